"""Benchmark: miiii's jitted, scanned training against plain PyTorch references, in one run.

    make bench                      # or: python experiments/bench.py [--quick] [--no-compile] [--peers DIR]

The references live in this folder: `torch_paper.py` (the paper's one-layer model, nanda or miiii task) and
`torch_adder.py` (the book's 17,760-parameter adder), each timed eagerly and under `torch.compile` (compile
excluded by warm-up steps; `--no-compile` leaves that column out). `--peers DIR` times the scripts of the same
names in DIR with the same command lines too, a cross-check against an independent implementation: both ratios
are printed side by side. Runtime on a 2-core CPU: 33 minutes in all (2026-11-23; each model's first
torch.compile takes a minute or two there, and the 8-seed timings about ten); --quick with --peers took 14 minutes
on 2 heavily loaded cores. On a GPU the miiii side takes a minute or two and times 20x
as many steps, and the PyTorch references run on CUDA with 20x their steps too (`--torch-device` picks).
Every figure is the median of --repeats timings (default 3) per side; the ratio's range over them is printed too.
Prints, for the nanda paper config (p 113, d 128), the miiii paper config (p 113, d 256, dropout 0.1,
grokfast) and the book adder (batch 512): steps/s of miiii (train step + per-step validation metrics
for the paper configs), steps/s of each reference, their ratios, achieved GFLOP/s from an analytic FLOP
count and its fraction of a measured f32 matmul peak, compile time, and steps/s of a real run (`train_run`:
host loop, writer thread, checkpoints) with the preset's default recording, i.e. the recording overhead;
then host RSS over a long run and vmapped seeds against one seed. Writes bench.json. PyTorch comes from
the optional `bench` extra. Measured numbers: the README's performance table. The persistent compilation
cache (miiii/compile_cache.py) is off here, so the compile times are compiles.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from miiii import apply_overrides, get_preset
from miiii.compile_cache import ENV, setup_compile_cache
from miiii.runner import prepare, train_run
from miiii.sweep import init_members, members_chunk
from miiii.train import make_trainer, task_data

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = Path(__file__).resolve().parent  # torch_paper.py, torch_adder.py: in the repository


def paper_fwd_flops(cfg, task) -> float:
    """Matmul FLOPs of one forward pass per sample, as miiii computes it: block 0's Q, K, V are gathered from
    |vocab|-row tables (W_E @ W, a per-step cost of 2 * 3 * |vocab| * d * d, under 0.2 % here and left out),
    the final block runs at the last position, each bucket of tasks is as wide as its widest task."""
    m, t = cfg.model, task.n_ctx
    d, dm = m.d_model, m.mlp_dim
    last = 2 * 2 * t * d + 2 * d * d + 2 * 2 * d * dm  # scores + AV, W_O, MLP at the last position
    unembed = 2 * d * sum((s1 - s0) * w for s0, s1, w in task.class_buckets)
    return last + unembed


def book_fwd_flops(cfg, task) -> float:
    """Matmul FLOPs of one forward pass per sample of the book model: every position in every block, except block
    0's Q, K, V, gathered from a table of LN(W_E[v] + W_pos[i]) @ W (a per-step cost, left out)."""
    m, t = cfg.model, task.n_ctx
    d, dm = m.d_model, m.mlp_dim
    per_layer = t * (4 * 2 * d * d + 2 * 2 * d * dm) + 2 * 2 * t * t * d
    return m.n_layers * per_layer - t * 3 * 2 * d * d + 2 * t * d * task.d_vocab


