"""⊥Grad (Prieto et al. 2025, "Grokking at the edge of numerical stability") as an optax `GradientTransformation`.

Per parameter array w with update g: the component of g along w is removed, and what is left is rescaled to g's norm,

    g_perp = g - (<w, g> / (<w, w> + eps)) w,        g_out = g_perp * ||g|| / (||g_perp|| + eps),

so the optimizer that follows never sees the direction that only scales the weights up (their naive loss
minimisation). eps = 1e-30, as their `OrthoGrad` (which wraps the optimizer: the projection acts on the gradient it
is given). The dot products are elementwise sums, not matmuls, so train.precision (TF32 on a GPU at `default`) never
reaches them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def orthogonal_to(w, g, eps: float = 1e-30):
    """g without its component along w, rescaled to g's norm (one array)."""
    w = w.astype(g.dtype)
    perp = g - (jnp.sum(w * g) / (jnp.sum(w * w) + eps)) * w
    return perp * (jnp.sqrt(jnp.sum(g * g)) / (jnp.sqrt(jnp.sum(perp * perp)) + eps))


def orthograd(eps: float = 1e-30) -> optax.GradientTransformation:
    """Each update made orthogonal to its parameter array and rescaled to its own norm; needs `params` (optax passes
    them to `update(updates, state, params)`). No state."""

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("orthograd needs the parameters: call update(updates, state, params)")
        return jax.tree.map(lambda g, w: orthogonal_to(w, g, eps), updates, params), state

    return optax.GradientTransformation(init_fn, update_fn)
