"""The PyTorch side of the bench: running a reference (torch_paper.py, torch_adder.py: modules of this package; or a
peer's scripts of the same names, --peers DIR) and reading the steps/s it prints last."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REFERENCES = HERE  # torch_paper.py, torch_adder.py: in the repository


def reference_command(script: Path) -> tuple[list[str], Path | None]:
    """The command line of a reference and the folder it runs in: one of this package's as `python -m
    experiments.bench.NAME` from the repository root (torch_adder.py imports the book's model from experiments.book),
    a peer's script (--peers DIR) as a file."""
    if script.resolve().parent == HERE:
        return [sys.executable, "-m", f"{__package__}.{script.stem}"], ROOT
    return [sys.executable, str(script)], None


def time_reference(script: Path, args: list[str], threads: int, compiled: bool = False) -> float | None:
    """steps/s that one run of a PyTorch reference script prints last (`steps_per_s X`), None if it failed."""
    cmd, cwd = reference_command(script)
    cmd += [*args, *(["--compile"] if compiled else [])]
    if "paper" in script.name:
        cmd += ["--threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, cwd=cwd)
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


def reference_args(args: list[str], device: str, scale: int) -> list[str]:
    """A reference's command line on `device`; on CUDA it times `scale` times its CPU steps, as miiii does on an
    accelerator (the step count is the value after --steps, or torch_adder.py's positional one)."""
    if device == "cpu":
        return [*args, "--device", "cpu"]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else int(next(a for a in args if a.isdigit()))
    return [*args, "--device", device, "--steps", str(steps * scale)]
