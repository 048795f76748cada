"""Named interventions: hook functions for `HookedModel.run_with_hooks` (hooks.py).

Each function returns a hook `fn(value, name) -> value` that is pure jax (jit- and vmap-safe):

    zero_ablate(index, axis)          neurons (mlp.hook_post, axis -1) or heads (attn.hook_z, axis 2) set to 0
    mean_ablate(mean, index, axis)    ... set to their mean over a reference batch (`batch_mean` of a cache)
    patch(source, index, axis)        activation patching: the value from another input's cache
    remove_grid_frequencies(p, freqs) the 2-D Fourier components (k0, k1) of an activation over the (x0, x1) grid
                                      removed (the batch must be the whole grid in `tasks.grid_inputs` order)
    project_over_inputs(basis, keep)  an activation projected onto (keep=True) or off (False) directions over
                                      the input axis: Nanda et al.'s restricted and excluded logits

Usage, e.g. the loss with neurons 3 and 7 gone:
    logits = model.run_with_hooks(params, x, {"blocks.0.mlp.hook_post": zero_ablate([3, 7])})
"""

from __future__ import annotations

from collections.abc import Iterable

import jax
import jax.numpy as jnp
import numpy as np


def _select(value, index, axis: int) -> jax.Array:
    """Bool mask broadcastable to `value`: True at `index` along `axis` (all entries when index is None)."""
    axis = axis % value.ndim
    n = value.shape[axis]
    hit = np.ones(n, bool) if index is None else np.isin(np.arange(n), np.asarray(index, np.int64))
    shape = [1] * value.ndim
    shape[axis] = n
    return jnp.asarray(hit.reshape(shape))


def zero_ablate(index: Iterable[int] | None = None, axis: int = -1):
    """Entries `index` along `axis` set to zero (None: all). An empty index leaves the value bit-identical."""
    def hook(value, name):
        return jnp.where(_select(value, index, axis), jnp.zeros_like(value), value)
    return hook


def batch_mean(cache_value) -> jax.Array:
    """The mean over the batch axis (axis 0) of a cached activation: the reference of `mean_ablate`."""
    return jnp.asarray(cache_value).mean(0, keepdims=True)


def mean_ablate(mean, index: Iterable[int] | None = None, axis: int = -1):
    """Entries `index` along `axis` replaced by `mean` (broadcast over the batch; `batch_mean` of a cache)."""
    def hook(value, name):
        return jnp.where(_select(value, index, axis), jnp.broadcast_to(mean, value.shape), value)
    return hook


def patch(source, index: Iterable[int] | None = None, axis: int = -1):
    """Activation patching: entries `index` along `axis` taken from `source` (the same hook point's value on
    other inputs, e.g. a corrupted prompt's cache; broadcast against the value)."""
    def hook(value, name):
        return jnp.where(_select(value, index, axis), jnp.broadcast_to(source, value.shape), value)
    return hook


def frequency_mask(p: int, freqs: Iterable[tuple[int, int]]) -> np.ndarray:
    """(p, p) bool over the 2-D spectrum (k1 rows, k0 columns): True at each (k0, k1) in `freqs` and at its
    conjugate (-k0, -k1) mod p, so that removing them leaves a real signal."""
    m = np.zeros((p, p), bool)
    for k0, k1 in freqs:
        m[k1 % p, k0 % p] = m[-k1 % p, -k0 % p] = True
    return m


def axis_frequencies(p: int, k: int) -> list[tuple[int, int]]:
    """Frequency k of either digit: every 2-D component whose x0 or x1 frequency is +-k (k >= 1), i.e. every
    term with a cos/sin(2 pi k x0 / p) or cos/sin(2 pi k x1 / p) factor."""
    ks = {k % p, -k % p}
    return [(a, b) for a in range(p) for b in range(p) if a in ks or b in ks]


