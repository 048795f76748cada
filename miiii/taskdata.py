"""A built task: its splits and the description of its loss and metrics (what `tasks.make_task` returns), and how
its output slots share unembedding matmuls (`class_buckets`). The registry of tasks and their rules: tasks.py."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Split:
    x: np.ndarray  # (N, n_ctx) int32 tokens
    y: np.ndarray  # (N, S) int32 targets per slot


@dataclass(frozen=True)
class Task:
    name: str
    train: Split
    valid: Split
    test: Split | None  # nanda/miiii: what is left after train and validation
    d_vocab: int  # input tokens
    n_classes: np.ndarray  # (S,) int32
    loss_weight: np.ndarray  # (S,) float32
    groups: np.ndarray  # (K, S) bool
    group_loss: np.ndarray  # (K, S) float32
    task_names: tuple[str, ...]  # (K,) names of the metric columns
    answer_start: int = 0  # sequence tasks: first target index of the answer span

    @property
    def generative(self) -> bool:
        """Sequence tasks answer token by token and can be decoded autoregressively."""
        return self.answer_start > 0

    @property
    def n_ctx(self) -> int:
        return self.train.x.shape[1]

    @property
    def n_slots(self) -> int:
        return self.train.y.shape[1]

    @property
    def d_out(self) -> int:
        return int(self.n_classes.max())

    @property
    def class_buckets(self) -> tuple[tuple[int, int, int], ...]:
        """Contiguous slot ranges (start, stop, width) that share one unembedding matmul and loss pass.

        miiii's 29 tasks have 2 ... 109 classes; padding all of them to 109 computes 3,161 logits per
        sample of which 1,480 are real. Up to 4 ranges, each padded to its own widest task, chosen to
        minimise the logits computed (1,791 for miiii). One range for every other task.
        """
        return class_buckets(tuple(int(c) for c in self.n_classes))

    def arrays(self) -> dict[str, np.ndarray]:
        """The loss/metric description as a pytree of arrays (passed to jit, never closed over)."""
        return dict(
            n_classes=self.n_classes, loss_weight=self.loss_weight, groups=self.groups, group_loss=self.group_loss
        )


@functools.cache
def class_buckets(n_classes: tuple[int, ...], max_buckets: int = 4) -> tuple[tuple[int, int, int], ...]:
    """Split slots 0..S-1 into <= max_buckets contiguous ranges minimising sum(len(range) * max class count)."""
    S = len(n_classes)

    @functools.cache
    def best(i: int, g: int) -> tuple[int, tuple]:  # cheapest split of slots i.. into at most g ranges
        if i == S:
            return 0, ()
        if g == 0:
            return math.inf, ()
        options = []
        for j in range(i + 1, S + 1):
            width = max(n_classes[i:j])
            cost, rest = best(j, g - 1)
            options.append((cost + (j - i) * width, ((i, j, width), *rest)))
        return min(options, key=lambda o: o[0])

    return best(0, max_buckets)[1]
