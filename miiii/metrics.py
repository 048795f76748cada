"""The per-step metrics: one table, from which the trainer, metrics.npz, metrics.jsonl and TensorBoard all derive.

Each `Metric` says what it is per step (`kind`: one scalar, one value per task, one value per parameter array),
whether the live log (metrics.jsonl and tb/) carries it, and how the trainer computes it from the step's
`StepContext`. Adding a metric is adding one entry to `METRICS`: the trainer computes it at every step, the run
keeps it in metrics.npz, and, when `logged`, metrics.jsonl and TensorBoard show it as `name` (scalar) or
`name/TASK` / `name/PARAM` (one column per task or parameter). Row t of every metric describes the parameters
before update t; validation metrics are NaN on the steps train.eval_every skips.

This module imports no jax at the top: the readers of a finished run use the table (columns, kinds) without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

KINDS = ("scalar", "task", "param")


class StepContext(NamedTuple):
    """What a metric may read at step t (inside the jitted step: jax arrays, traced)."""

    loss: object  # () the training loss of the step's batch, as optimised
    train_loss: object  # (K,) each task's loss on the batch
    train_acc: object  # (K,) each task's exact-match accuracy on the batch
    valid_loss: object  # (K,) on the validation set (NaN on steps that are not evaluated)
    valid_acc: object  # (K,)
    params: dict  # the parameters before update t
    grads: dict  # their gradient (raw: before clipping, grokfast and the optimizer)
    logits: object  # the training forward's logits: per bucket (b, slots, width), or padded (b, S, C)
    y: object  # (b, S) targets
    spec: dict  # the task's loss description (tasks.Task.arrays: n_classes, groups, ...)
    buckets: tuple  # (start, stop, width) slot ranges of `logits` (static)
    weight: object  # (b,) 0/1 rows that count (a padded last batch), or None
    loss_dtype: str = "float32"  # train.loss_dtype (static): the precision softmax_collapse reads the softmax in
    slot_stats: object = None  # (collapsed (b, S) bool, top (b, S)) from the loss's own pass (`softmax_parts`); None:
    # a metric computes them from `logits` (the same function, a second pass over every logit)
    patterns: tuple = ()  # the training forward's attention patterns, one (b, H, q, k) per layer (q = 1 where the
    # last layer reads the last position only)


@dataclass(frozen=True)
class Metric:
    name: str  # the key in metrics.npz, and the column prefix in metrics.jsonl and TensorBoard
    kind: str  # scalar: () | task: (K,) | param: (P,) in the order of `grad_names` (jax.tree.leaves of params)
    logged: bool  # also in metrics.jsonl and tb/ (as the run goes)
    fn: Callable[[StepContext], object]  # -> an array of the kind's shape, float32
    doc: str


def l2_per_array(tree):
    """(P,) the L2 norm of each array of a parameter-shaped tree, in `jax.tree.leaves` order."""
    import jax  # traced inside the step: jax is loaded (this module's readers need it not)
    import jax.numpy as jnp

    return jnp.stack([jnp.sqrt(jnp.sum(jnp.square(g))) for g in jax.tree.leaves(tree)])


def in_dtype(dtype: str):
    """The context a computation in `dtype` needs (train.loss_dtype): 64-bit types on for float64 (jax.enable_x64,
    scoped to it), nothing otherwise."""
    import contextlib

    import jax

    return jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()


def softmax_parts(lg, yb, classes):
    """The log-softmax's parts of masked logits lg (b, n, width) in the loss's dtype with targets yb (b, n):
    shifted = lg - max (max logit -> 0), shifted_y (b, n) and the sum of exp(shifted) (b, n). The loss takes its CE
    from them and softmax_collapse its test, so a training step makes one pass over the logits for both."""
    import jax
    import jax.numpy as jnp

    top = lg.max(-1, keepdims=True)
    shifted = lg - jax.lax.stop_gradient(top)
    # a one-hot mask, not a gather: one fused pass, and the backward pass has no scatter
    shifted_y = jnp.where(classes == yb[..., None], shifted, 0.0).sum(-1)
    return shifted, shifted_y, jnp.exp(shifted).sum(-1), top[..., 0]


def collapsed(shifted_y, sum_exp):
    """(b, n) Prieto et al.'s collapse of one slot: the correct class's softmax is exactly 1, which holds iff y holds
    the max (shifted_y == 0) and sum(exp(x - max)) == 1 exactly (every other class's term rounds to 0 beside 1)."""
    return (shifted_y == 0) & (sum_exp == 1)


def slot_stats(c: StepContext):
    """(collapsed (b, S) bool, top (b, S)): the loss's (c.slot_stats) when the trainer handed them over, else the
    same functions on c.logits in c.loss_dtype, the classes past a slot's own masked as the loss masks them."""
    import jax.numpy as jnp

    if c.slot_stats is not None:
        return c.slot_stats
    parts = c.logits if isinstance(c.logits, tuple) else tuple(c.logits[:, s0:s1, :w] for s0, s1, w in c.buckets)
    one, tops = [], []
    with in_dtype(c.loss_dtype):
        for (s0, s1, width), lg in zip(c.buckets, parts, strict=True):
            classes = jnp.arange(width)
            valid = classes[None, :] < c.spec["n_classes"][s0:s1, None]  # (n, width)
            _, shifted_y, sum_exp, _ = softmax_parts(
                jnp.where(valid, lg.astype(c.loss_dtype), MASKED), c.y[:, s0:s1], classes)
            one.append(collapsed(shifted_y, sum_exp))
            tops.append(jnp.where(valid, lg.astype(jnp.float32), MASKED).max(-1))  # float32 whatever the loss's
    return jnp.concatenate(one, axis=1), jnp.concatenate(tops, axis=1)


MASKED = -1e9  # the logit of a class past a slot's own: exp(MASKED - max) is 0 in every loss dtype (-inf in float16)


def softmax_collapse(c: StepContext):
    """(K,) Prieto et al. (2025)'s Softmax Collapse: the share of the step's training samples whose softmax, in the
    loss's precision (train.loss_dtype, float32 by default: their logger's softmax_precision), gives the correct class
    a probability of exactly 1 (its gradient is then exactly 0); a sample counts for a task when it does on every slot
    of the task. Under loss=stablemax this still reads the softmax, whose collapse StableMax is there to avoid."""
    import jax.numpy as jnp

    short = (~slot_stats(c)[0]).astype(jnp.float32)  # (b, S): slots not collapsed
    per_task = ((short @ c.spec["groups"].T.astype(jnp.float32)) == 0).astype(jnp.float32)  # (b, K)
    w = c.weight
    return per_task.mean(0) if w is None else (w[:, None] * per_task).sum(0) / w.sum()


def max_logit(c: StepContext):
    """() the largest logit of the step's batch over every slot's own classes."""
    return slot_stats(c)[1].max()


def _pattern_rows(c: StepContext, p):
    """p (b, H, q, k) with a padded batch's rows (weight 0) zeroed, and the count of rows that count."""
    if c.weight is None:
        return p, p.shape[0]
    return p * c.weight[:, None, None, None], c.weight.sum()


def head_similarity(c: StepContext):
    """() Verma (2026)'s mean pairwise attention-head cosine similarity: per layer, the cosine between two heads'
    patterns taken as vectors over the batch's (sample, query, key) entries, averaged over the layer's head pairs,
    then over layers. NaN for a one-head model (no pair)."""
    import jax.numpy as jnp

    per_layer = []
    for p in c.patterns:
        H = p.shape[1]
        if H < 2:
            continue
        flat = _pattern_rows(c, p)[0].transpose(1, 0, 2, 3).reshape(H, -1)  # (H, b*q*k)
        unit = flat / jnp.maximum(jnp.linalg.norm(flat, axis=1, keepdims=True), 1e-30)
        i, j = np.triu_indices(H, 1)
        per_layer.append((unit @ unit.T)[i, j].mean())
    return jnp.stack(per_layer).mean() if per_layer else jnp.float32(jnp.nan)


def head_entropies(c: StepContext):
    """(layers * H,) each head's attention entropy in nats, averaged over the batch's samples and the head's
    queries (a masked key, probability 0, adds 0)."""
    import jax.numpy as jnp

    out = []
    for p in c.patterns:
        ent = -jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0).sum(-1)  # (b, H, q)
        rows, n = _pattern_rows(c, ent[..., None])
        out.append(rows[..., 0].sum((0, 2)) / (n * p.shape[2]))
    return jnp.concatenate(out)


