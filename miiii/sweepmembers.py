"""Each sweep member's run directory as the sweep writes it: the solo run's `Recorder`, `Checkpoints` and
`MetricsLog` fed with the member's slice of the vmapped state and chunk outputs, so a member directory is a run
directory like any other (`load_run`, `params_at`, `acts`, `python -m miiii figures MEMBER`). Also the sweep's
plan (sweep-plan.json: what `--resume` rebuilds the members from), the recording's and checkpoints' bytes summed
over every member, and the restore of every member at one common step for a resume.

Order at a checkpoint, per member (as a solo run's, runner.py): activations and metrics up to step s reach the
disk, then acts/index.json says so, then the orbax save of step s commits, then its checksum is written.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import jax
import numpy as np

from miiii.actsindex import read_acts_index
from miiii.cadence import log_steps
from miiii.checkpoint import Checkpoints, state_nbytes
from miiii.config import ConfigError, RunConfig
from miiii.files import free_bytes, write_json_atomic
from miiii.integrity import check_metrics_rows, metrics_rows_sha256
from miiii.metricslog import MetricsLog
from miiii.record import GiB, Recording
from miiii.recorder import Recorder
from miiii.rundir import (
    CONFIG,
    MEMBER,
    METRICS,
    check_layout,
    check_unedited,
    has_checkpoints,
    read_ckpt_meta,
    read_config,
    read_json,
    read_metrics,
    remove_summary,
    write_config,
    write_metrics,
)
from miiii.train import ChunkOut, TrainState

PLAN, RESULT = "sweep-plan.json", "sweep.json"  # in the sweep directory: written first, and last (complete)


def write_plan(out_dir: Path, cfg: RunConfig, seeds: int, grid: dict) -> None:
    """sweep-plan.json: the base config, --seeds and --grid, from which `--resume` rebuilds every member."""
    write_json_atomic(Path(out_dir) / PLAN, {"config": cfg.to_dict(), "seeds": seeds,
                                             "grid": {k: list(v) for k, v in grid.items()}})


def plan_digest(cfg: RunConfig, seeds: int, grid: dict) -> int:
    """One number for a sweep's arguments: processes (and a resume) compare it."""
    return zlib.crc32(json.dumps([cfg.to_dict(), seeds, {k: list(v) for k, v in grid.items()}],
                                 sort_keys=True).encode())


def plan_is(out_dir: Path, cfg: RunConfig, seeds: int, grid: dict) -> bool:
    """Whether an interrupted sweep's plan (sweep-plan.json, read and checked as `read_plan`) is the one given: what
    `sweep --resume` and the paper study's --reuse check before they continue it."""
    return plan_digest(*read_plan(out_dir)) == plan_digest(cfg, seeds, grid)


