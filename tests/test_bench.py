"""The benchmark: its analytic FLOP counts against the matmuls jax traces, its PyTorch references (in the repository,
runnable), its refusal of bad input."""

import importlib
import shutil
import subprocess
from math import prod
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.extend.core import jaxprs_in_params

from experiments.bench import flops, references
from experiments.bench import study as bench
from miiii import apply_overrides, get_preset
from miiii.model import build_model
from miiii.tasks import make_task

ROOT = Path(__file__).resolve().parents[1]


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
    assert getattr(flops, flops_fn)(cfg, task) == per_sample


def test_default_references_are_in_the_repository():
    """A clone has only what git tracks: the bench's default references must be there, every script it runs."""
    assert bench.REFERENCES.resolve().is_relative_to(ROOT)
    scripts = {c[3] for quick in (False, True) for c in bench.bench_configs(quick)}
    assert scripts == {"torch_paper.py", "torch_adder.py"}
    assert references.missing_scripts(bench.REFERENCES, bench.bench_configs(False)) == []
    if (ROOT / ".git").exists() and shutil.which("git"):
        paths = [str((bench.REFERENCES / s).relative_to(ROOT)) for s in sorted(scripts)]
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", *paths], cwd=ROOT, capture_output=True)
        assert tracked.returncode == 0, tracked.stderr


