"""Many runs in one program: seeds x a grid of scalar hyper-parameters, vmapped and sharded.

The phase transition varies between seeds, so the honest report is a distribution. Every member is
the same jitted program; its scalar hyper-parameters travel as data (traced arrays, one value per
member) and its seed as its PRNG key, so `jax.vmap` trains them all at once. The member axis is
sharded over every device JAX sees (`jax.sharding`, a 1-D mesh "member"): on a multi-GPU box each GPU
takes its share. Several processes (hosts): `join_processes` (`python -m miiii sweep --coordinator HOST:PORT
--num-processes N --process-id I` on each) runs `jax.distributed.initialize`; the mesh then spans every
process's devices, each process puts its own members' shards on its devices, each chunk's metrics and the final
parameters are gathered to every process (`multihost_utils.process_allgather`), and process 0 alone writes files.

    sweep_dir/sweep-plan.json  the base config, --seeds and --grid, written first (what --resume rebuilds from)
    sweep_dir/member_000/   a run directory per member (rundir.py, sweepmembers.py), as a solo run of its config
                            writes it: config.json and member.json (index, seed, grid values) at the start, acts/ (the
                            recording) and ckpt/ (checkpoints), metrics.jsonl (and tb/) after every chunk, metrics.npz
                            at checkpoints, summary.json and params.npz at the end
    sweep_dir/members.csv   one row per member: seed, grid values, final accuracy and loss, grok step (sweepfiles.py)
    sweep_dir/grok_steps.png
    sweep_dir/sweep.json    members, their values, grokking steps; mean and spread per grid point; written last: a
                            sweep directory without it is incomplete (`python -m miiii sweep --resume OUT`)
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from miiii.analysis import grok_steps, last_evaluated
from miiii.cadence import checkpoint_due, log_steps, snap_steps
from miiii.claim import RunClaim, RunLock
from miiii.config import DATA_SWEEPABLE, SWEEPABLE, ConfigError, RunConfig, resolve_key, shown
from miiii.files import write_json_atomic, write_text_atomic
from miiii.integrity import finish_files
from miiii.record import GiB, describe_recording
from miiii.rundir import write_metrics, write_params
from miiii.runner import build, prepare
from miiii.session import Interrupted, StopFlag, check_profile, profiled_chunk, say, summarize, trace_chunk
from miiii.sweepfiles import grid_points, mark_diverged, members_csv, plot_grok_steps, point_label, split_spread
from miiii.sweephosts import agree, any_process, fetch, join_processes, to_global
from miiii.sweepmembers import (
    RESULT,
    MemberFiles,
    check_member,
    check_reopen,
    check_sweep_budget,
    describe_sweep_bytes,
    member_slice,
    plan_is,
    read_plan,
    reopen_member,
    restore_members,
    write_plan,
)
from miiii.sweepprogram import MEMBER_DATA, init_members, members_chunk, members_order
from miiii.train import ChunkOut, TrainState, numerics, task_data
from miiii.validate import check_memory, validate

__all__ = ["join_processes", "make_members", "member_dir", "parse_grid", "resume_sweep", "run_sweep"]


@dataclass(frozen=True)
class Member:
    index: int
    seed: int
    values: dict  # grid key (section.field) -> value
    config: RunConfig


def parse_grid(items: list[str]) -> dict[str, tuple[float, ...]]:
    """`lr=1e-3,3e-3 wd=0.3,1` -> {"optim.lr": (1e-3, 3e-3), "optim.weight_decay": (0.3, 1.0)}."""
    grid: dict[str, tuple[float, ...]] = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not text:
            raise ConfigError(f"--grid takes key=v1,v2,..., got '{shown(item)}'")
        sec, name = resolve_key(key.strip())
        path = f"{sec}.{name}"
        if path not in SWEEPABLE + DATA_SWEEPABLE:
            raise ConfigError(
                f"'{shown(key)}' cannot be swept in one program (only scalar hyper-parameters: "
                f"{', '.join(sorted(k.split('.')[1] for k in SWEEPABLE))}; and the split: "
                f"{', '.join(k.split('.')[1] for k in DATA_SWEEPABLE)}): it changes the arrays' shapes or the "
                "program; run separate sweeps for it"
            )
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise ConfigError(f"--grid {shown(key)}: values must be numbers, got '{shown(text)}'") from None
        if path in DATA_SWEEPABLE and not all(v.is_integer() and 0 <= v < 2**32 for v in values):
            raise ConfigError(f"--grid {shown(key)}: a seed is a whole number from 0 to 2**32 - 1, got '{shown(text)}'")
        if path in grid:
            raise ConfigError(f"--grid names {shown(key)} twice")
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:  # the same member twice would count one run as two in every summary
            raise ConfigError(f"--grid {shown(key)} gives {', '.join(f'{v:g}' for v in twice)} more than once; give "
                              "each value once (--seeds N repeats a point over seeds)")
        grid[path] = values
    return grid


def make_members(cfg: RunConfig, seeds: int, grid: dict[str, tuple[float, ...]]) -> list[Member]:
    """Every member's config, each validated; their number and seeds are checked before one is built."""
    if seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, got {seeds}")
    if validate(cfg).train.init_from:
        raise ConfigError("a sweep starts every member fresh: train.init_from is for `python -m miiii train`")
    if cfg.train.seed + seeds > 2**32:
        raise ConfigError(f"--seeds {seeds:,} from train.seed {cfg.train.seed} runs past the largest seed, 2**32 - 1")
    check_memory(cfg, seeds * math.prod(len(v) for v in grid.values()))
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        for s in range(seeds):
            c = replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + s))
            values = {k: int(v) if k in DATA_SWEEPABLE else v for k, v in zip(keys, combo, strict=True)}
            for k, v in values.items():
                sec, name = k.split(".")
                c = replace(c, **{sec: replace(getattr(c, sec), **{name: v})})
            validate(c)
            out.append(Member(len(out), c.train.seed, values, c))
    if "optim.lamb" in grid and cfg.optim.grokfast == "none":
        raise ConfigError("--grid lamb needs grokfast on: add --set optim.grokfast=ema")
    return out


