"""optim.optimizer = muon (its entry in optimizers.OPTIMIZERS): which parameter arrays get Muon and which AdamW (a
table over the models' trees), each side checked by what it does, a short run, and a run with every option of
issue 29 that resumes bit-identical."""

import re
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import Crash, assert_same_run, assert_trains, crash_at, train_chunks

from miiii.config import OptimConfig, apply_overrides
from miiii.errors import ConfigError, did_you_mean
from miiii.optim import make_optimizer
from miiii.optimizers import OPTIMIZERS, muon_labels
from miiii.presets import get_preset
from miiii.runner import prepare, resume_run, train_run
from miiii.train import make_trainer
from miiii.validate import validate


def params_of(preset, shapes=False):
    """The preset's initial parameters; `shapes`: their shapes alone (traced, nothing computed), all the labels read."""
    cfg = get_preset(preset)
    init = make_trainer(cfg, prepare(cfg)).init
    return jax.eval_shape(init, 0).params if shapes else init(0).params


def flat(tree):
    return {jax.tree_util.keystr(p, simple=True, separator="."): v
            for p, v in jax.tree_util.tree_leaves_with_path(tree)}


def test_which_arrays_get_muon_nanda():
    assert flat(muon_labels(params_of("nanda-tiny", shapes=True))) == {
        "W_E": "adamw", "W_pos": "adamw", "W_U": "adamw",
        "blocks_0.attn.W_Q": "muon", "blocks_0.attn.W_K": "muon", "blocks_0.attn.W_V": "muon",
        "blocks_0.attn.W_O": "muon", "blocks_0.mlp.W_in": "muon", "blocks_0.mlp.W_out": "muon",
        "blocks_0.mlp.b_in": "adamw", "blocks_0.mlp.b_out": "adamw",
    }


def test_which_arrays_get_muon_book_model():
    """Two layers, LayerNorms, a tied head (no W_U): every LayerNorm array and the embeddings are AdamW's."""
    labels = flat(muon_labels(params_of("addition-tiny", shapes=True)))
    muon = {k for k, v in labels.items() if v == "muon"}
    assert muon == {f"blocks_{i}.{m}" for i in range(2) for m in
                    ("attn.W_Q", "attn.W_K", "attn.W_V", "attn.W_O", "mlp.W_in", "mlp.W_out")}
    assert {k for k in labels if "ln" in k} and all(labels[k] == "adamw" for k in labels if "ln" in k)


def first_update(cfg, params, grads):
    tx = make_optimizer(cfg, 100)
    return tx.update(grads, tx.init(params), params)[0]


def test_adamw_side_is_plain_adamw_and_muon_side_orthogonalises_the_fused_matrix():
    params = params_of("nanda-tiny")
    rng = np.random.default_rng(0)
    grads = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
    cfg = OptimConfig(lr=1e-2, weight_decay=0.0, warmup_steps=0)
    mu = flat(first_update(replace(cfg, optimizer="muon"), params, grads))
    ad = flat(first_update(cfg, params, grads))
    labels = flat(muon_labels(params))
    for k, label in labels.items():
        if label == "adamw":  # the very AdamW of optimizer=adamw
            np.testing.assert_array_equal(mu[k], ad[k], err_msg=k)
        else:
            assert not np.allclose(mu[k], ad[k]), k
    # W_Q (heads, d_model, d_head) is one d_model x (heads * d_head) matrix to Muon: its update is -lr * 0.2 *
    # sqrt(max(fan_in, fan_out)) * (Newton-Schulz's approximation of U V^T of that matrix of the gradient)
    g = np.asarray(grads["blocks_0"]["attn"]["W_Q"]).transpose(1, 0, 2).reshape(64, -1)
    u = mu["blocks_0.attn.W_Q"].transpose(1, 0, 2).reshape(64, -1)
    left, _, right = np.linalg.svd(g, full_matrices=False)
    polar = left @ right
    cos = -np.sum(u * polar) / (np.linalg.norm(u) * np.linalg.norm(polar))
    assert cos > 0.95, cos
    sv = np.linalg.svd(-u / (1e-2 * 0.2 * np.sqrt(64)), compute_uv=False)
    # Keller Jordan's quintic Newton-Schulz leaves singular values in ~[0.7, 1.2], the smallest ones of a square
    # gradient lower
    assert np.median(sv) > 0.6 and sv.max() < 1.3, sv
    # not per head: each head's own polar factor is a different direction
    heads = np.concatenate([np.linalg.svd(gh, full_matrices=False)[0] @ np.linalg.svd(gh, full_matrices=False)[2]
                            for gh in np.asarray(grads["blocks_0"]["attn"]["W_Q"])], axis=1)
    assert -np.sum(u * heads) / (np.linalg.norm(u) * np.linalg.norm(heads)) < cos - 0.05


def test_bad_optimizer_is_one_config_error_with_the_choices():
    hint = re.escape(did_you_mean("sgdx", OPTIMIZERS))  # '' unless the registry holds a name close to it
    with pytest.raises(ConfigError, match=rf"optim.optimizer = 'sgdx'{hint}: choose one of {', '.join(OPTIMIZERS)}$"):
        validate(apply_overrides(get_preset("nanda-tiny"), ["optimizer=sgdx"]))
    with pytest.raises(ConfigError, match="did you mean 'adamw'"):
        validate(apply_overrides(get_preset("nanda-tiny"), ["optimizer=adam"]))


def test_nanda_tiny_trains_with_muon():
    assert_trains(*train_chunks("nanda-tiny", ["optimizer=muon"], [100, 100, 100]))


@pytest.mark.study  # make test-studies: an end-to-end run kept out of make test's 10 minutes
def test_every_new_option_at_once_checkpoints_and_resumes_bit_identical(tmp_path):
    """Muon's partitioned state (optax MaskedNodes), ⊥Grad, StableMax and the float64 loss through orbax: a run that
    dies after a checkpoint and is resumed ends as the run that never stopped."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["optimizer=muon", "orthograd=true", "loss=stablemax",
                                                     "loss_dtype=float64", "steps=40", "chunk=10", "ckpt.every=10"])
    train_run(cfg, tmp_path / "ref", progress=False, tensorboard=False)
    with pytest.raises(Crash):
        train_run(cfg, tmp_path / "run", progress=False, tensorboard=False, on_chunk=crash_at(20))
    resume_run(tmp_path / "run", progress=False, tensorboard=False)
    assert_same_run(tmp_path / "ref", tmp_path / "run")
