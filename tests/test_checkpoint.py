"""Checkpoints on orbax's current API (a preservation policy, a handler registry): the steps kept and deleted as with
max_to_keep, every kept step restores and verifies, a step without its item folder does not confuse the manager, and
orbax warns of nothing."""

from __future__ import annotations

import logging
import shutil
import warnings

import jax
import numpy as np
import pytest

from miiii.cadence import log_steps, snap_steps, snap_width
from miiii.checkpoint import ITEM, Checkpoints
from miiii.config import apply_overrides
from miiii.presets import PRESETS, get_preset
from miiii.runner import build
from miiii.tasks import make_task

STEPS = 160


@pytest.fixture(scope="module")
def trainer():
    cfg = apply_overrides(get_preset("miiii-tiny"), [f"steps={STEPS}"])
    return build(cfg, make_task(cfg.task))[0]


def saved(trainer, run_dir, keep: int, keep_log: int, every: int = 20) -> list[int]:
    """Save steps 0, every, ..., STEPS as a run with these settings does; the steps left."""
    cfg = apply_overrides(get_preset("miiii-tiny"), [f"steps={STEPS}", f"ckpt.keep={keep}",
                                                     f"ckpt.keep_log={keep_log}"])
    ckpts = Checkpoints(run_dir, keep, cfg)
    state = trainer.init(0)
    for s in range(0, STEPS + 1, every):
        ckpts.save(state._replace(step=jax.numpy.asarray(s, state.step.dtype)))
    steps = ckpts.steps()
    ckpts.close()
    return steps


@pytest.mark.parametrize("keep, keep_log", [(2, 0), (3, 0), (2, 5)])
def test_the_newest_keep_and_the_log_spaced_steps_are_kept_and_all_restore_verified(trainer, tmp_path, keep, keep_log):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        steps = saved(trainer, tmp_path, keep, keep_log)
        every = set(range(0, STEPS + 1, 20))
        assert steps == sorted(set(sorted(every)[-keep:]) | (set(log_steps(STEPS, keep_log)) & every))
        ckpts = Checkpoints(tmp_path, keep, read_only=True)  # as Run.params_at reads a finished run
        template = jax.eval_shape(trainer.init, 0)
        assert [int(ckpts.restore_verified(s, template).step) for s in steps] == steps
        ckpts.close()
    orbax = [w for w in caught if "orbax" in w.filename or issubclass(w.category, DeprecationWarning)]
    assert not orbax, [f"{w.category.__name__}: {w.message}" for w in orbax]


def test_a_step_without_its_item_folder_is_skipped_and_older_ones_still_restore(trainer, tmp_path):
    """The manager learns 'one item' from the first step it restores when it has saved nothing: the newest step
    without its default/ folder must not make it expect several items (and refuse every older step)."""
    steps = saved(trainer, tmp_path, keep=3, keep_log=0)
    shutil.rmtree(tmp_path / "ckpt" / str(steps[-1]) / ITEM)
    ckpts = Checkpoints(tmp_path, 3)
    state, skipped = ckpts.restore_good(jax.eval_shape(trainer.init, 0))
    ckpts.close()
    assert int(state.step) == steps[-2]
    assert len(skipped) == 1 and f"checkpoint {steps[-1]} does not restore" in skipped[0]


def test_no_deprecated_option_reaches_orbax(tmp_path):
    """max_to_keep and item_handlers are marked deprecated in orbax's docstrings (it does not warn)."""
    ckpts = Checkpoints(tmp_path, 2)
    opts = ckpts.mgr._options
    assert opts.max_to_keep is None and opts.keep_period is None and opts.preservation_policy is not None
    ckpts.close()


@pytest.mark.parametrize("steps, k, n", [(3000, 20, 250), (1500, 20, 250), (300, 6, 100), (160, 20, 20), (50, 5, 7)])
def test_every_chunk_returns_the_same_slots_for_the_kept_steps_inside_it(steps, k, n):
    """A chunk's snapshot slots are a static shape: one width for every chunk of length n, wherever it starts (a
    resume may start at any kept step), so a run compiles one program, not one per count of kept steps inside.
    The slots hold exactly the kept steps strictly inside the chunk, and the width is the most any start needs."""
    kept = log_steps(steps, k)
    inside = [[s for s in kept if d < s < d + n] for d in range(steps)]
    width = snap_width(kept, n)
    assert width == max(map(len, inside)) and width > 1
    for d, want in enumerate(inside):
        at = snap_steps(d, n, kept)
        assert at.dtype == np.int32 and len(at) == width
        assert at[at >= 0].tolist() == want and (at[len(want):] == -1).all()
    assert snap_steps(0, n, ()) is None  # nothing kept (ckpt.keep_log = 0): no slots at all


def test_every_preset_keeps_log_spaced_checkpoints():
    """make train's preset (nanda-cpu, grokking near step 700 of 3,000) keeps several before its grok step."""
    assert all(cfg.ckpt.keep_log >= 10 for cfg, _ in PRESETS.values())
    assert len([s for s in log_steps(3000, get_preset("nanda-cpu").ckpt.keep_log) if s < 700]) >= 10


def test_an_asyncio_task_error_nobody_retrieved_prints_nothing(caplog):
    """A failed checkpoint write fails several of orbax's tasks; the run reports one (its one error line) and
    asyncio must not print the others when they are collected. Other asyncio errors still print."""
    import asyncio
    import gc

    import miiii.checkpoint  # noqa: F401 - installs the filter

    async def fails():
        raise ValueError("the write failed")

    async def start():
        asyncio.get_running_loop().create_task(fails())
        await asyncio.sleep(0)

    asyncio.run(start())
    gc.collect()
    logging.getLogger("asyncio").error("another asyncio error")
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio"]  # what asyncio's logger let through
    assert said == ["another asyncio error"], said
