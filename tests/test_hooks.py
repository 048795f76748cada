"""Hook points, run_with_cache and run_with_hooks (miiii/hooks.py): TransformerLens names and shapes, the same
logits as the training forward on every input, every cached activation equal to a forward written out in numpy,
and hooks that really replace what the pass goes on with."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import finished_run

from miiii.hooks import HookedModel
from miiii.interventions import zero_ablate
from miiii.presets import get_preset
from miiii.tasks import make_task
from miiii.train import make_trainer


@functools.cache  # per worker: the tests below read (never change) a preset's model and parameters
def setup(preset: str, seed: int = 0):
    cfg = get_preset(preset)
    task = make_task(cfg.task)
    trainer = make_trainer(cfg, task)
    return cfg, task, trainer, jax.jit(trainer.init)(seed).params  # the seed traced: one program for every seed


def numpy_forward(params, x, cfg) -> dict:
    """Every activation of this family written out in float64 numpy, each by its TransformerLens name."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    acts = {}

    def ln(h, w, name):
        c = h - h.mean(-1, keepdims=True)
        acts[f"{name}.hook_scale"] = scale = np.sqrt((c**2).mean(-1, keepdims=True) + 1e-5)
        acts[f"{name}.hook_normalized"] = out = c / scale  # before the weight and bias (TransformerLens 3)
        return out * w["scale"] + w["bias"]

    t = x.shape[1]
    acts["hook_embed"] = h = p["W_E"][x]
    if cfg.pos_embed:
        acts["hook_pos_embed"] = np.broadcast_to(p["W_pos"][:t], h.shape)
        h = h + p["W_pos"][:t]
    for i in range(cfg.n_layers):
        b, w = f"blocks.{i}", p[f"blocks_{i}"]
        acts[f"{b}.hook_resid_pre"] = h
        a_in = ln(h, w["ln1"], f"{b}.ln1") if cfg.layer_norm else h
        a = w["attn"]
        q, k, v = (np.einsum("btd,hde->bthe", a_in, a[n]) for n in ("W_Q", "W_K", "W_V"))
        s = np.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
        if cfg.causal:
            s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
        e = np.exp(s - s.max(-1, keepdims=True))
        pattern = e / e.sum(-1, keepdims=True)
        z = np.einsum("bhqk,bkhe->bqhe", pattern, v)
        acts |= {f"{b}.attn.hook_q": q, f"{b}.attn.hook_k": k, f"{b}.attn.hook_v": v, f"{b}.attn.hook_z": z,
                 f"{b}.attn.hook_attn_scores": s, f"{b}.attn.hook_pattern": pattern}
        acts[f"{b}.hook_attn_out"] = attn_out = np.einsum("bthe,hed->btd", z, a["W_O"])
        acts[f"{b}.hook_resid_mid"] = h = h + attn_out
        m_in = ln(h, w["ln2"], f"{b}.ln2") if cfg.layer_norm else h
        m = w["mlp"]
        acts[f"{b}.mlp.hook_pre"] = pre = m_in @ m["W_in"] + m.get("b_in", 0)
        acts[f"{b}.mlp.hook_post"] = post = np.maximum(pre, 0)
        acts[f"{b}.hook_mlp_out"] = out = post @ m["W_out"] + m.get("b_out", 0)
        acts[f"{b}.hook_resid_post"] = h = h + out
    if cfg.layer_norm:
        h = ln(h, p["ln_final"], "ln_final")
    acts["logits"] = h @ p["W_E"].T if cfg.tie_head else np.einsum("bd,sdc->bsc", h[:, -1], p["W_U"])
    return acts


