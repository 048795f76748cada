"""Issue 16's faults, one test (or a few) each: durable writes, export-adder, claims and races, damaged
checkpoints, failed saves, start-up interrupts, sizes validated before anything is written, integrity, messages."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import _runhelp
import numpy as np
import pytest
from _runhelp import SLOW, TINY, TINY_CFG, crashed_tiny, tiny_reference

import miiii.files
from miiii.config import apply_overrides
from miiii.files import save_npz_atomic, write_json_atomic
from miiii.presets import get_preset
from miiii.runner import train_run

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
    """An untrained addition run directory (config.json, params.npz): what export-adder reads. Random values of the
    model's shapes: the initialiser run eagerly compiled op by op, seconds the tests here do not need."""
    import jax

    from miiii.rundir import flatten_params
    from miiii.tasks import make_task
    from miiii.train import make_trainer

    cfg = apply_overrides(get_preset("addition"), ["n_train=64", "n_valid=32", "steps=1"])
    path = tmp_path_factory.mktemp("adder") / "run"
    path.mkdir()
    (path / "config.json").write_text(cfg.to_json())
    shapes = jax.eval_shape(make_trainer(cfg, make_task(cfg.task)).init, 1).params
    rng = np.random.default_rng(1)
    params = jax.tree.map(lambda a: (0.02 * rng.standard_normal(a.shape)).astype(a.dtype), shapes)
    np.savez(path / "params.npz", **flatten_params(params))
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


def as_command(monkeypatch, *args) -> int:
    """cli.main as `python -m miiii ARGS` runs it (argv from sys.argv, so with the process's exit hooks, which are
    undone afterwards)."""
    import signal
    import sys

    from miiii.cli import main

    monkeypatch.setattr(sys, "argv", ["miiii", *args])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    handler = signal.getsignal(signal.SIGINT)
    try:
        return main()
    finally:
        signal.signal(signal.SIGINT, handler)


# empty-step-folder in make test-studies: orbax fails on it as on no-default-folder (a step without its one item,
# the damage the manager's fixed item type is for); no-default-folder stays in make test
@pytest.mark.parametrize("damage", ["no-default-folder", pytest.param("empty-step-folder", marks=SLOW),
                                    "truncated-data-file"])
