"""Many runs in one program: seeds x a grid of scalar hyper-parameters, vmapped and sharded.

The phase transition varies between seeds, so the honest report is a distribution. Every member is
the same jitted program; its scalar hyper-parameters travel as data (traced arrays, one value per
member) and its seed as its PRNG key, so `jax.vmap` trains them all at once. The member axis is
sharded over every device JAX sees (`jax.sharding`, a 1-D mesh "member"): on a multi-GPU box each GPU
takes its share. Several processes (hosts): `join_processes` (`python -m miiii sweep --coordinator HOST:PORT
--num-processes N --process-id I` on each) runs `jax.distributed.initialize`; the mesh then spans every
process's devices, each process puts its own members' shards on its devices, each chunk's metrics and the final
parameters are gathered to every process (`multihost_utils.process_allgather`), and process 0 alone writes files.

    sweep_dir/member_000/   a run directory per member (rundir.py): config.json at the start, metrics.jsonl (and tb/
                            when tensorboardX imports) after every chunk, metrics.npz, summary.json, params.npz at
                            the end
    sweep_dir/sweep.json    members, their values, grokking steps; mean and spread per grid point
    sweep_dir/members.csv   one row per member: seed, grid values, final accuracy and loss, grok step (sweepfiles.py)
    sweep_dir/grok_steps.png
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
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
from miiii.claim import RunClaim, check_new
from miiii.config import SWEEPABLE, ConfigError, RunConfig, resolve_key, shown
from miiii.errors import raise_interrupt
from miiii.files import write_json_atomic, write_text_atomic
from miiii.integrity import finish_files
from miiii.metricslog import MetricsLog
from miiii.rundir import (
    write_config,
    write_metrics,
    write_params,
)
from miiii.runner import prepare
from miiii.session import check_profile, profiled_chunk, summarize, trace_chunk
from miiii.sweepfiles import members_csv, plot_grok_steps, point_label
from miiii.train import Trainer, TrainState, make_trainer, numerics, task_data
from miiii.validate import check_memory, validate


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
        if path not in SWEEPABLE:
            raise ConfigError(
                f"'{shown(key)}' cannot be swept in one program (only scalar hyper-parameters: "
                f"{', '.join(sorted(k.split('.')[1] for k in SWEEPABLE))}); run separate sweeps for it"
            )
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            raise ConfigError(f"--grid {shown(key)}: values must be numbers, got '{shown(text)}'") from None
        if path in grid:
            raise ConfigError(f"--grid names {shown(key)} twice")
        grid[path] = values
    return grid


def make_members(cfg: RunConfig, seeds: int, grid: dict[str, tuple[float, ...]]) -> list[Member]:
    """Every member's config, each validated; their number and seeds are checked before one is built."""
    if seeds < 1:
        raise ConfigError(f"--seeds must be at least 1, got {seeds}")
    validate(cfg)
    if cfg.train.seed + seeds > 2**32:
        raise ConfigError(f"--seeds {seeds:,} from train.seed {cfg.train.seed} runs past the largest seed, 2**32 - 1")
    check_memory(cfg, seeds * math.prod(len(v) for v in grid.values()))
    keys = list(grid)
    out = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        for s in range(seeds):
            c = replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + s))
            for k, v in zip(keys, combo, strict=True):
                sec, name = k.split(".")
                c = replace(c, **{sec: replace(getattr(c, sec), **{name: v})})
            validate(c)
            out.append(Member(len(out), c.train.seed, dict(zip(keys, combo, strict=True)), c))
    if "optim.lamb" in grid and cfg.optim.grokfast == "none":
        raise ConfigError("--grid lamb needs grokfast on: add --set optim.grokfast=ema")
    return out


def _hp_arrays(members: list[Member], keys: list[str]) -> dict:
    """The grid's values by section and field ({"optim": {"lr": (n_members,)}, ...}): the trainer's data["hp"]."""
    hp: dict = {}
    for k in keys:
        sec, name = k.split(".")
        hp.setdefault(sec, {})[name] = jnp.asarray([m.values[k] for m in members], jnp.float32)
    return hp


JOIN_TIMEOUT_S = 300.0  # jax.distributed.initialize's own default (initialization_timeout)


