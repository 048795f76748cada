"""Grokfast against loops written like the reference (ironjr/grokfast), and lambda = 0 == AdamW."""

from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from miiii.grokfast import grokfast_ema, grokfast_ma


def gradient_sequence(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return [{"w": rng.normal(size=(3, 4)).astype(np.float32), "b": rng.normal(size=(4,)).astype(np.float32)}
            for _ in range(n)]


def reference_ema(grads_seq, alpha, lamb, init):
    """`gradfilter_ema` from the reference, on dicts of numpy arrays (init="zeros": original miiii)."""
    ema, out = None, []
    for g in grads_seq:
        if ema is None:
            ema = {k: (v.copy() if init == "first" else np.zeros_like(v)) for k, v in g.items()}
        ema = {k: ema[k] * alpha + g[k] * (1 - alpha) for k in g}
        out.append({k: g[k] + ema[k] * lamb for k in g})
    return out


def reference_ma(grads_seq, window, lamb, warmup=True):
    hist, out = {k: deque(maxlen=window) for k in grads_seq[0]}, []
    for g in grads_seq:
        new = {}
        for k, v in g.items():
            hist[k].append(v)
            if not warmup or len(hist[k]) == window:
                new[k] = v + sum(hist[k]) / len(hist[k]) * lamb
            else:
                new[k] = v
        out.append(new)
    return out


def run_transform(tx, grads_seq):
    state = tx.init(jax.tree.map(jnp.zeros_like, grads_seq[0]))
    update = jax.jit(tx.update)
    out = []
    for g in grads_seq:
        u, state = update(jax.tree.map(jnp.asarray, g), state)
        out.append(jax.tree.map(np.asarray, u))
    return out


@pytest.mark.parametrize("init", ["first", "zeros"])
def test_ema_matches_reference(init):
    seq = gradient_sequence()
    ours = run_transform(grokfast_ema(0.98, 2.0, init=init), seq)
    ref = reference_ema(seq, 0.98, 2.0, init)
    for a, b in zip(ours, ref, strict=True):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_ema_inits_differ_at_first_step():
    seq = gradient_sequence(1)
    first = run_transform(grokfast_ema(0.9, 1.0, init="first"), seq)[0]["w"]
    zeros = run_transform(grokfast_ema(0.9, 1.0, init="zeros"), seq)[0]["w"]
    np.testing.assert_allclose(first, 2 * seq[0]["w"], rtol=1e-6)  # ema_1 = g_1
    np.testing.assert_allclose(zeros, 1.1 * seq[0]["w"], rtol=1e-6)  # ema_1 = 0.1 g_1


@pytest.mark.parametrize("warmup", [True, False])
def test_ma_matches_reference(warmup):
    seq = gradient_sequence(9)
    ours = run_transform(grokfast_ma(window=4, lamb=5.0, warmup=warmup), seq)
    ref = reference_ma(seq, 4, 5.0, warmup)
    for a, b in zip(ours, ref, strict=True):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [lambda: grokfast_ema(0.98, 0.0), lambda: grokfast_ma(3, 0.0)])
def test_lambda_zero_is_exactly_adamw(make):
    seq = gradient_sequence(10)
    adamw = optax.adamw(1e-2, b1=0.9, b2=0.98, weight_decay=1.0)
    chained = optax.chain(make(), adamw)
    params = jax.tree.map(jnp.asarray, gradient_sequence(1, seed=5)[0])
    pa, pb = params, params
    sa, sb = adamw.init(params), chained.init(params)
    for g in seq:
        g = jax.tree.map(jnp.asarray, g)
        ua, sa = adamw.update(g, sa, pa)
        ub, sb = chained.update(g, sb, pb)
        pa, pb = optax.apply_updates(pa, ua), optax.apply_updates(pb, ub)
    for k in pa:
        np.testing.assert_array_equal(np.asarray(pa[k]), np.asarray(pb[k]))


def test_grokfast_amplifies_the_slow_component():
    """A constant gradient plus alternating noise: the filter keeps the constant, boosted by 1 + lamb."""
    seq = [{"w": np.array([1.0 + (-1) ** t], np.float32)} for t in range(400)]
    out = run_transform(grokfast_ema(0.98, 2.0), seq)
    slow = np.mean([o["w"][0] for o in out[-100:]])
    assert abs(slow - 3.0) < 0.05
