"""train.precision: reaches every dot of the compiled step, changes nothing on a CPU, lands in summary.json."""

import jax
import numpy as np
import pytest

from miiii.config import ConfigError, apply_overrides
from miiii.presets import get_preset
from miiii.runner import prepare, train_run
from miiii.train import make_trainer, task_data
from miiii.validate import validate


def lowered_dots(precision: str) -> list[str]:
    cfg = apply_overrides(get_preset("nanda-tiny"), [f"train.precision={precision}", "steps=4"])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    state = jax.eval_shape(trainer.init, 0)
    text = trainer.chunk.lower(state, task_data(task), 2).as_text()
    return [line for line in text.splitlines() if "dot_general" in line]


@pytest.mark.parametrize("precision,hlo", [("highest", "HIGHEST"), ("high", "HIGH"), ("default", "DEFAULT")])
def test_precision_reaches_every_dot_of_the_compiled_step(precision, hlo):
    dots = lowered_dots(precision)
    assert len(dots) > 10  # forward, backward and validation matmuls of the step
    assert all(f"precision = [{hlo}, {hlo}]" in d for d in dots), [d for d in dots if hlo not in d][:2]


def test_paper_and_book_presets_ask_for_true_float32():
    for name in ("nanda", "miiii", "addition", "reversal", "miiii-paper-cpu", "nanda-paper-cpu"):
        assert get_preset(name).train.precision == "highest"
    with pytest.raises(ConfigError, match="train.precision"):
        validate(apply_overrides(get_preset("nanda"), ["train.precision=tf32"]))


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_precision_changes_nothing_on_cpu_and_is_recorded(tmp_path):
    if jax.default_backend() != "cpu":
        pytest.skip("on an accelerator the passes differ by design")
    out = {}
    for p in ("highest", "default"):
        cfg = apply_overrides(get_preset("nanda-tiny"), [f"train.precision={p}", "steps=30", "chunk=10"])
        summary = train_run(cfg, tmp_path / p, progress=False)
        assert summary["precision"] == p and summary["jax_version"] == jax.__version__
        assert summary["backend"] == "cpu" and summary["device"]
        out[p] = np.load(tmp_path / p / "metrics.npz")["train_loss"]
    np.testing.assert_array_equal(out["highest"], out["default"])


@pytest.mark.parametrize("precision,hlo", [("highest", "HIGHEST"), ("default", "DEFAULT")])
def test_the_hooked_forward_runs_at_the_run_s_precision(precision, hlo):
    """Analyses (hooks, caches, interventions, the paper's measures) run the textbook forward: at the precision the
    run trained at, not JAX's default (TF32 on a GPU)."""
    from miiii.hooks import HookedModel
    from miiii.tasks import make_task

    cfg = apply_overrides(get_preset("miiii-tiny"), [f"train.precision={precision}"])
    task = make_task(cfg.task)
    model = HookedModel.of(cfg, task)
    params = make_trainer(cfg, task).init(0).params
    text = jax.jit(model.forward).lower(params, task.valid.x[:2]).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert len(dots) >= 5 and all(f"precision = [{hlo}, {hlo}]" in d for d in dots), dots[:2]
