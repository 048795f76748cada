"""train.loss = stablemax and train.loss_dtype = float64 against numpy float64 transcriptions of their formulas, their
gradients, and short runs that train with them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import assert_trains, train_chunks

from miiii.config import apply_overrides
from miiii.errors import ConfigError
from miiii.presets import get_preset
from miiii.train import loss_and_metrics, stablemax_s
from miiii.validate import validate

# a float64 request that jax truncates to float32 warns: here it fails the test (it would be a float32 loss)
pytestmark = pytest.mark.filterwarnings("error:Explicitly requested dtype")


def np_s(x):
    """s(x) = x + 1 for x >= 0, 1 / (1 - x) for x < 0 (Prieto et al. 2025), float64, one branch per element."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    out[x >= 0] = x[x >= 0] + 1
    out[x < 0] = 1 / (1 - x[x < 0])
    return out


def np_ds(x):
    """s'(x): 1 for x >= 0, 1 / (1 - x)^2 for x < 0."""
    x = np.asarray(x, np.float64)
    return np.where(x >= 0, 1.0, 1 / np.square(1 - np.minimum(x, 0)))


def problem(seed=0, b=40):
    """Random logits (b, 4 slots, 7 classes) with extreme values, per-slot class counts 2, 3, 5, 7, tasks grouping
    the slots, and their loss weights (as tests/test_train.py's)."""
    rng = np.random.default_rng(seed)
    s, c = 4, 7
    logits = rng.normal(scale=3, size=(b, s, c))
    pick = rng.random((b, s, c))
    logits[pick < 0.1] = 1e4
    logits[(pick >= 0.1) & (pick < 0.2)] = -1e4
    logits[(pick >= 0.2) & (pick < 0.25)] = 0.0  # s's two branches meet here
    logits[(pick >= 0.25) & (pick < 0.3)] = 1.0  # 1 / (1 - x) is infinite here: the unclamped branch's pole
    logits = logits.astype(np.float32)
    n_classes = np.array([2, 3, 5, 7])
    y = np.stack([rng.integers(0, q, b) for q in n_classes], 1)
    groups = np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]], bool)
    spec = dict(n_classes=n_classes, loss_weight=rng.random(s).astype(np.float32), groups=groups,
                group_loss=rng.random((3, s)).astype(np.float32))
    return logits, y, spec


def np_stablemax_ce(logits, y, n_classes):
    """(b, S) -(log StableMax(logits over the slot's own classes))[label], float64."""
    b, s, _ = logits.shape
    ce = np.zeros((b, s))
    for i in range(s):
        sx = np_s(logits[:, i, : n_classes[i]])
        ce[:, i] = -np.log(sx[np.arange(b), y[:, i]] / sx.sum(-1))
    return ce


def run_loss(logits, y, spec, **kw):
    return loss_and_metrics(jnp.asarray(logits), jnp.asarray(y), jax.tree.map(jnp.asarray, spec), **kw)


def jit_loss(logits, y, spec, **kw):
    """run_loss compiled as one program (as the trainer runs it), not one per operation. Gradients are taken of
    run_loss under jax.jit instead: a jitted loss_and_metrics' transpose is traced outside its float64 scope."""
    return jax.jit(lambda lg, yy: run_loss(lg, yy, spec, **kw))(jnp.asarray(logits), jnp.asarray(y))


def test_s_is_finite_with_finite_gradients_on_both_sides_of_both_branches():
    x = jnp.asarray([-1e30, -1e4, -1.0, -1e-7, 0.0, 1e-7, 0.5, 1.0, 2.0, 1e4, 1e30], jnp.float32)
    np.testing.assert_allclose(jax.jit(stablemax_s)(x), np_s(np.asarray(x)), rtol=1e-6)
    grad = jax.jit(jax.vmap(jax.grad(stablemax_s)))(x)
    assert np.isfinite(np.asarray(grad)).all()
    # s'(0) = 1 (both one-sided derivatives); s'(-1e30) = 1e-60 underflows float32 to 0
    np.testing.assert_allclose(grad, np_ds(np.asarray(x)), rtol=1e-6, atol=1e-38)


@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-5), ("float64", 1e-6)])
def test_stablemax_loss_against_numpy_float64(dtype, rtol):
    logits, y, spec = problem()
    loss, task_loss, task_acc = jit_loss(logits, y, spec, loss="stablemax", dtype=dtype)
    assert loss.dtype == task_loss.dtype == jnp.float32
    ce = np_stablemax_ce(logits.astype(np.float64), y, spec["n_classes"]).mean(0)
    np.testing.assert_allclose(loss, ce @ spec["loss_weight"], rtol=rtol)
    np.testing.assert_allclose(task_loss, spec["group_loss"] @ ce, rtol=rtol)
    # accuracy is argmax's, whatever the loss
    np.testing.assert_array_equal(task_acc, jit_loss(logits, y, spec)[2])


def test_stablemax_gradient_against_numpy_and_finite():
    logits, y, spec = problem(1)
    b, s, _ = logits.shape
    for dtype in ("float32", "float64"):
        grad = jax.jit(jax.grad(lambda z, dt=dtype: run_loss(z, y, spec, loss="stablemax", dtype=dt)[0]))(
            jnp.asarray(logits))
        assert np.isfinite(np.asarray(grad)).all(), dtype
    # d/dx_i [log sum_j s(x_j) - log s(x_y)] = s'(x_i) / sum_j s(x_j) - [i = y] s'(x_y) / s(x_y), weighted as the loss
    want = np.zeros(logits.shape)
    for i, q in enumerate(spec["n_classes"]):
        z = logits[:, i, :q].astype(np.float64)
        g = np_ds(z) / np_s(z).sum(-1, keepdims=True)
        rows = np.arange(b)
        g[rows, y[:, i]] -= np_ds(z[rows, y[:, i]]) / np_s(z[rows, y[:, i]])
        want[:, i, :q] = g * spec["loss_weight"][i] / b
    np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-12)  # the float64 one
    assert not np.asarray(grad)[:, 0, 2:].any()  # the padded classes get no gradient


