"""The grokking disputes' options, each against an independent computation: a fixed output scale multiplies the
logits (Kumar et al.'s alpha), an initial scale multiplies every initial parameter (Omnigrok), and a fixed norm
keeps the parameters on the sphere of that global norm after every update (Omnigrok's constrained runs)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from miiii.config import ConfigError, OptimConfig, apply_overrides
from miiii.optim import make_optimizer
from miiii.presets import get_preset
from miiii.tasks import make_task
from miiii.train import make_trainer
from miiii.validate import validate


@pytest.mark.parametrize("preset", ["miiii-tiny", "addition-tiny"])
def test_logit_scale_multiplies_the_logits(preset):
    base = get_preset(preset)
    task = make_task(base.task)
    plain, scaled = (make_trainer(c, task) for c in (base, apply_overrides(base, ["model.logit_scale=3.5"])))
    params = plain.init(0).params
    x = jnp.asarray(task.valid.x[:4])
    np.testing.assert_allclose(np.asarray(scaled.apply(params, x)[0]), 3.5 * np.asarray(plain.apply(params, x)[0]),
                               rtol=1e-5, atol=1e-6)


def test_init_scale_multiplies_every_initial_parameter():
    base = get_preset("miiii-tiny")
    task = make_task(base.task)
    a = make_trainer(base, task).init(3).params
    b = make_trainer(apply_overrides(base, ["model.init_scale=4"]), task).init(3).params
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(v), 4 * np.asarray(u), rtol=1e-6)


def test_fixed_norm_keeps_the_parameters_on_the_sphere():
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(4)}
    tx = make_optimizer(OptimConfig(lr=0.1, fixed_norm=2.5, warmup_steps=0), 100)
    state = tx.init(params)
    for k in range(3):
        grads = jax.tree.map(lambda p, k=k: jnp.sin(p + k), params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        assert float(optax.global_norm(params)) == pytest.approx(2.5, rel=1e-5)


@pytest.mark.parametrize("bad", ["model.logit_scale=0", "model.init_scale=-1", "optim.fixed_norm=-2"])
def test_bad_values_are_refused(bad):
    with pytest.raises(ConfigError):
        validate(apply_overrides(get_preset("miiii-tiny"), [bad]))


def test_mse_loss_is_the_squared_error_on_one_hot_targets():
    """train.loss = mse: per slot, the mean over its own classes of (logit - one-hot)^2; the loss and task losses are
    weighted as the cross-entropy's are, accuracy is unchanged (argmax)."""
    from miiii.tasks import MSE_LOSS_UNIT, loss_unit
    from miiii.train import loss_and_metrics

    task = make_task(get_preset("miiii-tiny").task)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, task.n_slots, task.d_out)).astype(np.float32)
    y = task.train.y[:5]
    spec = {k: jnp.asarray(v) for k, v in task.arrays().items()}
    loss, task_loss, acc = loss_and_metrics(jnp.asarray(logits), jnp.asarray(y), spec, loss="mse")
    per_slot = np.array([[((logits[b, s, :q] - np.eye(q)[y[b, s]]) ** 2).mean() for s, q in enumerate(task.n_classes)]
                         for b in range(5)]).mean(0)
    assert float(loss) == pytest.approx(float(per_slot @ task.loss_weight), rel=1e-5)
    np.testing.assert_allclose(np.asarray(task_loss), task.group_loss @ per_slot, rtol=1e-5)
    _, _, acc_ce = loss_and_metrics(jnp.asarray(logits), jnp.asarray(y), spec)
    np.testing.assert_array_equal(np.asarray(acc), np.asarray(acc_ce))
    assert loss_unit("miiii", "mse") == MSE_LOSS_UNIT and loss_unit("miiii") == "cross-entropy / ln q"
    validate(apply_overrides(get_preset("miiii-tiny"), ["train.loss=mse"]))


def test_post_ln_normalises_each_residual_sum():
    """model.ln_position = post: at init (scale 1, bias 0) every block's output has mean 0 and variance 1 over d_model
    at every position; the pre-LN model's does not."""
    for position, normalised in (("post", True), ("pre", False)):
        cfg = apply_overrides(get_preset("addition-tiny"), [f"model.ln_position={position}"])
        task = make_task(cfg.task)
        trainer = make_trainer(cfg, task)
        _, acts = trainer.apply(trainer.init(0).params, jnp.asarray(task.valid.x[:3]))
        h = np.asarray(acts["blocks.1.hook_resid_post"], np.float64)
        ok = np.allclose(h.mean(-1), 0, atol=1e-4) and np.allclose(h.var(-1), 1, atol=1e-2)
        assert ok == normalised, position