def entropy_spread(c: StepContext):
    """() Verma (2026)'s entropy standard deviation, read as the spread over heads: the standard deviation of
    `head_entropies` over every layer's heads (0 when they all attend alike; NaN for a model without attention)."""
    import jax.numpy as jnp

    return head_entropies(c).std() if c.patterns else jnp.float32(jnp.nan)


def _total_norm(tree):
    import jax.numpy as jnp

    return jnp.sqrt(jnp.sum(jnp.square(l2_per_array(tree))))


METRICS: tuple[Metric, ...] = (
    Metric("loss", "scalar", True, lambda c: c.loss, "training loss of the step's batch, as optimised"),
    Metric("train_loss", "task", True, lambda c: c.train_loss, "each task's loss on the step's batch"),
    Metric("train_acc", "task", True, lambda c: c.train_acc, "each task's exact-match accuracy on the batch"),
    Metric("valid_loss", "task", True, lambda c: c.valid_loss, "each task's loss on the validation set"),
    Metric("valid_acc", "task", True, lambda c: c.valid_acc, "each task's accuracy on the validation set"),
    Metric("grad_norm", "param", False, lambda c: l2_per_array(c.grads),
           "L2 norm of each parameter array's raw gradient"),
    Metric("weight_norm", "param", True, lambda c: l2_per_array(c.params), "L2 norm of each parameter array"),
    Metric("weight_norm_total", "scalar", True, lambda c: _total_norm(c.params), "L2 norm of all parameters"),
    Metric("softmax_collapse", "task", True, softmax_collapse,
           "each task's share of the batch whose softmax (in train.loss_dtype) puts exactly 1 on the correct class"),
    Metric("max_logit", "scalar", True, max_logit, "the largest logit of the batch"),
    Metric("head_similarity", "scalar", True, head_similarity,
           "mean cosine similarity of the attention patterns of every pair of heads in a layer (NaN: one head)"),
    Metric("entropy_spread", "scalar", True, entropy_spread,
           "standard deviation over heads of each head's mean attention entropy (nats)"),
)
ATTENTION_METRICS = ("head_similarity", "entropy_spread")  # read the forward's attention patterns