def matmul_peak(n: int = 1024, reps: int = 20) -> float:
    """Measured f32 matmul GFLOP/s on the default device (the roofline the fractions refer to)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda a: a @ a)
    f(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = f(a)
    out.block_until_ready()
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def time_miiii(preset: str, sets: list[str], steps: int, chunk: int, repeats: int = 1) -> dict:
    """steps/s of the bare jitted chunk: the median of `repeats` windows of `steps` steps, after the compile and one
    untimed warm-up window (the first window after a compile runs up to 10 % slow on a CPU)."""
    cfg = apply_overrides(get_preset(preset), [f"steps={steps + chunk}", f"chunk={chunk}", *sets])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    data = task_data(task)
    state = trainer.init(0)
    t0 = time.perf_counter()
    state, m = trainer.chunk(state, data, chunk)
    jax.block_until_ready(m)
    compile_s = time.perf_counter() - t0  # includes one chunk of steps
    samples = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        done = 0
        while done < steps:
            state, m = trainer.chunk(state, data, chunk)
            done += chunk
        jax.block_until_ready(m)
        samples.append(done / (time.perf_counter() - t0))
    samples = samples[1:]
    return dict(cfg=cfg, task=task, steps_per_s=float(np.median(samples)), samples=samples, compile_s=compile_s)


BASE_METRICS = ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc")  # what a run needs at the least


def metrics_cost(preset: str, sets: list[str], steps: int, repeats: int = 3) -> dict:
    """The per-step measures' cost (metrics.METRICS beyond the losses and accuracies: gradient and weight norms,
    softmax collapse, the largest logit): steps/s with the whole table and with BASE_METRICS only, each the median
    of `repeats` chunks, interleaved so a load that comes and goes hits both alike."""
    from miiii import metrics as M

    cfg = apply_overrides(get_preset(preset), [f"steps={steps * (repeats + 1)}", f"chunk={steps}", *sets])
    task = prepare(cfg)
    data = task_data(task)
    base = tuple(m for m in M.METRICS if m.name in BASE_METRICS)
    trainers = {"all": make_trainer(cfg, task), "base": make_trainer(cfg, task, metrics=base)}
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
                cost=med["all"] / med["base"] - 1)


def time_recorded(preset: str, sets: list[str], steps: int, chunk: int) -> dict:
    """steps/s of a real run (`train_run`: host loop, writer thread, metrics) with the preset's default recording.

    The first chunk (compile) is not timed; `steps` should cover the recording's sparsest cadence.
    """
    cfg = apply_overrides(get_preset(preset), [f"steps={steps + chunk}", f"chunk={chunk}", "ckpt.every=1000000000",
                                               *sets])
    ends = []
    with tempfile.TemporaryDirectory() as tmp:
        summary = train_run(cfg, Path(tmp) / "run", progress=False, on_chunk=lambda _: ends.append(time.perf_counter()))
    return dict(steps_per_s=steps / (ends[-1] - ends[0]), record_bytes=summary["record_bytes"],
                record=cfg.record.every, params_every=cfg.record.params_every)


def time_reference(script: Path, args: list[str], threads: int, compiled: bool = False) -> float | None:
    """steps/s that one run of a PyTorch reference script prints last (`steps_per_s X`), None if it failed."""
    cmd = [sys.executable, str(script), *args, *(["--compile"] if compiled else [])]
    if "paper" in script.name:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    except subprocess.TimeoutExpired:
        print(f"  {script.name}{' --compile' if compiled else ''} timed out")
        return None
    found = re.findall(r"steps_per_s ([0-9.]+)", res.stdout)
    if not found:
        print(f"  {script} {'--compile ' if compiled else ''}failed: {res.stderr.strip().splitlines()[-1:]}")
        return None
    return float(found[-1])


def time_references(script: Path, args: list[str], threads: int, compiled: bool, reps: int,
                    ours: list[float]) -> dict | None:
    """The median of `reps` runs of a reference, and miiii's ratio to it (range over miiii's samples `ours`)."""
    runs = [x for x in (time_reference(script, args, threads, compiled) for _ in range(reps)) if x is not None]
    if not runs:
        return None
    med = float(np.median(runs))
    return dict(script=str(script), compiled=compiled, steps_per_s=med, samples=runs,
                ratio=float(np.median(ours)) / med, ratio_range=[min(ours) / max(runs), max(ours) / min(runs)])


def missing_scripts(folder: Path, configs: list[tuple]) -> list[str]:
    """The reference scripts the bench runs that `folder` lacks."""
    return sorted({c[3] for c in configs if not (folder / c[3]).is_file()})


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


VMAP_PRESETS = ("nanda-tiny", "addition")  # the issue's two: a full-batch grid task and the book adder (batch 512)


def vmap_seeds(preset: str, n_seeds: int, steps: int, repeats: int = 1) -> dict:
    """n seeds vmapped into one program as `miiii sweep` runs them (`sweep.init_members`, `sweep.members_chunk`:
    one shared step counter) vs one seed's jitted chunk: the cost factor (median of `repeats` timings of each)."""
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


def bench_configs(quick: bool) -> list[tuple]:
    """(name, preset, overrides, reference script, its args, flop fn, (steps, chunk) plain, (steps, chunk) recorded
    or None) per row of the table; steps are CPU-sized (main scales them on an accelerator)."""
    q = quick
    return [
        ("nanda p113 d128", "nanda", ["p=113"], "torch_paper.py", ["--task", "nanda", "--steps", "10" if q else "30"],
         paper_fwd_flops, (20, 10) if q else (60, 20), (100, 50) if q else (200, 100)),
        # the reference trains on 30 % (its default): so does this row, whatever the preset's split
        ("miiii p113 d256", "miiii", ["task.train_frac=0.3"], "torch_paper.py",
         ["--task", "miiii", "--steps", "4" if q else "10"],
         paper_fwd_flops, (4, 2) if q else (12, 4), None if q else (256, 128)),
        ("book adder b512", "addition", ["eval_every=1000000"], "torch_adder.py", ["100" if q else "300"],
         book_fwd_flops, (100, 100) if q else (400, 100), (100, 100) if q else (400, 100)),
    ]


