"""Pure training functions: one step, a `lax.scan` over a chunk of steps, evaluation.

`step(state, data) -> (state, metrics)` is pure; `chunk` scans it and is jitted once (per chunk
length). Time is the leading axis of everything a chunk returns. Datasets and the task's loss
description travel as jit arguments, never as closed-over constants. Randomness (dropout, minibatch
order) is a function of (seed, step), so a run resumed at step t replays exactly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from miiii import metrics as M
from miiii.cadence import is_due, rows_before
from miiii.config import RunConfig
from miiii.errors import ConfigError
from miiii.model import build_model, param_names
from miiii.optim import make_optimizer
from miiii.soft_ties import tie_gap
from miiii.tasks import Task


class TrainState(NamedTuple):
    params: dict
    opt_state: optax.OptState
    step: jax.Array  # int32, steps taken
    key: jax.Array  # root PRNG key of the run; per-step keys are folded from it


def stablemax_s(x):
    """Prieto et al. (2025)'s s(x) = x + 1 for x >= 0, 1 / (1 - x) for x < 0: StableMax(x)_i = s(x_i) / sum_j s(x_j).

    Each branch's argument is clamped to its own side before the `where` (jnp.where evaluates both, and its gradient
    is the chosen branch's gradient times 1 plus the other's times 0): unclamped, 1 / (1 - x) is inf at x = 1 and
    its gradient 0 * inf = NaN; clamped with `where`, not `maximum`, so the derivative at x = 0 is 1, not 1/2.
    Their code adds 1e-30 to 1 - x, which is >= 1 here and changes nothing."""
    pos = jnp.where(x >= 0, x, 0.0) + 1.0
    neg = 1.0 / (1.0 - jnp.where(x < 0, x, 0.0))
    return jnp.where(x >= 0, pos, neg)


def loss_and_metrics(logits, y, spec, buckets=None, weight=None, loss="softmax", dtype="float32", stats=False):
    """logits (b, S, C), y (b, S) -> (scalar loss, per-task loss (K,), per-task exact-match accuracy (K,)), and with
    `stats` the slots' (collapsed (b, S) bool, top logit (b, S) float32) from the same pass (metrics.slot_stats).

    All tasks of a bucket in one fused computation: classes >= n_classes[s] are masked, CE is taken per
    slot, then weighted into the training loss and grouped into per-task metrics (see tasks.py).
    `buckets` ((start, stop, width) slot ranges, static; default one range of width C): `logits` is either
    padded (b, S, C), of which each range reads its first `width` classes, or the model's tuple of
    per-bucket (b, n, width) arrays (`bucketed=True`), so no gradient flows through the padding.
    `weight` (b,) 0/1: the means over samples count the rows of weight 1 only (a padded last batch).
    `loss` (train.loss): softmax, or stablemax (CE over StableMax: `stablemax_s` of the slot's own classes, the
    masked ones out of the sum). `dtype` (train.loss_dtype): the CE and its weighting into the losses are computed in
    it, both returned as float32; float64 turns on 64-bit types for this computation only (jax.enable_x64); float16
    is Prieto et al.'s `cross_entropy_float16` (log-softmax and mean in float16), where collapse comes soonest.
    """
    with M.in_dtype(dtype):  # scoped: the model, the optimizer and the metrics stay float32
        out, slots = _loss_and_metrics(logits, y, spec, buckets, weight, loss, jnp.dtype(dtype))
    out = out if dtype == "float32" else tuple(v.astype(jnp.float32) for v in out)
    return (*out, slots) if stats else out



def _loss_and_metrics(logits, y, spec, buckets, weight, loss, dtype):
    # weighted: elementwise, not a matmul (which would follow train.precision: TF32 on a GPU at `default`)
    mean = (lambda v: v.mean(0)) if weight is None else (  # noqa: E731
        lambda v: (weight[:, None] * v).sum(0) / weight.sum())
    if not isinstance(logits, tuple):  # padded (b, S, C): each bucket reads its slice
        buckets = buckets or ((0, logits.shape[1], logits.shape[2]),)
        logits = tuple(logits[:, s0:s1, :w] for s0, s1, w in buckets)
    ce, wrong, one, tops = [], [], [], []
    for (s0, s1, width), lg in zip(buckets, logits, strict=True):  # at most 4 buckets (Task.class_buckets)
        raw, yb = lg, y[:, s0:s1]
        classes = jnp.arange(width)
        valid = classes[None, :] < spec["n_classes"][s0:s1, None]  # (n, width)
        # the loss is float32 (or float64) whatever the compute dtype; log-softmax by hand (metrics.softmax_parts)
        shifted, shifted_y, sum_exp, top = M.softmax_parts(jnp.where(valid, lg.astype(dtype), M.MASKED), yb, classes)
        if loss == "stablemax":  # not shift-invariant: s of the logits themselves; masked classes count 0
            s = jnp.where(valid, stablemax_s(raw.astype(dtype)), 0.0)
            ce.append(jnp.log(s.sum(-1)) - jnp.log(jnp.where(classes == yb[..., None], s, 0.0).sum(-1)))
        elif loss == "mse":  # the logits against the one-hot target, the mean over the slot's own classes
            sq = jnp.where(valid, (raw.astype(dtype) - (classes == yb[..., None]).astype(dtype)) ** 2, 0.0)
            ce.append(sq.sum(-1) / spec["n_classes"][s0:s1][None].astype(dtype))
        else:
            ce.append(jnp.log(sum_exp) - shifted_y)
        # argmax == y exactly (first maximum wins): y's logit is the maximum and no earlier class reaches it;
        # `~(>= 0)`, not `< 0`: a NaN logit (a diverged run) is wrong, not right (NaN < 0 is False)
        tie_before = ((shifted == 0) & (classes < yb[..., None])).any(-1)
        wrong.append((~(shifted_y >= 0) | tie_before).astype(jnp.float32))
        one.append(M.collapsed(shifted_y, sum_exp))  # unused (and dropped by XLA) unless the trainer asks
        # float16's max is the float32 max rounded: the largest logit is read from the float32 logits there
        tops.append(jnp.where(valid, raw.astype(jnp.float32), M.MASKED).max(-1) if dtype == jnp.float16
                    else top.astype(jnp.float32))
    ce_slot = mean(jnp.concatenate(ce, axis=1))  # (S,)
    if dtype == jnp.float32:
        loss = ce_slot @ spec["loss_weight"]
        task_loss = spec["group_loss"] @ ce_slot  # (K,)
    else:  # elementwise: a dot's transpose is traced outside jax.enable_x64, where its float64 would be truncated
        loss = (ce_slot * spec["loss_weight"]).sum()
        task_loss = (spec["group_loss"] * ce_slot).sum(-1)
    wrong = jnp.concatenate(wrong, axis=1)  # (b, S)
    task_acc = mean(((wrong @ spec["groups"].T.astype(jnp.float32)) == 0).astype(jnp.float32))  # (K,)
    slots = jnp.concatenate(one, axis=1), jax.lax.stop_gradient(jnp.concatenate(tops, axis=1))
    return (loss, task_loss, task_acc), slots


def loss_kind(cfg: RunConfig) -> dict:
    """`loss_and_metrics`'s `loss` and `dtype` of a run (train.loss, train.loss_dtype)."""
    return dict(loss=cfg.train.loss, dtype=cfg.train.loss_dtype)