@pytest.mark.parametrize("preset", ["nanda-tiny", "miiii-tiny", "addition-tiny"])
def test_every_hook_point_by_its_transformerlens_name_and_shape(preset):
    cfg, task, _, params = setup(preset)
    model = HookedModel.of(cfg, task)
    x = task.valid.x[:5]
    _, cache = model.run_with_cache(params, x)
    b, t = x.shape
    m = cfg.model
    H, e, d, f = m.n_heads, m.d_head, m.d_model, m.mlp_dim
    want = {"hook_embed": (b, t, d), "hook_pos_embed": (b, t, d)}
    for i in range(m.n_layers):
        B = f"blocks.{i}"
        want |= {f"{B}.hook_resid_pre": (b, t, d), f"{B}.hook_resid_mid": (b, t, d), f"{B}.hook_resid_post": (b, t, d),
                 f"{B}.hook_attn_out": (b, t, d), f"{B}.hook_mlp_out": (b, t, d), f"{B}.mlp.hook_pre": (b, t, f),
                 f"{B}.mlp.hook_post": (b, t, f), f"{B}.attn.hook_attn_scores": (b, H, t, t),
                 f"{B}.attn.hook_pattern": (b, H, t, t)}
        want |= {f"{B}.attn.{n}": (b, t, H, e) for n in ("hook_q", "hook_k", "hook_v", "hook_z")}
        if m.layer_norm:
            want |= {f"{B}.{ln}.{n}": (b, t, d if n == "hook_normalized" else 1) for ln in ("ln1", "ln2")
                     for n in ("hook_scale", "hook_normalized")}
    if m.layer_norm:
        want |= {"ln_final.hook_scale": (b, t, 1), "ln_final.hook_normalized": (b, t, d)}
    want["logits"] = (b, t, task.d_out) if m.readout == "all" else (b, task.n_slots, task.d_out)
    # the TransformerLens shapes of the points TransformerLens has; a point added to hooks.py gets its own test
    assert set(want) <= set(model.hook_names()) and {k: tuple(cache[k].shape) for k in want} == want
    assert list(cache) == list(model.hook_names())  # in the order the pass reaches them


@pytest.mark.parametrize("preset", ["nanda-tiny", "addition-tiny"])
def test_every_hook_point_is_reached_once_and_a_hook_replaces_it(preset):
    """Read from the registry (hook_names): each point's hook runs exactly once per pass, sees what run_with_cache
    caches (batch first), and what it returns is what the pass goes on with: the same value keeps the logits."""
    cfg, task, _, params = setup(preset)
    model = HookedModel.of(cfg, task)
    x = task.valid.x[:3]
    logits, cache = model.run_with_cache(params, x)
    for name in model.hook_names():
        seen = []
        kept = model.run_with_hooks(params, x, {name: _noting(seen)})
        assert [n for n, _ in seen] == [name] and cache[name].shape[0] == x.shape[0], name
        np.testing.assert_array_equal(seen[0][1], cache[name], err_msg=name)
        np.testing.assert_array_equal(kept, logits, err_msg=name)


def _noting(seen: list):
    """A hook that notes (name, value) and changes nothing."""
    return lambda v, name: seen.append((name, v)) or v


@pytest.mark.parametrize("preset", ["nanda-tiny", "miiii-tiny", "addition-tiny", "reversal-tiny"])
def test_logits_and_every_activation_equal_the_numpy_forward_and_the_training_path(preset):
    """On every input of the grid tasks (a 512-sample slice of the sequence tasks): the hooked pass's logits equal
    the training path's (with its last-position, table and bucket shortcuts) and every cached activation equals
    the numpy forward; the training path's own recorded activations equal the hooked ones where both exist."""
    cfg, task, trainer, params = setup(preset, seed=3)
    model = HookedModel.of(cfg, task)
    grid = not cfg.task.is_sequence
    x = np.concatenate([task.train.x, task.valid.x, task.test.x]) if grid else task.valid.x[:512]
    logits, cache = jax.jit(model.run_with_cache)(params, x)
    fast, fast_acts = trainer.apply(params, x)
    valid = model.class_mask()[None] if cfg.model.readout == "last" else True
    scale = float(np.abs(fast).max())
    np.testing.assert_allclose(np.where(valid, logits, 0), np.where(valid, fast, 0), rtol=1e-5, atol=1e-5 * scale)
    if cfg.model.readout == "last":  # classes past a task's bucket are 0, as in training
        assert not np.asarray(logits)[:, ~model.class_mask()].any()
    want = numpy_forward(params, x, cfg.model)
    assert set(want) <= set(cache)  # the numpy forward writes out the points it knows; a new one has its own test
    for name in want:
        v, w = cache[name], want[name] if name != "logits" else np.where(valid, want[name], 0)
        tol = 2e-5 * max(float(np.abs(w[np.isfinite(w)]).max()), 1.0)
        np.testing.assert_allclose(np.asarray(v, np.float64), w, rtol=1e-4, atol=tol, err_msg=name)
    for name, v in fast_acts.items():  # the last block of readout "last" runs at the last position only
        if name in cache and name != "logits":
            ours = np.asarray(cache[name])
            if name == "hook_pos_embed":  # the training path keeps it unbroadcast, (t, d)
                ours = ours[0]
            elif cfg.model.readout == "last" and v.shape != ours.shape:
                ours = ours[:, :, -1:] if name.endswith("hook_pattern") else ours[:, -1:]
            np.testing.assert_allclose(v, ours, rtol=1e-4, atol=1e-5 * max(float(np.abs(ours).max()), 1.0),
                                       err_msg=name)


