"""Issue 16's faults, one test (or a few) each: durable writes, export-adder, claims and races, damaged
checkpoints, failed saves, start-up interrupts, sizes validated before anything is written, integrity, messages."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import time
from pathlib import Path

import _runhelp  # noqa: F401 - the session's compilation cache
import numpy as np
import pytest

import miiii.files
from miiii.config import apply_overrides
from miiii.files import save_npz_atomic, write_json_atomic
from miiii.presets import get_preset
from miiii.runner import train_run

# a run of a few seconds that records, checkpoints twice and finishes
TINY = ["--preset", "nanda-tiny", "--steps", "24", "--set", "chunk=12", "--set", "ckpt.every=12", "--set", "p=23",
        "--set", "valid_size=50", "--set", "d_model=32", "--set", "record.every=5"]
TINY_CFG = apply_overrides(get_preset("nanda-tiny"), ["steps=24", "chunk=12", "ckpt.every=12", "p=23", "valid_size=50",
                                                      "d_model=32", "record.every=5"])

# ---------------------------------------------------------------- durability (files.py)


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.mark.parametrize("write", ["json", "npz"])
def test_atomic_write_fsyncs_the_file_then_renames_then_fsyncs_the_directory(tmp_path, monkeypatch, write):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    def replace(src, dst):
        calls.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(miiii.files.os, "fsync", fsync)
    monkeypatch.setattr(miiii.files.os, "replace", replace)
    path = tmp_path / ("x.json" if write == "json" else "x.npz")
    if write == "json":
        write_json_atomic(path, {"a": 1})
    else:
        save_npz_atomic(path, a=np.arange(3))
    renames = [c for c in calls if c[0] == "replace"]
    assert len(renames) == 1 and renames[0][2] == str(path), calls
    tmp = renames[0][1]
    i = calls.index(renames[0])
    assert ("fsync", tmp) in calls[:i], f"the temp file is not fsynced before the rename: {calls}"
    assert ("fsync", str(tmp_path)) in calls[i + 1:], f"the directory is not fsynced after the rename: {calls}"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


class _Unconvertible:
    def __array__(self, *args, **kwargs):
        raise RuntimeError("cannot convert")


def test_a_write_that_raises_leaves_no_partial_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "m.npz"
    save_npz_atomic(path, a=np.arange(3))
    before = path.read_bytes()
    with pytest.raises(RuntimeError):  # the first array is written, the second raises
        save_npz_atomic(path, a=np.arange(1000), b=_Unconvertible())
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "j.json", {"a": list(range(1000)), "b": object()})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"] and path.read_bytes() == before


def test_a_checkpoint_syncs_activations_and_the_orbax_step_before_the_index_and_checksum_claim_them(tmp_path,
                                                                                                   monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", _fd_path(fd))), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", str(b))), real_replace(a, b))[1])
    run = tmp_path / "run"
    train_run(TINY_CFG, run, progress=False)
    last_index = max(i for i, c in enumerate(calls) if c == ("replace", str(run / "acts" / "index.json")))
    synced = {c[1] for c in calls[:last_index] if c[0] == "fsync"}
    acts = [str(p) for p in (run / "acts").glob("*.npy")]
    assert acts and set(acts) <= synced, "activation rows are not synced before index.json claims them"
    last_meta = max(i for i, c in enumerate(calls) if c == ("replace", str(run / "ckpt.json")))
    synced = {c[1] for c in calls[:last_meta] if c[0] == "fsync"}
    step = run / "ckpt" / "24"
    files = [str(p) for p in step.rglob("*") if p.is_file()]
    assert files and set(files) <= synced and str(step) in synced, "the checkpoint is not synced before its checksum"


# ---------------------------------------------------------------- export-adder


@pytest.fixture(scope="module")
def adder_run(tmp_path_factory) -> Path:
    """An untrained addition run directory (config.json, params.npz): what export-adder reads."""
    from miiii.rundir import flatten_params
    from miiii.tasks import make_task
    from miiii.train import make_trainer

    cfg = apply_overrides(get_preset("addition"), ["n_train=64", "n_valid=32", "steps=1"])
    path = tmp_path_factory.mktemp("adder") / "run"
    path.mkdir()
    (path / "config.json").write_text(cfg.to_json())
    np.savez(path / "params.npz", **flatten_params(make_trainer(cfg, make_task(cfg.task)).init(1).params))
    return path


INJECT = 'x"""+str(open("PWNED", "w").close())+"""'


@pytest.mark.parametrize("name", [INJECT, "back\\Nslash", "new\nline", "{brace}'quote'\"\"\"\\"],
                         ids=["injection", "backslash-N", "newline", "quotes"])
def test_export_adder_puts_the_run_name_in_as_a_literal(tmp_path, monkeypatch, adder_run, name):
    """A run directory's name is data: it can neither run code nor stop the module from importing."""
    from _runhelp import load_module

    from miiii.cli import main

    monkeypatch.chdir(tmp_path)
    run = tmp_path / name
    shutil.copytree(adder_run, run)
    assert main(["export-adder", str(run), str(tmp_path / "adder.py")]) == 0
    mod = load_module(tmp_path / "adder.py")
    assert not (tmp_path / "PWNED").exists(), "importing the exported module ran code from the run's name"
    assert mod.RUN == name
    model, meta = mod.build_model()
    assert meta["params"] > 0 and mod.forward(model, np.array([1, 2, 10, 3, 4, 11])).shape == (6, 14)