def remove_grid_frequencies(p: int, freqs: Iterable[tuple[int, int]]):
    """The 2-D Fourier components `freqs` ((k0, k1) pairs, with conjugates) of an activation removed over the
    (x0, x1) grid, independently at every other index (position, neuron). The batch must be the whole grid in
    grid order (row i = (x0, x1) = (i % p, i // p), `tasks.grid_inputs`)."""
    return remove_spectrum(p, frequency_mask(p, list(freqs)))


def remove_spectrum(p: int, mask):
    """`remove_grid_frequencies` by a (p, p) bool mask of the components removed (k1 rows, k0 columns; may be
    traced, e.g. one mask per step of a `lax.map`)."""
    keep = ~jnp.asarray(mask)

    def hook(value, name):
        if value.shape[0] != p * p:
            raise ValueError(f"{name}: remove_grid_frequencies needs the whole {p} x {p} grid as the batch, "
                             f"got {value.shape[0]} inputs")
        grid = value.reshape(p, p, *value.shape[1:])  # (x1, x0, ...)
        spec = jnp.fft.fft2(grid, axes=(0, 1))
        spec = spec * keep.reshape(p, p, *([1] * (value.ndim - 1)))
        return jnp.fft.ifft2(spec, axes=(0, 1)).real.astype(value.dtype).reshape(value.shape)
    return hook


def project_over_inputs(basis, keep: bool):
    """`basis` (K, N) orthonormal directions over the N inputs of the batch. keep=True: the value's mean over
    inputs plus its component along the basis (minus that component's mean), Nanda et al.'s restricted logits;
    keep=False: the value minus its component along the basis, their excluded logits (`analysis.sum_basis`
    gives cos/sin w_k (x0 + x1) of the key frequencies)."""
    B = jnp.asarray(basis, jnp.float32)

    def hook(value, name):
        proj = jnp.einsum("kn,k...->n...", B, jnp.einsum("kn,n...->k...", B, value))
        if not keep:
            return value - proj
        return value.mean(0, keepdims=True) + proj - proj.mean(0, keepdims=True)
    return hook


# ---------------------------------------------------------------- which frequencies each task needs


def slot_losses(logits, labels, n_classes) -> jax.Array:
    """Cross-entropy per logit row (task): logits (b, S, C), labels (b, S), n_classes (S,) -> (S,); classes a
    task does not have are left out of its softmax, as in training."""
    valid = jnp.arange(logits.shape[-1])[None, None, :] < jnp.asarray(n_classes)[None, :, None]
    logp = jax.nn.log_softmax(jnp.where(valid, logits, -jnp.inf), axis=-1)
    return -jnp.take_along_axis(logp, jnp.asarray(labels)[..., None], axis=-1)[..., 0].mean(0)


def frequency_ablation(run, name: str = "blocks.0.mlp.hook_post", params=None) -> dict:
    """Each task's loss over the whole grid when frequency k (`axis_frequencies`: every 2-D component with a
    +-k in x0 or x1) is removed from activation `name`, for k = 1 .. p // 2, beside the unablated loss.

    Returns {"k": (F,), "base": (S,), "loss": (F, S), "tasks": names}; `run` is a loaded grid run
    (run.Run), `params` default its final parameters. One jitted `lax.map` over the frequencies."""
    p = run.config.task.p
    x, y = run.inputs("grid"), run.labels("grid")
    ks = np.arange(1, p // 2 + 1)
    masks = np.stack([frequency_mask(p, axis_frequencies(p, int(k))) for k in ks])
    n_classes = run.task.n_classes
    params = run.params if params is None else params
    model = run.model

    @jax.jit
    def losses(params, masks):
        base = slot_losses(model.run_with_hooks(params, x, {}), y, n_classes)
        ablated = jax.lax.map(lambda m: slot_losses(
            model.run_with_hooks(params, x, {name: remove_spectrum(p, m)}), y, n_classes), masks)
        return base, ablated

    base, ablated = losses(params, masks)
    return {"k": ks, "base": np.asarray(base), "loss": np.asarray(ablated), "tasks": list(run.task.task_names)}
