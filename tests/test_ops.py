"""Operations: the persistent compilation cache."""

from __future__ import annotations

import os
import subprocess
import sys

from _runhelp import ROOT

from miiii.compile_cache import ENV, cache_dir

# a small program
TINY = ["--preset", "nanda-tiny", "--steps", "40", "--set", "chunk=20", "--set", "eval_every=3",
        "--set", "record.acts=", "--set", "record.params="]


def test_compile_cache_directory_and_off():
    home = os.path.expanduser("~")
    assert cache_dir({}) == cache_dir({"XDG_CACHE_HOME": ""}) and str(cache_dir({})) == f"{home}/.cache/miiii/jax"
    assert str(cache_dir({"XDG_CACHE_HOME": "/c"})) == "/c/miiii/jax"
    assert str(cache_dir({"JAX_COMPILATION_CACHE_DIR": "/j"})) == "/j"
    assert str(cache_dir({ENV: "/m", "JAX_COMPILATION_CACHE_DIR": "/j", "XDG_CACHE_HOME": "/c"})) == "/m"
    for off in ("off", "0", "OFF", "false", "none"):
        assert cache_dir({ENV: off, "JAX_COMPILATION_CACHE_DIR": "/j"}) is None


def test_compile_cache_receives_a_tiny_train_and_off_writes_nothing(tmp_path):
    def env(**kw):
        e = {k: v for k, v in os.environ.items() if k not in (ENV, "JAX_COMPILATION_CACHE_DIR")}
        return e | {"PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "xdg")} | kw

    res = subprocess.run([sys.executable, "-m", "miiii", "train", *TINY, "--run-dir", str(tmp_path / "run"),
                          "--no-progress"],
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
