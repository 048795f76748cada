"""The per-step metrics table (miiii/metrics.py): one entry is all a new metric needs."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from miiii import apply_overrides, get_preset
from miiii import metrics as M
from miiii.config import RecordConfig
from miiii.run import load_run
from miiii.rundir import flatten_params, read_metrics_log
from miiii.runner import prepare, train_run
from miiii.train import make_trainer


def tiny():
    # no log-spaced checkpoints: nothing here restores one (a resume takes ckpt.every's), and each costs a save
    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=12", "chunk=6", "eval_every=4", "ckpt.keep_log=0"])
    return cfg.__class__(**{**cfg.__dict__, "record": RecordConfig()})


def test_the_table_gives_shapes_and_log_columns():
    by = {m.name: m for m in M.METRICS}
    assert M.metric_shape(by["loss"], 3, 5) == () and M.metric_shape(by["valid_acc"], 3, 5) == (3,)
    assert M.metric_shape(by["grad_norm"], 3, 5) == (5,)
    cols = M.log_columns(["a", "b"], ["W"])  # read against the registry, so a new metric breaks nothing here
    suffix = {"scalar": [""], "task": ["/a", "/b"], "param": ["/W"]}
    assert cols == [m.name + s for m in M.METRICS if m.logged for s in suffix[m.kind]]
    assert {"loss", "valid_acc/a", "valid_acc/b"} <= set(cols)
    assert not [c for c in cols if c.split("/")[0] in {m.name for m in M.METRICS if not m.logged}]


def _abs_max(c):
    import jax
    import jax.numpy as jnp

    return jnp.stack([jnp.abs(w).max() for w in jax.tree.leaves(c.params)])


ABS_MAX = M.Metric("abs_max", "param", True, _abs_max, "largest |w| of each parameter array")


@pytest.fixture(scope="module")
def abs_max_run(tmp_path_factory):
    """tiny() trained once with ABS_MAX added to the table: the new metric's test and the weight norms' read it."""
    run = tmp_path_factory.mktemp("abs_max") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "METRICS", (*M.METRICS, ABS_MAX))
        train_run(tiny(), run, progress=False, tensorboard=False)
    return run


def test_a_new_per_parameter_metric_is_one_entry_and_reaches_every_file(abs_max_run):
    cfg = tiny()
    run = load_run(abs_max_run)
    names = list(run.metrics["grad_names"])
    got = run.metrics["abs_max"]
    assert got.shape == (12, len(names))
    # row 0 describes the parameters before update 0: the initial ones, computed here independently
    init = flatten_params(jax.device_get(make_trainer(cfg, prepare(cfg)).init(cfg.train.seed).params))
    assert len(init) == len(names)  # flatten_params walks the tree in leaf order, the order of grad_names
    np.testing.assert_array_equal(got[0], [np.abs(v).max() for v in init.values()])
    assert not np.allclose(got[0], got[-1])  # it moves as the run trains
    # metrics.jsonl (and so TensorBoard, whose tags are its columns) carries one column per parameter array
    first = json.loads((abs_max_run / "metrics.jsonl").read_text().splitlines()[0])
    assert len([c for c in first if c.startswith("abs_max/")]) == len(names)
    log = read_metrics_log(abs_max_run)
    np.testing.assert_array_equal(log["abs_max"], got[log["step"]])
    assert log["task_names"].tolist() == list(run.metrics["task_names"])


def test_a_logged_per_parameter_metric_reaches_tensorboard(tmp_path, monkeypatch):
    import pytest

    pytest.importorskip("tensorboardX")
    from test_ops import read_events

    monkeypatch.setattr(M, "METRICS", (*M.METRICS, ABS_MAX))
    train_run(tiny(), tmp_path / "run", progress=False)
    events = read_events(next((tmp_path / "run" / "tb").glob("events.out.tfevents.*")))
    log = read_metrics_log(tmp_path / "run")
    for step, scalars in events:
        tags = [t for t in scalars if t.startswith("abs_max/")]
        assert len(tags) == log["abs_max"].shape[1]
        row = list(log["step"]).index(step)
        assert [scalars[t] for t in tags] == log["abs_max"][row].tolist()


def test_a_run_begun_before_a_metric_was_added_resumes_with_it_nan_until_then(tmp_path, monkeypatch):
    from _runhelp import Crash, crash_at

    from miiii.runner import resume_run

    cfg = apply_overrides(tiny(), ["ckpt.every=6"])
    try:
        train_run(cfg, tmp_path / "run", progress=False, tensorboard=False, on_chunk=crash_at(6))
    except Crash:
        pass
    monkeypatch.setattr(M, "METRICS", (*M.METRICS, ABS_MAX))
    resume_run(tmp_path / "run", progress=False, tensorboard=False)
    w = load_run(tmp_path / "run").metrics["abs_max"]
    assert np.isnan(w[:6]).all() and np.isfinite(w[6:]).all()


def _ctx(logits, y, n_classes, groups, weight=None):
    import jax.numpy as jnp

    S = y.shape[1]
    return M.StepContext(*[None] * 7, jnp.asarray(logits), jnp.asarray(y),
                         {"n_classes": jnp.asarray(n_classes), "groups": jnp.asarray(groups)},
                         ((0, S, logits.shape[-1]),), None if weight is None else jnp.asarray(weight))


def test_softmax_collapse_is_the_share_whose_float32_softmax_is_exactly_one():
    """Against numpy's float32 softmax: a margin of 120 rounds the correct class's probability to 1 (and its gradient
    to 0), one of 5 does not; classes past a slot's own never count; a task counts a sample on all its slots."""
    rng = np.random.default_rng(0)
    b, S, C = 64, 3, 7
    n_classes = np.array([7, 5, 3])
    y = rng.integers(0, 3, (b, S))
    margin = rng.choice([5.0, 120.0], (b, S))
    logits = rng.normal(size=(b, S, C)).astype(np.float32)
    np.put_along_axis(logits, y[..., None], (logits.max(-1) + margin)[..., None], -1)
    logits[:, 2, 3:] = 1e4  # not classes of slot 2 (3 classes): masked, never the max
    groups = np.array([[1, 0, 0], [0, 1, 1]], bool)  # task 0: slot 0; task 1: slots 1 and 2
    lg = np.where(np.arange(C)[None, None] < n_classes[None, :, None], logits, -np.inf).astype(np.float32)
    e = np.exp(lg - lg.max(-1, keepdims=True), dtype=np.float32)
    p_y = np.take_along_axis(e / e.sum(-1, keepdims=True, dtype=np.float32), y[..., None], -1)[..., 0]
    one = p_y == np.float32(1)
    want = [one[:, 0].mean(), (one[:, 1] & one[:, 2]).mean()]
    assert 0 < want[0] < 1 and 0 < want[1] < 1
    got = np.asarray(M.softmax_collapse(_ctx(logits, y, n_classes, groups)))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    w = (np.arange(b) < 40).astype(np.float32)  # a padded batch: only the rows of weight 1 count
    got_w = np.asarray(M.softmax_collapse(_ctx(logits, y, n_classes, groups, w)))
    np.testing.assert_allclose(got_w, [one[:40, 0].mean(), (one[:40, 1] & one[:40, 2]).mean()], rtol=1e-6)
    assert float(M.max_logit(_ctx(logits, y, n_classes, groups))) == lg.max()


