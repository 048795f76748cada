"""Benchmark: miiii's jitted, scanned training against plain PyTorch references, in one run.

    make bench                      # or: python -m experiments.bench [--quick] [--no-compile] [--peers DIR]

This module is the command line; flops.py counts, timing.py times miiii, references.py runs the PyTorch references.
The references live in this folder: `torch_paper.py` (the paper's one-layer model, nanda or miiii task) and
`torch_adder.py` (the book's 17,760-parameter adder), each timed eagerly and under `torch.compile` (compile
excluded by warm-up steps; `--no-compile` leaves that column out). `--peers DIR` times the scripts of the same
names in DIR with the same command lines too, a cross-check against an independent implementation: both ratios
are printed side by side. The whole bench's wall time on each machine a record was committed from is in
docs/benchmark.md (on a CPU, the first torch.compile of each model and the 8-seed timings take most of it). On a
GPU the miiii side times 20x as many steps, and the PyTorch references run on CUDA with 20x their steps too
(`--torch-device` picks).
Every figure is the median of --repeats timings (default 3) per side; the ratio's range over them is printed too.
Prints, for the nanda paper config (p 113, d 128), the miiii paper config (p 113, d 256, dropout 0.1,
grokfast) and the book adder (batch 512): steps/s of miiii (train step + per-step validation metrics
for the paper configs), steps/s of each reference, their ratios, achieved GFLOP/s from an analytic FLOP
count and its fraction of a measured f32 matmul peak, compile time, and steps/s of a real run (`train_run`:
host loop, writer thread, checkpoints) with the preset's default recording, i.e. the recording overhead;
then host RSS over a long run, the log-spaced checkpoints' cost (whole nanda-tiny runs with
ckpt.keep_log = 20 and 0), and vmapped seeds against one seed. Writes bench.json. PyTorch comes from
the optional `bench` extra. Measured numbers: docs/benchmark.md. The persistent compilation
cache (miiii/compile_cache.py) is off here, so the compile times are compiles.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np

from experiments.bench.flops import book_fwd_flops, matmul_peak, paper_fwd_flops
from experiments.bench.references import REFERENCES, missing_scripts, reference_args, time_references
from experiments.bench.timing import (
    KEEP_LOG_PRESET,
    VMAP_PRESETS,
    keep_log_cost,
    metrics_cost,
    rss_over_run,
    time_miiii,
    time_recorded,
    vmap_seeds,
)
from miiii.compile_cache import ENV, setup_compile_cache
from miiii.errors import OneLineParser, module_prog


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


def parse_args(argv):
    ap = OneLineParser(prog=module_prog(), description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
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

    t_start = time.perf_counter()
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
    kl = keep_log_cost(KEEP_LOG_PRESET, reps)
    print(f"log-spaced checkpoints (ckpt.keep_log = {kl['keep_log']}), a whole {kl['preset']} run of {kl['steps']} "
          f"steps: {kl['cost']:+.1%} ({kl['on']['wall_s']:.1f} s vs {kl['off']['wall_s']:.1f} s; compile "
          f"{kl['on']['compile_s']:.1f} s vs {kl['off']['compile_s']:.1f} s; {kl['on']['checkpoints']:.0f} vs "
          f"{kl['off']['checkpoints']:.0f} checkpoints)", flush=True)
    vm = [vmap_seeds(preset, 8, (200 if q else 500) * scale, reps) for preset in VMAP_PRESETS]
    for v in vm:
        print(f"vmapped seeds, {v['preset']}: 8 seeds take {v['factor']:.2f}x one seed's time "
              f"({v['vmapped_s']:.2f} s vs {v['one_seed_s']:.2f} s for {v['steps']} steps)")

    from miiii.provenance import git_commit

    torch_version = importlib.metadata.version("torch") if importlib.util.find_spec("torch") else None
    result = dict(date=time.strftime("%Y-%m-%d %H:%M:%S"), commit=git_commit(), torch=torch_version,
                  device=jax.devices()[0].device_kind,
                  backend=jax.default_backend(), threads=threads, jax=jax.__version__,
                  torch_device=torch_device, matmul_peak_gflops=peak, repeats=reps, configs=rows, rss=rss,
                  vmap_seeds=vm, metrics_cost=costs, keep_log_cost=kl, wall_s=time.perf_counter() - t_start)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