def reference_args(args: list[str], device: str, scale: int) -> list[str]:
    """A reference's command line on `device`; on CUDA it times `scale` times its CPU steps, as miiii does on an
    accelerator (the step count is the value after --steps, or torch_adder.py's positional one)."""
    if device == "cpu":
        return [*args, "--device", "cpu"]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else int(next(a for a in args if a.isdigit()))
    return [*args, "--device", device, "--steps", str(steps * scale)]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=Path, default=None, metavar="DIR",
                    help="also time DIR/torch_paper.py and DIR/torch_adder.py (same command lines) as a cross-check")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="leave out the torch.compile timings of the references")
    ap.add_argument("--quick", "--smoke", action="store_true",
                    help="fewer steps and one repeat (a few minutes on 2 cores; rough figures, the recording "
                         "overhead most)")
    ap.add_argument("--out", type=Path, default=Path("bench.json"), help="where to write the results (bench.json)")
    ap.add_argument("--skip-reference", action="store_true", help="time miiii only (no PyTorch needed)")
    ap.add_argument("--torch-device", choices=["auto", "cpu", "cuda"], default="auto",
                    help="where the PyTorch references run: auto = cuda when JAX runs on a GPU, else cpu")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timings per side and config; medians are reported (default 3, --quick 1)")
    return ap.parse_args(argv)


def input_error(args, configs) -> str | None:
    """Why the bench cannot run as asked (checked before anything is timed), or None."""
    if args.repeats is not None and args.repeats < 1:
        return f"--repeats must be at least 1, got {args.repeats}"
    if args.peers is not None:
        if args.skip_reference:
            return "--peers and --skip-reference exclude each other"
        missing = missing_scripts(args.peers, configs)
        if missing:
            return f"--peers {args.peers} lacks {', '.join(missing)} (the peer references to cross-check against)"
    if args.skip_reference:
        return None
    missing = missing_scripts(REFERENCES, configs)
    if missing:  # a table of NaN ratios would look like a measurement
        return f"the PyTorch references ({', '.join(missing)}) are not in {REFERENCES}; pass --skip-reference"
    if importlib.util.find_spec("torch") is None:
        return ("PyTorch is not installed: pip install -e '.[bench]' (or torch==2.13.0, a CPU build), or pass "
                "--skip-reference")
    return None


def fmt_ref(ref: dict | None, reps: int) -> str:
    if ref is None:
        return "failed"
    spread = f" ({ref['ratio_range'][0]:.2f}-{ref['ratio_range'][1]:.2f})" if reps > 1 else ""
    return f"{ref['steps_per_s']:7.2f} steps/s, ratio {ref['ratio']:5.2f}x{spread}"


