"""The miiii side of the bench: steps/s of the bare jitted chunk, of a real run with its recording, the per-step
measures' cost, host RSS over a long run, and vmapped seeds against one."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from miiii import apply_overrides, get_preset
from miiii.runner import prepare, train_run
from miiii.sweepprogram import init_members, members_chunk
from miiii.train import make_trainer, task_data


def time_miiii(preset: str, sets: list[str], steps: int, chunk: int, repeats: int = 1) -> dict:
    """steps/s of the bare jitted chunk: the median of `repeats` windows of `steps` steps, after the compile and one
    untimed warm-up window (the first window after a compile runs up to 10 % slow on a CPU)."""
    cfg = apply_overrides(get_preset(preset), [f"steps={steps + chunk}", f"chunk={chunk}", *sets])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    data = task_data(task)
    state = trainer.init(0)
    t0 = time.perf_counter()
    state, out = trainer.chunk(state, data, chunk, None, None, trainer.order(state))  # the order carried, as a run
    jax.block_until_ready(out)
    compile_s = time.perf_counter() - t0  # includes one chunk of steps
    samples = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        done = 0
        while done < steps:
            state, out = trainer.chunk(state, data, chunk, None, None, out.order)
            done += chunk
        m = out.metrics
        jax.block_until_ready(m)
        samples.append(done / (time.perf_counter() - t0))
    samples = samples[1:]
    return dict(cfg=cfg, task=task, steps_per_s=float(np.median(samples)), samples=samples, compile_s=compile_s)


BASE_METRICS = ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc")  # what a run needs at the least


def metrics_cost(preset: str, sets: list[str], steps: int, repeats: int = 3) -> dict:
    """The per-step measures' cost (metrics.METRICS beyond the losses and accuracies: gradient and weight norms,
    softmax collapse, the largest logit, the attention diagnostics): steps/s with the whole table, with BASE_METRICS
    only, and with the whole table but metrics.ATTENTION_METRICS (their own cost), each the median of `repeats`
    chunks, interleaved so a load that comes and goes hits all three alike."""
    from miiii import metrics as M

    cfg = apply_overrides(get_preset(preset), [f"steps={steps * (repeats + 1)}", f"chunk={steps}", *sets])
    task = prepare(cfg)
    data = task_data(task)
    base = tuple(m for m in M.METRICS if m.name in BASE_METRICS)
    no_attention = tuple(m for m in M.METRICS if m.name not in M.ATTENTION_METRICS)
    trainers = {"all": make_trainer(cfg, task), "base": make_trainer(cfg, task, metrics=base),
                "no_attention": make_trainer(cfg, task, metrics=no_attention)}
    states = {k: t.init(0) for k, t in trainers.items()}
    times = {k: [] for k in trainers}
    for i in range(repeats + 1):  # the first chunk compiles: not timed
        for k, t in trainers.items():
            t0 = time.perf_counter()
            states[k], out = t.chunk(states[k], data, steps)
            jax.block_until_ready(out)
            if i:
                times[k].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in times.items()}
    return dict(preset=preset, steps=steps, measures=[m.name for m in M.METRICS if m.name not in BASE_METRICS],
                steps_per_s_all=steps / med["all"], steps_per_s_base=steps / med["base"],
                cost=med["all"] / med["base"] - 1, attention=list(M.ATTENTION_METRICS),
                steps_per_s_no_attention=steps / med["no_attention"],
                attention_cost=med["all"] / med["no_attention"] - 1)


def time_recorded(preset: str, sets: list[str], steps: int, chunk: int) -> dict:
    """steps/s of a real run (`train_run`: host loop, writer thread, metrics) with the preset's default recording.

    The first chunk (compile) is not timed; `steps` should cover the recording's sparsest cadence.
    """
    cfg = apply_overrides(get_preset(preset), [f"steps={steps + chunk}", f"chunk={chunk}", "ckpt.every=1000000000",
                                               "ckpt.keep_log=0", *sets])  # the recording's cost alone
    ends = []
    with tempfile.TemporaryDirectory() as tmp:
        summary = train_run(cfg, Path(tmp) / "run", progress=False, on_chunk=lambda _: ends.append(time.perf_counter()))
    return dict(steps_per_s=steps / (ends[-1] - ends[0]), record_bytes=summary["record_bytes"],
                record=cfg.record.every, params_every=cfg.record.params_every)


KEEP_LOG_PRESET = "nanda-tiny"  # the measurement: 44.7 s against 10.7 s when each kept step cost a compile


def keep_log_cost(preset: str, repeats: int = 1) -> dict:
    """Whole runs (`train_run`, the preset's recording) with the preset's log-spaced checkpoints (ckpt.keep_log) and
    without, interleaved: the wall and compile seconds (medians), and how many checkpoints each wrote. A chunk
    captures the kept states inside its one compiled program, so the difference should be the saves alone."""
    cfg = get_preset(preset)
    k = cfg.ckpt.keep_log
    runs = {k: [], 0: []}
    for _ in range(repeats):
        for keep_log in runs:
            jax.clear_caches()  # each run compiles, as a fresh process would
            with tempfile.TemporaryDirectory() as tmp:
                run = Path(tmp) / "run"
                t0 = time.perf_counter()
                summary = train_run(apply_overrides(cfg, [f"ckpt.keep_log={keep_log}"]), run, progress=False,
                                    tensorboard=False)
                wall = time.perf_counter() - t0
                saved = len([d for d in (run / "ckpt").iterdir() if d.name.isdigit()])
            runs[keep_log].append(dict(wall_s=wall, compile_s=summary["compile_s"], checkpoints=saved))
    med = {kl: {key: float(np.median([r[key] for r in rs])) for key in ("wall_s", "compile_s", "checkpoints")}
           for kl, rs in runs.items()}
    return dict(preset=preset, steps=cfg.train.steps, keep_log=k, on=med[k], off=med[0],
                cost=med[k]["wall_s"] / med[0]["wall_s"] - 1, samples={str(kl): rs for kl, rs in runs.items()})


def rss_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def rss_over_run(chunks: int) -> dict:
    """Host RSS after each chunk of a long nanda-tiny run: it must stay flat."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["chunk=100", f"steps={100 * chunks}"])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    data = task_data(task)
    state = trainer.init(0)
    rss = []
    for _ in range(chunks):
        state, m = trainer.chunk(state, data, 100)
        jax.device_get(m)
        rss.append(rss_mb())
    if rss[0] is None:
        return {}
    half = len(rss) // 2
    return dict(rss_mb_first_half=float(np.mean(rss[1:half])), rss_mb_second_half=float(np.mean(rss[half:])),
                rss_growth_mb=float(np.mean(rss[half:]) - np.mean(rss[1:half])), steps=100 * chunks)


VMAP_PRESETS = ("nanda-tiny", "addition")  # the two: a full-batch grid task and the book adder (batch 512)


def vmap_seeds(preset: str, n_seeds: int, steps: int, repeats: int = 1) -> dict:
    """n seeds vmapped into one program as `miiii sweep` runs them (`sweepprogram.init_members`,
    `sweepprogram.members_chunk`: one shared step counter) vs one seed's jitted chunk: the cost factor (median of
    `repeats` timings of each)."""
    cfg = apply_overrides(get_preset(preset), [f"steps={steps}", f"chunk={steps}"])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    data = task_data(task)
    many = members_chunk(trainer)
    one = jax.jit(trainer.raw_chunk, static_argnums=2)

    def timed(f, state):
        jax.block_until_ready(f(state(), data, steps))  # compile (then cached) and warm-up
        s = state()
        t0 = time.perf_counter()
        jax.block_until_ready(f(s, data, steps))
        return time.perf_counter() - t0

    t_many = float(np.median([timed(many, lambda: init_members(trainer, jnp.arange(n_seeds)))
                              for _ in range(repeats)]))
    t_one = float(np.median([timed(one, lambda: trainer.init(0)) for _ in range(repeats)]))
    return dict(preset=preset, n_seeds=n_seeds, steps=steps, one_seed_s=t_one, vmapped_s=t_many,
                factor=t_many / t_one)
