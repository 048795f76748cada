"""The step cadence: which steps are evaluated, recorded and kept, as pure functions of the step.

The trainer (inside `jit`, where `step` is traced), the recorder and the readers of a finished run (plain ints,
numpy) ask the same functions, so a run and its files agree on every step. A cadence `every` is an int (steps 0,
every, 2 every, ...) or the tuple of the steps themselves (a log-spaced schedule, `log_steps`). Nothing here
imports jax: a traced step brings `jax.numpy` with it.
"""

from __future__ import annotations

import numpy as np


def _xp(step):
    """numpy for a host int, jax.numpy for a traced (or device) step: the same formula serves both."""
    if isinstance(step, (int, np.integer)):
        return np
    import jax.numpy as jnp  # a traced step: jax is already loaded by whoever traced it

    return jnp


def rows_before(step, every):
    """Rows of a quantity recorded every `every` steps (steps 0, every, 2 every, ...) that hold a step < `step`:
    ceil(step / every). Also the row of the first recorded step >= `step`; `step` may be a traced integer.
    `every` may also be the tuple of the recorded steps themselves (a log-spaced schedule, `log_steps`)."""
    if isinstance(every, (int, np.integer)):
        return -(-step // every)
    xp = _xp(step)
    return xp.searchsorted(xp.asarray(every), step)


def is_due(step, every):
    """Whether `step` (an int or traced) is recorded under `every` (an int, or the tuple of recorded steps)."""
    if isinstance(every, (int, np.integer)):
        return step % every == 0
    xp = _xp(step)
    s = xp.asarray(every)
    return s[xp.minimum(xp.searchsorted(s, step), len(every) - 1)] == step


def log_steps(steps: int, k: int) -> tuple[int, ...]:
    """Step 0 and about `k` steps in 1 .. steps spread log-uniformly (rounded, distinct: every step early on,
    sparser later); () when k = 0. The schedule of `record.log` and of `ckpt.keep_log`."""
    if k <= 0:
        return ()
    return (0, *sorted({int(s) for s in np.round(np.geomspace(1, steps, k))}))


def due_steps(steps: int, every) -> list[int]:
    """The steps 0 .. steps (the last included) that `every` records: a run's recorded steps."""
    return list(every) if isinstance(every, tuple) else list(range(0, steps + 1, every))


def snap_width(kept: tuple[int, ...], n: int) -> int:
    """The most steps of `kept` strictly inside any n consecutive steps (d, d + n), wherever a chunk starts (a
    resume may start one at a kept step): the slots every chunk of length n gives for captured states."""
    k = np.asarray([s for s in kept if s > 0])
    return int((np.searchsorted(k, k + n - 1) - np.arange(len(k))).max()) if len(k) else 0


def snap_steps(done: int, n: int, kept: tuple[int, ...]) -> np.ndarray | None:
    """The steps kept for good (ckpt.keep_log) inside the chunk [done, done + n), whose states the chunk returns,
    padded with -1 to `snap_width(kept, n)` in every chunk, with a kept step or not: all chunks of a length share
    one compiled program (a width per chunk cost a compile each, seconds apiece); None if nothing is kept."""
    if not kept:
        return None
    inside = [k for k in kept if done < k < done + n]
    return np.array(inside + [-1] * (max(snap_width(kept, n), 1) - len(inside)), np.int32)


def evaluated_steps(start: int, stop: int, eval_every: int) -> np.ndarray:
    """The steps in [start, stop) with validation metrics (train.eval_every): the rows of metrics.jsonl."""
    return np.arange(start + -start % eval_every, stop, eval_every)


def last_evaluated_step(steps: int, eval_every: int) -> int:
    """A run's last step with validation metrics."""
    return (steps - 1) // eval_every * eval_every


def checkpoint_due(done: int, n: int, every: int) -> bool:
    """A chunk that ended at `done` after `n` steps crossed a multiple of ckpt.every: a checkpoint is due."""
    return done // every > (done - n) // every