def _hp_arrays(members: list[Member], keys: list[str]) -> dict:
    """The grid's values by section and field ({"optim": {"lr": (n_members,)}, ...}): the trainer's data["hp"]."""
    hp: dict = {}
    for k in (k for k in keys if k in SWEEPABLE):  # the data's keys travel as each member's own data instead
        sec, name = k.split(".")
        hp.setdefault(sec, {})[name] = jnp.asarray([m.values[k] for m in members], jnp.float32)
    return hp


def member_dir(sweep_dir: Path, index: int) -> Path:
    """Member `index`'s run directory in a sweep directory (the layout in the module docstring)."""
    return Path(sweep_dir) / f"member_{index:03d}"


_STARTING = "stopping once the start-up step under way returns (nothing is kept); press Ctrl-C again to stop at once"
_RUNNING = "stopping after this chunk (every member writes a checkpoint); press Ctrl-C again to stop at once"


def run_sweep(cfg: RunConfig, seeds: int, grid: dict, out_dir: str | Path, progress: bool = True,
              tensorboard: bool = True, profile: str | Path | None = None, record_budget: int | None = 2 * GiB,
              on_chunk=None) -> dict:
    """Train every member; `tensorboard`, `profile`, `record_budget` and `on_chunk(step)` as `runner.train_run`.
    Each member records and keeps checkpoints as a solo run of its config would; the recordings' and checkpoints'
    bytes summed over the members are checked before anything is written (`sweepmembers.check_sweep_budget`).

    The sweep directory is claimed before the build (claim.RunClaim): an error or Ctrl-C before every member's
    step-0 checkpoint removes it; after, it stays (sweep.json missing: incomplete) and `resume_sweep` continues it.
    In several processes (`join_processes`) every process calls it with the same arguments and gets the same result;
    process 0 alone writes `out_dir` (and the profile), shows progress, and decides whether `out_dir` may be written.
    """
    out_dir = Path(out_dir)
    agree(cfg, seeds, grid, out_dir, profile)
    writer = jax.process_index() == 0
    members = make_members(cfg, seeds, grid)
    sweep = SweepRun(cfg, members, grid, out_dir, writer)
    if writer:
        check_sweep_budget(sweep.rec, sweep.template, cfg, len(members), out_dir, record_budget)
        say(describe_recording(sweep.rec) + (f" (each of the {len(members)} members)" if sweep.rec.arrays else ""))
        say(describe_sweep_bytes(sweep.rec, sweep.template, cfg, len(members)))
    with StopFlag(_STARTING) as stop, (RunClaim(out_dir) if writer else contextlib.nullcontext()) as claim:
        if writer:
            write_plan(out_dir, cfg, seeds, grid)
        try:
            sweep.open_files(create=True)
            stop.check()
            states = sweep.init_states()
            stop.check()
            sweep.checkpoint(states, finished=False)  # step 0: a sweep stopped in its first chunk can resume
        except BaseException:
            sweep.close()
            raise
        if claim is not None:
            claim.keep()
        return sweep.run(states, 0, stop, progress, tensorboard, profile, on_chunk)