def check_loss_dtype(cfg: RunConfig) -> None:
    """A float64 loss on a backend without float64 (a TPU) is refused before anything is built."""
    if cfg.train.loss_dtype == "float64" and jax.default_backend() == "tpu":
        raise ConfigError("train.loss_dtype = float64: this backend (tpu) has no float64; set train.loss_dtype=float32")


def steps_per_epoch(train_cfg, n_train: int) -> int:
    """An epoch's length in steps, for a run's TrainConfig on n_train training samples: 1 at full batch, else
    n_train // batch_size full batches (the remainder waits for a later epoch), one more for the remainder with
    train.last_batch = keep (a sequence task's n_train is its config's task.n_train)."""
    return _batches(train_cfg.batch_size, n_train, train_cfg.last_batch == "keep")


def _batches(batch_size: int, n_train: int, keep_last: bool) -> int:
    if not 0 < batch_size < n_train:
        return 1
    return -(-n_train // batch_size) if keep_last else max(n_train // batch_size, 1)


def epoch_order(key, epoch, n_train: int):
    """The sample order of one epoch: a permutation drawn from (run key, epoch) alone."""
    return jax.random.permutation(jax.random.fold_in(jax.random.fold_in(key, 2), epoch), n_train)


def epoch_batch(order, i, batch: int, keep_last: bool = False):
    """Batch i of an epoch's `order` (n_train,) -> (indices (batch,), weight (batch,) 0/1 or None). With
    `keep_last` the last batch holds the n_train % batch remaining samples, padded with index 0 at weight 0."""
    n_train = order.shape[0]
    pad = -n_train % batch if keep_last else 0
    start = (i * batch,)
    idx = jax.lax.dynamic_slice(jnp.pad(order, (0, pad)) if pad else order, start, (batch,))
    if not pad:
        return idx, None
    return idx, jax.lax.dynamic_slice((jnp.arange(n_train + pad) < n_train).astype(jnp.float32), start, (batch,))


def batch_indices(key, step, n_train: int, batch: int, keep_last: bool = False):
    """Minibatch of `step` -> (indices, weight or None): epochs of steps_per_epoch batches, each epoch a fresh
    permutation (the trainer's order, which it computes once an epoch)."""
    per_epoch = _batches(batch, n_train, keep_last)
    return epoch_batch(epoch_order(key, step // per_epoch, n_train), step % per_epoch, batch, keep_last)


class ChunkOut(NamedTuple):
    """What a chunk returns besides the state, time first everywhere; every field is always there."""

    metrics: dict  # metric name -> (n_steps, ...), one row per step (the trainer's table, metrics.py)
    record: tuple = ()  # per recording group: its rows of the chunk, stacked (a dict of arrays each)
    record_end: tuple = ()  # per group: its record of the state after the chunk's last update
    snaps: tuple | None = None  # (params, opt_state, step), stacked at the chunk's `snap_at` steps; None: none asked
    order: object = None  # the running epoch's sample order after the chunk: the next chunk's `order` (no sort again)


class Trainer(NamedTuple):
    """The jitted functions of one run, built from its config and task."""

    init: Callable  # (seed) -> TrainState
    chunk: Callable  # (state, data, n_steps, counts?, snap_at?, order?) -> (state, ChunkOut); jitted, donates state
    raw_chunk: Callable  # the same, not jitted: for vmap over seeds or hyper-parameters
    order: Callable  # (state) -> the running epoch's sample order at state.step: a first chunk's `order`; jitted
    raw_order: Callable  # the same, not jitted
    evaluate: Callable  # (params, x, y, spec) -> (loss, task_loss, task_acc)
    apply: Callable  # (params, x) -> (logits, acts) in eval mode
    model: object
    tx: optax.GradientTransformation
    grad_names: tuple  # parameter names, in the order of every per-parameter metric (grad_norm, ...)
    metrics: tuple  # the per-step metrics it computes (metrics.Metric), in the table's order

    def metric_shape(self, metric: M.Metric, n_tasks: int) -> tuple:
        """Per-step shape of a metric: () scalar, (n tasks,), or (n parameter arrays,)."""
        return M.metric_shape(metric, n_tasks, len(self.grad_names))

    def empty_history(self, steps: int, n_tasks: int, lead: tuple = ()) -> dict:
        """NaN-filled host arrays (*lead, steps, ...) for every metric: a run's (or a sweep's) metrics.npz."""
        return {m.name: np.full((*lead, steps, *self.metric_shape(m, n_tasks)), np.nan, np.float32)
                for m in self.metrics}


def with_precision(fn: Callable, precision: str) -> Callable:
    """`fn` traced under `jax.default_matmul_precision(precision)`: every dot_general it emits carries it."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        with jax.default_matmul_precision(precision):
            return fn(*args, **kwargs)

    return traced


def numerics(cfg: RunConfig) -> dict:
    """What decides a run's float results besides its config: recorded in every summary.json."""
    return dict(backend=jax.default_backend(), device=str(jax.devices()[0].device_kind),
                precision=cfg.train.precision, jax_version=jax.__version__)


def task_data(task: Task) -> dict:
    """Everything a chunk reads from the task, as device arrays (jit arguments)."""
    return dict(
        train_x=jnp.asarray(task.train.x), train_y=jnp.asarray(task.train.y),
        valid_x=jnp.asarray(task.valid.x), valid_y=jnp.asarray(task.valid.y),
        spec={k: jnp.asarray(v) for k, v in task.arrays().items()},
    )


def make_step(cfg: RunConfig, task: Task, apply: Callable, evaluate: Callable, tx, metrics: tuple,
              buckets: tuple) -> Callable:
    """One training step `((state, order), data) -> ((state, order), metrics)`: the batch of step t, the loss and
    its gradient, validation on train.eval_every's steps, the step's metrics (the table `metrics`), the update.
    `order` is the running epoch's sample order (minibatches; empty at full batch); `buckets`: the model's
    unembedding buckets (`loss_and_metrics`)."""
    n_train = len(task.train.x)
    batch = cfg.train.batch_size if 0 < cfg.train.batch_size < n_train else 0
    keep_last = cfg.train.last_batch == "keep"
    per_epoch = steps_per_epoch(cfg.train, n_train)
    eval_every = cfg.train.eval_every

    def step(carry, data):
        state, order = carry
        t = state.step
        if batch:  # minibatches without replacement; the order is redrawn at each epoch boundary
            order = jax.lax.cond(
                t % per_epoch == 0, lambda: epoch_order(state.key, t // per_epoch, n_train), lambda: order
            )  # batch_indices(key, t, ...), without a permutation per step
            idx, weight = epoch_batch(order, t % per_epoch, batch, keep_last)
            x, y = data["train_x"][idx], data["train_y"][idx]
        else:
            x, y, weight = data["train_x"], data["train_y"], None
        dropout_key = jax.random.fold_in(jax.random.fold_in(state.key, 1), t)
        # a sweep passes its hyper-parameters (config.SWEEPABLE) as data by section: traced, one value per member
        hp = data.get("hp", {})
        opt = make_optimizer(cfg.optim, cfg.train.steps, hp["optim"]) if "optim" in hp else tx

        def loss_fn(params):
            logits, acts = apply(params, x, train=True, key=dropout_key,
                                 dropout_rate=hp.get("model", {}).get("dropout"), bucketed=True)
            loss, task_loss, task_acc, slots = loss_and_metrics(logits, y, data["spec"], buckets, weight,
                                                                stats=True, **loss_kind(cfg))
            if cfg.train.soft_ties:  # in `loss` (what is minimised); the per-task losses stay the task's
                loss = loss + cfg.train.soft_tie_weight * tie_gap(params, cfg.train.soft_ties)
            patterns = tuple(acts[k] for k in sorted(acts) if k.endswith("attn.hook_pattern"))  # unread: dead code
            return loss, (task_loss, task_acc, jax.lax.stop_gradient((logits, patterns)), slots)

        (loss, (train_loss, train_acc, (logits, patterns), slots)), grads = jax.value_and_grad(
            loss_fn, has_aux=True)(state.params)
        k = train_loss.shape[0]

        def validate():
            return evaluate(state.params, data["valid_x"], data["valid_y"], data["spec"])[1:]

        if eval_every == 1:  # every step (the paper presets): no lax.cond, which an accelerator may sync on
            valid_loss, valid_acc = validate()
        else:
            valid_loss, valid_acc = jax.lax.cond(
                is_due(t, eval_every), validate, lambda: (jnp.full((k,), jnp.nan), jnp.full((k,), jnp.nan)))
        ctx = M.StepContext(loss, train_loss, train_acc, valid_loss, valid_acc, state.params, grads, logits, y,
                            data["spec"], buckets or ((0, y.shape[1], logits.shape[-1]),), weight, cfg.train.loss_dtype,
                            slots, patterns)
        out = M.compute(ctx, metrics)
        updates, opt_state = opt.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        return (TrainState(params, opt_state, t + 1, state.key), order), out

    return step


def record_into(record_groups, counts, apply, data, t0, bufs, st):
    """Each recording group's record of `st.params` written into its buffer (row: its due steps since the chunk's
    first step `t0`) when `st.step` is due for it (lax.cond)."""
    t = st.step
    out = []
    for (every, fn), buf, count in zip(record_groups, bufs, counts, strict=True):
        if count == 0:  # no step of this chunk is due (a chunk shorter than `every`)
            out.append(buf)
            continue
        row = rows_before(t, every) - rows_before(t0, every)  # rows count from the chunk's first due step

        def write(b, every=every, fn=fn, row=row):
            return jax.tree.map(lambda bb, v: bb.at[row].set(v), b, fn(apply, st.params, data))

        out.append(jax.lax.cond(is_due(t, every), write, lambda b: b, buf))
    return tuple(out)


def snap_into(snap_at, snaps, st):
    """The whole state (params, opt_state, step) written into row i of `snaps` when `st.step == snap_at[i]`."""
    hit = snap_at == st.step
    row = jnp.argmax(hit)
    keep = (st.params, st.opt_state, st.step)
    return jax.lax.cond(hit.any(), lambda b: jax.tree.map(lambda bb, v: bb.at[row].set(v), b, keep),
                        lambda b: b, snaps)


def make_chunk(cfg: RunConfig, task: Task, step: Callable, apply: Callable,
               record_groups: tuple) -> tuple[Callable, Callable]:
    """`chunk(state, data, n_steps, counts=None, snap_at=None, order=None) -> (state, ChunkOut)`: `step` scanned
    n_steps times, recording and capturing states on the way when asked; and `start_order(state)`, the order a run's
    first chunk takes."""
    n_train = len(task.train.x)
    batch = 0 < cfg.train.batch_size < n_train
    per_epoch = steps_per_epoch(cfg.train, n_train)

    def start_order(state: TrainState):
        """The running epoch's sample order at state.step (minibatches; empty at full batch). A state at an epoch's
        first step gets zeros: the step's own cond draws that epoch's order (one sort)."""
        if not batch:
            return jnp.zeros((0,), jnp.int32)
        return jax.lax.cond(state.step % per_epoch == 0, lambda: jnp.zeros((n_train,), jnp.int32),
                            lambda: epoch_order(state.key, state.step // per_epoch, n_train))

    def chunk(state: TrainState, data: dict, n_steps: int, counts: tuple | None = None, snap_at=None, order=None):
        """Metrics at index i describe the parameters *before* update state.step + i.

        `counts[g]`: how many multiples of group g's `every` lie in [state.step, state.step + n_steps)
        (static; the default assumes the chunk starts at a multiple of every `every`).
        `snap_at`: (m,) int32 steps (-1 = none) whose whole state (params, opt_state, step; the key never
        changes) is returned in `ChunkOut.snaps`, stacked, for the checkpoints kept at log-spaced steps.
        `order`: the last chunk's `ChunkOut.order` (or `start_order(state)`); None draws it here, a sort of the
        training set that at 2M pairs costs seconds a chunk (the batches are the same either way).
        """
        order = start_order(state) if order is None else order
        if not record_groups and snap_at is None:
            (state, order), metrics = jax.lax.scan(lambda c, _: step(c, data), (state, order), None, length=n_steps)
            return state, ChunkOut(metrics, order=order)
        counts = counts or tuple(rows_before(n_steps, every) for every, _ in record_groups)
        t0 = state.step

        def body(carry, _):
            st, order, bufs, snaps = carry
            bufs = record_into(record_groups, counts, apply, data, t0, bufs, st)
            if snap_at is not None:
                snaps = snap_into(snap_at, snaps, st)
            (st, order), metrics = step((st, order), data)
            return (st, order, bufs, snaps), metrics

        bufs = tuple(
            jax.tree.map(lambda a, c=count: jnp.zeros((c, *a.shape), a.dtype),
                         jax.eval_shape(lambda p, d, fn=fn: fn(apply, p, d), state.params, data))
            for (_, fn), count in zip(record_groups, counts, strict=True)
        )
        snaps = () if snap_at is None else jax.tree.map(
            lambda a: jnp.zeros((len(snap_at), *a.shape), a.dtype), (state.params, state.opt_state, state.step))
        (state, order, bufs, snaps), metrics = jax.lax.scan(body, (state, order, bufs, snaps), None, length=n_steps)
        # the state after the chunk's last update too (one record per chunk; the run's last step needs it)
        end = tuple(fn(apply, state.params, data) for _, fn in record_groups)
        return state, ChunkOut(metrics, tuple(bufs), end, snaps if snap_at is not None else None, order)

    return chunk, start_order


def make_trainer(cfg: RunConfig, task: Task, record_groups: tuple = (), metrics: tuple | None = None) -> Trainer:
    """The jitted functions of a run.

    `record_groups`: `(every, fn)` pairs, `fn(apply, params, data) -> dict` run in eval mode on the
    parameters *before* update t at every step t with `t % every == 0`; a chunk's `ChunkOut.record[g]`
    is group g's dict stacked over its ceil(n_steps / every) recorded steps, `ChunkOut.record_end[g]`
    group g's record of the parameters after the chunk's last update. Inputs it reads (probes) travel in
    `data`, so nothing large is closed over. `metrics`: the per-step metrics (default: metrics.METRICS).
    """
    metrics = M.METRICS if metrics is None else tuple(metrics)
    check_loss_dtype(cfg)
    model = build_model(cfg.model, task)
    tx = make_optimizer(cfg.optim, cfg.train.steps)

    def apply(params, x, train=False, key=None, dropout_rate=None, bucketed=False):
        rngs = {"dropout": key} if train else None
        return model.apply({"params": params}, x, train=train, rngs=rngs, dropout_rate=dropout_rate, bucketed=bucketed)

    def init(seed: int, params=None) -> TrainState:
        """A fresh state; `params` (train.init_from: another run's) replace the drawn ones, the optimizer starts on
        them afresh, and the seed still sets dropout and the batch order."""
        key = jax.random.key(seed)
        if params is None:
            params = model.init({"params": jax.random.fold_in(key, 0)}, jnp.asarray(task.train.x[:1]))["params"]
            if cfg.model.init_scale != 1.0:  # Omnigrok's initial weight norm
                params = jax.tree.map(lambda p: p * cfg.model.init_scale, params)
        return TrainState(params, tx.init(params), jnp.zeros((), jnp.int32), key)

    def evaluate(params, x, y, spec):
        logits, _ = apply(params, x, bucketed=True)
        return loss_and_metrics(logits, y, spec, model.unembed_buckets, **loss_kind(cfg))

    step = make_step(cfg, task, apply, evaluate, tx, metrics, model.unembed_buckets)
    chunk, start_order = make_chunk(cfg, task, step, apply, record_groups)
    # the matmul precision is read while tracing, so it is set around every traced function (train.precision)
    init, chunk, evaluate, apply = (with_precision(f, cfg.train.precision) for f in (init, chunk, evaluate, apply))
    return Trainer(
        init=init,
        chunk=jax.jit(chunk, static_argnums=(2, 3), donate_argnums=(0, 5)),
        raw_chunk=chunk,
        order=jax.jit(start_order),
        raw_order=start_order,
        evaluate=jax.jit(evaluate),
        apply=jax.jit(apply),
        model=model,
        tx=tx,
        grad_names=tuple(param_names(jax.eval_shape(init, 0).params)),
        metrics=metrics,
    )


def evaluate_split(trainer: Trainer, params, split, spec, batch: int = 8192) -> dict:
    """Eval-mode loss and per-task metrics on a whole split, in batches (host loop, end of run only)."""
    n = len(split.x)
    tot_loss, tot_tl, tot_acc = 0.0, 0.0, 0.0
    for i in range(0, n, batch):
        xb, yb = jnp.asarray(split.x[i:i + batch]), jnp.asarray(split.y[i:i + batch])
        loss, tl, acc = trainer.evaluate(params, xb, yb, spec)
        w = len(xb) / n
        tot_loss, tot_tl, tot_acc = tot_loss + w * loss, tot_tl + w * tl, tot_acc + w * acc
    return dict(loss=float(tot_loss), task_loss=np.asarray(tot_tl).tolist(), task_acc=np.asarray(tot_acc).tolist())


def greedy_decode(apply: Callable, params, prompt: np.ndarray, n_new: int) -> np.ndarray:
    """Autoregressive greedy decoding, the book's way: prompt (b, t0) -> (b, n_new) predicted tokens.

    Each predicted token is appended and the grown sequence fed back, so a non-causal model never
    sees placeholder tokens after the prompt (a padded window would be right for causal models only);
    `apply(params, x) -> (logits, acts)`, one compile per length.
    """
    seq = np.asarray(prompt, np.int32)
    for _ in range(n_new):
        logits, _ = apply(params, jnp.asarray(seq))
        seq = np.concatenate([seq, np.asarray(jnp.argmax(logits[:, -1], -1), np.int32)[:, None]], axis=1)
    return seq[:, prompt.shape[1]:]
