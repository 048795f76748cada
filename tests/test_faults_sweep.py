"""Issue 27's faults, one test (or a few) each: a diverged sweep member, repeated --grid, Ctrl-C during start-up,
multi-process sweeps that wait forever, --profile checked before training."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import _runhelp  # noqa: F401 - the session's compilation cache
import numpy as np
import pytest
from _runhelp import SLOW

ROOT = _runhelp.ROOT


def cli(*args: str, cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "miiii", *args], capture_output=True, text=True, cwd=cwd or ROOT,
                          env=env, timeout=timeout)


def start(*args: str, cwd=None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "miiii", *args], cwd=cwd or ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def one_error(rc: int, err: str, says: str = "", code: int = 2) -> str:
    """Exit status `code`, exactly one `error:` line (containing `says`), no traceback."""
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == code and len(errors) == 1 and says in errors[0], (rc, err[-3000:])
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    return errors[0]


# ---------------------------------------------------------------- 1. a diverged sweep member


def test_accuracy_on_nan_logits_is_zero_not_one():
    import jax.numpy as jnp

    from miiii.train import loss_and_metrics

    spec = {"n_classes": jnp.array([3]), "loss_weight": jnp.array([1.0]), "group_loss": jnp.array([[1.0]]),
            "groups": jnp.array([[True]])}
    y = jnp.array([[0], [2]])
    for bad in (jnp.nan, jnp.inf):
        logits = jnp.full((2, 1, 3), bad)
        loss, _, acc = loss_and_metrics(logits, y, spec)
        assert not jnp.isfinite(loss) and acc.tolist() == [0.0], (bad, acc)
    good = jnp.array([[[5.0, 1.0, 0.0]], [[0.0, 1.0, 0.5]]])  # right, wrong
    assert loss_and_metrics(good, y, spec)[2].tolist() == [0.5]


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_a_diverged_sweep_member_is_marked_diverged_and_the_others_go_on(tmp_path):
    out = tmp_path / "sw"
    res = cli("sweep", "--preset", "nanda-tiny", "--steps", "40", "--set", "chunk=20", "--seeds", "1",
              "--set", "ckpt.keep_log=0", "--set", "record.acts=", "--grid", "lr=3e-3,inf", "--no-progress",
              "--out", str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    sweep = json.loads((out / "sweep.json").read_text())
    good, gone = sweep["members"]
    assert good["values"]["optim.lr"] == 3e-3 and good["diverged_at"] is None
    assert gone["diverged_at"] is not None and gone["grok_step_all"] is None
    assert set(gone["grok_step"].values()) == {None}
    d = gone["diverged_at"]
    m0, m1 = (np.load(out / f"member_{i:03d}" / "metrics.npz") for i in (0, 1))
    assert np.isfinite(m0["loss"]).all() and np.isfinite(m0["train_acc"]).all()  # the other member went on
    assert np.isfinite(m1["loss"][:d]).all()
    for k in ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc", "grad_norm"):
        assert np.isnan(m1[k][d:]).all(), k  # NaN from the step it diverged, accuracies included
    p_good, p_gone = sweep["points"]
    assert (p_good["n_diverged"], p_good["diverged_at"]) == (0, [None])
    assert (p_gone["n_diverged"], p_gone["diverged_at"], p_gone["n_grokked"]) == (1, [d], 0)
    assert "lr=inf: grokked 0/1, diverged 1/1 (at step" in res.stdout, res.stdout
    assert "member 1 (lr=inf, seed 0) diverged" in res.stderr and "Traceback" not in res.stderr, res.stderr


# ---------------------------------------------------------------- 2. --grid given twice


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_every_grid_is_crossed_and_a_key_given_twice_is_refused(tmp_path, capsys):
    from miiii.cli import main

    out = tmp_path / "sw"
    assert main(["sweep", "--preset", "nanda-tiny", "--steps", "20", "--seeds", "1", "--grid", "lr=1e-3,3e-3",
                 "--grid", "wd=0.1,1", "--set", "ckpt.keep_log=0", "--set", "record.acts=", "--set", "record.params=",
                 "--no-progress", "--no-tensorboard", "--out", str(out)]) == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["n_members"] == 4
    assert sorted((p["values"]["optim.lr"], p["values"]["optim.weight_decay"]) for p in sweep["points"]) == [
        (1e-3, 0.1), (1e-3, 1.0), (3e-3, 0.1), (3e-3, 1.0)]
    capsys.readouterr()
    again = tmp_path / "again"
    assert main(["sweep", "--preset", "nanda-tiny", "--steps", "20", "--seeds", "1", "--grid", "lr=1e-3",
                 "--grid", "wd=0.1", "lr=3e-3", "--no-progress", "--out", str(again)]) == 2
    one_error(2, capsys.readouterr().err, "--grid names lr twice")
    assert not again.exists()


# ---------------------------------------------------------------- 3. Ctrl-C during start-up

# what a train prints on stderr besides the interruption's own line (--no-progress)
INFO = ("recording:", "checkpoints:", "stopping ")


@SLOW
def test_ctrl_c_at_any_moment_of_start_up_stops_the_run(tmp_path):
    """SIGINT at several moments from the interpreter's start to the first chunks: exit 130, one line (besides the
    run's own notes), no traceback, and a directory that is absent, empty, or resumes to the end."""
    args = ["train", "--preset", "nanda-tiny", "--steps", "1000", "--set", "chunk=20", "--no-progress",
            "--no-tensorboard"]
    t0 = time.monotonic()
    # on a loaded 2-core machine the imports alone take ~4 s; "config.json": once the run's directory is claimed
    for delay in (0.3, 1.5, 4.0, "config.json"):  # imports, their end, the start-up stages, the claimed directory
        run = tmp_path / f"run-{delay}"
        proc = start(*args, "--run-dir", str(run))
        if delay == "config.json":
            while not (run / "config.json").exists() and proc.poll() is None:
                time.sleep(0.005)
        else:
            time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        lines = [ln for ln in err.splitlines() if not ln.startswith(INFO)]
        assert proc.returncode == 130, (delay, proc.returncode, err[-3000:])
        assert len(lines) <= 1 and "Traceback" not in err and "Error" not in err, (delay, err[-3000:])
        if run.exists() and any(run.iterdir()):
            assert "--resume" in err, (delay, err)
            res = cli("train", "--resume", str(run), "--no-progress", "--no-tensorboard")
            assert res.returncode == 0, (delay, res.stderr[-3000:])
            assert json.loads((run / "summary.json").read_text())["steps"] == 1000
    assert time.monotonic() - t0 < 150