def resume_sweep(out_dir: str | Path, progress: bool = True, tensorboard: bool = True,
                 profile: str | Path | None = None, expect: tuple | None = None, on_chunk=None) -> dict:
    """Continue an interrupted sweep from the newest checkpoint every member has good; it ends bit-identical to an
    uninterrupted sweep of the same plan (sweep-plan.json). `expect`: the (config, seeds, grid) a command line gave,
    which must be the plan's. Every check runs before anything is changed; one process only."""
    out_dir = Path(out_dir)
    if jax.process_count() > 1:
        raise ConfigError("sweep --resume runs in one process (leave out --coordinator, --num-processes, "
                          "--process-id)")
    cfg, seeds, grid = read_plan(out_dir)
    if expect is not None and not plan_is(out_dir, *expect):
        raise ConfigError(f"--resume {out_dir}: --preset, --set, --steps, --seeds or --grid differ from the sweep's "
                          f"own ({out_dir / 'sweep-plan.json'}); resume without them, or start a new sweep")
    check_profile(profile)
    members = make_members(cfg, seeds, grid)
    on_disk = sorted(p.name for p in out_dir.glob("member_*") if p.is_dir())
    if on_disk != [member_dir(out_dir, m.index).name for m in members]:
        raise ConfigError(f"{out_dir / 'sweep-plan.json'} makes {len(members)} members but {out_dir} holds "
                          f"{len(on_disk)} member directories: the plan was edited or members were added or removed; "
                          "the sweep cannot be resumed")
    for mem in members:
        check_member(member_dir(out_dir, mem.index), mem.config)
    with StopFlag() as stop, RunLock(out_dir):
        sweep = SweepRun(cfg, members, grid, out_dir, True)
        try:
            sweep.open_files(create=False)
            restored, step = restore_members(sweep.files, sweep.template)
            checked = [check_reopen(f, step) for f in sweep.files]  # all checked before the first is cut back
            for f, c in zip(sweep.files, checked, strict=True):
                reopen_member(f, step, step == cfg.train.steps, c)
        except BaseException:
            sweep.close()
            raise
        say(f"resuming {out_dir} from step {step} of {cfg.train.steps}")
        return sweep.run(sweep.stack(restored, step), step, stop, progress, tensorboard, profile, on_chunk)