def test_resume_falls_back_past_an_incomplete_newest_checkpoint(tmp_path, monkeypatch, capfd, damage):
    run = crashed_tiny(tmp_path)
    step = run / "ckpt" / "24"
    if damage == "truncated-data-file":
        data = max((p for p in step.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    else:
        shutil.rmtree(step / ("default" if damage == "no-default-folder" else ""))
        step.mkdir(exist_ok=True)
    capfd.readouterr()
    assert as_command(monkeypatch, "train", "--resume", str(run), "--no-progress") == 0
    err = capfd.readouterr().err
    assert "checkpoint 24" in err and "from step 12" in err and "Traceback" not in err, err
    _runhelp.assert_same_run(tiny_reference(), run)


def _tensorstore_error(code: int) -> ValueError:
    """What tensorstore raises when a write fails (errno `code`), as orbax passes it on."""
    return ValueError(f'RESOURCE_EXHAUSTED: Error writing "params.W_E/0.0" in OCDBT database at local file '
                      f'"/x/ckpt/12.orbax-checkpoint-tmp/default.orbax-checkpoint-tmp/ocdbt.process_0/": Failed to '
                      f"write 4096 bytes to file 19 [os_error_code='{code}']")


def test_a_checkpoint_write_that_tensorstore_fails_is_one_error_line_and_resumable(tmp_path, monkeypatch, capfd):
    import errno

    import orbax.checkpoint as ocp

    from miiii.cli import main

    real, calls = ocp.CheckpointManager.save, []

    def full_disk(self, step, *args, **kwargs):
        calls.append(step)
        if step == 12:
            raise _tensorstore_error(errno.ENOSPC)
        return real(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", full_disk)
    run = tmp_path / "run"
    assert main(["train", *TINY, "--run-dir", str(run), "--no-progress"]) == 1
    err = capfd.readouterr().err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and sum(ln.startswith("error:") for ln in err.splitlines()) == 1, err
    assert last.startswith(f"error: writing {run / 'ckpt' / '12'} failed: No space left on device"), last
    assert "checkpoint (step 0)" in last and "--resume" in last
    monkeypatch.undo()  # space freed
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    _runhelp.assert_same_run(tiny_reference(), run)


def test_a_file_size_limit_stops_the_run_with_one_line_and_it_resumes(tmp_path, capfd):
    """`ulimit -f` (RLIMIT_FSIZE, SIGXFSZ ignored) below a checkpoint's data file, in a real process: tensorstore
    fails from its threads; the process says so in one line, exit 1, and the run resumes from checkpoint 0."""
    import shlex
    import subprocess
    import sys

    from miiii.cli import main

    run = tmp_path / "run"
    env = dict(os.environ)  # with the session's compile cache (tests/conftest.py exports it)
    train = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "miiii", "train", "--no-progress", *TINY,
                                              "--run-dir", str(run)])
    # 146 KiB: the acts files fit, checkpoint 12 does not; SIGXFSZ ignored, so writes fail with EFBIG
    res = subprocess.run(["bash", "-c", f"trap '' XFSZ; ulimit -f 146; exec {train}"], cwd=_runhelp.ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 3 and lines[0].startswith("recording:"), res.stderr
    assert lines[1].startswith("checkpoints:")  # the start-up lines, then the one error line
    assert lines[2].startswith("error: writing ") and "File too large" in lines[2] and "--resume" in lines[2]
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "from step" in err, err
    _runhelp.assert_same_run(tiny_reference(), run)


def test_a_second_ctrl_c_while_the_process_exits_prints_nothing_more(tmp_path):
    import signal

    run = tmp_path / "run"
    proc = _runhelp.start_cli([*TINY, "--steps", "2400", "--run-dir", str(run)])
    _runhelp.wait_for_checkpoint(run, proc, at_least=12)
    proc.send_signal(signal.SIGINT)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("interrupted"):  # the command is over; the interpreter is shutting down
            for _ in range(3):
                proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    err = "".join(lines)
    assert proc.returncode == 130 and "Exception ignored" not in err and "Traceback" not in err, err


# ---------------------------------------------------------------- sizes and ranges, checked before anything is written

_BIG = str(10**30)
TOO_BIG = {  # each once passed validation and then crashed (after or before writing) or hung
    "warmup_steps 2**31": (["--set", f"warmup_steps={2**31}"], "optim.warmup_steps"),
    "eval_every 2**31": (["--set", f"eval_every={2**31}"], "train.eval_every"),
    "record.every 1e30": (["--set", f"record.every={_BIG}"], "record.every"),
    "steps 1e30 as a float": (["--steps", "1e30"], "--steps"),
    "steps 1e30": (["--steps", _BIG, "--set", "record.acts=", "--set", "record.params="], "train.steps"),
    "seed 2**32": (["--seed", str(2**32)], "train.seed"),
    "split_seed -1": (["--set", "split_seed=-1"], "task.split_seed"),
    "neurons 0:10**12": (["--set", f"record.neurons=0:{10**12}"], "holds 1,000,000,000,000 values"),
    "run-dir a dangling symlink": (["--run-dir", "{tmp}/dangling"], "symlink"),
    "run-dir on a read-only disk": (["--run-dir", "{tmp}/ro/run"], "Read-only file system"),
    "p 2**61-1": (["--set", f"p={2**61 - 1}"], "task.p"),
    "d_model 65536": (["--set", "d_model=65536", "--set", "d_mlp=0"], "memory"),
    "window 10**9": (["--set", "optim.grokfast=ma", "--set", f"window={10**9}"], "memory"),
    "sweep of 10**8 seeds": (["sweep", "--seeds", "100000000", "--out", "{tmp}/sweep"], "memory"),
    "figures --out a file": (["figures", "{ref}", "--out", "{tmp}/afile"], "not a directory"),
}


@pytest.mark.parametrize("case", list(TOO_BIG))
def test_sizes_and_ranges_are_refused_before_anything_is_written(case, tmp_path, monkeypatch, capsys):
    import errno
    import signal

    from miiii.cli import main

    args, says = TOO_BIG[case]
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    args = [str(tiny_reference()) if a == "{ref}" else a for a in args]
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "afile").write_text("mine")
    real_mkdir = os.mkdir

    def read_only(path, *a, **k):
        if str(path).startswith(str(tmp_path / "ro")):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_mkdir(path, *a, **k)

    monkeypatch.setattr(os, "mkdir", read_only)
    monkeypatch.chdir(tmp_path)
    before = _runhelp.tree_digest(tmp_path), sorted(p.name for p in tmp_path.iterdir())

    def hung(*_):
        raise TimeoutError(f"{case}: still running after 20 s")

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        if args[0] in ("sweep", "figures"):
            argv = [args[0], *(["--preset", "nanda-tiny", "--no-progress"] if args[0] == "sweep" else []), *args[1:]]
        else:
            argv = ["train", "--preset", "nanda-tiny", "--no-progress", *args]
            argv += [] if "--run-dir" in args else ["--run-dir", str(tmp_path / "run")]
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's own refusals
            rc = e.code
    finally:
        signal.alarm(0)
    out, err = capsys.readouterr()
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and says in errors[0] and "Traceback" not in err, (rc, err)
    assert (_runhelp.tree_digest(tmp_path), sorted(p.name for p in tmp_path.iterdir())) == before, "files written"


# ---------------------------------------------------------------- integrity


def test_a_flipped_byte_in_recorded_activations_is_caught_on_resume_and_on_load(tmp_path, capsys):
    from miiii.cli import main
    from miiii.config import ConfigError
    from miiii.run import load_run

    run = crashed_tiny(tmp_path)
    load_run(run)  # intact: the checksums of the committed rows hold
    path = run / "acts" / "W_E.npy"
    raw = bytearray(path.read_bytes())
    header = np.load(path, mmap_mode="r").offset
    raw[header + 5] ^= 0x10  # row 0, committed at step 0
    path.write_bytes(bytes(raw))
    before = _runhelp.tree_digest(run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "W_E.npy is damaged" in err and "checksum" in err and "Traceback" not in err, err
    assert _runhelp.tree_digest(run) == before
    with pytest.raises(ConfigError, match="W_E.npy is damaged"):
        load_run(run)


def test_load_run_refuses_an_activation_file_outside_the_run(tmp_path):
    import json

    from miiii.config import ConfigError
    from miiii.run import load_run

    run = tmp_path / "run"
    shutil.copytree(tiny_reference(), run)
    index = json.loads((run / "acts" / "index.json").read_text())
    other = os.path.relpath(tiny_reference() / "acts" / "W_E.npy", run / "acts")  # ../../..: the shared reference run
    index["arrays"]["W_E"]["file"] = other
    (run / "acts" / "index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="not a .npy file inside acts/"):
        load_run(run)


def test_an_edited_config_is_refused_even_when_its_copy_was_removed_from_ckpt_json(tmp_path, capsys):
    import json

    from miiii.cli import main
    from miiii.config import ConfigError
    from miiii.run import load_run

    run = crashed_tiny(tmp_path)
    meta = json.loads((run / "ckpt.json").read_text())
    del meta["config"]
    (run / "ckpt.json").write_text(json.dumps(meta))
    cfg = json.loads((run / "config.json").read_text())
    cfg["optim"]["lr"] = 0.5
    (run / "config.json").write_text(json.dumps(cfg))
    before = _runhelp.tree_digest(run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "ckpt.json" in err and "no copy of the config" in err and "Traceback" not in err, err
    assert _runhelp.tree_digest(run) == before
    with pytest.raises(ConfigError, match="no copy of the config"):
        load_run(run)


# make test-studies: test_faults_files' test_resume_of_a_finished_run_writes_a_damaged_rebuildable_file_again
# [params.npz other values] damages params.npz the same way for the resume (its manifest checksum no longer matches)
# and checks the same: written again, the run equal to its uninterrupted self, a second resume with nothing to do
@SLOW
def test_resume_of_a_finished_run_with_damaged_params_writes_them_again(tmp_path, capsys):
    from miiii.cli import main

    run = tmp_path / "run"
    shutil.copytree(tiny_reference(), run)
    params = run / "params.npz"
    params.write_bytes(params.read_bytes()[: params.stat().st_size // 2])
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "params.npz is damaged" in err and "nothing to do" not in err, err
    _runhelp.assert_same_run(tiny_reference(), run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert "nothing to do" in capsys.readouterr().err


# ---------------------------------------------------------------- messages

_LONG = "x" * 100_000
MESSAGES = {
    "newline in a --set value": ["--set", "task.name=nan\nda"],
    "newline in a key": ["--set", "model.d_\nmodel=3"],
    "100,000 characters in a --set value": ["--set", f"task.name={_LONG}"],
    "100,000 characters of a number": ["--set", f"lr={_LONG}"],
    "100,000 characters in a list": ["--set", f"record.acts={_LONG}"],
    "100,000 characters for --steps": ["--steps", _LONG],
    "4,000 digits for --seed": ["--seed", "9" * 4000],
    "100,000 characters in a preset": ["--preset", _LONG],
}


@pytest.mark.parametrize("case", list(MESSAGES))
def test_an_echoed_value_is_one_short_line(case, tmp_path, capsys):
    """Control characters shown escaped, long values cut to 80 characters with …: one error line, readable."""
    from miiii.cli import main

    args = MESSAGES[case]
    argv = ["train", "--no-progress", "--run-dir", str(tmp_path / "run"), *args]
    if "--preset" not in args:
        argv += ["--preset", "nanda-tiny"]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and len(errors) == 1 and len(err) < 600 and "Traceback" not in err, err[:600]
    assert "\n" not in err.strip().splitlines()[0] and ("\\n" in errors[0] or "…" in errors[0]), errors[0]
    assert list(tmp_path.iterdir()) == []
