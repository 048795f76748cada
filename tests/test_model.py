"""The transformer family: exact parameter counts, shapes, an independent numpy forward, causality.

Outside test_jit_and_eager_agree the model runs jitted: op by op, every primitive is a compile of its own (the
gradient tests took 20-50 s eager, 4-12 s jitted), and init is cached per preset (one init per worker)."""

import functools
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import SLOW

from miiii.model import build_model, count_params
from miiii.presets import get_preset
from miiii.tasks import make_task


def build(preset, **model_changes):
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, **model_changes))
    task = make_task(cfg.task)
    return cfg, task, build_model(cfg.model, task)


def init(preset, **model_changes):
    model = get_preset(preset).model  # a change to the preset's own value is none: one init for both spellings
    return _init(preset, tuple(sorted((k, v) for k, v in model_changes.items() if getattr(model, k) != v)))


@functools.cache
def _init(preset, model_changes):
    cfg, task, model = build(preset, **dict(model_changes))
    params = jax.jit(model.init)({"params": jax.random.key(0)}, jnp.asarray(task.train.x[:2]))["params"]
    return cfg, task, model, params


def jitted(model):
    """model.apply, jitted (train and bucketed are Python branches)."""
    return jax.jit(model.apply, static_argnames=("train", "bucketed"))


def test_book_model_has_exactly_17760_parameters():
    _, task, model = build("addition")  # the shapes are the property: traced, nothing computed
    params = jax.eval_shape(model.init, {"params": jax.random.key(0)}, jnp.asarray(task.train.x[:2]))["params"]
    assert count_params(params) == 17_760
    assert params["W_E"].size == 448 and params["W_pos"].size == 416  # 14 x 32, 13 x 32
    for i in range(2):
        block = params[f"blocks_{i}"]
        assert count_params(block["attn"]) == 4_096  # Q, K, V, O: 4 x 32 x 32, no bias
        assert count_params(block["mlp"]) == 4_192  # 32x64 + 64 + 64x32 + 32
        assert count_params(block["ln1"]) + count_params(block["ln2"]) == 128
    assert count_params(params["ln_final"]) == 64
    assert "W_U" not in params  # the head is tied to the token embedding


def test_paper_model_shapes():
    cfg, task, model, params = init("miiii")
    d, H = 256, 4
    assert params["W_E"].shape == (114, d) and params["W_pos"].shape == (3, d)
    attn, mlp = params["blocks_0"]["attn"], params["blocks_0"]["mlp"]
    assert attn["W_Q"].shape == (H, d, d // H) and attn["W_O"].shape == (H, d // H, d)
    assert mlp["W_in"].shape == (d, 4 * d) and mlp["W_out"].shape == (4 * d, d)
    assert set(mlp) == {"W_in", "W_out"}  # no biases, no LayerNorm in the paper model
    assert params["W_U"].shape == (29, d, 109)  # classes >= 109 are never a label
    logits, acts = jitted(model)({"params": params}, jnp.asarray(task.valid.x[:5]))
    assert logits.shape == (5, 29, 109)
    assert acts["blocks.0.attn.hook_pattern"].shape == (5, H, 1, 3)  # from the last position
    assert acts["blocks.0.mlp.hook_post"].shape == (5, 1, 4 * d)
    np.testing.assert_allclose(acts["blocks.0.attn.hook_pattern"].sum(-1), 1.0, rtol=1e-5)


def numpy_paper_forward(params, x, xp=np):
    """The paper's model written out in numpy (or jax.numpy, xp=jnp) at every position: no last-position
    shortcut, no projection tables, the textbook order of operations."""
    p = jax.tree.map(xp.asarray, params)
    a, m = p["blocks_0"]["attn"], p["blocks_0"]["mlp"]
    h = p["W_E"][x] + p["W_pos"][None]  # (b, t, d)
    q = xp.einsum("btd,hde->bhte", h, a["W_Q"])
    k = xp.einsum("btd,hde->bhte", h, a["W_K"])
    v = xp.einsum("btd,hde->bhte", h, a["W_V"])
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    s = xp.exp(s - s.max(-1, keepdims=True))
    att = s / s.sum(-1, keepdims=True)
    h = h + xp.einsum("bhte,hed->btd", att @ v, a["W_O"])
    pre = h @ m["W_in"] + m.get("b_in", 0)
    h = h + xp.maximum(pre, 0) @ m["W_out"] + m.get("b_out", 0)
    return xp.einsum("bd,sdc->bsc", h[:, -1], p["W_U"])


@pytest.mark.parametrize("preset", ["miiii-tiny", "nanda-tiny"])
def test_last_position_readout_equals_full_numpy_forward(preset):
    _, task, model, params = init(preset)
    x = task.train.x[:16]
    apply = jitted(model)
    logits, _ = apply({"params": params}, jnp.asarray(x))
    valid = np.arange(task.d_out)[None, :] < task.n_classes[:, None]  # (S, C): the classes a slot can have
    want = numpy_paper_forward(params, x)
    np.testing.assert_allclose(np.asarray(logits)[:, valid], want[:, valid], rtol=2e-4, atol=2e-4)
    # the bucketed form the loss reads holds the same numbers, each bucket as wide as its widest task
    parts, _ = apply({"params": params}, jnp.asarray(x), bucketed=True)
    assert [a.shape[1:] for a in parts] == [(s1 - s0, w) for s0, s1, w in task.class_buckets]
    for (s0, s1, w), a in zip(task.class_buckets, parts, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(logits)[:, s0:s1, :w])


@pytest.mark.parametrize("preset", ["miiii-tiny", "nanda-tiny"])
def test_gradients_equal_the_textbook_forward(preset):
    """Block 0 gathers Q, K, V from W_E @ W tables and the final block runs at the last position only:
    the gradient of every parameter must still be the textbook model's."""
    _, task, model, params = init(preset)
    x = jnp.asarray(task.train.x[:32])
    valid = np.arange(task.d_out)[None, :] < task.n_classes[:, None]  # classes >= n_classes are never labels
    r = jax.random.normal(jax.random.key(1), jax.eval_shape(model.apply, {"params": params}, x)[0].shape) * valid
    ours = jax.jit(jax.grad(lambda p: (model.apply({"params": p}, x)[0] * r).sum()))(params)
    want = jax.jit(jax.grad(lambda p: (numpy_paper_forward(p, x, jnp) * r).sum()))(params)
    for (path, g), w in zip(jax.tree_util.tree_flatten_with_path(ours)[0], jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * float(jnp.abs(w).max()), err_msg=str(path))


def textbook_book_forward(params, x, causal=True, xp=jnp):
    """The book's AdditionTransformer written out (pre-LN blocks, single causal head, FFN with bias, final LN,
    head tied to W_E): every position through every matrix, no tables."""
    def ln(h, q):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / xp.sqrt(var + 1e-5) * q["scale"] + q["bias"]

    t = x.shape[1]
    h = params["W_E"][x] + params["W_pos"][:t][None]
    for i in range(2):
        b = params[f"blocks_{i}"]
        a, m, z = b["attn"], b["mlp"], ln(h, b["ln1"])
        q, k, v = (xp.einsum("btd,hde->bhte", z, a[n]) for n in ("W_Q", "W_K", "W_V"))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
        if causal:
            s = xp.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
        s = xp.exp(s - s.max(-1, keepdims=True))
        h = h + xp.einsum("bhte,hed->btd", (s / s.sum(-1, keepdims=True)) @ v, a["W_O"])
        z = ln(h, b["ln2"])
        h = h + xp.maximum(z @ m["W_in"] + m["b_in"], 0) @ m["W_out"] + m["b_out"]
    return ln(h, params["ln_final"]) @ params["W_E"].T


def logits_and_grad(f, params, r):
    """f(params) and the gradient of (f(params) * r).sum(): one jitted program."""
    def both(p):
        logits, pullback = jax.vjp(f, p)
        return logits, pullback(r)[0]
    return jax.jit(both)(params)


@pytest.mark.parametrize("causal", [True, False])
def test_book_model_logits_and_gradients_equal_the_textbook_forward(causal):
    """Block 0 gathers Q, K, V from a table of LN(W_E[v] + W_pos[i]) @ W over all (token, position) pairs: the
    logits and every parameter's gradient must be the textbook model's."""
    _, task, model, params = init("addition-tiny", causal=causal)
    x = jnp.asarray(task.train.x[:32])
    r = jax.random.normal(jax.random.key(1), jax.eval_shape(model.apply, {"params": params}, x)[0].shape)
    logits, ours = logits_and_grad(lambda p: model.apply({"params": p}, x)[0], params, r)
    want_logits, want = logits_and_grad(lambda p: textbook_book_forward(p, x, causal), params, r)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-4, atol=1e-4)
    for (path, g), w in zip(jax.tree_util.tree_flatten_with_path(ours)[0], jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4 * float(jnp.abs(w).max()), err_msg=str(path))


