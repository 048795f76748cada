"""The bench's arithmetic: the matmul FLOPs of one forward pass per sample (equal to what jax traces:
tests/test_bench.py) and a measured f32 matmul peak, the roofline the achieved GFLOP/s are a fraction of."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp


def paper_fwd_flops(cfg, task) -> float:
    """Matmul FLOPs of one forward pass per sample, as miiii computes it: block 0's Q, K, V are gathered from
    |vocab|-row tables (W_E @ W, a per-step cost of 2 * 3 * |vocab| * d * d, under 0.2 % here and left out),
    the final block runs at the last position, each bucket of tasks is as wide as its widest task."""
    m, t = cfg.model, task.n_ctx
    d, dm = m.d_model, m.mlp_dim
    last = 2 * 2 * t * d + 2 * d * d + 2 * 2 * d * dm  # scores + AV, W_O, MLP at the last position
    unembed = 2 * d * sum((s1 - s0) * w for s0, s1, w in task.class_buckets)
    return last + unembed


def book_fwd_flops(cfg, task) -> float:
    """Matmul FLOPs of one forward pass per sample of the book model: every position in every block, except block
    0's Q, K, V, gathered from a table of LN(W_E[v] + W_pos[i]) @ W (a per-step cost, left out)."""
    m, t = cfg.model, task.n_ctx
    d, dm = m.d_model, m.mlp_dim
    per_layer = t * (4 * 2 * d * d + 2 * 2 * d * dm) + 2 * 2 * t * t * d
    return m.n_layers * per_layer - t * 3 * 2 * d * d + 2 * t * d * task.d_vocab


def matmul_peak(n: int = 1024, reps: int = 20) -> float:
    """Measured f32 matmul GFLOP/s on the default device (the roofline the fractions refer to)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda a: a @ a)
    f(a).block_until_ready()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = f(a)
    out.block_until_ready()
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9