def join_processes(coordinator: str, num_processes: int, process_id: int, timeout: float = JOIN_TIMEOUT_S) -> None:
    """Join a sweep spanning `num_processes` processes (one per host, or several on one): `jax.distributed.initialize`
    with process 0's HOST:PORT; call it before anything touches a device. CPU processes exchange through gloo
    (jax's default CPU collectives in recent versions, named here for older ones); GPUs through NCCL.

    It says what it waits for, and waits at most `timeout` seconds for every process to join (a ConfigError then).
    jax's call runs in a thread, given a longer `initialization_timeout` of its own: jax's wait in C++ takes no
    Ctrl-C and ends its process in ways of its own, the wait here takes Ctrl-C and ends first (the CLI then leaves
    with os._exit, which ends jax's wait too). Process 0
    first checks that the port is free on this host: jax's coordination service would abort the process (a native
    stack dump) when another process 0, or any program, listens there."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port = int(coordinator.rpartition(":")[2])
    if process_id == 0:
        _check_port_free(port)
    others = f"the {num_processes - 1} other process{'es' if num_processes > 2 else ''}"
    where = f"its coordinator on port {port}" if process_id == 0 else f"process 0's coordinator at {coordinator}"
    print(f"process {process_id} of {num_processes}: waiting for {others} to join through {where} (at most "
          f"{timeout:g} s: --join-timeout; Ctrl-C stops)", file=sys.stderr, flush=True)
    failed: list[BaseException] = []

    def initialize():
        try:
            jax.distributed.initialize(coordinator, num_processes, process_id,
                                       initialization_timeout=min(math.ceil(timeout) + 60, 2**31 - 1))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            failed.append(e)

    thread = threading.Thread(target=initialize, name="miiii-join", daemon=True)
    deadline = time.monotonic() + timeout
    thread.start()
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.2)  # a Ctrl-C is raised here, in the main thread
    if thread.is_alive() or failed:
        why = (": " + shown(str(failed[0]).strip().splitlines()[0], 200)) if failed and str(failed[0]).strip() else ""
        raise ConfigError(f"process {process_id} of {num_processes}: not all {num_processes} processes joined through "
                          f"{coordinator} within {timeout:g} s (--join-timeout){why}; start every process with the "
                          "same --coordinator and --num-processes and its own --process-id")


def _check_port_free(port: int) -> None:
    """Process 0's coordinator port can be bound on this host (as jax's service binds it: every address)."""
    for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((addr, port))
            except OSError as e:
                if e.errno == errno.EADDRNOTAVAIL:
                    continue
                raise ConfigError(f"process 0 cannot start the coordinator on port {port}: {e.strerror or e} "
                                  "(another process 0 of a sweep, or another program, uses it); choose a free port "
                                  "for --coordinator") from None
            return


def _agree(cfg: RunConfig, seeds: int, grid: dict, out_dir: Path, profile: str | Path | None = None) -> None:
    """Every process was given the same sweep, and process 0 may write `out_dir` (check_new there) and its
    `profile` (runner.check_profile): a ConfigError on every process otherwise, before any compile. One all-gather;
    nothing to do in a single process."""
    if jax.process_count() == 1:
        check_new(out_dir)
        check_profile(profile)
        return
    refused = ""
    if jax.process_index() == 0:
        try:
            check_new(out_dir)
            check_profile(profile)
        except ConfigError as e:
            refused = str(e)
    digest = zlib.crc32(json.dumps([cfg.to_dict(), seeds, grid], sort_keys=True).encode())
    rows = multihost_utils.process_allgather(np.array([digest, bool(refused)], np.int64))  # (processes, 2)
    if len(set(rows[:, 0].tolist())) > 1:
        raise ConfigError("the processes of this sweep were given different presets, --set, --seeds or --grid; "
                          "start every process with the same arguments")
    if rows[0, 1]:
        raise ConfigError(refused or f"process 0 cannot write its sweep directory {out_dir} or its --profile "
                          "(see process 0's error)")


def _global(tree, sharding: NamedSharding):
    """Host values that every process computed alike -> arrays sharded over all processes' devices: each process
    fills its own devices' shards (`jax.device_put` cannot target another process's device). Typed PRNG keys
    travel as their key data."""
    def put(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(put(jax.random.key_data(x)), impl=jax.random.key_impl(x))
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree)


def _fetch(tree):
    """A tree of member-sharded arrays as numpy on this process: `jax.device_get` in one process, an all-gather to
    every process across several."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def member_dir(sweep_dir: Path, index: int) -> Path:
    """Member `index`'s run directory in a sweep directory (the layout in the module docstring)."""
    return Path(sweep_dir) / f"member_{index:03d}"


MEMBER_AXES = TrainState(params=0, opt_state=0, step=None, key=0)  # one step counter for every member


