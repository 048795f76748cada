"""A GPU box without a GPU: a fake `nvidia-smi` on PATH (printing a chosen GPU and driver) drives `make install-gpu`'s
choice of CUDA build, the refusal to train on the CPU where a GPU is visible, and `doctor`; the paper study's plan is
held to the bytes small CPU runs really write, and refuses a plan that does not fit before anything is written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import jax
import pytest
from _runhelp import ROOT, SLOW, tree_digest

from miiii import doctor, gpu
from miiii.config import ConfigError

H100 = "NVIDIA H100 80GB HBM3"


def fake_smi(folder: Path, driver: str | None, name: str = H100) -> Path:
    """A `nvidia-smi` in `folder` that answers the one query (GPU name, driver) or, driver None, fails as on a box
    whose driver is not loaded."""
    folder.mkdir(exist_ok=True)
    exe = folder / "nvidia-smi"
    body = f'echo "{name}, {driver}"' if driver else 'echo "NVIDIA-SMI has failed" >&2; exit 9'
    exe.write_text(f'#!/bin/sh\ncase "$*" in *--query-gpu=name,driver_version*) {body};; *) exit 3;; esac\n')
    exe.chmod(0o755)
    return folder


def env_with(folder: Path | None, **extra) -> dict:
    """The environment of a CLI process on a simulated box: CUDA_VISIBLE_DEVICES empty, so that JAX falls back to the
    CPU there as it does on a box without the CUDA build, also where this suite runs on a real GPU."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    if folder is not None:
        env["PATH"] = f"{folder}{os.pathsep}{env['PATH']}"
    return env | {"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", **extra}


def run(args: list[str], env: dict, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def one_error(res: subprocess.CompletedProcess, says: str) -> str:
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and says in errors[0], (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr
    return errors[0]


# ---------------------------------------------------------------- the driver bands


@pytest.mark.parametrize(("driver", "cuda"), [("580.65.06", 13), ("595.1", 13), ("579.99", 12), ("570.133.20", 12),
                                              ("550.54.15", 12), ("535.247.01", 12), ("525.60.13", 12)])
def test_each_driver_band_picks_its_cuda_build(driver, cuda):
    assert gpu.choose_cuda([gpu.Gpu(H100, driver)]) == cuda


def test_the_oldest_driver_of_several_gpus_decides_and_an_override_wins():
    both = [gpu.Gpu(H100, "580.1"), gpu.Gpu("NVIDIA A100", "535.1")]
    assert gpu.choose_cuda(both) == 12
    assert gpu.choose_cuda([gpu.Gpu(H100, "470.1")], override=13) == 13
    with pytest.raises(ConfigError, match="CUDA must be 12 or 13"):
        gpu.choose_cuda([], override=11)


@pytest.mark.parametrize("gpus", [[], [gpu.Gpu(H100, "520.61.05")], [gpu.Gpu(H100, "470.256.02")]],
                         ids=["no driver", "520", "470"])
def test_an_old_or_missing_driver_is_one_error_naming_what_was_found_and_needed(gpus):
    with pytest.raises(ConfigError) as e:
        gpu.choose_cuda(gpus)
    msg = str(e.value)
    assert ">= 525" in msg and ">= 580" in msg
    assert (gpus[0].driver in msg) if gpus else "no NVIDIA driver found" in msg


def test_the_query_reads_every_gpu_and_a_failing_nvidia_smi_lists_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'ok', '550.54.15')}{os.pathsep}{os.environ['PATH']}")
    assert gpu.visible_gpus() == [gpu.Gpu(H100, "550.54.15")]
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'broken', None)}{os.pathsep}{os.environ['PATH']}")
    assert gpu.visible_gpus() == []


@pytest.mark.parametrize(("driver", "cuda"), [("580.65.06", 13), ("550.54.15", 12)])
def test_install_gpu_dry_run_prints_the_pip_command_of_its_band_and_installs_nothing(tmp_path, driver, cuda):
    res = run(["-m", "miiii.gpu", "--dry-run"], env_with(fake_smi(tmp_path, driver)))
    assert res.returncode == 0, res.stderr
    pip = [ln for ln in res.stdout.splitlines() if ln.startswith("$ ") and " install " in ln]
    assert len(pip) == 1 and pip[0].endswith(f"-m pip install jax[cuda{cuda}]=={version('jax')}"), res.stdout
    assert "nothing installed" in res.stdout and driver in res.stdout


def test_install_gpu_with_an_old_driver_exits_2_before_pip(tmp_path):
    res = run(["-m", "miiii.gpu", "--dry-run"], env_with(fake_smi(tmp_path, "470.256.02")))
    assert "470.256.02" in one_error(res, "too old") and "$ " not in res.stdout


