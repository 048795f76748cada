"""`python -m miiii doctor`: what this machine runs miiii with, and whether that is well. A report (one line a
fact) and the problems found; the command exits 1 when there is any, naming each."""

from __future__ import annotations

import platform
import shutil
import sys
from pathlib import Path

from miiii.compile_cache import cache_dir
from miiii.gpu import INSTALL_HINT, PLUGINS, cpu_asked, describe, installed, visible_gpus

RUNS = Path("runs")
# The versions `make test` last passed with (the README's "Versions" names the same; a test holds them equal).
# pyproject.toml admits a range below the next minor release; a version in it that is not this one is untested.
TESTED = {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8", "optax": "0.2.8", "orbax-checkpoint": "0.12.8"}
MIN_FREE = 2 * 2**30  # bytes: below this a default recording (2 GiB budget) may not fit


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def examine(environ=None) -> tuple[list[str], list[str]]:
    """(report lines, problems)."""
    lines, problems = [f"python: {platform.python_version()} ({sys.executable})"], []
    for name, tested in TESTED.items():
        have = installed(name)
        lines.append(f"{name}: {have or 'not installed'} (tested: {tested})")
        if have is None:
            problems.append(f"{name} is not installed: run `make install`")
        elif have != tested:
            problems.append(f"{name} {have} is not the tested {tested}: run `make test` to try it (README, "
                            "\"Versions\")")
    plugins = {cuda: [f"{p} {installed(p)}" for p in names if installed(p)] for cuda, names in PLUGINS.items()}
    lines.append("CUDA plugins: " + ("; ".join(f"CUDA {k}: {', '.join(v)}" for k, v in plugins.items() if v)
                                     or "none (CPU build)"))
    if all(plugins.values()):
        problems.append(f"both CUDA 12 and CUDA 13 plugins are installed (both register as `cuda`, CUDA 13's loads "
                        f"first): run `{INSTALL_HINT}`, which removes the one not chosen")
    jax_version = installed("jax")
    for entry in (e for found in plugins.values() for e in found):
        if jax_version and not entry.endswith(" " + jax_version):
            problems.append(f"{entry} does not match jax {jax_version}: run `{INSTALL_HINT}`")
    gpus = visible_gpus()
    lines.append(f"NVIDIA GPUs (nvidia-smi): {describe(gpus)}")
    try:
        import jax

        backend, devices = jax.default_backend(), jax.devices()
    except Exception as e:  # a broken plugin raises here: that is the report
        backend, devices = None, []
        problems.append(f"JAX could not start a backend: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    lines.append(f"backend: {backend}")
    for d in devices:
        stats = d.memory_stats() or {}
        mem = f", {gib(stats['bytes_limit'])} memory" if "bytes_limit" in stats else ""
        lines.append(f"  device {d.id}: {d.device_kind}{mem}")
    if gpus and backend == "cpu" and not cpu_asked(environ=environ):
        problems.append(f"an NVIDIA GPU is visible but JAX runs on the CPU: run `{INSTALL_HINT}` (train and sweep "
                        "refuse to start like this unless given --device cpu)")
    cache = cache_dir(environ)
    lines.append(f"compile cache: {cache} ({gib(folder_bytes(cache))})" if cache else "compile cache: off")
    where = next(p for p in (RUNS.resolve(), *RUNS.resolve().parents) if p.exists())
    free = shutil.disk_usage(where).free
    lines.append(f"free disk at {RUNS.resolve()}: {gib(free)}")
    if free < MIN_FREE:
        problems.append(f"only {gib(free)} free where runs go ({where}): a default recording budget is 2 GiB")
    return lines, problems


def doctor(environ=None) -> int:
    lines, problems = examine(environ)
    print("\n".join(lines))
    if problems:
        print("\n".join(["", f"{len(problems)} problem(s):", *(f"- {p}" for p in problems)]))
        return 1
    print("\nall is well")
    return 0
