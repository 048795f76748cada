"""Grokfast (Lee et al. 2024) as optax `GradientTransformation`s, chained before `optax.adamw`.

The gradient is split into a slow component (boosted) and a fast one: `g_hat = g + lamb * filter(g)`.
With `lamb = 0` the update is `g` itself, so the chain is exactly the optimizer that follows.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax


class GrokfastEmaState(NamedTuple):
    ema: optax.Updates  # EMA of the raw gradients
    started: jax.Array  # bool: has the EMA seen a gradient (for init="first")


def grokfast_ema(alpha: float = 0.98, lamb: float = 2.0, init: str = "first") -> optax.GradientTransformation:
    """`ema_t = alpha * ema_{t-1} + (1 - alpha) * g_t`; `g_hat_t = g_t + lamb * ema_t`.

    init="first": the reference (ironjr/grokfast `gradfilter_ema`) creates the EMA from the first
    gradient, so `ema_1 = g_1`. init="zeros": the original miiii code starts from zeros, so
    `ema_1 = (1 - alpha) g_1`. The difference fades as alpha^t.
    """
    if init not in ("first", "zeros"):
        raise ValueError(f"init must be 'first' or 'zeros', got {init!r}")

    def init_fn(params):
        return GrokfastEmaState(ema=optax.tree.zeros_like(params), started=jnp.asarray(init == "zeros"))

    def update_fn(updates, state, params=None):
        del params
        prev = jax.tree.map(lambda e, g: jnp.where(state.started, e, g), state.ema, updates)
        ema = jax.tree.map(lambda e, g: alpha * e + (1 - alpha) * g, prev, updates)
        new = jax.tree.map(lambda g, e: g + lamb * e, updates, ema)
        return new, GrokfastEmaState(ema=ema, started=jnp.asarray(True))

    return optax.GradientTransformation(init_fn, update_fn)


class GrokfastMaState(NamedTuple):
    history: optax.Updates  # (window, *shape) ring buffer of the last gradients
    n_seen: jax.Array  # int32: gradients seen so far (not called `count`: see optax.tree.get)


def grokfast_ma(window: int = 100, lamb: float = 5.0, warmup: bool = True) -> optax.GradientTransformation:
    """`g_hat_t = g_t + lamb * mean(g_{t-window+1..t})` (the reference's `gradfilter_ma`, filter "mean").

    With warmup (the reference's default) nothing is added until the window is full.
    """

    def init_fn(params):
        hist = jax.tree.map(lambda p: jnp.zeros((window, *p.shape), p.dtype), params)
        return GrokfastMaState(history=hist, n_seen=jnp.zeros((), jnp.int32))

    def update_fn(updates, state, params=None):
        del params
        slot = state.n_seen % window
        hist = jax.tree.map(lambda h, g: h.at[slot].set(g), state.history, updates)
        n_seen = state.n_seen + 1
        filled = jnp.minimum(n_seen, window)
        on = (n_seen >= window) if warmup else jnp.asarray(True)
        new = jax.tree.map(lambda g, h: g + jnp.where(on, lamb, 0.0) * h.sum(0) / filled, updates, hist)
        return new, GrokfastMaState(history=hist, n_seen=n_seen)

    return optax.GradientTransformation(init_fn, update_fn)
