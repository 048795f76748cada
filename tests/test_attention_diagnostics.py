"""Verma (2026)'s two attention diagnostics as per-step metrics (metrics.head_similarity, metrics.entropy_spread),
against a numpy computation written from their definitions."""

import jax
import numpy as np

from miiii import apply_overrides, get_preset
from miiii import metrics as M
from miiii.runner import prepare
from miiii.train import make_trainer, task_data


def cosine_pairs(p):
    """numpy: the mean over head pairs (i < j) of the cosine of patterns p (b, H, q, k), flattened per head."""
    H = p.shape[1]
    v = [p[:, h].ravel().astype(np.float64) for h in range(H)]
    cos = [v[i] @ v[j] / np.linalg.norm(v[i]) / np.linalg.norm(v[j]) for i in range(H) for j in range(i + 1, H)]
    return np.mean(cos)


def entropies(p):
    """numpy: each head's entropy, averaged over samples and queries, with 0 log 0 = 0."""
    p = p.astype(np.float64)
    logs = np.log(np.where(p > 0, p, 1.0))
    return -(p * logs).sum(-1).mean(axis=(0, 2))


def ctx(patterns, weight=None):
    return M.StepContext(*([None] * 11), weight=weight, patterns=tuple(patterns))


def test_the_diagnostics_on_hand_patterns():
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(3), size=(5, 4, 3)).astype(np.float32)  # (b, H, q, k)
    b = rng.dirichlet(np.ones(3), size=(5, 4, 1)).astype(np.float32)  # a last-position-only layer
    got = float(M.head_similarity(ctx([a, b])))
    np.testing.assert_allclose(got, (cosine_pairs(a) + cosine_pairs(b)) / 2, rtol=1e-5)
    np.testing.assert_allclose(float(M.entropy_spread(ctx([a, b]))), np.concatenate([entropies(a), entropies(b)]).std(),
                               rtol=1e-5)
    same = np.repeat(a[:, :1], 4, axis=1)  # every head attends alike: similarity 1, no spread
    np.testing.assert_allclose(float(M.head_similarity(ctx([same]))), 1.0, rtol=1e-6)
    assert float(M.entropy_spread(ctx([same]))) < 1e-6
    onehot = np.zeros((5, 2, 3, 3), np.float32)  # head 0 on key 0, head 1 on key 1: orthogonal, both entropy 0
    onehot[:, 0, :, 0] = onehot[:, 1, :, 1] = 1
    assert float(M.head_similarity(ctx([onehot]))) == 0.0 and float(M.entropy_spread(ctx([onehot]))) == 0.0
    assert np.isnan(float(M.head_similarity(ctx([a[:, :1]]))))  # one head: no pair


def test_a_padded_batch_counts_its_real_rows_only():
    rng = np.random.default_rng(1)
    a = rng.dirichlet(np.ones(3), size=(6, 3, 3)).astype(np.float32)
    w = np.array([1, 1, 1, 1, 0, 0], np.float32)
    junk = a.copy()
    junk[4:] = rng.dirichlet(np.ones(3), size=(2, 3, 3))  # what the padded rows hold does not matter
    for fn in (M.head_similarity, M.entropy_spread):
        np.testing.assert_allclose(float(fn(ctx([junk], w))), float(fn(ctx([a[:4]]))), rtol=1e-5)


def test_the_trainer_records_them_from_its_own_forward():
    """Row 0 of a full-batch run is the initial parameters' patterns on the training set, computed here apart."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=3", "chunk=3"])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    state = trainer.init(cfg.train.seed)
    _, acts = trainer.apply(state.params, task.train.x)
    patterns = [np.asarray(acts[k]) for k in sorted(acts) if k.endswith("attn.hook_pattern")]
    assert patterns and patterns[0].shape[1] == cfg.model.n_heads > 1
    _, out = trainer.chunk(state, task_data(task), 3)
    m = jax.device_get(out.metrics)
    np.testing.assert_allclose(m["head_similarity"][0], np.mean([cosine_pairs(p) for p in patterns]), rtol=1e-4)
    np.testing.assert_allclose(m["entropy_spread"][0], np.concatenate([entropies(p) for p in patterns]).std(),
                               rtol=1e-4, atol=1e-6)
    assert m["head_similarity"][0] != m["head_similarity"][-1]  # they move as the run trains
