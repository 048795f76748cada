"""One more entry in each registry, and nothing else changed: a module fixture adds a metric, an optimizer, a task, a
hook point (with its row in the cache's axes table) and a figure to the live registries, then the suite's own
registry-driven tests run again and must pass with them, and each new entry is checked for the property its kind
promises. A test that fails here holds a copy of a registry instead of reading it."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
import pytest
import test_cache
import test_figures
import test_hooks
import test_metrics
import test_muon
import test_tasks
from _runhelp import SLOW

from miiii import cache as C
from miiii import metrics as M
from miiii import plots
from miiii.cli import main
from miiii.config import OptimConfig, apply_overrides
from miiii.errors import ConfigError
from miiii.hooks import HookedModel
from miiii.optim import make_optimizer
from miiii.optimizers import OPTIMIZERS, Optimizer
from miiii.presets import get_preset
from miiii.run import load_run
from miiii.runner import train_run
from miiii.tasks import GRID, TASKS, TaskConfig, TaskSpec, make_task
from miiii.validate import validate

METRIC = M.Metric("embed_norm", "scalar", True, lambda c: jnp.sqrt(jnp.sum(jnp.square(c.params["W_E"]))),
                  "L2 norm of the token embedding W_E")
OPTIMIZER = Optimizer("sgd", lambda schedule, adamw, v: optax.sgd(schedule), 0, "plain gradient descent")
TASK = TaskSpec("add2", GRID, "(x0 + 2 x1) mod p", metric_names=lambda cfg, moduli: (f"mod {cfg.p}",),
                answer=lambda x0, x1, p: ((x0 + 2 * x1) % p)[:, None], moduli=lambda p: np.array([p], np.int32))
HOOK = "attn.hook_x"  # blocks.{i}.attn.hook_x: the attention's input (after ln1 where there is one), (b, t, d_model)
FIGURE = "fig_extra"  # fig_extra_{run}: one more figure per run


def _hook_names(names):
    """hook_names with the new point where the pass reaches it: after ln1, before hook_q."""
    def with_new(self):
        out = []
        for n in names(self):
            if n.endswith(".attn.hook_q"):
                out.append(n.replace("attn.hook_q", HOOK))
            out.append(n)
        return tuple(out)
    return with_new


def _attention(attention):
    """The attention with its input passed through the new hook point."""
    return lambda self, p, x, name, h_: attention(self, p, h_(f"{name}.hook_x", x), name, h_)


def _extra_figure(run, out, crop):
    """One more per-run figure, as one FIGURES entry: the embedding norm per step, read from the new metric."""
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.plot(run.metrics["embed_norm"], marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("|W_E|")
    return plots.save_figure(fig, out, f"{FIGURE}_{run.path.name}")


@pytest.fixture(scope="module")
def extended():
    """The registries with one more entry of each kind, for this module's tests."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(M, "METRICS", (*M.METRICS, METRIC))
        mp.setitem(OPTIMIZERS, OPTIMIZER.name, OPTIMIZER)
        mp.setitem(TASKS, TASK.name, TASK)
        mp.setattr(HookedModel, "hook_names", _hook_names(HookedModel.hook_names))
        mp.setattr(HookedModel, "_attention", _attention(HookedModel._attention))
        mp.setitem(C.HOOKS, f"blocks.{{i}}.{HOOK}", (("batch", "pos", "d_model"), "the attention's input"))
        mp.setattr(plots, "FIGURES", [*plots.FIGURES, plots.Figure("extra", "run", _extra_figure)])
        yield