def test_jit_and_eager_agree():
    _, task, model, params = init("addition-tiny")
    x = jnp.asarray(task.train.x[:8])
    eager = model.apply({"params": params}, x)[0]
    jitted = jax.jit(lambda p, x: model.apply({"params": p}, x)[0])(params, x)
    np.testing.assert_allclose(eager, jitted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_causality(causal):
    """With the causal mask the output at position i does not depend on any later token."""
    _, task, model, params = init("addition-tiny", causal=causal)
    # perturb a later token and look at earlier positions' logits
    x = np.array(task.train.x[:4])
    y = x.copy()
    y[:, 7:] = (y[:, 7:] + 3) % 10
    apply = jitted(model)
    lx = np.asarray(apply({"params": params}, jnp.asarray(x))[0])
    ly = np.asarray(apply({"params": params}, jnp.asarray(y))[0])
    same_before = np.array_equal(lx[:, :7], ly[:, :7])
    assert same_before == causal
    assert not np.array_equal(lx[:, 7:], ly[:, 7:])


@SLOW
def test_causal_gradient_from_later_positions_is_zero():
    _, task, model, params = init("addition-tiny")
    x = jnp.asarray(task.train.x[:2])

    def early_logits_sum(w_pos):  # positions 0..5 must not see W_pos rows 6..
        logits, _ = model.apply({"params": dict(params, W_pos=w_pos)}, x)
        return logits[:, :6].sum()

    g = jax.grad(early_logits_sum)(params["W_pos"])
    assert float(jnp.abs(g[6:]).max()) == 0.0 and float(jnp.abs(g[:6]).max()) > 0.0


def test_dropout_only_in_training_mode():
    _, task, model, params = init("miiii-tiny")
    x = jnp.asarray(task.train.x[:8])
    apply = jitted(model)
    e1 = apply({"params": params}, x, train=False)[0]
    e2 = apply({"params": params}, x, train=False)[0]
    t1 = apply({"params": params}, x, train=True, rngs={"dropout": jax.random.key(1)})[0]
    t2 = apply({"params": params}, x, train=True, rngs={"dropout": jax.random.key(2)})[0]
    np.testing.assert_array_equal(e1, e2)
    assert not np.allclose(t1, t2)


def test_he_init_scale():
    _, _, _, params = init("miiii")
    w = np.asarray(params["blocks_0"]["mlp"]["W_in"])
    assert abs(w.std() - np.sqrt(2 / 256)) < 0.01 * np.sqrt(2 / 256) * 5
    assert abs(w.mean()) < 1e-3