def live(metrics: tuple[Metric, ...] | None) -> tuple[Metric, ...]:
    """`metrics`, or the table as it is now (not as it was when a function was defined): an entry added at run time
    (a test's, a notebook's) reaches every reader."""
    return METRICS if metrics is None else metrics


def metric_names(metrics: tuple[Metric, ...] | None = None) -> tuple[str, ...]:
    return tuple(m.name for m in live(metrics))


def metric_shape(metric: Metric, n_tasks: int, n_params: int) -> tuple[int, ...]:
    """The per-step shape of a metric."""
    return {"scalar": (), "task": (n_tasks,), "param": (n_params,)}[metric.kind]


def compute(ctx: StepContext, metrics: tuple[Metric, ...] | None = None) -> dict:
    """Every metric of the table at one step: name -> array."""
    return {m.name: m.fn(ctx) for m in live(metrics)}


def log_columns(task_names, param_names, metrics: tuple[Metric, ...] | None = None) -> list[str]:
    """metrics.jsonl's keys after "step", which are also the TensorBoard tags: each logged metric's name (a
    scalar) or `name/TASK` and `name/PARAM` per task or parameter, in the table's order."""
    metrics = live(metrics)
    subs = {"scalar": [None], "task": list(task_names), "param": list(param_names)}
    return [m.name if s is None else f"{m.name}/{s}" for m in metrics if m.logged for s in subs[m.kind]]


def log_values(hist: dict, steps, metrics: tuple[Metric, ...] | None = None):
    """The logged metrics of `hist` (name -> (T, ...)) at `steps`, one column per `log_columns` entry:
    (len(steps), columns) float64."""
    metrics = live(metrics)
    cols = [hist[m.name][steps].reshape(len(steps), int(np.prod(hist[m.name].shape[1:]))) for m in metrics if m.logged]
    return np.concatenate(cols, axis=1).astype(np.float64)