def init_members(trainer: Trainer, seeds: jax.Array) -> TrainState:
    """Every member's initial state (`seeds` (n,)), with one unbatched step counter: every member is at the same
    step, so the step's lax.conds (a new epoch's data order, validation every eval_every steps, the recording)
    stay conds under vmap instead of selects that compute both branches every step (measured on the book adder:
    the epoch's sort at every step made a vmapped sweep 10-16x slower than its members alone)."""
    states = jax.vmap(trainer.init)(seeds)
    return states._replace(step=states.step[0])


def members_chunk(trainer: Trainer) -> Callable:
    """jit(states, data, n_steps) -> (states, ChunkOut of metrics (n, n_steps, ...)): `trainer.raw_chunk` vmapped over
    members of `init_members`; the data is shared but for data["hp"] (one value per member). `states` is
    donated."""
    def chunk(states, data, n_steps):
        axes = {k: 0 if k == "hp" else None for k in data}
        return jax.vmap(lambda s, d: trainer.raw_chunk(s, d, n_steps), in_axes=(MEMBER_AXES, axes),
                        out_axes=(MEMBER_AXES, 0))(states, data)

    return jax.jit(chunk, static_argnums=2, donate_argnums=0)


def run_sweep(cfg: RunConfig, seeds: int, grid: dict, out_dir: str | Path, progress: bool = True,
              tensorboard: bool = True, profile: str | Path | None = None) -> dict:
    """Train every member; `tensorboard` and `profile` as `runner.train_run` (one chunk of all members traced).
    The sweep directory is claimed before the build (claim.RunClaim): an error or Ctrl-C before the end removes it (a
    sweep has no checkpoints to resume from).

    In several processes (`join_processes`) every process calls it with the same arguments and gets the same result;
    process 0 alone writes `out_dir` (and the profile), shows progress, and decides whether `out_dir` may be written.
    """
    out_dir = Path(out_dir)
    _agree(cfg, seeds, grid, out_dir, profile)
    writer = jax.process_index() == 0
    members = make_members(cfg, seeds, grid)
    if not writer:
        return _sweep(cfg, members, grid, out_dir, progress, tensorboard, profile, writer)
    with RunClaim(out_dir) as claim:
        result = _sweep(cfg, members, grid, out_dir, progress, tensorboard, profile, writer)
        claim.keep()
        return result