def test_weight_norms_are_every_runs_and_start_at_the_initial_parameters(abs_max_run):
    cfg = tiny()  # the run with a metric added: every run's metrics are there too
    m = load_run(abs_max_run).metrics
    init = flatten_params(jax.device_get(make_trainer(cfg, prepare(cfg)).init(cfg.train.seed).params))
    norms = [np.sqrt(np.sum(np.square(v.astype(np.float64)))) for v in init.values()]
    np.testing.assert_allclose(m["weight_norm"][0], norms, rtol=1e-5)
    np.testing.assert_allclose(m["weight_norm_total"][0], np.sqrt(np.sum(np.square(norms))), rtol=1e-5)
    assert m["softmax_collapse"].shape == (12, 1) and np.isfinite(m["max_logit"]).all()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_softmax_collapse_reads_the_softmax_in_the_loss_dtype(dtype):
    """Prieto et al.'s logger takes the softmax in the loss's precision: margins of 12, 30 and 25 all collapse in
    float16 (1 + 3 e^-12 rounds to 1 there), the last two in float32, none in float64 (e^-30 is above its epsilon)."""
    b, C = 3, 4
    logits = np.zeros((b, 1, C), np.float32)
    logits[:, 0, 0] = [12.0, 30.0, 25.0]
    y = np.zeros((b, 1), np.int64)
    ctx = _ctx(logits, y, np.array([C]), np.array([[1]], bool))._replace(loss_dtype=dtype)
    want = {"float16": 1.0, "float32": 2 / 3, "float64": 0.0}[dtype]
    np.testing.assert_allclose(np.asarray(M.softmax_collapse(ctx)), [want], rtol=1e-6)