def test_a_ctrl_c_swallowed_by_a_gc_callback_stops_the_run_at_the_next_stage(tmp_path, monkeypatch, capsys):
    """A KeyboardInterrupt raised inside a garbage-collection callback reaches only sys.unraisablehook: the CLI's
    hook remembers it, and the next start-up stage raises it (before: the run trained to the end, exit 0)."""
    import gc

    import miiii.errors
    import miiii.runner
    from miiii.cli import _unraisable, main

    def interrupted(phase, info):
        gc.callbacks.remove(interrupted)
        raise KeyboardInterrupt

    real_prepare = miiii.runner.prepare

    def prepare(cfg):  # a Ctrl-C lands in a gc callback while the task is built
        gc.callbacks.append(interrupted)
        gc.collect()
        return real_prepare(cfg)

    monkeypatch.setattr(sys, "unraisablehook", _unraisable)
    monkeypatch.setattr(miiii.runner, "prepare", prepare)
    run = tmp_path / "run"
    try:
        rc = main(["train", "--preset", "nanda-tiny", "--steps", "40", "--no-progress", "--run-dir", str(run)])
    finally:
        miiii.errors._pending[0] = False
    err = capsys.readouterr().err
    assert rc == 130 and "nothing was kept" in err and not run.exists(), err


