"""The benchmark's analytic FLOP counts against the matmuls jax actually traces, and its refusal without references."""

from math import prod
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from _runhelp import load_module
from jax.extend.core import jaxprs_in_params

from miiii import apply_overrides, get_preset
from miiii.model import build_model
from miiii.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]
bench = load_module(ROOT / "experiments" / "bench.py")


def dot_flops(jaxpr) -> int:
    """2 * (output size) * (contracted size) summed over every dot_general, sub-jaxprs (pjit, remat, ...) included."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (lhs_contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * prod(eqn.outvars[0].aval.shape) * prod(lhs[i] for i in lhs_contract)
        for sub in jaxprs_in_params(eqn.params):
            total += dot_flops(sub)
    return total


@pytest.mark.parametrize("preset,sets,flops_fn", [("nanda", ["p=113"], "paper_fwd_flops"),
                                                   ("miiii", [], "paper_fwd_flops"),
                                                   ("addition", [], "book_fwd_flops")])
def test_flops_per_sample_equal_the_traced_matmuls(preset, sets, flops_fn):
    """One more sample costs exactly the analytic count; what does not grow with the batch (block 0's Q, K, V tables)
    is a per-step cost the count leaves out."""
    cfg = apply_overrides(get_preset(preset), sets)
    task = make_task(cfg.task)
    model = build_model(cfg.model, task)
    x = jnp.asarray(task.train.x[:4])
    params = jax.eval_shape(lambda: model.init({"params": jax.random.key(0)}, x[:1])["params"])
    bucketed = cfg.model.readout == "last"

    def traced(b):
        return dot_flops(jax.make_jaxpr(lambda p: model.apply({"params": p}, x[:b], bucketed=bucketed))(params).jaxpr)

    per_sample = traced(4) - traced(3)
    assert per_sample == traced(3) - traced(2)  # linear in the batch
    assert getattr(bench, flops_fn)(cfg, task) == per_sample


def test_bench_refuses_without_the_references(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--peers", str(tmp_path), "--out", str(out), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "torch_paper.py" in err and "--skip-reference" in err
    assert not out.exists()
