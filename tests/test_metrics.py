"""The per-step metrics table (miiii/metrics.py): one entry is all a new metric needs."""

import json

import jax
import numpy as np

from miiii import apply_overrides, get_preset
from miiii import metrics as M
from miiii.config import RecordConfig
from miiii.run import load_run
from miiii.rundir import flatten_params, read_metrics_log
from miiii.runner import prepare, train_run
from miiii.train import make_trainer


def tiny():
    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=12", "chunk=6", "eval_every=4"])
    return cfg.__class__(**{**cfg.__dict__, "record": RecordConfig()})


def test_the_table_gives_shapes_and_log_columns():
    by = {m.name: m for m in M.METRICS}
    assert M.metric_shape(by["loss"], 3, 5) == () and M.metric_shape(by["valid_acc"], 3, 5) == (3,)
    assert M.metric_shape(by["grad_norm"], 3, 5) == (5,)
    assert M.log_columns(["a"], ["W"]) == ["loss", "train_loss/a", "train_acc/a", "valid_loss/a", "valid_acc/a"]


def test_a_new_per_parameter_metric_is_one_entry_and_reaches_every_file(tmp_path, monkeypatch):
    weight_norm = M.Metric("weight_norm", "param", True, lambda c: M.l2_per_array(c.params),
                           "L2 norm of each parameter array")
    monkeypatch.setattr(M, "METRICS", (*M.METRICS, weight_norm))
    cfg = tiny()
    train_run(cfg, tmp_path / "run", progress=False, tensorboard=False)
    run = load_run(tmp_path / "run")
    names = list(run.metrics["grad_names"])
    got = run.metrics["weight_norm"]
    assert got.shape == (12, len(names))
    # row 0 describes the parameters before update 0: the initial ones, computed here independently
    init = flatten_params(jax.device_get(make_trainer(cfg, prepare(cfg)).init(cfg.train.seed).params))
    assert len(init) == len(names)  # flatten_params walks the tree in leaf order, the order of grad_names
    want = [np.sqrt(np.sum(np.square(v.astype(np.float64)))) for v in init.values()]
    np.testing.assert_allclose(got[0], want, rtol=1e-5)
    assert not np.allclose(got[0], got[-1])  # it moves as the run trains
    # metrics.jsonl (and so TensorBoard, whose tags are its columns) carries one column per parameter array
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    cols = [c for c in first if c.startswith("weight_norm/")]
    assert len(cols) == len(names)
    log = read_metrics_log(tmp_path / "run")
    np.testing.assert_array_equal(log["weight_norm"], got[log["step"]])
    assert log["task_names"].tolist() == list(run.metrics["task_names"])


def test_a_logged_per_parameter_metric_reaches_tensorboard(tmp_path, monkeypatch):
    import pytest

    pytest.importorskip("tensorboardX")
    from test_ops import read_events

    weight_norm = M.Metric("weight_norm", "param", True, lambda c: M.l2_per_array(c.params), "L2 norm")
    monkeypatch.setattr(M, "METRICS", (*M.METRICS, weight_norm))
    train_run(tiny(), tmp_path / "run", progress=False)
    events = read_events(next((tmp_path / "run" / "tb").glob("events.out.tfevents.*")))
    log = read_metrics_log(tmp_path / "run")
    for step, scalars in events:
        tags = [t for t in scalars if t.startswith("weight_norm/")]
        assert len(tags) == log["weight_norm"].shape[1]
        row = list(log["step"]).index(step)
        assert [scalars[t] for t in tags] == log["weight_norm"][row].tolist()


def test_a_run_begun_before_a_metric_was_added_resumes_with_it_nan_until_then(tmp_path, monkeypatch):
    from _runhelp import Crash, crash_at

    from miiii.runner import resume_run

    cfg = apply_overrides(tiny(), ["ckpt.every=6"])
    try:
        train_run(cfg, tmp_path / "run", progress=False, tensorboard=False, on_chunk=crash_at(6))
    except Crash:
        pass
    weight_norm = M.Metric("weight_norm", "param", True, lambda c: M.l2_per_array(c.params), "L2 norm")
    monkeypatch.setattr(M, "METRICS", (*M.METRICS, weight_norm))
    resume_run(tmp_path / "run", progress=False, tensorboard=False)
    w = load_run(tmp_path / "run").metrics["weight_norm"]
    assert np.isnan(w[:6]).all() and np.isfinite(w[6:]).all()
