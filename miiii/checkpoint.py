"""Checkpoints of the whole train state with orbax, each verified by our own checksum.

    run_dir/ckpt/STEP/      orbax `CheckpointManager` steps (params, opt_state incl. the grokfast EMA,
                            step, PRNG key data); a save killed half-way leaves a tmp folder orbax ignores
    run_dir/ckpt.json       {"checksums": {STEP: sha256 of the state's array bytes}, "config": the RunConfig}
                            (written and read by rundir.py)

With `ckpt.keep_log = K` the steps `log_steps(steps, K)` are checkpointed too (each chunk returns their states)
and kept for good beside the newest `keep`: `Run.params_at(step)` restores them exactly.

orbax verifies nothing (a flipped byte in a saved checkpoint restores silently), so a step counts as
good only when it restores and its arrays hash to the checksum written after its save completed. The
minibatch order and dropout are pure functions of (key, step), so this state is all a resume needs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp

from miiii.cadence import log_steps
from miiii.config import RunConfig
from miiii.files import fsync_tree, io_fault
from miiii.rundir import CKPT, CKPT_META, read_ckpt_meta, write_ckpt_meta
from miiii.train import TrainState

# orbax logs every save at INFO, and a failed write as a traceback from each of its threads; the failure also
# reaches Checkpoints.save as an exception, which the run reports in one line
logging.getLogger("absl").setLevel(logging.CRITICAL)


def _not_unretrieved(record: logging.LogRecord) -> bool:
    """A failed write fails several of orbax's asyncio tasks; save() awaits one, and asyncio prints each other one
    as "Task exception was never retrieved" when it is collected (under load, after the run's one error line)."""
    return not record.getMessage().startswith("Task exception was never retrieved")


logging.getLogger("asyncio").addFilter(_not_unretrieved)
ITEM = ocp.checkpoint_manager.DEFAULT_ITEM_NAME  # "default": a manager of one item saves it in STEP/default/


def to_host(state: TrainState) -> TrainState:
    """Device state -> numpy pytree; the typed PRNG key becomes its uint32 key data (orbax saves arrays)."""
    return jax.device_get(state._replace(key=jax.random.key_data(state.key)))


def from_host(tree: TrainState) -> TrainState:
    t = jax.tree.map(jax.numpy.asarray, tree)
    return t._replace(key=jax.random.wrap_key_data(t.key))


def checksum(host: TrainState) -> str:
    """sha256 over every leaf's dtype, shape and bytes, in pytree order."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(host):
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def state_nbytes(template: TrainState) -> int:
    """Bytes of one checkpoint's arrays (orbax adds a little metadata)."""
    host = template._replace(key=jax.eval_shape(jax.random.key_data, template.key))  # saved as its uint32 data
    return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in jax.tree.leaves(host))


def store_error(e: Exception) -> str:
    """tensorstore's error (a ValueError of several lines naming temp files) -> its reason in a few words."""
    text = str(e)
    code = re.search(r"os_error_code='(\d+)'", text)
    if code:
        return os.strerror(int(code.group(1)))
    return text.splitlines()[0][:160] if text else type(e).__name__


def describe_checkpoints(cfg: RunConfig, template: TrainState) -> str:
    """The run's one line on its checkpoints: the bytes of one, how many are kept, the most ckpt/ holds."""
    one, kept = state_nbytes(template), log_steps(cfg.train.steps, cfg.ckpt.keep_log)
    total = one * (cfg.ckpt.keep + len(kept))
    extra = f" + {len(kept)} log-spaced steps kept for good (ckpt.keep_log = {cfg.ckpt.keep_log})" if kept else ""
    return (f"checkpoints: {one:,} bytes each; the newest {cfg.ckpt.keep}{extra}: up to {total:,} bytes "
            f"({total / (1 << 30):.3f} GiB) in ckpt/")


