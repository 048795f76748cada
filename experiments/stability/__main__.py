"""Prieto et al. (2025), "Grokking at the edge of numerical stability", judged at CPU scale: for each task (nanda,
miiii) one vmapped sweep of every seed per setting (weight decay; none; none in float16 / float64; StableMax;
⊥Grad), each member summarised into results/stability/summaries/, results.md and collapse.png drawn from those.

    python -m experiments.stability                    # train (runs/stability/, reused when there) and write the bundle
    python -m experiments.stability --seeds 3 --tasks nanda
    python -m experiments.stability.bundle results/stability --check   # the bundle from its summaries, no training
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.stability import bundle
from experiments.stability.study import SETTINGS, TASKS, sweep_dir, sweep_seconds, train_setting, trained_by
from miiii.compile_cache import setup_compile_cache
from miiii.config import ConfigError
from miiii.errors import OneLineParser, one_line_errors, out_folder
from miiii.files import write_json_atomic
from miiii.provenance import provenance, to_jsonable
from miiii.run import load_run
from miiii.sweep import member_dir


def parse(argv):
    ap = OneLineParser(prog="python -m experiments.stability", description=__doc__.split("\n\n", 1)[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS),
                    help="tasks to train (default: both); a task left out keeps its committed summary")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per setting, 0 ... N-1 (default 3)")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per run (default: nanda-cpu's 3,000; 10,000 for miiii-tiny)")
    ap.add_argument("--runs", type=Path, default=Path("runs/stability"),
                    help="where the sweeps go; a finished sweep there is reused (default runs/stability)")
    ap.add_argument("--out", type=Path, default=Path("runs/stability/bundle"),
                    help="the bundle (default runs/stability/bundle, a scratch folder; `--out results/stability` "
                         "rewrites the committed one, as `make stability` does)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    return ap.parse_args(argv)


def check_fewer_seeds(out: Path, seeds: int, tasks) -> None:
    """A bundle is never rewritten with fewer seeds than it holds (its summaries say how many)."""
    for task in tasks:
        f = out / "summaries" / f"{task}.json"
        if not f.is_file():
            continue
        held = max((len(v) for v in json.loads(f.read_text()).get("settings", {}).values()), default=0)
        if seeds < held:
            raise ConfigError(f"{out} holds {held} seeds of {task} per setting; --seeds {seeds} would replace them "
                              f"with fewer: pass --seeds {held} or another --out")


def main(argv=None) -> int:
    return one_line_errors(study, parse(argv))


def study(args) -> int:
    if args.seeds < 1:
        raise ConfigError(f"--seeds {args.seeds}: give at least 1")
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps {args.steps}: give at least 1 (or leave it out for each task's default)")
    out_folder(args.out)
    out_folder(args.runs, "--runs")
    check_fewer_seeds(args.out, args.seeds, args.tasks)
    setup_compile_cache()
    (args.out / "summaries").mkdir(parents=True, exist_ok=True)
    for task in args.tasks:
        settings = {s: train_setting(task, s, args.seeds, args.runs, args.steps, not args.no_progress)
                    for s, _ in SETTINGS}
        first = load_run(member_dir(sweep_dir(args.runs, task, SETTINGS[0][0]), 0))
        cmd = f"python -m experiments.stability --tasks {task}" + (
            f" --seeds {args.seeds}" if args.seeds != 3 else "") + (f" --steps {args.steps}" if args.steps else "")
        write_json_atomic(args.out / "summaries" / f"{task}.json", to_jsonable({
            "task": task, "preset": TASKS[task], "steps": first.config.train.steps,
            "weight_decay": first.config.optim.weight_decay, "command": cmd, "settings": settings,
            "trained_by": sorted({trained_by(args.runs, task, s) for s, _ in SETTINGS}),
            "wall_s": {s: round(sweep_seconds(args.runs, task, s), 1) for s, _ in SETTINGS}}))
    write_json_atomic(args.out / "summaries" / "report.json", to_jsonable({
        "provenance": provenance(first.summary, first.config.train.precision)}))
    bundle.write(args.out)
    print(f"wrote {args.out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
