"""A sweep's members as one program: `trainer.raw_chunk` vmapped over their states with one shared step counter
(sweep.py runs it chunk by chunk; the bench and the paper's resource estimate time and size it)."""

from __future__ import annotations

from collections.abc import Callable

import jax

from miiii.train import Trainer, TrainState

MEMBER_AXES = TrainState(params=0, opt_state=0, step=None, key=0)  # one step counter for every member


def init_members(trainer: Trainer, seeds: jax.Array) -> TrainState:
    """Every member's initial state (`seeds` (n,)), with one unbatched step counter: every member is at the same
    step, so the step's lax.conds (a new epoch's data order, validation every eval_every steps, the recording)
    stay conds under vmap instead of selects that compute both branches every step (measured on the book adder:
    the epoch's sort at every step made a vmapped sweep 10-16x slower than its members alone)."""
    states = jax.vmap(trainer.init)(seeds)
    return states._replace(step=states.step[0])


MEMBER_DATA = ("train_x", "train_y", "valid_x", "valid_y")  # a member's own split (DATA_SWEEPABLE), stacked


def members_chunk(trainer: Trainer, own_data: bool = False) -> Callable:
    """jit(states, data, n_steps, counts=None, snap_at=None, order=None) -> (states, ChunkOut, member axis first):
    `trainer.raw_chunk` vmapped over members of `init_members`; the data (the recorded inputs too) and the
    recording's `counts` and `snap_at` are shared, but for data["hp"] (one value per member) and, with `own_data`,
    the MEMBER_DATA arrays (each member's split, member axis first). `states` is donated."""
    per_member = ("hp", *MEMBER_DATA) if own_data else ("hp",)

    def chunk(states, data, n_steps, counts=None, snap_at=None, order=None):
        axes = {k: 0 if k in per_member else None for k in data}
        return jax.vmap(lambda s, d, at, o: trainer.raw_chunk(s, d, n_steps, counts, at, o),
                        in_axes=(MEMBER_AXES, axes, None, 0), out_axes=(MEMBER_AXES, 0))(states, data, snap_at, order)

    return jax.jit(chunk, static_argnums=(2, 3), donate_argnums=(0, 5))


def members_order(trainer: Trainer) -> Callable:
    """jit(states) -> every member's running epoch order (member axis first): the first chunk's `order`."""
    return jax.jit(jax.vmap(trainer.raw_order, in_axes=(MEMBER_AXES,)))