def test_install_gpu_removes_the_other_builds_plugins_first(monkeypatch):
    have = {"jax": "0.10.2", "jax-cuda13-plugin": "0.10.2", "jax-cuda13-pjrt": "0.10.2"}
    monkeypatch.setattr(gpu, "installed", have.get)
    cmds = gpu.install_commands(12, python="py")
    assert cmds == [["py", "-m", "pip", "uninstall", "-y", "jax-cuda13-plugin", "jax-cuda13-pjrt"],
                    ["py", "-m", "pip", "install", "jax[cuda12]==0.10.2"]]


def test_make_install_gpu_passes_cuda_and_dry_run_through():
    res = subprocess.run(["make", "-n", "install-gpu", "CUDA=12", "DRY_RUN=1"], capture_output=True, text=True,
                         cwd=ROOT)
    assert re.search(r"-m miiii\.gpu +--cuda 12 +--dry-run", res.stdout), res.stdout


def test_make_gpu_check_dry_run_prints_every_command_in_order():
    res = subprocess.run(["make", "-s", "gpu-check", "DRY_RUN=1"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "MAKEFLAGS": ""})
    lines = [ln.removeprefix("gpu-check: ") for ln in res.stdout.splitlines() if ln.startswith("gpu-check: ")]
    assert res.returncode == 0 and [ln.split()[1] for ln in lines] == ["doctor", "test", "bench", "paper", "paper"]
    assert "--torch-device cuda" in lines[2] and "bench-gpu.json" in lines[2]
    assert "SEEDS=3" in lines[3] and "results/paper'" in lines[3]
    assert "VARIANT=original" in lines[4] and "results/paper-original" in lines[4]


# ---------------------------------------------------------------- no silent CPU on a GPU box

# test_ops.py's TINY (no recording, one chunk program): the persistent cache holds its programs once either file
# has run, so a CLI process here loads them instead of compiling
TINY = ["--preset", "nanda-tiny", "--steps", "40", "--set", "chunk=20", "--set", "eval_every=3", "--set",
        "record.acts=", "--set", "record.params=", "--set", "ckpt.keep_log=0", "--no-progress", "--no-tensorboard"]


def test_train_and_sweep_refuse_a_cpu_backend_where_a_gpu_is_visible(tmp_path):
    env = env_with(fake_smi(tmp_path / "bin", "550.54.15"))
    res = run(["-m", "miiii", "train", *TINY, "--run-dir", str(tmp_path / "run")], env, cwd=tmp_path)
    line = one_error(res, "make install-gpu")
    assert "NVIDIA H100" in line and "--device cpu" in line and not (tmp_path / "run").exists()
    res = run(["-m", "miiii", "sweep", *TINY, "--seeds", "2", "--out", str(tmp_path / "sweep")], env, cwd=tmp_path)
    one_error(res, "make install-gpu")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("how", ["JAX_PLATFORMS=cpu", "--device cpu"])
def test_the_cpu_asked_for_trains_on_a_gpu_box(tmp_path, how):
    extra = {"JAX_PLATFORMS": "cpu"} if how.startswith("JAX") else {}
    flag = ["--device", "cpu"] if how.startswith("--") else []
    res = run(["-m", "miiii", "train", *TINY, *flag, "--run-dir", str(tmp_path / "run")],
              env_with(fake_smi(tmp_path / "bin", "550.54.15"), **extra), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["backend"] == "cpu"


def test_a_machine_without_nvidia_smi_sees_no_change(monkeypatch):
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    import jax

    before = jax.config.jax_platforms
    assert gpu.visible_gpus() == []
    assert gpu.check_backend("auto") is None  # no GPU listed: nothing to refuse
    assert jax.config.jax_platforms == before  # and nothing pinned


# ---------------------------------------------------------------- doctor


ON_CPU = pytest.mark.skipif(jax.default_backend() != "cpu", reason="simulates a box whose JAX runs on the CPU, in "
                            "this process: here it runs on a GPU (the CLI tests simulate it in a subprocess instead)")


def _well(monkeypatch):
    monkeypatch.setattr(doctor, "TESTED", {k: version(k) for k in doctor.TESTED})
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)


@ON_CPU
def test_doctor_reports_and_exits_0_when_all_is_well(monkeypatch, capsys):
    _well(monkeypatch)
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    assert doctor.doctor() == 0
    out = capsys.readouterr().out
    for fact in ("python:", f"jax: {version('jax')}", "jaxlib:", "CUDA plugins:", "backend: cpu", "device 0:",
                 "compile cache:", "free disk at"):
        assert fact in out, out
    assert out.rstrip().endswith("all is well")


