"""What the paper study needs before it trains: per role and seed, the bytes of its recording, checkpoints and
metrics (the estimates `train` and `sweep` print and check); their sum against the free disk; the device memory of
each role's largest program (XLA's memory analysis of the compiled chunk) against the device's; and the wall time,
extrapolated from a short timed segment of every role's programs on the device they will run on.

`python -m experiments.paper --plan` prints it and exits; the study prints it before training and refuses (exit 2,
nothing written) what does not fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from miiii.cadence import log_steps
from miiii.checkpoint import state_nbytes
from miiii.config import RecordConfig
from miiii.files import free_bytes
from miiii.record import GiB
from miiii.runner import build, prepare
from miiii.sweepprogram import init_members, members_chunk
from miiii.train import task_data
from miiii.validate import host_memory

SEGMENT = 16  # steps of the timed segment (at most a chunk): its second call is timed, the first compiles
HEADROOM = 0.9  # of the device's memory a program may plan on (XLA's allocator and fragmentation take the rest)


@dataclass
class Program:
    """One compiled training program of a role: the recorded solo run or the sweep of its other seeds."""

    what: str
    members: int
    peak: int  # device bytes while a whole chunk runs (the segment's, its per-step outputs scaled to the chunk)
    step_s: float  # seconds per step (all members at once)
    compile_s: float


@dataclass
class RolePlan:
    role: str
    steps: int
    runs: list[tuple[str, int, int, int]]  # (label, recording, checkpoints, the rest) bytes, one per seed
    programs: list[Program] = field(default_factory=list)

    @property
    def disk(self) -> int:
        return sum(a + c + m for _, a, c, m in self.runs)

    @property
    def seconds(self) -> float:
        return sum(p.step_s * self.steps + p.compile_s for p in self.programs)


JSON_VALUE = 24  # bytes a number takes in metrics.jsonl ("q=11": 0.974841774, ...), measured on small runs


def metrics_nbytes(trainer, cfg, n_tasks: int) -> int:
    """metrics.npz's float32 arrays and metrics.jsonl's text (the evaluated steps) of a run."""
    values = sum(int(np.prod(trainer.metric_shape(m, n_tasks))) for m in trainer.metrics)
    return values * (4 * cfg.train.steps + JSON_VALUE * -(-cfg.train.steps // cfg.train.eval_every))


def device_memory() -> tuple[int, str]:
    """(bytes, what they are): the first device's memory limit, or this machine's memory on a CPU."""
    d = jax.devices()[0]
    stats = d.memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]), f"{d.device_kind} memory"
    return host_memory(), "host memory (CPU backend)"


def measure(trainer, task, rec, cfg, members: int, steps: int) -> Program:
    """Compile the chunk of `steps` steps (members 0: the solo recorded program; else `members` vmapped without a
    recording), run it twice, time the second. Peak bytes: arguments + temporaries + the per-step outputs, scaled
    from the segment to train.chunk steps."""
    data = task_data(task)
    counts = None
    if members == 0:
        fn, state, what = trainer.chunk, trainer.init(cfg.train.seed), "recorded run"
        if rec.arrays:
            data, counts = data | {"record_x": jnp.asarray(rec.inputs)}, rec.counts(0, steps)
    else:
        fn, what = members_chunk(trainer), f"sweep of {members} seeds"
        state, data = init_members(trainer, jnp.arange(members) + cfg.train.seed + 1), data | {"hp": {}}
    t = time.perf_counter()
    compiled = fn.lower(state, data, steps, counts, None).compile()
    compile_s = time.perf_counter() - t
    m = compiled.memory_analysis()
    per_step = max(m.output_size_in_bytes - m.alias_size_in_bytes, 0) / steps
    peak = int(m.argument_size_in_bytes + m.temp_size_in_bytes + per_step * cfg.train.chunk)
    state, out = compiled(state, data, None)
    jax.block_until_ready(out)
    t = time.perf_counter()
    state, out = compiled(state, data, None)
    jax.block_until_ready((state, out))
    return Program(what, max(members, 1), peak, (time.perf_counter() - t) / steps, compile_s)


def role_plan(role: str, cfg, seeds: int, recorded: bool, timed: bool = True) -> RolePlan:
    """The bytes each seed of `role` writes and, `timed`, its programs measured on this device."""
    task = prepare(cfg)
    trainer, rec = build(cfg, task)
    template = jax.eval_shape(trainer.init, cfg.train.seed)
    ckpt = state_nbytes(template) * (cfg.ckpt.keep + len(log_steps(cfg.train.steps, cfg.ckpt.keep_log)))
    params = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(template.params))  # params.npz
    metrics = metrics_nbytes(trainer, cfg, len(task.task_names)) + params
    runs = [(f"seed {cfg.train.seed} (recorded)", rec.nbytes, ckpt, metrics)]
    runs += [(f"seed {cfg.train.seed + k} ({'recorded' if recorded else 'sweep member'})",
              rec.nbytes if recorded else 0, ckpt, metrics) for k in range(1, seeds)]
    plan = RolePlan(role, cfg.train.steps, runs)
    if timed:
        steps = min(SEGMENT, cfg.train.chunk)
        plan.programs.append(measure(trainer, task, rec, cfg, 0, steps))
        if seeds > 1 and recorded:
            plan.programs += [replace(plan.programs[0], what=f"recorded run, seed +{k}", compile_s=0.0)  # cached
                              for k in range(1, seeds)]
        elif seeds > 1:
            sweep_cfg = replace(cfg, record=RecordConfig())
            trainer_s, rec_s = build(sweep_cfg, task)
            plan.programs.append(measure(trainer_s, task, rec_s, sweep_cfg, seeds - 1, steps))
    return plan


def gib(n: float) -> str:
    return f"{n / GiB:,.2f} GiB" if n >= GiB / 10 else f"{n / 2**20:,.1f} MiB"


def describe(plans: list[RolePlan], out: Path) -> tuple[list[str], list[str]]:
    """(the plan's lines, what does not fit)."""
    lines, problems = [f"plan for {out}:"], []
    for p in plans:
        for label, acts, ckpt, met in p.runs:
            lines.append(f"  {p.role:<11} {label:<26} recording {gib(acts):>11}  checkpoints {gib(ckpt):>10}  "
                         f"metrics, params {gib(met):>9}")
    disk, free = sum(p.disk for p in plans), free_bytes(out)
    lines.append(f"  disk: {gib(disk)} in all, {gib(free)} free at {out}")
    if disk >= free:
        problems.append(f"the runs need {gib(disk)} of disk, more than the {gib(free)} free at {out}")
    timed = [p for p in plans if p.programs]
    if timed:
        have, what = device_memory()
        worst = max((prog for p in timed for prog in p.programs), key=lambda prog: prog.peak)
        for p in timed:
            for prog in p.programs:
                lines.append(f"  {p.role:<11} {prog.what:<26} device memory {gib(prog.peak):>10}  "
                             f"{1 / prog.step_s:,.0f} steps/s  compile {prog.compile_s:.0f} s")
        lines.append(f"  device memory: at most {gib(worst.peak)} at once (the programs run one after another), "
                     f"{gib(have)} of {what}")
        if worst.peak > HEADROOM * have:
            problems.append(f"{worst.what} needs {gib(worst.peak)} of device memory, more than {HEADROOM:.0%} of the "
                            f"{gib(have)} of {what}")
        total = sum(p.seconds for p in timed)
        lines.append(f"  wall time: about {total / 60:,.1f} min of training on {jax.devices()[0].device_kind} "
                     f"(from a {min(SEGMENT, min(p.steps for p in timed))}-step timed segment of each program; "
                     "figures and the report come after)")
    return lines, problems
