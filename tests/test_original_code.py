"""The original code's variant (docs/definitions.md §5): its initialisation, its input order, the summed loss of
Eq. 12, the *-original presets and `python -m experiments.paper --variant original`, each checked against an independent
computation of what the original does."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from _runhelp import make_legacy

from experiments.paper import study as paper
from miiii.config import ConfigError, apply_overrides
from miiii.plots_neurons import train_idx
from miiii.presets import ORIGINAL_CODE, as_original_code, get_preset
from miiii.run import load_run
from miiii.rundir import CKPT_META, CONFIG
from miiii.runner import train_run
from miiii.tasks import make_task
from miiii.tokens import grid_inputs
from miiii.train import make_trainer
from miiii.validate import validate

TRUNC = 0.87962566103423978  # std of a standard normal truncated at +-2, which jax's he_normal divides by


def _params(cfg):
    return jax.tree.map(np.asarray, make_trainer(cfg, make_task(cfg.task)).init(0).params)


def _flat(params) -> dict[str, np.ndarray]:
    return {k[-1].key: v for k, v in jax.tree_util.tree_flatten_with_path(params)[0]}


def test_original_init_is_a_truncated_he_normal_with_the_original_fan_ins():
    """At p = 113, d 256 the fan-ins are the original's array shapes (W_pos 3, W_E 114, W_Q 4 * 256, miiii's W_U
    29 * 256); the values are cut at 2 std, which a plain normal of this size would not be."""
    w = _flat(_params(get_preset("miiii-original")))
    fan_in = {"W_E": 114, "W_pos": 3, "W_Q": 4 * 256, "W_K": 4 * 256, "W_V": 4 * 256, "W_O": 4 * 64, "W_in": 256,
              "W_out": 1024, "W_U": 29 * 256}
    assert set(fan_in) == set(w)
    for name, f in fan_in.items():
        std = math.sqrt(2 / f)
        assert abs(w[name].std() / std - 1) < 0.1, (name, w[name].std(), std)
        assert np.abs(w[name]).max() <= 2 * std / TRUNC * (1 + 1e-6), name  # truncated at 2 std of the normal
    assert abs(w["W_pos"].std() - 0.82) < 0.08 and abs(w["W_U"].std() - 0.016) < 0.002  # the numbers §5 quotes
    he = _flat(_params(get_preset("miiii")))  # this codebase's He: N(0, 2 / d) for the embeddings
    assert abs(he["W_pos"].std() / math.sqrt(2 / 256) - 1) < 0.1
    assert np.abs(he["W_E"]).max() > 2 * math.sqrt(2 / 256) / TRUNC  # untruncated


def test_high_digit_first_feeds_the_original_tokens_with_the_same_split_and_labels():
    cfg = get_preset("miiii-tiny").task
    p = cfg.p
    hi = replace(cfg, digit_order="high")
    x = grid_inputs(p, "high")
    n = np.arange(p * p)
    np.testing.assert_array_equal(x, np.stack([n // p, n % p, np.full_like(n, p)], 1))  # repr_fn: (x // p, x % p)
    np.testing.assert_array_equal(grid_inputs(p, "high", 5), grid_inputs(p, "low", 5)[:, [1, 0, 2]])  # a corner
    a, b = make_task(cfg), make_task(hi)
    for s in ("train", "valid", "test"):
        np.testing.assert_array_equal(getattr(b, s).x, getattr(a, s).x[:, [1, 0, 2]])
        np.testing.assert_array_equal(getattr(b, s).y, getattr(a, s).y)
    # the training samples' numbers n, read back from the tokens by their positions, are the split's
    perm = np.random.default_rng(cfg.split_seed).permutation(p * p)[: len(a.train.x)]
    for t in (cfg, hi):
        got = train_idx(SimpleNamespace(config=SimpleNamespace(task=t)))
        np.testing.assert_array_equal(got, perm)
    with pytest.raises(ConfigError, match="digit_order"):
        validate(apply_overrides(get_preset("miiii-tiny"), ["task.digit_order=middle"]))


@pytest.mark.parametrize("variant", ["none", "masked"])
def test_summed_loss_is_the_mean_times_the_tasks_switched_on(variant):
    cfg = replace(get_preset("miiii-tiny").task, variant=variant)
    mean, total = make_task(cfg), make_task(replace(cfg, loss_over_tasks="sum"))
    on = mean.loss_weight > 0
    np.testing.assert_allclose(total.loss_weight, mean.loss_weight * on.sum(), rtol=1e-6)
    np.testing.assert_allclose(total.loss_weight[on], 1 / np.log(mean.n_classes[on]), rtol=1e-6)  # CE_q / ln q


def test_original_presets_differ_from_the_project_only_in_the_original_choices():
    for project, original in (("miiii", "miiii-original"), ("miiii-paper-cpu", "miiii-original-paper-cpu")):
        a, b = get_preset(project), get_preset(original)
        assert (b.model.init, b.optim.ema_init, b.task.digit_order) == ("original", "zeros", "high")
        assert replace(b, task=a.task, model=a.model, optim=a.optim) == a
        assert replace(b.task, digit_order="low") == a.task and replace(b.model, init="he") == a.model
        assert replace(b.optim, ema_init="first") == a.optim
    nanda = get_preset("nanda-original")  # the paper's model and recipe on nanda
    assert nanda.task.name == "nanda" and nanda.model == get_preset("miiii-original").model
    assert nanda.optim == get_preset("miiii-original").optim and nanda.train.steps == 65_536
    assert as_original_code(get_preset("nanda")).model.init == "original" and set(ORIGINAL_CODE) <= {"task", "model",
                                                                                                      "optim"}


def test_paper_variant_original_runs_every_role_as_the_original_code():
    for smoke in (False, True):
        for role in paper.ROLES:
            project, original = (paper.role_config(role, smoke, v) for v in ("project", "original"))
            assert project == get_preset(paper.ROLES[role][smoke])
            assert (original.model.init, original.optim.ema_init, original.task.digit_order) == ("original", "zeros",
                                                                                                  "high")
            if role == "nanda":
                assert original == get_preset(paper.ORIGINAL_NANDA[smoke])
                assert original.model.d_model == get_preset(paper.ROLES["miiii"][smoke]).model.d_model
            else:
                assert original == as_original_code(project)


def test_a_run_written_before_a_config_field_existed_still_loads(tmp_path):
    """config.json and ckpt.json of an older run lack the newer task fields: they read back as the defaults, and
    an edit is still refused."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=20", "train.chunk=10", "ckpt.every=10"])
    run_dir = tmp_path / "run"
    train_run(cfg, run_dir, progress=False)
    make_legacy(run_dir)  # the older runs also had no manifest (a legacy run: a warning)
    for name in (CONFIG, CKPT_META):
        d = json.loads((run_dir / name).read_text())
        task = d["config"]["task"] if name == CKPT_META else d["task"]
        del task["digit_order"], task["loss_over_tasks"]
        (run_dir / name).write_text(json.dumps(d))
    with pytest.warns(UserWarning, match="checksums"):
        assert load_run(run_dir).config == cfg
    d = json.loads((run_dir / CONFIG).read_text())
    d["task"]["digit_order"] = "high"
    (run_dir / CONFIG).write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="edited"):
        load_run(run_dir)