def read_plan(out_dir: Path) -> tuple[RunConfig, int, dict]:
    """(base config, seeds, grid) of a sweep directory that may be resumed; a ConfigError that says why not: not a
    sweep (no sweep-plan.json), a complete one (sweep.json), or a damaged plan."""
    out_dir = Path(out_dir)
    if not (out_dir / PLAN).is_file():
        what = ("a sweep written before sweeps could resume (no sweep-plan.json)" if (out_dir / RESULT).is_file()
                else "not a sweep directory (no sweep-plan.json)")
        raise ConfigError(f"--resume {out_dir}: {what}")
    if (out_dir / RESULT).is_file():
        raise ConfigError(f"--resume {out_dir}: the sweep is complete (sweep.json is written); nothing to resume")
    plan = read_json(out_dir / PLAN)
    try:
        cfg = RunConfig.from_dict(plan["config"])
        seeds = int(plan["seeds"])
        grid = {str(k): tuple(float(x) for x in v) for k, v in plan["grid"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{out_dir / PLAN} is damaged ({type(e).__name__}: {e})") from None
    return cfg, seeds, grid


def describe_sweep_bytes(rec: Recording, template: TrainState, cfg: RunConfig, n: int) -> str:
    """The sweep's line on what its members write: the recording and the checkpoints, per member and in all."""
    ckpt = state_nbytes(template) * (cfg.ckpt.keep + len(log_steps(cfg.train.steps, cfg.ckpt.keep_log)))
    per = rec.nbytes + ckpt
    return (f"members: {n} x ({rec.nbytes:,} bytes of recording in acts/ + up to {ckpt:,} bytes of checkpoints in "
            f"ckpt/) = up to {n * per:,} bytes ({n * per / GiB:.3f} GiB) in all")


def check_sweep_budget(rec: Recording, template: TrainState, cfg: RunConfig, n: int, out_dir: Path,
                       budget: int | None) -> None:
    """Refuse (ConfigError, nothing written) a sweep whose members' recordings together exceed `budget` bytes (None:
    no budget), or whose recordings and checkpoints together exceed the free disk."""
    acts = n * rec.nbytes
    total = acts + n * state_nbytes(template) * (cfg.ckpt.keep + len(log_steps(cfg.train.steps, cfg.ckpt.keep_log)))
    free = free_bytes(out_dir)
    if budget is not None and acts > budget:
        raise ConfigError(f"the {n} members' recordings need {acts:,} bytes ({acts / GiB:.2f} GiB; {rec.nbytes:,} "
                          f"each), more than --record-budget {budget:,} bytes; record less (--set record.every=K, "
                          "record.neurons=0:16, record.acts=..., ...), sweep fewer members, or raise --record-budget")
    if total >= free:
        raise ConfigError(f"the {n} members need up to {total:,} bytes (recordings and checkpoints), more than the "
                          f"free disk ({free:,} bytes); record less, keep fewer checkpoints (ckpt.keep) or sweep "
                          "fewer members")


def member_slice(tree, i: int):
    """Member i's part of a tree with the member axis first (None stays None)."""
    return None if tree is None else jax.tree.map(lambda a: a[i], tree)


class MemberFiles:
    """One member's run directory, written by the sweep's host loop through the solo run's writers."""

    def __init__(self, run_dir: Path, cfg: RunConfig, rec: Recording, hist: dict, task_names, trainer,
                 create: bool, info: dict | None = None):
        """`hist`: the member's view of the sweep's history (metric -> (steps, ...)); `create`: a new member
        (config.json and member.json written) or one being resumed."""
        self.dir, self.cfg, self.hist = Path(run_dir), cfg, hist
        self.task_names, self.trainer = task_names, trainer
        if create:
            self.dir.mkdir()
            write_config(self.dir, cfg)
            write_json_atomic(self.dir / MEMBER, info or {})
        self.recorder = Recorder(self.dir, rec, create=create)
        self.ckpts = Checkpoints(self.dir, cfg.ckpt.keep, cfg)
        self.log: MetricsLog | None = None

    def open_log(self, upto: int, tensorboard: bool) -> None:
        self.log = MetricsLog(self.dir, self.hist, self.task_names, self.trainer.grad_names, upto,
                              self.cfg.train.eval_every, self.cfg.train.steps, tensorboard, self.trainer.metrics)

    def take(self, done: int, n: int, out: ChunkOut) -> None:
        """The member's outputs of the chunk [done, done + n) (its slice; its metrics are already in `hist`)."""
        self.log.append(done, done + n)
        self.recorder.take(done, n, out)

    def metrics_sum(self, step: int) -> dict:
        names = list(self.hist)
        return {"names": names, "sha256": metrics_rows_sha256(self.hist, names, step)}

    def checkpoint(self, state: TrainState, finished: bool) -> None:
        """Metrics and activations up to the state's step, then the checkpoint that covers them (a diverged
        member's NaN parameters too: the sweep goes on with them, and a resume must as well)."""
        step = int(state.step)
        write_metrics(self.dir, self.hist, step, self.task_names, self.trainer.grad_names)
        self.recorder.commit(step, finished)
        self.ckpts.save(state, self.metrics_sum(step))

    def save_snaps(self, end_state: TrainState, snaps, snap_at) -> None:
        """The states a chunk captured at steps kept for good (session.Session.save_snaps, for one member)."""
        params, opt_state, step = snaps
        for j in np.nonzero(snap_at >= 0)[0]:
            self.ckpts.save(end_state._replace(params=member_slice(params, j), opt_state=member_slice(opt_state, j),
                                               step=step[j]), self.metrics_sum(int(step[j])))

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
        self.recorder.close()
        self.ckpts.close()


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def check_member(run_dir: Path, cfg: RunConfig) -> None:
    """A member directory a resume may continue: its config.json is the one its sweep's plan gives it, unedited
    since it started, with checkpoints to resume from."""
    if not (run_dir / CONFIG).is_file():
        raise ConfigError(f"{run_dir} is missing: the sweep stopped before its first checkpoints; nothing to resume "
                          "(start the sweep again into a new --out)")
    saved = read_config(run_dir)
    if saved != cfg:
        raise ConfigError(f"{run_dir}/config.json differs from the member its sweep's sweep-plan.json makes; the "
                          "sweep cannot be resumed")
    check_layout(run_dir)
    if not has_checkpoints(run_dir):
        raise ConfigError(f"{run_dir} has no checkpoints: the sweep stopped before its first checkpoints; nothing "
                          "to resume (start the sweep again into a new --out)")
    check_unedited(run_dir, cfg, read_ckpt_meta(run_dir))


def restore_members(files: list[MemberFiles], template: TrainState) -> tuple[list[TrainState], int]:
    """Every member's newest good checkpoint at one step, the newest that every member has good (members step
    together); a ConfigError when there is none."""
    for f in files:  # a member without its metrics would pull every member back to step 0
        if not (f.dir / METRICS).is_file():
            raise ConfigError(f"{f.dir / METRICS} is missing: the member is damaged, and resuming would cut every "
                              "member back to step 0; nothing was changed")
    at_most, states = None, []
    for _ in range(len(files) + 2):  # each pass lowers the common step or ends
        states, why = [], []
        for f in files:
            rows = len(read_metrics(f.dir).get("step", []))
            state, skipped = f.ckpts.restore_good(template, at_most=rows if at_most is None else min(rows, at_most))
            why += [f"{f.dir.name}: {w}" for w in skipped]
            if state is None:
                raise ConfigError(f"{f.dir}: no checkpoint can be resumed from ({'; '.join(skipped) or 'none saved'})")
            states.append(state)
        steps = {int(s.step) for s in states}
        if len(steps) == 1:
            for w in why:
                if "newer than" not in w:
                    say(f"warning: {w}; falling back to an older checkpoint")
            return states, steps.pop()
        at_most = min(steps)
    raise ConfigError("the members' checkpoints share no step to resume from")


def check_reopen(f: MemberFiles, step: int) -> tuple[dict, dict]:
    """(metrics, acts index) of a member that can be cut back to `step`, or a ConfigError; nothing is changed, so a
    sweep's resume checks every member before it cuts back the first."""
    metrics = read_metrics(f.dir, complete=("loss",), optional=tuple(m.name for m in f.trainer.metrics))
    check_metrics_rows(f.dir, metrics, step, read_ckpt_meta(f.dir))
    index = {}
    if f.recorder.rec.arrays:
        index = read_acts_index(f.dir)
        if index.get("complete_step", -1) < step:
            raise ConfigError(f"{f.dir / 'acts'} holds activations up to step {index.get('complete_step')} only, "
                              f"older than checkpoint {step}: the activation files are damaged")
    return metrics, index


def reopen_member(f: MemberFiles, step: int, finished: bool, checked: tuple[dict, dict]) -> None:
    """A member's files cut back to `step` (`checked`: its `check_reopen`), as a solo resume does."""
    metrics, index = checked
    done = finished and index.get("finished", False)
    f.recorder.resume(index, step, done)
    f.ckpts.delete_after(step)
    remove_summary(f.dir)
    for key, h in f.hist.items():
        if key in metrics:
            h[:step] = metrics[key][:step]
    write_metrics(f.dir, f.hist, step, f.task_names, f.trainer.grad_names)
    f.recorder.commit(step, done)
