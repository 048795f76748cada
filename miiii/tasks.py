"""The four tasks as data plus a loss and metrics, one representation for all of them.

A task yields integer inputs `x (N, n_ctx)` and integer targets `y (N, S)` over S output *slots*
(miiii: one slot per prime q; nanda: one slot; addition/reversal: one slot per position), and three
small arrays that say how slots become a loss and per-task metrics:

    n_classes   (S,)    classes of each slot; logits at index >= n_classes are masked out
    loss_weight (S,)    loss = sum_s loss_weight[s] * mean_b CE[b, s]
    groups      (K, S)  task k is correct on a sample when every slot in its group is (exact match)
    group_loss  (K, S)  task k's reported loss = sum_s group_loss[k, s] * mean_b CE[b, s]

so the trainer and model never branch on the task's name.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from miiii.config import TASKS, ConfigError, TaskConfig, digit_positions, is_prime, sequence_length, shown

# Book vocabulary: digits 0-9, then these four.
PLUS, EQUALS, EOS, PAD = 10, 11, 12, 13
BOOK_VOCAB = 14
TOKEN_TEXT = [str(i) for i in range(10)] + ["+", "=", "<EOS>", "<PAD>"]


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


def primes_below(p: int) -> np.ndarray:
    return np.array([q for q in range(2, p) if is_prime(q)], dtype=np.int32)


# ---------------------------------------------------------------- nanda and miiii


def grid_inputs(p: int, digit_order: str = "low", size: int | None = None) -> np.ndarray:
    """The inputs of the size x size corner of the grid (default: all p^2) in (x1-major, x0-minor) order, row i =
    (x0, x1) = (i % size, i // size), so for the whole grid row i holds the number n = i (the order
    `analysis.to_grid` expects). Tokens [x0, x1, p], or [x1, x0, p] with digit_order "high" (the original's)."""
    k = size or p
    x1, x0 = np.divmod(np.arange(k * k), k)
    x = np.full((k * k, 3), p, np.int32)
    x[:, list(digit_positions(digit_order))] = np.stack([x0, x1], axis=1)
    return x


def grid_labels(name: str, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Targets over the grid (row i: n = i = x0 + x1*p) and the modulus of each slot. miiii: one slot per prime
    q < p."""
    n = np.arange(p * p, dtype=np.int64)
    if name == "nanda":
        return ((n % p + n // p) % p)[:, None].astype(np.int32), np.array([p], dtype=np.int32)
    qs = primes_below(p)
    return (n[:, None] % qs[None, :]).astype(np.int32), qs


def split_sizes(cfg: TaskConfig) -> tuple[int, int, int]:
    n = cfg.p * cfg.p
    n_train = int(math.floor(cfg.train_frac * n))
    return n_train, cfg.valid_size, n - n_train - cfg.valid_size


def make_grid_task(cfg: TaskConfig) -> Task:
    x = grid_inputs(cfg.p, cfg.digit_order)
    y, moduli = grid_labels(cfg.name, cfg.p)
    if cfg.variant == "basis":  # the labels of every task shuffled across samples: nothing to learn
        y = y[np.random.default_rng(cfg.basis_seed).permutation(len(y))]
    perm = np.random.default_rng(cfg.split_seed).permutation(len(x))
    n_train, n_valid, _ = split_sizes(cfg)
    parts = np.split(perm, [n_train, n_train + n_valid])
    train, valid, test = (Split(x[i], y[i]) for i in parts)
    n_slots = len(moduli)
    # Paper Eq. 12: each task's CE divided by ln q so chance scores 1.0; the mean over the tasks switched on (the
    # original code) or, with loss_over_tasks "sum", their sum (the text)
    on = np.ones(n_slots, bool)
    if cfg.variant == "masked":
        on &= ~np.isin(moduli, [2, 3, 5, 7])
    inv_ln = (1.0 / np.log(moduli)).astype(np.float32)
    loss_weight = np.where(on, inv_ln, 0.0).astype(np.float32) / (1 if cfg.loss_over_tasks == "sum" else on.sum())
    names = tuple(f"q={q}" for q in moduli) if cfg.name == "miiii" else (f"mod {cfg.p}",)
    return Task(
        name=cfg.name,
        train=train,
        valid=valid,
        test=test if len(test.x) else None,
        d_vocab=cfg.p + 1,
        n_classes=moduli.astype(np.int32),
        loss_weight=loss_weight,
        groups=np.eye(n_slots, dtype=bool),
        group_loss=np.diag(inv_ln).astype(np.float32),
        task_names=names,
    )


# ---------------------------------------------------------------- addition and reversal


def digits(v: np.ndarray, n: int) -> np.ndarray:
    """(N,) non-negative ints -> (N, n) digits, most significant first, zero-padded."""
    v = v.astype(object) if n > 18 else v.astype(np.int64)
    out = np.empty((len(v), n), dtype=np.int32)
    for i in range(n - 1, -1, -1):
        out[:, i] = (v % 10).astype(np.int32)
        v = v // 10
    return out


def encode_addition(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """`a+b=` then the sum reversed (ones digit first) on n+1 digits, then <EOS>: (N, 3n + 3) tokens."""
    a, b = np.asarray(a), np.asarray(b)
    total = a.astype(object) + b.astype(object) if n > 17 else a.astype(np.int64) + b.astype(np.int64)
    col = lambda t: np.full((len(a), 1), t, np.int32)  # noqa: E731
    return np.concatenate(
        [digits(a, n), col(PLUS), digits(b, n), col(EQUALS), digits(np.asarray(total), n + 1)[:, ::-1], col(EOS)],
        axis=1,
    )


def encode_reversal(d: np.ndarray) -> np.ndarray:
    """digits, `=`, the same digits reversed, <EOS>: (N, 2n + 2) tokens."""
    col = lambda t: np.full((len(d), 1), t, np.int32)  # noqa: E731
    return np.concatenate([d, col(EQUALS), d[:, ::-1], col(EOS)], axis=1).astype(np.int32)


def decode(tokens) -> str:
    return "".join(TOKEN_TEXT[int(t)] for t in tokens)


def _draw_distinct(
    rng: np.random.Generator, n: int, n_digits: int, count: int, exclude: set, mixed: bool = False
) -> np.ndarray:
    """`count` distinct operand rows (n columns of ints < 10**n_digits) whose tuples are not in `exclude`.

    mixed: half the operands are uniform n-digit numbers, the other half a random block of 0..n_digits
    digits at a random place with zeros around it (0 digits: the operand is 0). A curriculum in the
    data: a sum digit is (a_j + b_j + carry) mod 10, which tells nothing about a_j alone while b_j is
    uniform; where b's column j is 0 it depends on a_j alone, and attention gets a gradient toward that
    column. Blocks at the high end only (short numbers) left the ones and tens columns unlearned.
    """
    out, seen = [], set(exclude)
    hi = 10**n_digits
    while len(out) < count:
        size = (2 * (count - len(out)) + 16, n)
        if n_digits <= 18:
            if mixed:
                width = np.where(rng.random(size) < 0.5, n_digits, rng.integers(0, n_digits + 1, size=size))
                shift = rng.integers(0, n_digits - width + 1, dtype=np.int64)
                rows = rng.integers(0, 10**width, dtype=np.int64) * 10**shift
            else:
                rows = rng.integers(0, hi, size=size, dtype=np.int64)
        else:  # beyond int64: draw digit by digit
            width = np.full(size, n_digits)
            if mixed:
                width = np.where(rng.random(size) < 0.5, n_digits, rng.integers(0, n_digits + 1, size=size))
            shift = rng.integers(0, n_digits - width + 1) if mixed else np.zeros(size, int)
            rows = np.array([[int("".join(map(str, rng.integers(0, 10, w))) or 0) * 10 ** int(z) for w, z in
                              zip(r, zr, strict=True)] for r, zr in zip(width, shift, strict=True)], dtype=object)
        for r in rows:
            k = tuple(int(v) for v in r)
            if k not in seen:
                seen.add(k)
                out.append(r)
                if len(out) == count:
                    break
    return np.array(out)


def make_sequence_task(cfg: TaskConfig) -> Task:
    n = cfg.n_digits
    if cfg.name == "addition":
        n_ops, encode = 2, lambda r: encode_addition(r[:, 0], r[:, 1], n)
        answer_start = 2 * n + 1  # Y index of the first answer digit (after `a+b=`, shifted by one)
    else:
        n_ops, encode = 1, lambda r: encode_reversal(digits(r[:, 0], n))
        answer_start = n  # Y index of the first reversed digit
    # Held-out set first (book seed 123), then the training set (seed 42) drawn without those pairs,
    # an improvement over the book, whose test pairs can also appear in training.
    valid_ops = _draw_distinct(np.random.default_rng(cfg.valid_seed), n_ops, n, cfg.n_valid, set())
    held_out = {tuple(int(v) for v in r) for r in valid_ops}
    if cfg.name == "addition":  # a+b and b+a are different sequences but the same fact: keep both out
        held_out |= {k[::-1] for k in held_out}
    train_ops = _draw_distinct(np.random.default_rng(cfg.train_seed), n_ops, n, cfg.n_train, held_out,
                               mixed=cfg.mixed_lengths)
    train_seq, valid_seq = encode(train_ops), encode(valid_ops)
    s = train_seq.shape[1] - 1
    groups = np.zeros((1, s), bool)
    groups[0, answer_start:] = True  # exact match over the answer digits and <EOS>
    return Task(
        name=cfg.name,
        train=Split(train_seq[:, :-1], train_seq[:, 1:]),
        valid=Split(valid_seq[:, :-1], valid_seq[:, 1:]),
        test=None,
        d_vocab=BOOK_VOCAB,
        n_classes=np.full(s, BOOK_VOCAB, np.int32),
        loss_weight=np.full(s, 1.0 / s, np.float32),  # mean CE over all target positions (book)
        groups=groups,
        group_loss=np.full((1, s), 1.0 / s, np.float32),
        task_names=(cfg.name,),
        answer_start=answer_start,
    )


def make_task(cfg: TaskConfig) -> Task:
    if cfg.name not in TASKS:
        raise ConfigError(f"unknown task '{shown(cfg.name)}'; choose one of: {', '.join(TASKS)}")
    return make_sequence_task(cfg) if cfg.is_sequence else make_grid_task(cfg)


def loss_floor(name: str, n_digits: int) -> float:
    """Population loss of a model that predicts every deterministic token exactly.

    Only the operand digits after the first are unpredictable (uniform over 10): addition has 2n-1 of
    them over 3n+3 target positions, reversal n-1 over 2n+1 (`config.sequence_length`).
    """
    unpredictable = 2 * n_digits - 1 if name == "addition" else n_digits - 1
    return unpredictable * math.log(10) / sequence_length(name, n_digits)
