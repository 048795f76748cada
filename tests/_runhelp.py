"""Shared by the tests: small configs, one cached reference run, comparisons, loading an exported file as a module."""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from miiii.config import apply_overrides
from miiii.presets import get_preset
from miiii.rundir import LOCK

ROOT = Path(__file__).resolve().parents[1]

# one of the slowest unit tests, run by `make test-studies` (the `study` marker) to keep `make test` inside its
# 10 minutes on 2 cores (docs/watching.md)
SLOW = pytest.mark.study



def load_module(path: Path):
    """A file that belongs to no package as a module: an adder `export-adder` wrote (self-contained, numpy only), loaded
    by its path as AdderBoard loads it. The studies are the package `experiments`: the tests import them."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# miiii-tiny with minibatches, dropout and grokfast: resume must restore the EMA, the key and the data order.
# Checkpoints every 20 steps only (no log-spaced ones: the fault tests name the step they fall back to; resuming
# from those: test_run_api.py).
RESUME_ARGS = ["--preset", "miiii-tiny", "--steps", "160", "--set", "chunk=20", "--set", "ckpt.every=20",
               "--set", "batch_size=64", "--set", "ckpt.keep_log=0"]


def resume_cfg():
    return apply_overrides(get_preset("miiii-tiny"), ["steps=160", "chunk=20", "ckpt.every=20", "batch_size=64",
                                                      "ckpt.keep_log=0"])


@functools.cache
def reference_run() -> Path:
    """The uninterrupted run every resume test compares with, trained once a session for every worker (`shared`).
    Read, never changed."""
    from miiii.runner import train_run

    return shared("resume-reference", lambda d: train_run(resume_cfg(), d / "run", progress=False)) / "run"


def assert_same_run(a: Path, b: Path) -> None:
    """metrics.npz arrays, metrics.jsonl and every acts/*.npy file bit for bit, and the final parameters."""
    with np.load(a / "metrics.npz") as ma, np.load(b / "metrics.npz") as mb:
        assert ma.files == mb.files
        for k in ma.files:
            assert ma[k].tobytes() == mb[k].tobytes(), f"metrics.npz[{k}] differs"
    assert (a / "metrics.jsonl").read_bytes() == (b / "metrics.jsonl").read_bytes(), "metrics.jsonl differs"
    fa = sorted(p.name for p in (a / "acts").glob("*.npy"))
    assert fa == sorted(p.name for p in (b / "acts").glob("*.npy")) and fa
    for name in fa:
        assert (a / "acts" / name).read_bytes() == (b / "acts" / name).read_bytes(), f"acts/{name} differs"
    with np.load(a / "params.npz") as pa, np.load(b / "params.npz") as pb:
        for k in pa.files:
            assert pa[k].tobytes() == pb[k].tobytes(), f"params.npz[{k}] differs"


def tree_digest(d: Path) -> dict[str, str]:
    """Every file under d with its hash: 'nothing changed' means equal digests. A run's .lock counts by its presence
    only: it holds the pid of the last process to take it, and a refused --resume of a copy of a shared run (built
    by another pytest worker) writes its own."""
    if not d.exists():
        return {}
    return {str(p.relative_to(d)): "" if p.name == LOCK else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def start_cli(args: list[str]) -> subprocess.Popen:
    # the CLI uses the session's compilation cache (conftest.py): it loads the programs the in-process runs
    # compiled (the same executables, so bits cannot differ) instead of compiling them again
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "miiii", "train", "--no-progress", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_checkpoint(run_dir: Path, proc: subprocess.Popen, at_least: int, timeout: float = 120) -> int:
    """Poll ckpt.json until a checkpoint >= at_least is recorded; returns the newest step seen."""
    import json

    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        try:
            steps = [int(s) for s in json.loads((run_dir / "ckpt.json").read_text())["checksums"]]
        except (OSError, ValueError, KeyError):
            steps = []
        if steps and max(steps) >= at_least:
            return max(steps)
        time.sleep(0.01)
    raise AssertionError("no checkpoint appeared in time")


SHARED = "MIIII_TEST_SHARED_RUNS"  # the directory conftest.py gives every worker of a session


def shared(key: str, build) -> Path:
    """A directory `build(dir)` filled once per test session, whichever worker asks first: under pytest it lives in
    the session's shared directory and is built while holding a lock (the other workers wait, then use it); outside
    pytest, in a temporary directory of this process. What is built there is read, never changed, by the tests."""
    import fcntl

    if SHARED not in os.environ:
        d = Path(tempfile.mkdtemp(prefix=f"miiii-{key}-"))
        atexit.register(shutil.rmtree, d, True)
        build(d)
        return d
    root = Path(os.environ[SHARED])
    root.mkdir(parents=True, exist_ok=True)
    d = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a worker dies holding it
        if not (root / f"{key}.done").is_file():
            shutil.rmtree(d, ignore_errors=True)  # a worker that died while building left a partial one
            d.mkdir()
            build(d)
            (root / f"{key}.done").touch()
    return d


@functools.cache
def finished_run(preset: str, *sets: str):
    """`preset` (with `--set` overrides) trained to the end once per test session (`shared`), loaded (`load_run`):
    the runs the extension tests (hooks, interventions, params_at, the README's example) read and never change."""
    from miiii.run import load_run
    from miiii.runner import train_run

    cfg = apply_overrides(get_preset(preset), list(sets))
    key = hashlib.sha256(repr((preset, sets)).encode()).hexdigest()[:16]
    build = lambda d: train_run(cfg, d / "run", progress=False)  # noqa: E731
    d = shared(key, optimised(build) if cfg.train.steps >= LONG_RUN else build)
    return load_run(d / "run")


# nanda-tiny for a few seconds: it records, checkpoints twice (no log-spaced ones) and finishes. The fault tests
# (test_faults, _files, _round3, test_hardening, test_run_api) train it: its programs compile once a session (compile
# time is most of these tests' time) and its finished and stopped runs are trained once (`shared`).
TINY_SETS = ("steps=24", "chunk=12", "ckpt.every=12", "p=23", "valid_size=50", "d_model=32", "record.every=5",
             "ckpt.keep_log=0")
TINY = ["--preset", "nanda-tiny", "--steps", "24", *[a for s in TINY_SETS[1:] for a in ("--set", s)]]
TINY_CFG = apply_overrides(get_preset("nanda-tiny"), list(TINY_SETS))


@functools.cache
def stopped_run(cfg, at: int) -> Path:
    """`cfg` stopped by an exception after its checkpoint at step `at` (no params.npz, summary.json or
    checksums.json), as if the process had died there: trained once a session for every worker (`shared`). Read,
    never changed: copy it to resume it."""
    from miiii.runner import train_run

    def build(d: Path) -> None:
        with pytest.raises(Crash):
            train_run(cfg, d / "run", progress=False, on_chunk=crash_at(at))

    key = hashlib.sha256(repr(cfg).encode()).hexdigest()[:16]
    return shared(f"stopped-{key}-at-{at}", build) / "run"


def tiny_reference() -> Path:
    """TINY trained without interruption: what every resumed TINY run must equal. Read, never changed."""
    return finished_run("nanda-tiny", *TINY_SETS).path


def crashed_tiny(tmp_path: Path) -> Path:
    """A copy of TINY stopped after its last checkpoint (checkpoints 0, 12, 24; no params.npz, no summary)."""
    shutil.copytree(stopped_run(TINY_CFG, 24), tmp_path / "run")
    return tmp_path / "run"


LONG_RUN = 1000  # steps from which a reference run compiles with XLA's optimisations: running costs more than compiling


def optimised(build):
    """`build` compiled with XLA's optimisations, as conftest's `optimized` marker compiles a test: nanda-tiny's
    reference run (1,500 steps) took 35 s against 39 s without them (test_a_finished_run_ablated, one core, empty
    compile cache, twice each)."""
    import jax

    def run(d):
        before = jax.config.values["jax_disable_most_optimizations"]
        jax.config.update("jax_disable_most_optimizations", False)
        jax.clear_caches()  # nothing compiled the other way is reused
        try:
            build(d)
        finally:
            jax.config.update("jax_disable_most_optimizations", before)
            jax.clear_caches()
    return run


class Crash(Exception):
    """Raised by `crash_at`: a run that dies between chunks, after a checkpoint."""


def signal_at(step: int, sig: int):
    """An on_chunk that sends this process `sig` once the run or sweep reaches `step` (SIGINT: Ctrl-C, as a user
    would; SIGTERM: a batch system's stop)."""
    def on_chunk(done):
        if done == step:
            os.kill(os.getpid(), sig)
    return on_chunk


def crash_at(step: int):
    """An `on_chunk` callback that raises Crash once the run reaches `step`."""
    def on_chunk(done):
        if done == step:
            raise Crash
    return on_chunk


def train_chunks(preset: str, sets: list[str], chunks: list[int]):
    """(the loss of every step, the final state) of `preset` with `sets`, trained in chunks of the given lengths (no
    run directory): how the optimizer and loss options show that a tiny preset still trains under them."""
    import numpy as np

    from miiii.runner import prepare
    from miiii.train import make_trainer, task_data

    cfg = apply_overrides(get_preset(preset), sets)
    task = prepare(cfg)
    trainer, data = make_trainer(cfg, task), task_data(task)
    state, losses = trainer.init(0), []
    for n in chunks:
        state, out = trainer.chunk(state, data, n)
        losses.append(np.asarray(out.metrics["loss"]))
    return np.concatenate(losses), state


def assert_trains(loss, state) -> None:
    """Finite throughout, and the last 20 steps' loss under half the first 20 steps'."""
    import jax
    import numpy as np

    assert np.isfinite(loss).all() and all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(state.params))
    assert loss[-20:].mean() < 0.5 * loss[:20].mean(), (loss[:3], loss[-3:])


def make_legacy(run: Path) -> None:
    """`run` as a version before manifests wrote it: no checksums.json, and a ckpt.json that does not name one (a
    finished run whose ckpt.json names its manifest and lacks it is damaged, not legacy)."""
    import json

    (run / "checksums.json").unlink(missing_ok=True)
    meta = run / "ckpt.json"
    if meta.is_file():
        d = json.loads(meta.read_text())
        d.pop("manifest", None)
        meta.write_text(json.dumps(d))