def summary_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    """A markdown table: miiii's steps/s, then each (source, mode) reference's steps/s and miiii's ratio to it."""
    head = ["config", "miiii"] + [f"{label} {mode}" for label, mode in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        cells = [row["config"], f"{row['miiii_steps_per_s']:.2f}"]
        for label, mode in columns:
            ref = row["references"].get(label, {}).get(mode)
            cells.append(f"{ref['steps_per_s']:.2f} ({ref['ratio']:.2f}x)" if ref else "failed")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    configs = bench_configs(args.quick)
    problem = input_error(args, configs)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    setup_compile_cache({ENV: "off"})  # compile times are compiles, not loads from ~/.cache/miiii/jax
    threads = os.cpu_count() or 1
    q = args.quick
    reps = args.repeats or (1 if q else 3)
    sources = [] if args.skip_reference else [("reference", REFERENCES)]
    sources += [("peer", args.peers)] if args.peers is not None else []
    modes = [("eager", False)] + ([("compiled", True)] if args.compile else [])
    on_cpu = jax.default_backend() == "cpu"
    scale = 1 if on_cpu else 20  # an accelerator runs these steps in milliseconds: time 20x as many
    torch_device = args.torch_device if args.torch_device != "auto" else ("cpu" if on_cpu else "cuda")
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), {threads} CPU threads, "
          f"jax {jax.__version__}; PyTorch on {torch_device}" +
          "".join(f"; {label}s: {folder}" for label, folder in sources))
    peak = matmul_peak() if on_cpu else matmul_peak(8192)
    print(f"measured f32 matmul peak: {peak:.1f} GFLOP/s\n")

    rows = []
    nan = float("nan")
    for name, preset, sets, script, ref_args, flops_fn, (steps, chunk), recorded in configs:
        r = time_miiii(preset, sets, steps * scale, chunk * scale, reps)
        cfg, task = r["cfg"], r["task"]
        fwd = flops_fn(cfg, task)
        batch = cfg.train.batch_size or len(task.train.x)
        n_eval = len(task.valid.x) if cfg.train.eval_every == 1 else 0
        step_flops = 3 * fwd * batch + fwd * n_eval  # forward + backward (2x) on the batch, validation forward
        ours = r["steps_per_s"]
        recs = [time_recorded(preset, sets, *(scale * v for v in recorded)) for _ in range(reps)] if recorded else []
        rec = recs and dict(recs[len(recs) // 2], steps_per_s=float(np.median([x["steps_per_s"] for x in recs])),
                            samples=[x["steps_per_s"] for x in recs])
        gflops = ours * step_flops / 1e9
        print(f"{name:<17} miiii {ours:7.2f} steps/s | {gflops:6.1f} GFLOP/s = {gflops / peak:5.1%} of peak | "
              f"compile+1st chunk {r['compile_s']:4.1f} s | with default recording "
              f"{rec['steps_per_s'] if rec else nan:7.2f} steps/s "
              f"({ours / rec['steps_per_s'] - 1 if rec else nan:+.1%})", flush=True)
        refs = {}
        for label, folder in sources:
            for mode, compiled in modes:
                ref = time_references(folder / script, reference_args(ref_args, torch_device, scale), threads,
                                      compiled, reps, r["samples"])
                refs.setdefault(label, {})[mode] = ref
                print(f"  {label:<9} {script} {mode:<8} {fmt_ref(ref, reps)}", flush=True)
        main_ref = refs.get("reference", {}).get("eager")
        rows.append(dict(config=name, miiii_steps_per_s=ours,
                         reference_steps_per_s=main_ref and main_ref["steps_per_s"],
                         ratio=main_ref and main_ref["ratio"], ratio_range=main_ref and main_ref["ratio_range"],
                         references=refs, compile_s=r["compile_s"], gflop_per_step=step_flops / 1e9,
                         achieved_gflops=gflops, fraction_of_peak=gflops / peak, validation_every_step=bool(n_eval),
                         recorded_steps_per_s=rec["steps_per_s"] if rec else None,
                         recording_overhead=ours / rec["steps_per_s"] - 1 if rec else None, recording=rec or None,
                         samples=dict(miiii=r["samples"], recorded=rec["samples"] if rec else [])))

    if sources:
        print("\nsteps/s and ratio (miiii / PyTorch) per reference:\n")
        print(summary_table(rows, [(label, mode) for label, _ in sources for mode, _ in modes]))

    print("\nhost memory over a long run (nanda-tiny):")
    rss = rss_over_run(20 if q else 60)
    if rss:
        print(f"  RSS {rss['rss_mb_first_half']:.0f} MB -> {rss['rss_mb_second_half']:.0f} MB over {rss['steps']} "
              f"steps (growth {rss['rss_growth_mb']:+.1f} MB)")
    costs = [metrics_cost(preset, sets, (steps // 2 or 1) * scale, reps) for _, preset, sets, _, _, _, (steps, _), _
             in configs if preset != "addition"]
    for c in costs:
        print(f"per-step measures ({', '.join(c['measures'])}), {c['preset']}: {c['cost']:+.1%} "
              f"({c['steps_per_s_all']:.2f} vs {c['steps_per_s_base']:.2f} steps/s without them)")
    vm = [vmap_seeds(preset, 8, (200 if q else 500) * scale, reps) for preset in VMAP_PRESETS]
    for v in vm:
        print(f"vmapped seeds, {v['preset']}: 8 seeds take {v['factor']:.2f}x one seed's time "
              f"({v['vmapped_s']:.2f} s vs {v['one_seed_s']:.2f} s for {v['steps']} steps)")

    result = dict(date=time.strftime("%Y-%m-%d %H:%M:%S"), device=jax.devices()[0].device_kind,
                  backend=jax.default_backend(), threads=threads, jax=jax.__version__,
                  torch_device=torch_device, matmul_peak_gflops=peak, repeats=reps, configs=rows, rss=rss,
                  vmap_seeds=vm, metrics_cost=costs)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