def _sweep(cfg: RunConfig, members: list[Member], grid: dict, out_dir: Path, progress: bool, tensorboard: bool,
           profile: str | Path | None, writer: bool) -> dict:
    task = prepare(cfg)
    keys = list(grid)
    trainer = make_trainer(cfg, task)
    data = task_data(task)

    n_dev = len(jax.devices())
    n = len(members)
    padded = members + [members[-1]] * (-n % n_dev)  # the member axis must split evenly over devices
    mesh = jax.make_mesh((n_dev,), ("member",), axis_types=(jax.sharding.AxisType.Auto,))
    shard = NamedSharding(mesh, P("member"))
    states = init_members(trainer, jnp.asarray([m.seed for m in padded]))
    step, states = states.step, states._replace(step=None)
    hp = _hp_arrays(padded, keys)
    everywhere = NamedSharding(mesh, P())
    if jax.process_count() == 1:
        states, hp = jax.device_put((states, hp), shard)
        step = jax.device_put(step, everywhere)
    else:
        states, hp = _global((states, hp), shard)
        step = _global(step, everywhere)
    states = states._replace(step=step)
    chunk = members_chunk(trainer)

    steps = cfg.train.steps
    hist = trainer.empty_history(steps, len(task.task_names), lead=(len(padded),))
    logs = []
    if writer:  # out_dir itself is made by the claim
        for mem in members:
            run = member_dir(out_dir, mem.index)
            run.mkdir()
            write_config(run, mem.config)
            logs.append(MetricsLog(run, {key: h[mem.index] for key, h in hist.items()}, task.task_names,
                                   trainer.grad_names, 0, cfg.train.eval_every, steps, tensorboard, trainer.metrics))
    lengths = [min(cfg.train.chunk, steps - s) for s in range(0, steps, cfg.train.chunk)]
    traced, compiles = profiled_chunk(lengths)
    diverged = np.full(len(padded), -1)  # each member's first step with a non-finite loss (-1: none)
    t0 = time.perf_counter()
    done = 0
    try:
        with tqdm(total=steps, disable=not (progress and writer), unit="step", desc=f"sweep x{n}") as bar:
            for i, m in enumerate(lengths):
                raise_interrupt()  # a Ctrl-C swallowed since the last chunk (errors.remember_interrupt) stops here
                with trace_chunk(profile if i == traced and writer else None, i, done, m, compiles):
                    states, out = chunk(states, data | {"hp": hp}, m)
                    metrics = _fetch(out.metrics)
                for key, h in hist.items():
                    h[:, done:done + m] = metrics[key]
                for i in mark_diverged(hist, diverged, done, done + m):
                    if writer and i < n:
                        mem = members[i]
                        tqdm.write(f"member {i} ({point_label(mem.values)}, seed {mem.seed}) diverged: its loss is "
                                   f"{hist['loss'][i, diverged[i]]} at step {diverged[i]}; its metrics are NaN from "
                                   "there and it counts as not grokked (the other members go on)", file=sys.stderr)
                for log in logs:
                    log.append(done, done + m)
                done += m
                bar.update(m)
    finally:
        for log in logs:
            log.close()
    wall = time.perf_counter() - t0

    step_axis = np.arange(steps)
    rows = []
    final = states.params if jax.process_count() == 1 else _fetch(states.params)
    for mem in members:
        run = member_dir(out_dir, mem.index)
        mh = {key: h[mem.index] for key, h in hist.items()}
        if writer:
            write_metrics(run, mh, steps, task.task_names, trainer.grad_names)
        per_task = grok_steps(step_axis, mh["valid_acc"])
        gone = int(diverged[mem.index]) if diverged[mem.index] >= 0 else None
        grok_all = None if None in per_task or gone is not None else max(per_task)
        params = jax.tree.map(lambda a, i=mem.index: a[i], final)
        # the same summary as a solo run (final metrics after the last update), plus the member's place in the sweep;
        # diverged_at: the first step whose loss was not finite (its metrics are NaN from there), None if none
        summary = summarize(mem.config, task, trainer, params, step_axis, mh) | dict(
            seed=mem.seed, values=mem.values, grok_step_all=grok_all, diverged_at=gone,
            final_valid_acc=last_evaluated(mh["valid_acc"]).tolist(), **numerics(mem.config))
        if gone is not None:  # a diverged member never counts as grokked
            summary["grok_step"] = dict.fromkeys(summary["grok_step"])
        if writer:
            write_params(run, params)
            finish_files(run, summary)
        rows.append(summary | {"member": mem.index})

    points = []
    for combo, group in itertools.groupby(rows, key=lambda r: tuple(r["values"].items())):
        group = list(group)
        g = [r["grok_step_all"] for r in group]
        done_g = [x for x in g if x is not None]
        gone = [r["diverged_at"] for r in group]
        points.append(dict(values=dict(combo), grok_steps=g, n_grokked=len(done_g), diverged_at=gone,
                           n_diverged=sum(d is not None for d in gone),
                           mean=float(np.mean(done_g)) if done_g else None,
                           std=float(np.std(done_g)) if len(done_g) > 1 else None))
    result = dict(preset_config=cfg.to_dict(), n_members=n, n_devices=n_dev, n_processes=jax.process_count(),
                  wall_s=round(wall, 3), member_steps_per_s=round(n * steps / wall, 1), members=rows, points=points)
    if writer:
        write_json_atomic(out_dir / "sweep.json", result)
        write_text_atomic(out_dir / "members.csv", members_csv(rows, keys))
        plot_grok_steps(points, steps, out_dir / "grok_steps.png")
    if jax.process_count() > 1:  # the others wait for process 0's files here, not in jax's shutdown barrier (5 min)
        multihost_utils.sync_global_devices("miiii sweep: files written")
    return result


def mark_diverged(hist: dict, diverged: np.ndarray, start: int, stop: int) -> list[int]:
    """After steps [start, stop) reached `hist` (metric -> (members, steps, ...)): a member whose loss is not finite
    there for the first time gets that step in `diverged` (-1: not diverged), and every metric of a diverged member
    is NaN from its step on (its accuracies on NaN logits say nothing). Returns the members new to `diverged`."""
    bad = ~np.isfinite(hist["loss"][:, start:stop])
    new = [int(i) for i in np.nonzero((diverged < 0) & bad.any(1))[0]]
    for i in new:
        diverged[i] = start + int(np.argmax(bad[i]))
    for i in np.nonzero(diverged >= 0)[0]:
        for h in hist.values():
            h[i, max(start, int(diverged[i])):stop] = np.nan
    return new