class Checkpoints:
    """Save every N steps and at the end, keep the newest `keep` (and the log-spaced ones), restore the newest
    good one."""

    def __init__(self, run_dir: Path, keep: int, cfg: RunConfig | None = None, read_only: bool = False):
        """`cfg`: the run's config, copied into ckpt.json at each save (None: the stored copy stays), and the
        source of the log-spaced steps kept for good (`ckpt.keep_log`)."""
        self.run_dir, self.cfg = Path(run_dir), cfg
        self.dir = self.run_dir / CKPT
        self.kept_for_good = log_steps(cfg.train.steps, cfg.ckpt.keep_log) if cfg else ()
        policies = ocp.checkpoint_managers
        keeping = [policies.LatestN(n=keep)] + ([policies.CustomSteps(steps=list(self.kept_for_good))]
                                                if self.kept_for_good else [])
        handler, registry = ocp.StandardCheckpointHandler(), ocp.handlers.DefaultCheckpointHandlerRegistry()
        registry.add(ITEM, ocp.args.StandardSave, handler)  # one item, the state, in STEP/default/
        registry.add(ITEM, ocp.args.StandardRestore, handler)
        # A run's checkpoints belong to the one process that writes its files (a sweep's process 0): orbax would
        # otherwise hold a barrier across every process of a jax.distributed job, which the others never join.
        me = jax.process_index()
        local = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
        if not read_only:
            self.dir.mkdir(parents=True, exist_ok=True)  # orbax's create=True refuses active_processes
        self.mgr = ocp.CheckpointManager(
            self.dir.absolute(),
            options=ocp.CheckpointManagerOptions(preservation_policy=policies.AnyPreservationPolicy(keeping),
                                                 create=False, read_only=read_only, enable_async_checkpointing=False,
                                                 multiprocessing_options=local),
            handler_registry=registry,
        )

    def checksums(self) -> dict[str, str]:
        """step (str) -> checksum of every save that completed (ckpt.json; none when it is missing or damaged)."""
        return read_ckpt_meta(self.run_dir, strict=False).get("checksums", {})

    def steps(self) -> list[int]:
        return sorted(self.mgr.all_steps())

    def save(self, state: TrainState, metrics_sum: dict | None = None) -> int:
        """Save synchronously (the next chunk donates the state's buffers), then record its checksum (and
        `metrics_sum`, the checksum of the metrics rows before its step: rundir.metrics_rows_sha256)."""
        host = to_host(state)
        step = int(host.step)
        try:
            self.mgr.save(step, args=ocp.args.StandardSave(host), force=True)
            self.mgr.wait_until_finished()
            fsync_tree(self.dir / str(step))  # synced before its checksum says it is good
        except OSError as e:
            raise io_fault(self.dir / str(step), e) from None
        except ValueError as e:  # tensorstore's write errors (RESOURCE_EXHAUSTED: disk full, OUT_OF_RANGE: ulimit -f)
            raise io_fault(self.dir / str(step), store_error(e)) from None
        kept = {str(s) for s in self.mgr.all_steps()}
        sums = {k: v for k, v in self.checksums().items() if k in kept} | {str(step): checksum(host)}
        rows = read_ckpt_meta(self.run_dir, strict=False).get("metrics", {})
        rows = {k: v for k, v in rows.items() if k in kept} | ({str(step): metrics_sum} if metrics_sum else {})
        write_ckpt_meta(self.run_dir, sums, self.cfg, rows)
        return step

    def restore(self, step: int, template: TrainState) -> TrainState:
        """Checkpoint `step` as saved (unverified); `template` may be abstract (jax.eval_shape of init)."""
        return from_host(self._restore_host(step, template))

    def _restore_host(self, step: int, template: TrainState) -> TrainState:
        """Checkpoint `step` as numpy arrays. A manager given a handler registry learns whether its steps hold one
        item or several from its first save, or else from the folder of the first step it restores: a step without
        its default/ folder (a save cut short) is refused before orbax sees it, or the manager would expect several
        items and fail every older, intact step with 'Must provide args of type Composite'."""
        if not (self.dir / str(step) / ITEM).is_dir():
            raise FileNotFoundError(f"{self.dir / str(step) / ITEM} is missing")
        return TrainState(*jax.device_get(self.mgr.restore(step, args=self._args(template))))

    @staticmethod
    def _args(template: TrainState):
        key = jax.eval_shape(jax.random.key_data, template.key)
        return ocp.args.StandardRestore(jax.tree.map(ocp.utils.to_shape_dtype_struct, template._replace(key=key)))

    def restore_verified(self, step: int, template: TrainState) -> TrainState:
        """Checkpoint `step`, refused (ValueError) unless its arrays match the checksum written at its save."""
        sums = self.checksums()
        if str(step) not in sums:
            raise ValueError(f"checkpoint {step} has no checksum in {self.run_dir / CKPT_META}")
        host = self._restore_host(step, template)
        if checksum(host) != sums[str(step)]:
            raise ValueError(f"checkpoint {step} in {self.dir} is damaged (checksum mismatch)")
        return from_host(host)

    def restore_good(self, template: TrainState, at_most: int | None = None) -> tuple[TrainState | None, list[str]]:
        """Newest step whose arrays restore and match their checksum; the reasons others were skipped."""
        sums = self.checksums()
        skipped = []
        for step in sorted(self.mgr.all_steps(), reverse=True):
            if at_most is not None and step > at_most:
                skipped.append(f"checkpoint {step} is newer than the recorded metrics")
                continue
            if str(step) not in sums:
                skipped.append(f"checkpoint {step} has no checksum (its save did not finish)")
                continue
            try:
                host = self._restore_host(step, template)
            except Exception as e:  # noqa: BLE001 - orbax raises many kinds on damaged files
                skipped.append(f"checkpoint {step} does not restore ({type(e).__name__}: {str(e)[:120]})")
                continue
            if checksum(host) != sums[str(step)]:
                skipped.append(f"checkpoint {step} is damaged (checksum mismatch)")
                continue
            return from_host(host), skipped
        return None, skipped

    def delete_after(self, step: int) -> None:
        """Drop checkpoints newer than `step` (damaged ones, or beyond the data kept) before training on."""
        for s in self.mgr.all_steps():
            if s > step:
                self.mgr.delete(s)
        self.mgr.reload()

    def close(self) -> None:
        self.mgr.wait_until_finished()
        self.mgr.close()