# ---------------------------------------------------------------- 4. several processes that never join


MP = ["sweep", "--preset", "nanda-tiny", "--steps", "20", "--seeds", "2", "--no-progress", "--num-processes", "2"]


@pytest.mark.parametrize("port", ["0", "99999", "65536"])
def test_a_coordinator_port_out_of_range_is_refused(tmp_path, capsys, port):
    from miiii.cli import build_parser, run_command  # main() itself leaves a multi-process command with os._exit

    argv = [*MP, "--coordinator", f"127.0.0.1:{port}", "--process-id", "0", "--out", str(tmp_path / "sw")]
    assert run_command(build_parser().parse_args(argv), argv) == 2
    one_error(2, capsys.readouterr().err, "a port is 1 .. 65535")
    assert list(tmp_path.iterdir()) == []


def test_a_lone_process_0_gives_up_after_join_timeout_with_one_line(tmp_path):
    t0 = time.monotonic()
    res = cli(*MP, "--coordinator", f"127.0.0.1:{free_port()}", "--process-id", "0", "--join-timeout", "3",
              "--out", "sw", cwd=tmp_path, timeout=60)
    assert time.monotonic() - t0 < 30
    line = one_error(res.returncode, res.stderr, "not all 2 processes joined")
    assert "within 3 s" in line and "waiting for the 1 other process to join" in res.stderr, res.stderr
    assert list(tmp_path.iterdir()) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_line(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    """stderr lines until one contains `text` (returns what was read)."""
    seen, t0 = [], time.monotonic()
    for line in proc.stderr:
        seen.append(line)
        if text in line:
            return "".join(seen)
        assert time.monotonic() - t0 < timeout, "".join(seen)
    raise AssertionError(f"the process ended without saying {text!r}: {''.join(seen)}")


def test_ctrl_c_stops_a_waiting_process_and_a_second_process_0_is_refused(tmp_path):
    port = free_port()
    first = start(*MP, "--coordinator", f"127.0.0.1:{port}", "--process-id", "0", "--out", "sw", cwd=tmp_path)
    try:
        _wait_for_line(first, "waiting for")
        time.sleep(1)  # jax's coordinator is listening by now
        second = cli(*MP, "--coordinator", f"127.0.0.1:{port}", "--process-id", "0", "--out", "sw2", cwd=tmp_path,
                     timeout=60)
        one_error(second.returncode, second.stderr, f"cannot start the coordinator on port {port}")
        assert "waiting for" not in second.stderr
        t0 = time.monotonic()
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=30)
        assert first.returncode == 130 and time.monotonic() - t0 < 10, err
        assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted", err
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- 5. --profile checked before training


@pytest.mark.parametrize("command", ["train", "sweep"])
@pytest.mark.parametrize("case", ["empty", "a file", "under a file", "read-only"])
def test_a_profile_directory_that_cannot_be_written_is_refused_before_training(tmp_path, monkeypatch, capsys,
                                                                              command, case):
    from miiii.cli import main

    (tmp_path / "afile").write_text("mine")
    (tmp_path / "ro").mkdir()
    profile = {"empty": "", "a file": str(tmp_path / "afile"), "under a file": str(tmp_path / "afile" / "prof"),
               "read-only": str(tmp_path / "ro" / "prof")}[case]
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p) == str(tmp_path / "ro")  # as for a user
                        else real_access(p, mode, **k))  # without write permission (root may write anywhere)
    monkeypatch.chdir(tmp_path)
    before = _runhelp.tree_digest(tmp_path), sorted(p.name for p in tmp_path.rglob("*"))
    out = ["--run-dir", str(tmp_path / "run")] if command == "train" else ["--out", str(tmp_path / "run")]
    rc = main([command, "--preset", "nanda-tiny", "--steps", "20", "--no-progress", "--profile", profile, *out])
    one_error(rc, capsys.readouterr().err, "--profile")
    assert (_runhelp.tree_digest(tmp_path), sorted(p.name for p in tmp_path.rglob("*"))) == before
