"""Operations: the live metrics file (metrics.jsonl) and TensorBoard scalars, `--profile`, the compilation cache."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from _runhelp import ROOT, SLOW, Crash, assert_same_run, crash_at, reference_run, resume_cfg

from miiii.cli import main
from miiii.compile_cache import ENV, cache_dir
from miiii.config import ConfigError, RecordConfig, apply_overrides
from miiii.metrics import METRICS, log_columns
from miiii.presets import get_preset
from miiii.rundir import read_metrics_log
from miiii.runner import resume_run, train_run
from miiii.session import profiled_chunk

# one small program for the tests here and test_gpu_box.py's CLI runs (compiled once: the persistent cache shares it
# between tests, workers and processes); no log-spaced checkpoints, whose snapshots make the first chunk a second one
TINY = ["--preset", "nanda-tiny", "--steps", "40", "--set", "chunk=20", "--set", "eval_every=3",
        "--set", "record.acts=", "--set", "record.params=", "--set", "ckpt.keep_log=0"]


def tiny_cfg():
    return replace(apply_overrides(get_preset("nanda-tiny"), ["steps=40", "chunk=20", "eval_every=3",
                                                              "ckpt.keep_log=0"]), record=RecordConfig())


def evaluated_rows(run_dir) -> dict:
    """metrics.npz's rows at the evaluated steps (validation not NaN), in read_metrics_log's layout."""
    with np.load(run_dir / "metrics.npz") as m:
        rows = ~np.isnan(m["valid_acc"]).all(1)
        logged = {x.name: m[x.name][rows] for x in METRICS if x.logged}
        return {"step": m["step"][rows], "task_names": m["task_names"]} | logged


def assert_same_rows(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_metrics_log_equals_metrics_npz_and_is_read_mid_run(tmp_path):
    seen = {}
    train_run(tiny_cfg(), tmp_path / "run", progress=False, tensorboard=False,
              on_chunk=lambda step: seen.setdefault(step, read_metrics_log(tmp_path / "run")))
    final = read_metrics_log(tmp_path / "run")
    assert_same_rows(final, evaluated_rows(tmp_path / "run"))
    assert final["step"].tolist() == list(range(0, 40, 3)) and final["valid_acc"].shape == (14, 1)
    assert sorted(seen) == [20, 40]
    for step, mid in seen.items():  # each chunk's lines were on disk when on_chunk ran
        assert mid["step"].tolist() == list(range(0, step, 3))
        assert_same_rows(mid, {k: v[: len(mid["step"])] if k != "task_names" else v for k, v in final.items()})
    line = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[1]
    assert line.startswith('{"step": 3, "loss": ')
    assert f'"valid_acc/mod 37": {final["valid_acc"][1, 0]:.9g}, ' in line and line.endswith("}")
    assert not (tmp_path / "run" / "tb").exists()  # tensorboard=False


def test_metrics_log_reader_skips_a_line_being_written_and_names_a_damaged_file(tmp_path):
    cols = log_columns(["a", "b"], [])
    line = '{"step": 0, ' + ", ".join(f'"{c}": 0.5' for c in cols) + "}\n"
    (tmp_path / "metrics.jsonl").write_text(line + line.replace('"step": 0', '"step": 1')[:30])
    got = read_metrics_log(tmp_path)
    assert got["step"].tolist() == [0] and got["train_acc"].shape == (1, 2) and got["task_names"].tolist() == ["a", "b"]
    (tmp_path / "metrics.jsonl").write_text(line + "{oops\n" + line)
    with pytest.raises(ConfigError, match="metrics.jsonl is damaged"):
        read_metrics_log(tmp_path)
    assert read_metrics_log(tmp_path / "nothing") == {}


def test_resumed_metrics_log_holds_each_step_once_and_equals_the_uninterrupted_run(tmp_path):
    ref = reference_run()
    run_dir = tmp_path / "run"

    crash = crash_at(80)

    with pytest.raises(Crash):
        train_run(resume_cfg(), run_dir, progress=False, on_chunk=crash)
    # as if the process had died after writing the next chunk's lines, and in the middle of one more line
    ref_lines = (ref / "metrics.jsonl").read_text().splitlines(keepends=True)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write("".join(ref_lines[80:100]) + ref_lines[100][:40])
    resume_run(run_dir, progress=False)
    assert_same_run(ref, run_dir)  # metrics.jsonl byte for byte too
    steps = read_metrics_log(run_dir)["step"]
    assert steps.tolist() == list(range(160))


def read_events(path) -> list[tuple[int, dict]]:
    """(step, {tag: value}) of each scalar event in a TensorBoard event file (TFRecord framing, protobuf events)."""
    from tensorboardX.proto.event_pb2 import Event

    data, out, i = path.read_bytes(), [], 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        ev = Event.FromString(data[i + 12:i + 12 + n])
        i += 12 + n + 4
        if ev.HasField("summary"):
            out.append((ev.step, {v.tag: v.simple_value for v in ev.summary.value}))
    return out


def test_tensorboard_scalars_when_tensorboardx_is_installed(tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX")
    monkeypatch.setattr("miiii.metricslog.TB_POINTS", 4)  # 14 evaluated steps (every 3rd) -> every 12th, and the last
    train_run(tiny_cfg(), tmp_path / "run", progress=False)
    files = list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))
    assert len(files) == 1
    events = read_events(files[0])
    log = read_metrics_log(tmp_path / "run")
    assert [s for s, _ in events] == [0, 12, 24, 36, 39]
    cols = log_columns(log["task_names"], [])
    for step, scalars in events:
        assert list(scalars) == cols
        row = step // 3
        assert scalars["loss"] == log["loss"][row] and scalars[cols[-1]] == log["valid_acc"][row, -1]


def test_profiled_chunk_is_the_first_already_compiled():
    a, b = (10, None), (5, None)
    assert profiled_chunk([a, a, a, b]) == (1, False)
    assert profiled_chunk([a, b, b]) == (2, False)  # the second chunk's static arguments are new: it compiles
    assert profiled_chunk([a, b]) == (1, True)
    assert profiled_chunk([a]) == (0, True)


def test_profile_writes_a_trace_of_the_second_chunk(tmp_path, capsys):
    run, prof = tmp_path / "run", tmp_path / "prof"
    assert main(["train", *TINY, "--run-dir", str(run), "--profile", str(prof), "--no-progress",
                 "--no-tensorboard"]) == 0
    err = capsys.readouterr().err
    assert "profiling chunk 2 (steps 20-39)" in err and "ui.perfetto.dev" in err
    traces = [p.name for p in prof.rglob("*") if p.name.endswith((".trace.json.gz", ".xplane.pb"))]
    assert traces and list(prof.rglob("perfetto_trace.json.gz"))
    assert not (run / "tb").exists()


def test_compile_cache_directory_and_off():
    home = os.path.expanduser("~")
    assert cache_dir({}) == cache_dir({"XDG_CACHE_HOME": ""}) and str(cache_dir({})) == f"{home}/.cache/miiii/jax"
    assert str(cache_dir({"XDG_CACHE_HOME": "/c"})) == "/c/miiii/jax"
    assert str(cache_dir({"JAX_COMPILATION_CACHE_DIR": "/j"})) == "/j"
    assert str(cache_dir({ENV: "/m", "JAX_COMPILATION_CACHE_DIR": "/j", "XDG_CACHE_HOME": "/c"})) == "/m"
    for off in ("off", "0", "OFF", "false", "none"):
        assert cache_dir({ENV: off, "JAX_COMPILATION_CACHE_DIR": "/j"}) is None


@SLOW
def test_compile_cache_receives_a_tiny_train_and_off_writes_nothing(tmp_path):
    def env(**kw):
        e = {k: v for k, v in os.environ.items() if k not in (ENV, "JAX_COMPILATION_CACHE_DIR")}
        return e | {"PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "xdg")} | kw

    res = subprocess.run([sys.executable, "-m", "miiii", "train", *TINY, "--run-dir", str(tmp_path / "run"),
                          "--no-progress", "--no-tensorboard"],
                         env=env(MIIII_COMPILE_CACHE=str(tmp_path / "cache")), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    assert len(list((tmp_path / "cache").iterdir())) >= 3  # init, the chunk, evaluation: all cached
    # off beats jax's own setting too; a jitted function in a process set up like the CLI writes nowhere
    code = ("from miiii.compile_cache import setup_compile_cache; setup_compile_cache(); import jax; "
            "print(jax.jit(lambda x: x * 2 + 1)(3.0))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=env(MIIII_COMPILE_CACHE="off", JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax")))
    assert res.returncode == 0 and "7.0" in res.stdout, res.stderr
    assert not (tmp_path / "jax").exists() and not (tmp_path / "xdg" / "miiii").exists()