def test_padded_classes_are_out_of_the_stablemax_sum_padded_or_bucketed():
    logits, y, spec = problem(2)
    want = jit_loss(logits, y, spec, loss="stablemax")
    junk = logits.copy()
    for i, q in enumerate(spec["n_classes"]):
        junk[:, i, q:] = 1e4  # s(1e4) would dominate the denominator if it counted
    got = jit_loss(junk, y, spec, loss="stablemax")
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    buckets = ((0, 2, 3), (2, 4, 7))
    parts = tuple(jnp.asarray(junk[:, s0:s1, :w]) for s0, s1, w in buckets)
    got = jax.jit(lambda p: loss_and_metrics(p, jnp.asarray(y), jax.tree.map(jnp.asarray, spec), buckets,
                                             loss="stablemax"))(parts)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_float64_loss_where_float32_collapses():
    """Logits (20, 0, 0): softmax gives the label 1 - 4.1e-9, which float32 rounds to 1 (loss 0, gradient 0: Prieto
    et al.'s softmax collapse); float64 keeps it, and its value matches numpy."""
    logits = np.array([[[20.0, 0.0, 0.0]], [[0.3, -1.2, 2.0]]], np.float32)
    y = np.array([[0], [2]])
    spec = dict(n_classes=np.array([3]), loss_weight=np.ones(1, np.float32), groups=np.ones((1, 1), bool),
                group_loss=np.ones((1, 1), np.float32))
    z = logits[:, 0].astype(np.float64)
    ce = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) - (z - z.max(-1, keepdims=True))[[0, 1], [0, 2]]
    f32 = jnp.stack(jax.jit(jax.vmap(lambda lg, yy: run_loss(lg[None], yy[None], spec)[0]))(logits, y))
    f64 = jnp.stack(jax.jit(jax.vmap(lambda lg, yy: run_loss(lg[None], yy[None], spec, dtype="float64")[0]))(logits, y))
    assert float(f32[0]) == 0.0 and ce[0] > 4e-9
    np.testing.assert_allclose(f64, ce, rtol=1e-6)
    grad = jax.jit(jax.grad(lambda lg: run_loss(lg, y[:1], spec, dtype="float64")[0]))(jnp.asarray(logits[:1]))
    np.testing.assert_allclose(grad[0, 0, 0], -2 * np.exp(-20.0), rtol=1e-6)  # p_y - 1, 0 in float32
    assert float(jax.jit(jax.grad(lambda lg: run_loss(lg, y[:1], spec)[0]))(jnp.asarray(logits[:1]))[0, 0, 0]) == 0.0
    # the 64-bit types stay inside the loss
    assert not jax.config.jax_enable_x64 and jnp.zeros(1).dtype == jnp.float32


def test_float64_softmax_loss_against_numpy_on_random_logits():
    logits, y, spec = problem(3)
    logits = np.clip(logits, -30, 30)
    got = jit_loss(logits, y, spec, dtype="float64")
    ce = np.zeros(y.shape)
    for i, q in enumerate(spec["n_classes"]):
        z = logits[:, i, :q].astype(np.float64)
        ce[:, i] = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1) - z[np.arange(len(z)), y[:, i]]
    np.testing.assert_allclose(got[0], ce.mean(0) @ spec["loss_weight"], rtol=1e-6)
    np.testing.assert_allclose(got[1], spec["group_loss"] @ ce.mean(0), rtol=1e-6)


@pytest.mark.parametrize("sets", [["loss=foo"], ["loss_dtype=bfloat16"]])
def test_bad_loss_settings_are_one_config_error_naming_the_choices(sets):
    with pytest.raises(ConfigError, match="choose one of") as e:
        validate(apply_overrides(get_preset("nanda-tiny"), sets))
    assert "\n" not in str(e.value)


def test_float64_loss_is_refused_on_a_tpu_before_anything_is_written(tmp_path, monkeypatch):
    from miiii.runner import train_run

    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    cfg = apply_overrides(get_preset("nanda-tiny"), ["loss_dtype=float64"])
    with pytest.raises(ConfigError, match="no float64"):
        train_run(cfg, tmp_path / "run", progress=False, tensorboard=False)
    assert not (tmp_path / "run").exists()


def test_nanda_tiny_trains_with_stablemax():
    # the last 20 steps' loss is 0.12 of the first 20's at step 120 (0.004 at 300): one chunk, compiled once
    assert_trains(*train_chunks("nanda-tiny", ["loss=stablemax"], [120]))


@pytest.mark.study  # make test-studies: an end-to-end run kept out of make test's 10 minutes
def test_sequence_task_and_float64_loss_train():
    loss, _ = train_chunks("reversal-tiny", ["loss=stablemax", "loss_dtype=float64", "eval_every=10"], [20])
    assert np.isfinite(loss).all() and loss[-5:].mean() < loss[:5].mean()
    # float64 and float32 losses of the same first step agree to float32's precision
    a, _ = train_chunks("nanda-tiny", ["loss_dtype=float64"], [3])
    b, _ = train_chunks("nanda-tiny", [], [3])
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