def test_export_adder_refuses_to_overwrite(tmp_path, adder_run, capsys):
    """An existing output only with --force; a run's own files never, --force or not. Exit 2, one line."""
    from miiii.cli import main

    run = tmp_path / "run"
    shutil.copytree(adder_run, run)
    (run / "acts").mkdir()
    (run / "acts" / "W_E.npy").write_bytes(b"rows")
    before = _runhelp.tree_digest(tmp_path)
    refused = [(run / "config.json", []), (run / "config.json", ["--force"]), (run / "params.npz", ["--force"]),
               (run / "acts" / "W_E.npy", ["--force"]), (run / "summary.json", ["--force"]), (run, ["--force"])]
    for out, force in refused:
        assert main(["export-adder", str(run), str(out), *force]) == 2, out
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert _runhelp.tree_digest(tmp_path) == before
    mine = tmp_path / "mine.py"
    mine.write_text("keep me")
    assert main(["export-adder", str(run), str(mine)]) == 2
    err = capsys.readouterr().err
    assert "--force" in err and len(err.strip().splitlines()) == 1 and mine.read_text() == "keep me"
    assert main(["export-adder", str(run), str(mine), "--force"]) == 0
    assert "def add(" in mine.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.py", "run"]  # no temp file left


# ---------------------------------------------------------------- claims, races, start-up


@functools.cache
def tiny_reference() -> Path:
    """TINY trained without interruption (once per session): what every resumed TINY run must equal."""
    d = Path(tempfile.mkdtemp(prefix="miiii-tiny-ref-"))
    atexit.register(shutil.rmtree, d, True)
    train_run(TINY_CFG, d / "run", progress=False)
    return d / "run"


def test_a_second_train_into_a_directory_being_started_is_refused(tmp_path, monkeypatch, capsys):
    """Both pass the emptiness check; the one still building its model held the directory first and wins."""
    import miiii.runner
    from miiii.cli import main

    run = tmp_path / "run"
    real_build, inner = miiii.runner.build, []

    def slow_build(cfg, task):  # while the first is building, a fast second `train` into the same directory
        if not inner:
            inner.append(None)
            inner[0] = main(["train", *TINY, "--run-dir", str(run), "--no-progress"])
        return real_build(cfg, task)

    monkeypatch.setattr(miiii.runner, "build", slow_build)
    assert main(["train", *TINY, "--run-dir", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert inner == [2], "the second train into a directory being started was not refused"
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and str(run) in errors[0] and "Traceback" not in err, err
    _runhelp.assert_same_run(tiny_reference(), run)


def test_a_start_up_that_fails_leaves_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    """A write error before the first checkpoint: the directory is removed, and the message does not promise a
    checkpoint that does not exist."""
    import errno

    import orbax.checkpoint as ocp

    from miiii.cli import main

    def broken_disk(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ocp.CheckpointManager, "save", broken_disk)  # the step-0 checkpoint cannot be written
    run = tmp_path / "deep" / "run"
    assert main(["train", *TINY, "--run-dir", str(run), "--no-progress"]) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: writing ") and "Input/output error" in last and "Traceback" not in err, err
    assert "can be resumed" not in err and "last checkpoint" not in err and "nothing was kept" in last, last
    assert list(tmp_path.iterdir()) == [], "a failed start-up left files"


def test_ctrl_c_during_start_up_exits_130_and_leaves_a_directory_train_can_use(tmp_path):
    """SIGINT after config.json exists and before the step-0 checkpoint (while XLA compiles: no compilation
    cache here): exit 130, one message, no traceback, and the directory is gone, so `train` into it works."""
    import signal
    import subprocess
    import sys

    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")} | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "miiii", "train", "--no-progress", *TINY, "--run-dir", str(run)],
                            cwd=_runhelp.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (run / "config.json").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.002)
    assert not (run / "ckpt.json").exists()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err and "nothing was kept" in err, err
    assert not run.exists(), sorted(p.name for p in run.iterdir())  # so `train --run-dir` into it starts afresh


def test_a_start_up_killed_outright_is_started_over_by_resume(tmp_path, capsys):
    """What SIGKILL during start-up leaves (config.json, the lock file, preallocated acts/, a checkpoint 0 with no
    checksum): --resume trains it from scratch, equal to an uninterrupted run."""
    from miiii.cli import main
    from miiii.rundir import write_config

    run = tmp_path / "run"
    (run / "acts").mkdir(parents=True)
    write_config(run, TINY_CFG)
    (run / ".lock").write_text("12345")
    (run / "acts" / "W_E.npy").write_bytes(b"\x93NUMPY half-written")
    (run / "ckpt" / "0.orbax-checkpoint-tmp-1").mkdir(parents=True)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert "starting it over" in capsys.readouterr().err
    _runhelp.assert_same_run(tiny_reference(), run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0  # a finished run: nothing to do
    assert "already finished" in capsys.readouterr().err


# ---------------------------------------------------------------- damaged checkpoints, failed saves


class Crash(Exception):
    pass


def crashed_tiny(tmp_path: Path, at: int = 24) -> Path:
    """TINY stopped after its checkpoint at step `at` (checkpoints 0, 12, 24), as if the process had died."""

    def crash(step):
        if step == at:
            raise Crash

    with pytest.raises(Crash):
        train_run(TINY_CFG, tmp_path / "run", progress=False, on_chunk=crash)
    return tmp_path / "run"


@pytest.mark.parametrize("damage", ["no-default-folder", "empty-step-folder"])
def test_resume_falls_back_past_an_incomplete_newest_checkpoint(tmp_path, capsys, damage):
    from miiii.cli import main

    run = crashed_tiny(tmp_path)
    shutil.rmtree(run / "ckpt" / "24" / ("default" if damage == "no-default-folder" else ""))
    (run / "ckpt" / "24").mkdir(exist_ok=True)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "checkpoint 24" in err and "from step 12" in err and "Traceback" not in err, err
    _runhelp.assert_same_run(tiny_reference(), run)
