"""The scanned trainer: chunks equal single steps, seeds reproduce, metrics match numpy, minibatch order.

Compiling dominates these tests: the trainers are cached per config (`setup`), and the tests share configs, so a
worker compiles each chunk length once (the chunk donates its state, never the trainer or the data)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import SLOW

from miiii.config import apply_overrides
from miiii.presets import get_preset
from miiii.runner import prepare
from miiii.train import batch_indices, loss_and_metrics, make_trainer, task_data


@functools.cache
def setup(preset, *sets):
    cfg = apply_overrides(get_preset(preset), list(sets))
    task = prepare(cfg)
    return cfg, task, make_trainer(cfg, task), task_data(task)


# miiii-tiny at full batch with dropout and grokfast; reversal-tiny in minibatches of 16 from 64 samples (an epoch
# of 4 steps, so 10 steps cross two epochs' orders) and an evaluation every 3 steps, mid-chunk
MIIII = ("miiii-tiny", "steps=20")
REVERSAL = ("reversal-tiny", "n_train=64", "n_valid=8", "batch_size=16", "steps=12", "eval_every=3")


def run(trainer, data, seed, chunks):
    state = trainer.init(seed)
    out = []
    for n in chunks:
        state, m = trainer.chunk(state, data, n)
        m = m.metrics
        out.append(jax.device_get(m))
    metrics = {k: np.concatenate([m[k] for m in out]) for k in out[0]}
    return state, metrics


@pytest.mark.parametrize("config", [MIIII, REVERSAL], ids=["miiii-tiny", "reversal-tiny"])
def test_chunk_of_k_steps_equals_k_single_steps(config):
    _, _, trainer, data = setup(*config)
    s_scan, m_scan = run(trainer, data, 0, [10])
    s_one, m_one = run(trainer, data, 0, [1] * 10)  # every step a chunk boundary (eval_every 3 mid-chunk too)
    for k in m_scan:
        np.testing.assert_allclose(m_scan[k], m_one[k], rtol=2e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(s_scan.params), jax.tree.leaves(s_one.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert int(s_scan.step) == 10


def test_same_seed_same_metrics_other_seed_differs():
    _, _, trainer, data = setup(*MIIII)
    _, a = run(trainer, data, 3, [10, 10])
    _, b = run(trainer, data, 3, [10, 10])
    _, c = run(trainer, data, 4, [10, 10])
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["train_loss"], c["train_loss"])


def test_eval_every_leaves_nan_between_evaluations():
    _, _, trainer, data = setup(*REVERSAL)
    _, m = run(trainer, data, 0, [10])
    evaluated = ~np.isnan(m["valid_acc"][:, 0])
    assert evaluated.tolist() == [t % 3 == 0 for t in range(10)]
    assert np.isfinite(m["train_loss"]).all()


@pytest.mark.parametrize("ties", [False, True])
def test_loss_and_metrics_against_numpy(ties):
    rng = np.random.default_rng(0)
    b, s, c = 50, 4, 7
    logits = rng.normal(size=(b, s, c)).astype(np.float32)
    if ties:  # small integers: many rows with several maxima; argmax (the first maximum) decides
        logits = rng.integers(0, 3, size=(b, s, c)).astype(np.float32)
    n_classes = np.array([2, 3, 5, 7])
    y = np.stack([rng.integers(0, q, b) for q in n_classes], 1)
    groups = np.array([[1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]], bool)
    group_loss = rng.random((3, s)).astype(np.float32)
    weight = rng.random(s).astype(np.float32)
    spec = dict(n_classes=n_classes, loss_weight=weight, groups=groups, group_loss=group_loss)
    lm = jax.jit(loss_and_metrics, static_argnums=3)  # one compile, not one per operation
    loss, task_loss, task_acc = lm(jnp.asarray(logits), jnp.asarray(y), jax.tree.map(jnp.asarray, spec))
    ce = np.zeros((b, s))
    correct = np.zeros((b, s), bool)
    for i in range(s):
        z = logits[:, i, : n_classes[i]]
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        ce[:, i] = -logp[np.arange(b), y[:, i]]
        correct[:, i] = z.argmax(-1) == y[:, i]
    np.testing.assert_allclose(loss, ce.mean(0) @ weight, rtol=1e-5)
    np.testing.assert_allclose(task_loss, group_loss @ ce.mean(0), rtol=1e-5)
    want = [correct[:, g].all(1).mean() for g in groups]
    np.testing.assert_allclose(task_acc, want, rtol=1e-6)
    # the same through buckets of slots, each read only up to its widest task (padded or as parts)
    buckets = ((0, 2, 3), (2, 4, 7))
    parts = tuple(jnp.asarray(logits[:, s0:s1, :w]) for s0, s1, w in buckets)
    for lg in (jnp.asarray(logits), parts):
        got = lm(lg, jnp.asarray(y), jax.tree.map(jnp.asarray, spec), buckets)
        np.testing.assert_allclose(got[0], loss, rtol=1e-6)
        np.testing.assert_allclose(got[1], task_loss, rtol=1e-6)
        np.testing.assert_array_equal(got[2], task_acc)
    # the gradient is softmax - one-hot over the valid classes, weighted like the loss
    grad = jax.jit(jax.grad(lambda z: loss_and_metrics(z, jnp.asarray(y), jax.tree.map(jnp.asarray, spec))[0]))(
        jnp.asarray(logits))
    want_grad = np.zeros_like(logits)
    for i in range(s):
        z = logits[:, i, : n_classes[i]]
        sm = np.exp(z - z.max(-1, keepdims=True))
        sm /= sm.sum(-1, keepdims=True)
        sm[np.arange(b), y[:, i]] -= 1
        want_grad[:, i, : n_classes[i]] = sm * weight[i] / b
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-7)


@SLOW
def test_grad_norm_metric_is_the_raw_gradient_norm_per_matrix():
    cfg, task, trainer, data = setup("nanda-tiny", "steps=2")  # full batch, no dropout: step 0 is deterministic
    state = trainer.init(0)
    m = trainer.chunk(trainer.init(0), data, 1)[1].metrics

    def loss(params):
        logits, _ = trainer.model.apply({"params": params}, data["train_x"])
        return loss_and_metrics(logits, data["train_y"], data["spec"])[0]

    grads = jax.grad(loss)(state.params)
    names = dict(zip(trainer.grad_names, np.asarray(m["grad_norm"][0]), strict=True))
    assert names.keys() >= {"W_E", "W_pos", "W_U", "blocks.0.attn.W_Q", "blocks.0.mlp.W_in"}
    np.testing.assert_allclose(names["W_U"], np.linalg.norm(grads["W_U"]), rtol=1e-4)
    np.testing.assert_allclose(names["blocks.0.attn.W_Q"], np.linalg.norm(grads["blocks_0"]["attn"]["W_Q"]), rtol=1e-4)
    np.testing.assert_allclose(names["W_E"], np.linalg.norm(grads["W_E"]), rtol=1e-4)


def test_minibatch_epoch_visits_every_sample_once():
    """A fresh permutation each epoch: one epoch of steps sees each sample exactly once, epochs differ."""
    key = jax.random.key(7)
    epochs = [np.concatenate([np.asarray(batch_indices(key, e * 4 + i, 64, 16)[0]) for i in range(4)])
              for e in range(2)]
    for e in epochs:
        np.testing.assert_array_equal(np.sort(e), np.arange(64))
    assert not np.array_equal(epochs[0], epochs[1])


def test_trainer_uses_the_documented_batch_order():
    """Record the training batch the scanned step sees; it must be batch_indices(key, t)."""
    cfg, task, trainer, data = setup(*REVERSAL)
    # A "task" whose first input token is the sample index makes the batch visible in the train metrics:
    # instead, compare the step's loss with the loss of the documented batch under the same parameters.
    state = trainer.init(0)
    params0 = jax.tree.map(jnp.copy, state.params)  # the chunk donates (deletes) the state it is given
    m = trainer.chunk(state, data, 1)[1].metrics
    idx = np.asarray(batch_indices(jax.random.key(0), 0, 64, 16)[0])
    spec = data["spec"]

    @jax.jit
    def loss_of(params, x, y):
        logits, _ = trainer.model.apply({"params": params}, x, train=True, rngs={"dropout": jax.random.key(0)})
        return loss_and_metrics(logits, y, spec)[0]

    loss = loss_of(params0, jnp.asarray(task.train.x[idx]), jnp.asarray(task.train.y[idx]))
    np.testing.assert_allclose(float(m["loss"][0]), float(loss), rtol=1e-5)


def test_a_carried_order_gives_the_batches_a_chunk_draws_itself():
    """The session and the sweep hand each chunk the last one's ChunkOut.order (the first trainer.order(state))
    instead of sorting the training set again: chunks of 3 steps in epochs of 4 start mid-epoch and cross epoch
    boundaries, and their metrics and parameters are bit for bit those of chunks that draw the order themselves."""
    _, _, trainer, data = setup(*REVERSAL)
    s_own, m_own = run(trainer, data, 0, [3, 3, 3, 3])
    state = trainer.init(0)
    order, rows = trainer.order(state), []
    for _ in range(4):
        state, out = trainer.chunk(state, data, 3, None, None, order)
        order, m = out.order, jax.device_get(out.metrics)
        # after step t the order is that of t's epoch (the next chunk starts in it or draws a new one itself)
        t = int(state.step) - 1
        np.testing.assert_array_equal(np.asarray(order)[(t % 4) * 16:(t % 4 + 1) * 16],
                                      np.asarray(batch_indices(jax.random.key(0), t, 64, 16)[0]))
        rows.append(m)
    for k in m_own:
        np.testing.assert_array_equal(np.concatenate([m[k] for m in rows]), m_own[k])
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(s_own.params), strict=True):
        np.testing.assert_array_equal(a, b)


def test_batch_larger_than_data_is_refused():
    from miiii.config import ConfigError

    with pytest.raises(ConfigError, match="batch_size"):
        prepare(apply_overrides(get_preset("reversal-tiny"), ["n_train=100", "batch_size=512"]))


def test_vmap_over_seeds_matches_single_runs():
    """Nothing in the step prevents vmap: two seeds in one program equal the two runs alone."""
    # test_attention_diagnostics' trainer and chunk: the single runs' program is compiled once for both
    cfg, task, trainer, data = setup("nanda-tiny", "steps=3", "chunk=3")
    states = jax.jit(jax.vmap(trainer.init))(jnp.arange(2))  # one compile, not one per batched operation
    chunk = jax.jit(jax.vmap(lambda s: trainer.raw_chunk(s, data, 3)))
    m = chunk(states)[1].metrics
    for seed in range(2):
        _, single = run(trainer, data, seed, [3])
        np.testing.assert_allclose(np.asarray(m["loss"][seed]), single["loss"], rtol=1e-5)


@SLOW
def test_a_kept_last_batch_is_the_epochs_remainder_and_counts_its_rows_only():
    """train.last_batch=keep (PyTorch's DataLoader): 70 samples in batches of 16 are 5 steps an epoch, the fifth of
    the permutation's last 6 samples, its loss their mean alone; the sixth step starts the next epoch's order."""
    from miiii.config import TrainConfig
    from miiii.train import epoch_order, steps_per_epoch

    drop, keep = TrainConfig(batch_size=16), TrainConfig(batch_size=16, last_batch="keep")
    assert (steps_per_epoch(drop, 70), steps_per_epoch(keep, 70), steps_per_epoch(keep, 64)) == (4, 5, 4)
    assert steps_per_epoch(TrainConfig(batch_size=0), 70) == steps_per_epoch(TrainConfig(batch_size=70), 70) == 1
    cfg, task, trainer, data = setup("reversal-tiny", "n_train=70", "n_valid=8", "batch_size=16", "steps=6",
                                     "last_batch=keep")
    state, _ = trainer.chunk(trainer.init(0), data, 4)
    key, seen = jax.random.key(0), []
    idx, w = batch_indices(key, 4, 70, 16, keep_last=True)  # the documented last batch: 6 samples, 10 of padding
    np.testing.assert_array_equal(np.asarray(idx)[:6], np.asarray(epoch_order(key, 0, 70))[64:])
    np.testing.assert_array_equal(np.asarray(w), np.r_[np.ones(6), np.zeros(10)])
    assert batch_indices(key, 3, 70, 16, keep_last=True)[0].shape == (16,) and batch_indices(key, 3, 70, 16)[1] is None
    for t, rows in ((4, np.asarray(epoch_order(key, 0, 70))[64:]), (5, np.asarray(epoch_order(key, 1, 70))[:16])):
        assert int(state.step) == t
        params = jax.tree.map(jnp.copy, state.params)  # the chunk donates the state it is given
        state, m = trainer.chunk(state, data, 1)
        m = m.metrics
        logits, _ = trainer.model.apply({"params": params}, jnp.asarray(task.train.x[rows]))
        loss, _, acc = loss_and_metrics(logits, jnp.asarray(task.train.y[rows]), data["spec"])
        np.testing.assert_allclose(float(m["loss"][0]), float(loss), rtol=1e-5)
        np.testing.assert_allclose(m["train_acc"][0], np.asarray(acc), rtol=1e-6)
        seen.append(len(rows))
    assert seen == [6, 16] and int(state.step) == 6


@SLOW
def test_loss_weights_count_the_weighted_rows_only():
    """A batch padded with rows of weight 0 has the loss, gradient and accuracy of the unpadded batch."""
    cfg, task, trainer, data = setup("reversal-tiny", "n_train=64", "n_valid=8", "batch_size=16")
    params = trainer.init(0).params
    x, y = jnp.asarray(task.train.x[:10]), jnp.asarray(task.train.y[:10])
    xp, yp = jnp.concatenate([x, x[:6] * 0 + 3]), jnp.concatenate([y, y[:6] * 0])  # 6 rows of garbage
    w = (jnp.arange(16) < 10).astype(jnp.float32)

    def loss(p, x, y, w=None):
        return loss_and_metrics(trainer.model.apply({"params": p}, x)[0], y, data["spec"], weight=w)

    (l0, _, a0), (l1, _, a1) = loss(params, x, y), loss(params, xp, yp, w)
    np.testing.assert_allclose(float(l1), float(l0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(a1), np.asarray(a0), rtol=1e-6)
    g0, g1 = (jax.grad(lambda p, *a: loss(p, *a)[0])(params, *args) for args in ((x, y), (xp, yp, w)))
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-7)
    assert float(loss(params, xp, yp)[0]) != pytest.approx(float(l0))  # unweighted, the garbage rows count