@pytest.fixture(scope="module")
def run(extended, tmp_path_factory):
    """A tiny run of the new task with the new optimizer: every metric, the new one among them, in its files."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["task.name=add2", "optimizer=sgd", "lr=0.1",
                                                     "steps=12", "chunk=6", "eval_every=4", "record.acts=",
                                                     "record.params="])
    out = tmp_path_factory.mktemp("extended") / "add2"
    train_run(cfg, out, progress=False, tensorboard=False)
    return load_run(out)


def test_the_suites_registry_checks_pass_with_a_new_metric(extended, run):
    test_metrics.test_the_table_gives_shapes_and_log_columns()
    assert "embed_norm" in M.log_columns(["a"], ["W_E"])
    norm = run.metrics["embed_norm"]
    w_e = list(run.metrics["grad_names"]).index("W_E")
    assert norm.shape == (12,) and not np.allclose(norm[0], norm[-1])  # computed at every step, and it moves
    np.testing.assert_allclose(norm, run.metrics["weight_norm"][:, w_e], rtol=1e-5)  # the same norm, another entry
    first = json.loads((run.path / "metrics.jsonl").read_text().splitlines()[0])
    assert "embed_norm" in first  # logged: metrics.jsonl and TensorBoard's tags


def test_the_suites_registry_checks_pass_with_a_new_optimizer(extended, run, capsys):
    test_muon.test_bad_optimizer_is_one_config_error_with_the_choices()
    assert main(["train", "--preset", "nanda-tiny", "--set", "optimizer=sgdx"]) == 2
    assert f"choose one of {', '.join(OPTIMIZERS)}" in capsys.readouterr().err and "sgd" in OPTIMIZERS  # the CLI's
    # the chain ends in the entry's stage: plain SGD's first update is -lr * g
    params = {"w": jnp.ones(3)}
    g = {"w": jnp.array([1.0, -2.0, 3.0])}
    tx = make_optimizer(OptimConfig(optimizer="sgd", lr=0.5, warmup_steps=0), 10)
    np.testing.assert_allclose(tx.update(g, tx.init(params), params)[0]["w"], [-0.5, 1.0, -1.5])
    assert run.config.optim.optimizer == "sgd" and np.isfinite(run.metrics["loss"]).all()


def test_the_suites_registry_checks_pass_with_a_new_task(extended, run):
    test_tasks.test_unknown_task_lists_the_registry()
    test_tasks.test_each_task_has_its_own_smallest_p_and_variants()
    test_tasks.test_only_the_registry_compares_task_names()
    task = make_task(TaskConfig(name="add2", p=7, valid_size=10))
    parts = [s for s in (task.train, task.valid, task.test) if s is not None]
    x, y = np.concatenate([s.x for s in parts]), np.concatenate([s.y for s in parts])
    assert x.shape[1:] == (3,) and y.shape == (len(x), 1) and (x[:, 2] == 7).all()  # [x0, x1, p], one slot
    assert len({tuple(r) for r in x[:, :2]}) == len(x) and (y[:, 0] == (x[:, 0] + 2 * x[:, 1]) % 7).all()
    assert len(task.valid.x) == 10
    assert run.metrics["valid_acc"].shape == (12, 1) and run.config.task.name == "add2"
    with pytest.raises(ConfigError, match="choose one of: .*add2"):
        validate(apply_overrides(get_preset("nanda-tiny"), ["task.name=add3"]))


@SLOW
def test_the_suites_registry_checks_pass_with_a_new_hook_point(extended):
    for preset in ("nanda-tiny", "addition-tiny"):
        test_hooks.test_every_hook_point_by_its_transformerlens_name_and_shape(preset)
        test_hooks.test_every_hook_point_is_reached_once_and_a_hook_replaces_it(preset)
    test_hooks.test_logits_and_every_activation_equal_the_numpy_forward_and_the_training_path("nanda-tiny")
    test_cache.test_axes_name_every_dimension_of_every_hook_point("nanda-tiny")
    test_cache.test_every_hook_point_has_its_row()
    cfg, task, _, params = test_hooks.setup("nanda-tiny")
    model = HookedModel.of(cfg, task)
    x = task.valid.x[:4]
    _, cache = jax.jit(model.run_with_cache, static_argnames="names")(
        params, x, names=("blocks.0.attn.hook_x", "blocks.0.hook_resid_pre"))
    np.testing.assert_array_equal(cache["blocks.0.attn.hook_x"], cache["blocks.0.hook_resid_pre"])  # no ln1 here
    assert cache.axes("blocks.0.attn.hook_x") == ("batch", "pos", "d_model")  # its row in cache.HOOKS


@pytest.mark.study  # draws every figure of a run (make test-studies; make test's 10-minute budget)
def test_the_suites_registry_checks_pass_with_a_new_figure(extended, run, tmp_path, monkeypatch):
    found = test_figures._checking(monkeypatch)
    assert main(["figures", str(run.path), "--out", str(tmp_path)]) == 0
    stem = f"{FIGURE}_{run.path.name}"
    test_figures.assert_figures(tmp_path, [stem, f"fig17_grad_norms_{run.path.name}"])
    assert found[stem] == [] and len(found) == len(list(tmp_path.glob("*.png")))
