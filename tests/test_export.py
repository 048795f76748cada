"""export-adder: the numpy module is the trained model (same logits), adds correctly, and needs no jax."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import load_module

from experiments.adderboard import score as adderboard
from miiii.cli import main as cli_main
from miiii.config import ConfigError, apply_overrides
from miiii.export import export_adder
from miiii.presets import get_preset
from miiii.rundir import flatten_params
from miiii.tasks import make_task
from miiii.train import make_trainer
from miiii.validate import validate


def _untrained_run(path, overrides):
    cfg = apply_overrides(get_preset("addition"), ["n_train=64", "n_valid=32", "steps=1"] + overrides)
    task = make_task(validate(cfg).task)
    trainer = make_trainer(cfg, task)
    params = jax.jit(trainer.init, static_argnums=0)(1).params  # one compile, not one per operation
    # a tie's scale and angle away from 1 and 0, every norm's scale away from ones (a shared norm's copies must match)
    ones = lambda a: a.ndim == 1 and bool(np.all(np.asarray(a) == 1))  # noqa: E731
    params = jax.tree.map(lambda a: a + 0.7 if a.ndim == 0 else a * (1 + 0.5 * np.sin(np.arange(a.size))) if ones(a)
                          else a, params)
    path.mkdir(parents=True)
    (path / "config.json").write_text(cfg.to_json())
    np.savez(path / "params.npz", **flatten_params(params))
    return task, trainer, params


@pytest.mark.parametrize("overrides", [
    [],  # the book's model
    ["n_digits=4", "model.n_ctx=0", "model.n_layers=1", "model.n_heads=2", "model.layer_norm=false",
     "model.tie_head=false", "model.mlp_bias=false", "model.pos_embed=false"],
    # the small-decoder options on the book's format: grouped key/value heads, RoPE, SwiGLU
    ["model.n_heads=4", "model.n_kv_heads=2", "model.rope_theta=100", "model.mlp_act=swiglu", "model.pos_embed=false"],
    # AdderBoard's format and a Qwen3-style decoder: head size 4 > d 3, RMSNorm, QK-norm, the arc embedding
    ["task.name=board", "n_digits=3", "model.n_ctx=0", "model.d_model=3", "model.n_heads=2", "model.n_kv_heads=1",
     "model.head_dim=4", "model.d_mlp=3", "model.norm=rms", "model.norm_eps=1e-6", "model.qk_norm=true",
     "model.mlp_act=swiglu", "model.rope_theta=3", "model.pos_embed=false", "model.embed=arc",
     "model.mlp_bias=false"],
    # tied weights (the 62-parameter entry's K = V and O = Q^T), and the scaled and rotated transforms
    ["task.name=board", "n_digits=3", "model.n_ctx=0", "model.d_model=3", "model.n_heads=1", "model.head_dim=4",
     "model.d_mlp=2", "model.norm=rms", "model.qk_norm=true", "model.mlp_act=swiglu", "model.rope_theta=3",
     "model.pos_embed=false", "model.embed=arc", "model.mlp_bias=false",
     "model.ties=attn.W_V=scale(attn.W_K),attn.W_O=T(attn.W_Q),mlp.W_gate=rot(mlp.W_in),mlp.W_out=T(mlp.W_in)"],
    # the 36-parameter entry's ties: K = Q turned, V = Q, O = Q^T, down = up turned then transposed (Trot)
    ["task.name=board", "n_digits=3", "model.n_ctx=0", "model.d_model=3", "model.n_heads=1", "model.head_dim=4",
     "model.d_mlp=2", "model.norm=rms", "model.qk_norm=true", "model.mlp_act=swiglu", "model.rope_theta=3",
     "model.pos_embed=false", "model.embed=arc", "model.mlp_bias=false",
     "model.ties=attn.W_K=rot(attn.W_Q),attn.W_V=attn.W_Q,attn.W_O=T(attn.W_Q),mlp.W_out=Trot(mlp.W_in)",
     "model.norm_groups=ln1+ln2+ln_final,q_norm+k_norm"],
    # the 41-parameter entry's ties: Q = K turned in its first plane alone (from -0.5), V = K, O = K^T
    ["task.name=board", "n_digits=3", "model.n_ctx=0", "model.d_model=3", "model.n_heads=1", "model.head_dim=4",
     "model.d_mlp=2", "model.norm=rms", "model.qk_norm=true", "model.mlp_act=swiglu", "model.rope_theta=3",
     "model.pos_embed=false", "model.embed=arc", "model.mlp_bias=false",
     "model.ties=attn.W_Q=rot1(attn.W_K),attn.W_V=attn.W_K,attn.W_O=T(attn.W_K)", "model.tie_angle=-0.5",
     "model.norm_groups=ln1+ln2+ln_final,q_norm+k_norm"],
    # the 41 with entries pinned (model.pins: the gauge of experiments/adderboard/gauge.py), stored free; two blocks
    ["task.name=board", "n_digits=3", "model.n_ctx=0", "model.d_model=3", "model.n_heads=1", "model.head_dim=4",
     "model.n_layers=2",
     "model.d_mlp=2", "model.norm=rms", "model.qk_norm=true", "model.mlp_act=swiglu", "model.rope_theta=3",
     "model.pos_embed=false", "model.embed=arc", "model.mlp_bias=false",
     "model.ties=attn.W_K=rot(attn.W_Q),attn.W_V=attn.W_Q,attn.W_O=T(attn.W_Q)",
     "model.norm_groups=ln1+ln2+ln_final,q_norm+k_norm",
     "model.pins=W_E_arc[0]=40,shared_norm_0.scale[2]=50,mlp.W_in[2]=10,attn.W_Q[0,2,0]=0,attn.W_Q[0,2,3]=0"],
    # norms shared by name: the block and head RMSNorms one scale, the QK-norms another
    ["task.name=board", "n_digits=3", "model.n_ctx=0", "model.d_model=3", "model.n_heads=1", "model.head_dim=4",
     "model.d_mlp=2", "model.norm=rms", "model.qk_norm=true", "model.mlp_act=swiglu", "model.rope_theta=3",
     "model.pos_embed=false", "model.embed=arc", "model.mlp_bias=false",
     "model.norm_groups=ln1+ln2+ln_final,q_norm+k_norm"],
])
def test_numpy_forward_equals_jax(tmp_path, overrides):
    """The exported forward pass reproduces the Flax model's logits at every position."""
    task, trainer, params = _untrained_run(tmp_path / "run", overrides)
    meta = export_adder(tmp_path / "run", tmp_path / "adder.py")
    mod = load_module(tmp_path / "adder.py")
    model, metadata = mod.build_model()
    assert metadata == meta and set(metadata) >= {"name", "author", "params", "architecture", "tricks"}
    assert metadata["params"] == sum(int(np.size(v)) for v in flatten_params(params).values())
    x = task.valid.x[:4]
    want = np.asarray(trainer.apply(params, jnp.asarray(x))[0])
    got = np.stack([mod.forward(model, row) for row in x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_export_refuses_other_tasks(tmp_path, capsys):
    run = tmp_path / "rev"
    run.mkdir()
    (run / "config.json").write_text(get_preset("reversal").to_json())
    with pytest.raises(ConfigError, match="addition"):
        export_adder(run, tmp_path / "x.py")
    assert cli_main(["export-adder", str(run), str(tmp_path / "x.py")]) == 2
    assert capsys.readouterr().err.startswith("error:")
    assert not (tmp_path / "x.py").exists()


DATA = Path(__file__).parent / "data" / "book_adder"  # config.json + params.npz of `make train-addition`


@pytest.fixture(scope="module")
def trained_adder(tmp_path_factory):
    """The book's 3-digit adder (17,760 parameters, trained with the `addition` preset), exported.

    Training one takes minutes to hours on a CPU (the grokking plateau), so its final parameters are
    kept in tests/data; the export and the decoding are what this file tests.
    """
    path = tmp_path_factory.mktemp("adder") / "book_adder3.py"
    meta = export_adder(DATA, path)
    return path, meta


def test_exported_adder_adds(trained_adder):
    """`add` on random pairs agrees with Python's + (the trained model, decoded greedily in numpy)."""
    path, meta = trained_adder
    mod = load_module(path)
    model, metadata = mod.build_model()
    assert metadata["params"] == meta["params"] == 17_760
    rng = np.random.default_rng(7)
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, 1000, (300, 2))]
    pairs += [(123, 456), (999, 1), (0, 0), (999, 999), (500, 500), (111, 222)]  # the book's edge cases
    wrong = [(a, b, mod.add(model, a, b)) for a, b in pairs if mod.add(model, a, b) != a + b]
    assert len(wrong) <= 1, wrong
    with pytest.raises(ValueError):
        mod.add(model, 1000, 1)  # outside the model's three digits


def test_exported_module_needs_no_jax(trained_adder):
    path, _ = trained_adder
    code = ("import sys; sys.modules['jax'] = None; sys.modules['flax'] = None; sys.modules['miiii'] = None\n"
            f"sys.path.insert(0, {str(path.parent)!r}); import {path.stem} as m\n"
            "model, meta = m.build_model(); print(m.add(model, 12, 34), meta['params'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["46", "17760"]


def test_adderboard_scores_the_exported_file(trained_adder, capsys):
    """python -m experiments.adderboard: random pairs and the edge cases through the exported file, as AdderBoard."""
    path, _ = trained_adder
    assert adderboard.main([str(path), "--pairs", "20"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["params"] == 17_760 and r["n_digits"] == 3 and r["pairs"] == 20 and r["edge_cases"] == 6
    assert r["cases"] == 26 and r["passed"] == round(r["accuracy"] * 26) and r["accuracy"] >= 0.9
    assert len(r["failed_edge_cases"]) <= 1 and r["seed"] == 2025