class SweepRun:
    """The members of one sweep in one program: the task, trainer and recording they share, their vmapped chunk,
    their history, and (process 0) each member's run directory (`sweepmembers.MemberFiles`)."""

    def __init__(self, cfg: RunConfig, members: list[Member], grid: dict, out_dir: Path, writer: bool):
        self.cfg, self.members, self.keys, self.out_dir, self.writer = cfg, members, list(grid), out_dir, writer
        self.task = prepare(cfg)
        self.trainer, self.rec = build(cfg, self.task)
        self.template = jax.eval_shape(self.trainer.init, cfg.train.seed)
        self.n_dev, n = len(jax.devices()), len(members)
        self.padded = members + [members[-1]] * (-n % self.n_dev)  # the member axis must split evenly over devices
        mesh = jax.make_mesh((self.n_dev,), ("member",), axis_types=(jax.sharding.AxisType.Auto,))
        self.shard, self.everywhere = NamedSharding(mesh, P("member")), NamedSharding(mesh, P())
        # a grid over the split (DATA_SWEEPABLE): every member's own task, same shapes, its data stacked
        self.tasks = [prepare(m.config) for m in self.padded] if set(self.keys) & set(DATA_SWEEPABLE) else None
        self.chunk = members_chunk(self.trainer, own_data=self.tasks is not None)
        self.order = members_order(self.trainer)
        self.hist = self.trainer.empty_history(cfg.train.steps, len(self.task.task_names), lead=(len(self.padded),))
        self.files: list[MemberFiles] = []
        self.kept = log_steps(cfg.train.steps, cfg.ckpt.keep_log)
        self.keydata = None  # (members, key data): a member's key never changes

    def open_files(self, create: bool) -> None:
        if not self.writer:
            return
        for mem in self.members:
            self.files.append(MemberFiles(member_dir(self.out_dir, mem.index), mem.config, self.rec,
                                          {k: h[mem.index] for k, h in self.hist.items()}, self.task.task_names,
                                          self.trainer, create, dict(index=mem.index, seed=mem.seed,
                                                                     values=mem.values)))

    def close(self) -> None:
        for f in self.files:
            f.close()

    def _put(self, states: TrainState) -> TrainState:
        step, states = states.step, states._replace(step=None)
        hp = _hp_arrays(self.padded, self.keys)
        if jax.process_count() == 1:
            states, self.hp = jax.device_put((states, hp), self.shard)
            step = jax.device_put(step, self.everywhere)
        else:
            states, self.hp = to_global((states, hp), self.shard)
            step = to_global(step, self.everywhere)
        return states._replace(step=step)

    def init_states(self) -> TrainState:
        return self._put(init_members(self.trainer, jnp.asarray([m.seed for m in self.padded])))

    def stack(self, restored: list[TrainState], step: int) -> TrainState:
        """Every member's restored state as one member-sharded state (padding repeats the last member)."""
        restored = restored + [restored[-1]] * (len(self.padded) - len(restored))
        host = [s._replace(key=jax.random.key_data(s.key), step=None) for s in restored]
        stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *host)
        self.keydata = stacked.key
        stacked = stacked._replace(key=jax.random.wrap_key_data(jnp.asarray(stacked.key)),
                                   step=jnp.asarray(step, self.template.step.dtype))
        return self._put(stacked)

    def _host(self, states: TrainState) -> TrainState:
        """The states on this host (a collective across processes): key data instead of typed keys."""
        out = fetch(states._replace(key=jax.random.key_data(states.key), step=None))
        return out._replace(step=np.asarray(states.step.addressable_data(0)))

    def _member_state(self, host: TrainState, i: int) -> TrainState:
        return TrainState(member_slice(host.params, i), member_slice(host.opt_state, i), host.step,
                          jax.random.wrap_key_data(jnp.asarray(host.key[i])))

    def checkpoint(self, states: TrainState, finished: bool) -> None:
        host = self._host(states)
        self.keydata = host.key
        for i, f in enumerate(self.files):
            f.checkpoint(self._member_state(host, i), finished)
        self.last_ckpt = int(host.step)

    def counts(self, start: int, n: int):
        return self.rec.counts(start, n) if self.rec.arrays else None

    def run(self, states, done: int, stop: StopFlag, progress: bool, tensorboard: bool, profile, on_chunk) -> dict:
        """The chunks from step `done` (every member's history before it filled) to the end, then the results."""
        try:
            for f in self.files:
                f.open_log(done, tensorboard)
            diverged = np.full(len(self.padded), -1)  # each member's first step with a non-finite loss (-1: none)
            mark_diverged(self.hist, diverged, 0, done)
            stop.message = _RUNNING
            t0 = time.perf_counter()
            states = self._train(states, done, diverged, stop, progress, profile, on_chunk)
            wall = time.perf_counter() - t0
            final = jax.device_get(self._host(states).params)
        finally:
            self.close()
        return self._finish(final, diverged, wall, start=done)

    def _train(self, states, done, diverged, stop, progress, profile, on_chunk):
        cfg, n, steps = self.cfg, len(self.members), self.cfg.train.steps
        data = self._task_data() | self._record_data() | {"hp": self.hp}
        starts = range(done, steps, cfg.train.chunk)
        lengths = [min(cfg.train.chunk, steps - s) for s in starts]
        traced, compiles = profiled_chunk([(m, self.counts(s, m)) for s, m in zip(starts, lengths, strict=True)])
        self.last_ckpt = done
        order = self.order(states)  # every member's running epoch order, carried from chunk to chunk
        with tqdm(total=steps, initial=done, disable=not (progress and self.writer), unit="step",
                  desc=f"sweep x{n}") as bar:
            for i, m in enumerate(lengths):
                if any_process(stop.requested):
                    raise Interrupted(f"interrupted: every member's checkpoint at step {self.last_ckpt} of {steps} is "
                                      f"in {self.out_dir}; continue with: python -m miiii sweep --resume "
                                      f"{self.out_dir}")
                snap_at = snap_steps(done, m, self.kept)
                if i == 0 and self.writer:  # the bar stands still until the first chunk has compiled and run
                    tqdm.write(f"compiling and running the first chunk ({m} steps x {n} members)…", file=sys.stderr)
                    t_first = time.perf_counter()
                with trace_chunk(profile if i == traced and self.writer else None, i, done, m, compiles):
                    states, out = self.chunk(states, data, m, self.counts(done, m), snap_at, order)
                    order, out = out.order, fetch(out._replace(order=None))
                if i == 0 and self.writer:
                    tqdm.write(f"first chunk: {time.perf_counter() - t_first:.0f} s (its compile included)",
                               file=sys.stderr)
                for key, h in self.hist.items():
                    h[:, done:done + m] = out.metrics[key]
                for j in mark_diverged(self.hist, diverged, done, done + m):
                    if self.writer and j < n:
                        mem = self.members[j]
                        tqdm.write(f"member {j} ({point_label(mem.values)}, seed {mem.seed}) diverged: its loss, "
                                   f"parameters or logits are not finite at step {diverged[j]}; its metrics are NaN "
                                   "from there and it counts as not grokked (the other members go on)", file=sys.stderr)
                for j, f in enumerate(self.files):
                    f.take(done, m, ChunkOut({}, member_slice(out.record, j), member_slice(out.record_end, j)))
                    if snap_at is not None:
                        key = jax.random.wrap_key_data(jnp.asarray(self.keydata[j]))
                        f.save_snaps(self.template._replace(key=key), member_slice(out.snaps, j), snap_at)
                done += m
                if (any_process(stop.requested) or done == steps or checkpoint_due(done, m, cfg.ckpt.every)
                        or done in self.kept or snap_at is not None):
                    self.checkpoint(states, finished=done == steps)
                bar.update(m)
                if on_chunk is not None:
                    on_chunk(done)
        return states

    def _task_data(self) -> dict:
        """task_data, with each member's own split stacked on the member axis when the grid sweeps the split."""
        data = task_data(self.task)
        if self.tasks is None:
            return data
        own = {k: np.stack([np.asarray(task_data(t)[k]) for t in self.tasks]) for k in MEMBER_DATA}
        own = jax.device_put(own, self.shard) if jax.process_count() == 1 else to_global(own, self.shard)
        return data | own

    def _record_data(self) -> dict:
        return {"record_x": jnp.asarray(self.rec.inputs)} if self.rec.arrays else {}

    def _finish(self, final, diverged: np.ndarray, wall: float, start: int = 0) -> dict:
        """`wall`: the seconds this process trained, from step `start` (a resumed sweep's rate counts those steps)."""
        cfg, task, trainer, steps, n = self.cfg, self.task, self.trainer, self.cfg.train.steps, len(self.members)
        step_axis = np.arange(steps)
        rows = []
        for mem in self.members:
            run = member_dir(self.out_dir, mem.index)
            mh = {key: h[mem.index] for key, h in self.hist.items()}
            per_task = grok_steps(step_axis, mh["valid_acc"])
            gone = int(diverged[mem.index]) if diverged[mem.index] >= 0 else None
            grok_all = None if None in per_task or gone is not None else max(per_task)
            params = member_slice(final, mem.index)
            # the same summary as a solo run (final metrics after the last update), plus the member's place in the
            # sweep; diverged_at: the first step whose loss was not finite (its metrics are NaN from there), or None
            own = task if self.tasks is None else self.tasks[mem.index]  # a split axis: the member's own split
            summary = summarize(mem.config, own, trainer, params, step_axis, mh) | dict(
                seed=mem.seed, values=mem.values, grok_step_all=grok_all, diverged_at=gone,
                final_valid_acc=last_evaluated(mh["valid_acc"]).tolist(), **numerics(mem.config),
                record_bytes=self.rec.nbytes)
            if gone is not None:  # a diverged member never counts as grokked
                summary["grok_step"] = dict.fromkeys(summary["grok_step"])
            if self.writer:
                write_metrics(run, mh, steps, task.task_names, trainer.grad_names)
                write_params(run, params)
                finish_files(run, summary)
            rows.append(summary | {"member": mem.index})
        result = dict(preset_config=cfg.to_dict(), n_members=n, n_devices=self.n_dev,
                      n_processes=jax.process_count(), wall_s=round(wall, 3),
                      resumed_from=start, member_steps_per_s=round(n * (steps - start) / max(wall, 1e-9), 1),
                      members=rows,
                      points=grid_points(rows), split_spread=split_spread(rows))
        if self.writer:  # sweep.json last: its presence says the sweep is complete
            write_text_atomic(self.out_dir / "members.csv", members_csv(rows, self.keys))
            plot_grok_steps(result["points"], steps, self.out_dir / "grok_steps.png")
            write_json_atomic(self.out_dir / RESULT, result)
        if jax.process_count() > 1:  # the others wait for process 0's files here, not in jax's shutdown barrier
            multihost_utils.sync_global_devices("miiii sweep: files written")
        return result