def test_float16_loss_is_their_float16_cross_entropy():
    """train.loss_dtype=float16 against numpy's float16 log-softmax (Prieto et al.'s cross_entropy_float16)."""
    from miiii.train import loss_and_metrics

    rng = np.random.default_rng(1)
    logits = (rng.normal(size=(64, 1, 7)) * 6).astype(np.float32)
    y = rng.integers(0, 7, (64, 1))
    spec = {"n_classes": np.array([7]), "loss_weight": np.array([1.0], np.float32),
            "group_loss": np.array([[1.0]], np.float32), "groups": np.array([[1]], bool)}
    x = logits.astype(np.float16)
    z = x - x.max(-1, keepdims=True)
    want = -(np.take_along_axis(z, y[..., None], -1)[..., 0] - np.log(np.exp(z).sum(-1))).mean()
    got = float(loss_and_metrics(jnp.asarray(logits), jnp.asarray(y), spec, dtype="float16")[0])
    assert got == pytest.approx(float(want), rel=2e-3)  # float16's own rounding, not float32's
    f32 = float(loss_and_metrics(jnp.asarray(logits), jnp.asarray(y), spec, dtype="float32")[0])
    assert got != f32


@pytest.mark.parametrize("dtype,loss", [("float16", "softmax"), ("float32", "softmax"), ("float64", "softmax"),
                                        ("float32", "stablemax")])
def test_the_trainer_reads_collapse_and_the_top_logit_off_the_loss_pass(dtype, loss):
    """The trainer hands softmax_collapse and max_logit the loss's own (collapsed, top) per slot (one pass over the
    logits): they equal what the metrics compute from the logits alone, over two class buckets and a padded batch,
    with margins that collapse in one precision and not another."""
    import jax.numpy as jnp

    from miiii.train import loss_and_metrics

    rng = np.random.default_rng(3)
    b, S, C = 48, 3, 6
    n_classes = np.array([6, 5, 3])
    y = rng.integers(0, 3, (b, S))
    logits = (rng.normal(size=(b, S, C)) * 3).astype(np.float32)
    margin = rng.choice([3.0, 12.0, 30.0, 120.0], (b, S)).astype(np.float32)
    np.put_along_axis(logits, y[..., None], (logits.max(-1) + margin)[..., None], -1)
    logits[:, 2, 3:] = 1e4  # past slot 2's classes: never its max
    groups = np.array([[1, 0, 0], [0, 1, 1]], bool)
    buckets = ((0, 2, 6), (2, 3, 3))
    w = (np.arange(b) < 40).astype(np.float32)
    spec = {"n_classes": jnp.asarray(n_classes), "groups": jnp.asarray(groups),
            "loss_weight": jnp.full((S,), 1 / S), "group_loss": jnp.asarray(groups / groups.sum(1, keepdims=True))}

    @jax.jit  # one compile, not one per operation (as the trainer runs it)
    def read(logits, y, w):
        *_, slots = loss_and_metrics(logits, y, spec, buckets, w, loss=loss, dtype=dtype, stats=True)
        alone = M.StepContext(*[None] * 7, logits, y, spec, buckets, w, dtype)
        handed = alone._replace(slot_stats=slots)
        return (M.softmax_collapse(alone), M.softmax_collapse(handed)), (M.max_logit(alone), M.max_logit(handed))

    (want, got), (top_alone, top_handed) = read(jnp.asarray(logits), jnp.asarray(y), jnp.asarray(w))
    want = np.asarray(want)
    assert 0 < want.min() and want.max() < 1
    np.testing.assert_array_equal(np.asarray(got), want)
    assert float(top_handed) == float(top_alone) == np.where(
        np.arange(C)[None, None] < n_classes[None, :, None], logits, -np.inf).max()
