"""A sweep across two processes joined by jax.distributed (a local coordinator, CPU collectives through gloo):
its members equal the same configs trained alone, and process 0 alone writes."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_sweep import assert_same, solo

pytestmark = pytest.mark.multihost  # run by `make test-multihost`; `make test` leaves them out (10-minute budget)
ROOT = Path(__file__).resolve().parents[1]
# test_sweep's four-device sweep, two chunks: longer runs of nanda-tiny (grokfast, lamb 2) amplify the float32
# rounding in which a vmapped member differs from a solo run past the 1e-5 tolerance, in one process as in two
SWEEP = ["--preset", "nanda-tiny", "--seeds", "4", "--set", "steps=24", "--set", "chunk=12", "--no-progress"]
RUN_FILES = {"config.json", "metrics.npz", "metrics.jsonl", "summary.json", "params.npz"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep_in_two(tmp: Path, args: list[str], outs=("sw", "sw"), timeout: float = 240,
                 python=("-m", "miiii")) -> list[tuple]:
    """`python -m miiii sweep ARGS` as processes 0 and 1 of one sweep (two CPU devices each), each in its own empty
    working directory tmp/p0, tmp/p1 with its own relative --out: [(returncode, stdout, stderr)] of each. A hang
    fails the test at `timeout` instead of blocking it. `python`: what runs instead of `-m miiii`."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    procs = []
    for i in (0, 1):
        (tmp / f"p{i}").mkdir(exist_ok=True)
        procs.append(subprocess.Popen(
            [sys.executable, *python, "sweep", *args, "--out", outs[i], "--coordinator", f"127.0.0.1:{port}",
             "--num-processes", "2", "--process-id", str(i)],
            cwd=tmp / f"p{i}", env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two-process sweep did not finish in {timeout:.0f} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


def test_two_process_sweep_equals_solo_runs(tmp_path):
    (rc0, out0, err0), (rc1, out1, err1) = sweep_in_two(tmp_path, SWEEP)
    assert rc0 == 0 and rc1 == 0, f"process 0:\n{err0[-3000:]}\nprocess 1:\n{err1[-3000:]}"
    assert "4 members on 4 device(s), 2 processes" in out0
    assert "process 1 of 2: done" in out1
    assert list((tmp_path / "p1").iterdir()) == []  # process 1 wrote nothing, not even its --out
    sw = tmp_path / "p0" / "sw"
    result = json.loads((sw / "sweep.json").read_text())
    assert (result["n_processes"], result["n_devices"], result["n_members"]) == (2, 4, 4)
    assert (sw / "grok_steps.png").stat().st_size > 0
    assert sorted(p.name for p in sw.glob("member_*")) == [f"member_{i:03d}" for i in range(4)]
    for i in range(4):  # members 0, 1 trained on process 0's devices, 2, 3 on process 1's
        d = sw / f"member_{i:03d}"
        assert RUN_FILES <= {p.name for p in d.iterdir()}
        assert json.loads((d / "config.json").read_text())["train"]["seed"] == i
        assert_same(dict(np.load(d / "metrics.npz")), solo(d, tmp_path))
        with np.load(d / "params.npz") as a, np.load(tmp_path / f"solo-{d.name}" / "params.npz") as b:
            assert a.files == b.files
            for k in a.files:  # the final parameters, gathered from the process that trained them (a member put in
                # another's place would differ by the weights' own scale, ~0.1; rounding moves a few by ~1e-6)
                np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_process_0_decides_the_sweep_directory(tmp_path):
    (tmp_path / "p0" / "sw").mkdir(parents=True)
    (tmp_path / "p0" / "sw" / "old.txt").write_text("an earlier sweep")
    (rc0, _, err0), (rc1, _, err1) = sweep_in_two(tmp_path, SWEEP, outs=("sw", "new"), timeout=120)
    assert (rc0, rc1) == (2, 2), (err0[-2000:], err1[-2000:])
    assert "already exists and is not empty" in err0 and "process 0 cannot write" in err1
    assert list((tmp_path / "p1").iterdir()) == []
    assert [p.name for p in (tmp_path / "p0" / "sw").iterdir()] == ["old.txt"]


# process 0 fails (as on a full disk) before its first collective, while process 1 goes on to wait in one
FAULT = """import sys
from miiii import cli, sweep
from miiii.files import RunError
if sys.argv[-1] == "0":
    def fault(*args, **kwargs):
        raise RunError("no space left on device (a test's fault)")
    assert callable(sweep.build), "the fault's target moved: the test must patch what the sweep calls"
    sweep.build = fault  # the trainer and recorder every member shares (miiii.runner.build)
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_failing_process_stops_the_others(tmp_path):
    # process 1, waiting in a collective, is stopped by jax's coordination service (SIGABRT) as soon as process 0
    # exits (seconds), not when process 0's shutdown barrier gives up, five minutes later (past the timeout)
    (rc0, _, err0), (rc1, _, err1) = sweep_in_two(tmp_path, SWEEP, timeout=150, python=("-c", FAULT))
    assert rc0 == 1 and "no space left on device" in err0
    assert rc1 not in (0, 2), err1[-2000:]
    assert list((tmp_path / "p1").iterdir()) == []