def test_a_finished_run_ablated():
    """On a finished nanda-tiny run: zero-ablating every MLP neuron raises the loss far above the trained one;
    ablating none leaves the logits bit-identical; run_with_cache caches only what it is asked for."""
    run = finished_run("nanda-tiny")
    x, y = run.inputs("valid"), run.labels("valid")[:, 0]
    model = run.model

    def loss(logits):
        return float(-jax.nn.log_softmax(logits[:, 0])[np.arange(len(y)), y].mean())

    plain, cache = jax.jit(model.run_with_cache, static_argnames="names")(run.params, x, names=("logits",))
    assert list(cache) == ["logits"] and np.array_equal(cache["logits"], plain)
    neurons = "blocks.0.mlp.hook_post"
    none = jax.jit(lambda p, x: model.run_with_hooks(p, x, {neurons: zero_ablate([])}))(run.params, x)
    assert np.array_equal(none, plain) and np.array_equal(jax.jit(model.run_with_hooks)(run.params, x, {}), plain)
    ablated, seen = model.run_with_hooks(run.params, x, {neurons: zero_ablate()}, names=(neurons,))
    assert not np.asarray(seen[neurons]).any()  # the cache holds the value after the hook
    assert loss(plain) < 0.1 and loss(ablated) > 1.0, (loss(plain), loss(ablated))
    one = model.run_with_hooks(run.params, x, {neurons: zero_ablate([5])})
    assert not np.array_equal(one, plain) and loss(one) < loss(ablated)


def test_patching_the_residual_stream_carries_the_answer():
    """Patching input A's final residual stream into input B: B's logits become A's (the unembedding reads only
    it), and patching at no position leaves B's logits alone."""
    run = finished_run("nanda-tiny")
    x = run.inputs("valid")[:8]
    model = run.model
    logits, cache = model.run_with_cache(run.params, x, names=("blocks.0.hook_resid_post",))
    source = jnp.roll(cache["blocks.0.hook_resid_post"], 1, axis=0)  # input i gets input i-1's stream
    patched = model.run_with_hooks(run.params, x, {"blocks.0.hook_resid_post": lambda v, name: source})
    np.testing.assert_allclose(patched, np.roll(logits, 1, axis=0), rtol=1e-6, atol=1e-6)


def test_jit_and_vmap_over_seeds():
    cfg, task, trainer, _ = setup("miiii-tiny")
    model = HookedModel.of(cfg, task)
    params = jax.jit(jax.vmap(trainer.init))(jnp.arange(2))[0]  # two seeds stacked (jitted: one compile)
    x = jnp.asarray(task.valid.x[:16])
    names = ("blocks.0.attn.hook_pattern", "blocks.0.mlp.hook_post")
    batched = jax.jit(jax.vmap(lambda p: model.run_with_cache(p, x, names)))(params)
    for s in range(2):
        one = model.run_with_cache(jax.tree.map(lambda a, s=s: a[s], params), x, names)
        for a, b in zip(jax.tree.leaves(one), jax.tree.leaves(batched), strict=True):
            np.testing.assert_allclose(b[s], a, rtol=1e-5, atol=1e-6)
    hooked = jax.jit(jax.vmap(lambda p: model.run_with_hooks(p, x, {names[1]: zero_ablate()})))(params)
    assert hooked.shape == (2, 16, task.n_slots, task.d_out) and not np.array_equal(hooked, batched[0])


def test_unknown_hook_point_is_named():
    cfg, task, _, params = setup("nanda-tiny")
    model = HookedModel.of(cfg, task)
    with pytest.raises(KeyError, match="blocks.0.mlp.hook_postt.*this model has: hook_embed"):
        model.run_with_cache(params, task.valid.x[:2], names=("blocks.0.mlp.hook_postt",))
    with pytest.raises(KeyError, match="ln1"):  # the paper model has no LayerNorm
        model.run_with_hooks(params, task.valid.x[:2], {"blocks.0.ln1.hook_normalized": zero_ablate()})