def test_bench_refuses_peers_without_the_scripts(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--peers", str(tmp_path), "--out", str(out), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "torch_paper.py" in err and err.count("\n") == 1
    assert not out.exists()


def test_bench_refuses_without_the_references(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench, "REFERENCES", tmp_path)
    out = tmp_path / "bench.json"
    assert bench.main(["--out", str(out), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "torch_adder.py" in err and "--skip-reference" in err
    assert not out.exists()


def test_bench_refuses_without_torch_and_contradictory_flags(tmp_path, capsys, monkeypatch):
    out = tmp_path / "bench.json"
    assert bench.main(["--peers", str(bench.REFERENCES), "--skip-reference", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: --peers and --skip-reference")
    monkeypatch.setattr(bench.importlib.util, "find_spec", lambda name: None)
    assert bench.main(["--out", str(out), "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: PyTorch is not installed") and "--skip-reference" in err
    assert not out.exists()


def test_reference_scripts_take_the_bench_command_lines():
    """The arguments the bench passes (and --threads, --compile) parse in the in-repo references."""
    pytest.importorskip("torch")
    for _, _, _, script, args, *_ in bench.bench_configs(False) + bench.bench_configs(True):
        mod = importlib.import_module(f"experiments.bench.{Path(script).stem}")
        extra = ["--threads", "2"] if "paper" in script else []
        a = mod.parse_args([*args, *extra, "--compile"])
        assert a.compile and a.steps == int(args[-1])


@pytest.mark.parametrize("script,args", [
    ("torch_paper.py", ["--task", "nanda", "--p", "11", "--d", "16", "--steps", "2"]),
    ("torch_paper.py", ["--task", "miiii", "--p", "11", "--d", "16", "--steps", "2"]),
    ("torch_adder.py", ["2"]),
])
def test_reference_scripts_run(script, args):
    """A few steps of each in-repo reference, run the way the bench runs them, print a positive steps/s."""
    pytest.importorskip("torch")
    steps_per_s = references.time_reference(bench.REFERENCES / script, args, threads=1)
    assert steps_per_s is not None and steps_per_s > 0


def test_references_run_on_the_asked_device_with_the_accelerator_s_step_count():
    paper, adder = ["--task", "nanda", "--steps", "30"], ["300"]
    assert references.reference_args(paper, "cpu", 1) == paper + ["--device", "cpu"]
    assert references.reference_args(paper, "cuda", 20) == paper + ["--device", "cuda", "--steps", "600"]
    assert references.reference_args(adder, "cuda", 20) == ["300", "--device", "cuda", "--steps", "6000"]
    assert bench.parse_args([]).torch_device == "auto"
    assert bench.parse_args(["--torch-device", "cuda"]).torch_device == "cuda"


def test_in_repo_references_run_as_modules_and_a_peers_as_files(tmp_path):
    """torch_adder.py imports the book's model (experiments.book): the bench runs its own references as modules from
    the repository root, a peer's scripts (--peers DIR) as the files they are."""
    cmd, cwd = references.reference_command(bench.REFERENCES / "torch_adder.py")
    assert cmd[1:] == ["-m", "experiments.bench.torch_adder"] and cwd == ROOT
    cmd, cwd = references.reference_command(tmp_path / "torch_adder.py")
    assert cmd[1:] == [str(tmp_path / "torch_adder.py")] and cwd is None


def test_the_measures_cost_lines_are_the_committed_json():
    """docs/benchmark.md's per-step measures table is generated from results/bench/measures_cost.json."""
    from experiments.bench import measures_cost

    if not measures_cost.JSON.is_file():
        pytest.skip("no committed measures_cost.json")
    assert measures_cost.main(["--check"]) == 0


def _bench_record(eager_ratio: float, vmap_factor: float) -> dict:
    ref = lambda r: {"steps_per_s": 1.0, "ratio": r, "ratio_range": [r - 0.1, r + 0.1]}  # noqa: E731
    row = lambda name: {"config": name, "miiii_steps_per_s": 3.0, "references": {"reference": {  # noqa: E731
        "eager": ref(eager_ratio), "compiled": ref(eager_ratio)}}, "achieved_gflops": 10.0, "fraction_of_peak": 0.05,
        "compile_s": 2.0, "recorded_steps_per_s": None, "recording_overhead": None}
    return {"configs": [row("nanda p113 d128"), row("miiii p113 d256"), row("book adder b512")],
            "vmap_seeds": [{"preset": "nanda-tiny", "factor": vmap_factor, "vmapped_s": 8.0, "one_seed_s": 1.0,
                            "steps": 500}],
            "keep_log_cost": {"keep_log": 20, "preset": "nanda-tiny", "steps": 1500, "cost": 0.3,
                              "on": {"wall_s": 13.0, "compile_s": 6.0, "checkpoints": 25},
                              "off": {"wall_s": 10.0, "compile_s": 6.0, "checkpoints": 3}},
            "rss": None, "metrics_cost": [], "device": "cpu", "backend": "cpu", "date": "2026-01-01 00:00:00",
            "threads": 2, "jax": "0", "torch_device": "cpu", "matmul_peak_gflops": 200.0, "repeats": 3,
            "wall_s": 600.0, "file": "results/bench/bench-cpu.json"}


def test_the_bench_goals_are_read_off_the_record_both_ways():
    from experiments.bench import doc

    good, bad = doc.goals(_bench_record(3.5, 5.0)), doc.goals(_bench_record(1.2, 7.9))
    assert all(line.endswith("**met**") for line in good) and len(good) == len(doc.GOALS)
    assert all(line.endswith("**missed**") for line in bad)  # 1.2x misses every ratio goal, 7.9x the vmapped one
    text = doc.block([_bench_record(3.5, 5.0)])
    assert text.startswith(doc.START) and text.endswith(doc.END) and "**3.50x** (3.40–3.60)" in text


def test_the_benchmark_page_is_the_committed_records():
    """docs/benchmark.md's measured block is generated from results/bench/bench-*.json."""
    from experiments.bench import doc

    assert doc.main(["--check"]) == 0


def test_a_reference_run_without_torch_says_so_in_one_line(monkeypatch, capsys):
    """The references are an optional extra: run without PyTorch they exit 2 with one error line, no traceback."""
    import importlib
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ModuleNotFoundError
    for name in ("experiments.bench.torch_adder", "experiments.bench.torch_paper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        with pytest.raises(SystemExit) as e:
            importlib.import_module(name)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: PyTorch is not installed")