@ON_CPU
def test_doctor_exits_1_naming_a_cpu_backend_on_a_gpu_box_and_both_plugins(tmp_path, monkeypatch, capsys):
    _well(monkeypatch)
    monkeypatch.setenv("PATH", f"{fake_smi(tmp_path, '550.54.15')}{os.pathsep}{os.environ['PATH']}")
    real = doctor.installed
    monkeypatch.setattr(doctor, "installed", lambda n: "0.10.2" if "cuda" in n else real(n))
    assert doctor.doctor() == 1
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3 (driver 550.54.15)" in out
    assert "JAX runs on the CPU" in out and "both CUDA 12 and CUDA 13" in out


def test_doctor_names_an_untested_version(monkeypatch, capsys):
    _well(monkeypatch)
    monkeypatch.setattr(gpu.shutil, "which", lambda name: None)
    monkeypatch.setitem(doctor.TESTED, "optax", "0.0.1")
    assert doctor.doctor() == 1
    assert f"optax {version('optax')} is not the tested 0.0.1" in capsys.readouterr().out


def test_the_readme_names_the_tested_versions():
    text = (ROOT / "README.md").read_text()
    assert f"jax and jaxlib {doctor.TESTED['jax']}" in text and doctor.TESTED["jax"] == doctor.TESTED["jaxlib"]
    for name in ("flax", "optax", "orbax-checkpoint"):
        assert f"{name} {doctor.TESTED[name]}" in text


# ---------------------------------------------------------------- the paper's plan

SMALL = ["--smoke", "--roles", "nanda", "miiii", "--seeds", "2", "--steps", "40", "--no-progress", "--set", "p=13",
         "--set", "task.valid_size=30", "--set", "model.d_model=32", "--set", "model.d_mlp=64", "--set",
         "train.chunk=20"]


def _bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())


@pytest.mark.study  # make test-studies: four small runs trained end to end, kept out of make test's 10 minutes
def test_the_plan_holds_to_the_bytes_small_runs_write(tmp_path, capsys):
    from experiments.paper import study

    assert study.main([*SMALL, "--out", str(tmp_path), "--train-only"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^  (\w+) +seed (\d) \(recorded\) +recording +([\d.,]+) MiB +checkpoints +([\d.,]+) MiB +"
                      r"metrics, params +([\d.,]+) MiB", out, re.M)
    assert len(rows) == 4, out
    for role, k, acts, ckpt, rest in rows:
        run_dir = tmp_path / "runs" / (role if k == "0" else f"{role}-s{k}")
        planned = {"acts": float(acts) * 2**20, "ckpt": float(ckpt) * 2**20}
        slack = 0.15 * 2**20  # the MiB's rounding, npy headers, acts/index.json, orbax's metadata
        assert abs(_bytes(run_dir / "acts") - planned["acts"]) < slack, run_dir
        # an upper bound: the newest ckpt.keep and the log-spaced ones may share steps
        assert 0.6 * planned["ckpt"] < _bytes(run_dir / "ckpt") < planned["ckpt"] + slack, run_dir
        written = _bytes(run_dir) - _bytes(run_dir / "acts") - _bytes(run_dir / "ckpt")
        assert 0.3 * float(rest) * 2**20 < written < 2 * float(rest) * 2**20 + 0.1 * 2**20, (run_dir, written, rest)
    assert re.search(r"wall time: about [\d.]+ min of training on cpu", out)
    assert re.search(r"miiii +recorded run +device memory +[\d.]+ MiB +[\d,]+ steps/s", out)


@SLOW
def test_paper_plan_prints_and_writes_nothing(tmp_path, capsys):
    from experiments.paper import study

    assert study.main([*SMALL, "--out", str(tmp_path / "out"), "--plan"]) == 0
    assert "disk:" in capsys.readouterr().out and not (tmp_path / "out").exists()


@pytest.mark.parametrize("short", ["disk", "memory"])
def test_a_plan_that_does_not_fit_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, short):
    from experiments.paper import resources, study

    if short == "disk":  # refused on its bytes alone, before any program is compiled and timed
        monkeypatch.setattr(resources, "free_bytes", lambda path: 1000)
        monkeypatch.setattr(resources, "measure", lambda *a, **k: pytest.fail("timed a plan the disk cannot hold"))
    else:
        monkeypatch.setattr(resources, "device_memory", lambda: (1000, "fake device memory"))
    for name in ("train_run", "run_sweep"):
        monkeypatch.setattr(study, name, lambda *a, **k: pytest.fail("trained a plan that does not fit"))
    before = tree_digest(tmp_path)
    # one role is enough to refuse: the memory case compiles and times its programs first (two roles: twice that)
    assert study.main([*SMALL, "--roles", "nanda", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "does not fit" in err and ("disk" if short == "disk" else "memory") in err
    assert tree_digest(tmp_path) == before and not (tmp_path / "out").exists()
