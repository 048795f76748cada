"""The LLC estimator (miiii/llc.py) against theory and devinterp's definition: a regular model's λ̂ is half its
parameter count (a linear Gaussian model, where the tempered posterior's mean loss is known in closed form), a
singular direction lowers it, and `python -m miiii llc RUN` writes a series over the kept steps."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import SLOW

from miiii.cli import main
from miiii.llc import LLCConfig, make_estimator, nbeta


def _linear(n=4000, d=6, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ rng.normal(size=d) + rng.normal(size=n)).astype(np.float32)
    w_star = np.linalg.lstsq(x, y, rcond=None)[0].astype(np.float32)
    return jnp.asarray(x), jnp.asarray(y), {"w": jnp.asarray(w_star)}


def _estimate(loss_fn, w0, x, y, cfg):
    out = jax.jit(make_estimator(loss_fn, cfg, len(x)))(w0, x, y, jax.random.key(0))
    return float(out["llc"]), out


def test_a_regular_model_has_half_its_parameters():
    """Gaussian linear regression at its least-squares point: L = mean (y - x w)^2 / 2, Hessian x^T x / n ~ I; the
    localised posterior's mean of nβ (L - L(w*)) is d/2 * nβ / (nβ + γ) up to SGLD's O(ε nβ) bias: 3 for d = 6."""
    x, y, w0 = _linear()

    def loss_fn(p, xb, yb):
        loss = 0.5 * jnp.mean((yb - xb @ p["w"]) ** 2)
        return loss, loss[None]

    cfg = LLCConfig(lr=2e-5, gamma=1.0, chains=4, draws=3000, burnin=500, batch=0)
    llc, out = _estimate(loss_fn, w0, x, y, cfg)
    nb = nbeta(cfg, len(x))
    assert nb == pytest.approx(4000 / np.log(4000))
    assert llc == pytest.approx(3.0 * nb / (nb + 1.0), rel=0.1)
    assert np.asarray(out["llc_tasks"])[0] == pytest.approx(llc, rel=1e-5)  # one task: its λ̂ is the model's
    assert out["loss_trace"].shape == (3000,)


def test_a_degenerate_direction_counts_half():
    """y = (a + b) x: two parameters, one effective (a - b is free): λ = 1/2, where y = a x + b x^2 has 1."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=4000).astype(np.float32))
    y = jnp.asarray((x + rng.normal(size=4000)).astype(np.float32))
    slope = float((x @ y) / (x @ x))
    cfg = LLCConfig(lr=5e-5, gamma=1.0, chains=8, draws=3000, burnin=1000, batch=0)  # 8 chains: the spread is ~0.1

    def summed(p, xb, yb):
        loss = 0.5 * jnp.mean((yb - (p["a"] + p["b"]) * xb) ** 2)
        return loss, loss[None]

    def regular(p, xb, yb):
        loss = 0.5 * jnp.mean((yb - p["a"] * xb - p["b"] * xb ** 2) ** 2)
        return loss, loss[None]

    llc_summed, _ = _estimate(summed, {"a": jnp.float32(slope / 2), "b": jnp.float32(slope / 2)}, x, y, cfg)
    a, b = np.linalg.lstsq(np.stack([x, x ** 2], 1), np.asarray(y), rcond=None)[0]  # the joint least-squares point
    llc_regular, _ = _estimate(regular, {"a": jnp.float32(a), "b": jnp.float32(b)}, x, y, cfg)
    assert llc_regular == pytest.approx(1.0, rel=0.15)
    assert llc_summed == pytest.approx(0.5, rel=0.15)


@SLOW
def test_llc_command_writes_a_series_over_the_kept_steps(tmp_path, capsys):
    run = tmp_path / "r"
    assert main(["train", "--preset", "miiii-tiny", "--steps", "20", "--set", "chunk=20", "--set", "ckpt.every=20",
                 "--set", "batch_size=64", "--no-progress", "--run-dir", str(run)]) == 0
    assert main(["llc", str(run), "--steps", "0", "20", "--chains", "2", "--draws", "20", "--batch", "128"]) == 0
    report = json.loads((run / "llc.json").read_text())
    assert report["steps"] == [0, 20] and len(report["llc"]) == 2 and np.isfinite(report["llc"]).all()
    assert np.asarray(report["llc_tasks"]).shape == (2, len(report["task_names"]))
    assert np.asarray(report["llc_chains"]).shape == (2, 2) and np.asarray(report["loss_trace"]).shape == (2, 20)
    assert report["nbeta"] == pytest.approx(128 / np.log(128))
    from miiii.page import page
    from miiii.plots import fig_llc
    from miiii.run import load_run

    assert [p.suffix for p in fig_llc(load_run(run), tmp_path / "fig")] == [".png", ".pdf"]
    assert "Local learning coefficient" in page(run, tmp_path / "p.html", with_film=False).read_text()
    assert main(["llc", str(run), "--steps", "21"]) == 2  # past the run: not kept
    assert "kept no checkpoint" in capsys.readouterr().err
