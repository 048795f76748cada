"""The package's layering: every import in miiii/ goes down this list (module-level and function-level alike), so
there is no cycle and no module reaches above itself; and reading a finished run imports no jax."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from _runhelp import SLOW

PACKAGE = Path(__file__).resolve().parents[1] / "miiii"

# Bottom to top: the code map. A module may import only modules before it.
LAYERS = (
    "errors",  # ConfigError, shown
    "files",  # atomic writes, RunError
    "provenance",  # a bundle's commit, date, machine; JSON-ready values
    "compile_cache",  # jax's persistent compilation cache
    "gpu",  # nvidia-smi's query, the CUDA build a driver supports, no silent CPU training on a GPU box
    "doctor",  # `python -m miiii doctor`: versions, backend, devices, driver, cache, disk
    "analysis",  # numpy: Fourier, SVD, statistics
    "cadence",  # which steps are evaluated, recorded, kept
    "grokfast",  # the EMA / MA gradient filters (optax)
    "orthograd",  # Prieto et al.'s perpendicular gradient (optax)
    "optimizers",  # the optimizer registry: optim.optimizer's names and last stages
    "metrics",  # the per-step metrics table
    "tokens",  # how the tasks' numbers become tokens: the grid, the book's sequences, probes, edge cases
    "taskdata",  # a built task: its splits, loss description and class buckets
    "tasks",  # the task registry: TaskConfig, every rule of a task, its data and loss description
    "config",  # RunConfig and its sections, --set
    "soft_ties",  # train.soft_ties: the penalty, the followers set, a tied model's start from an untied run's
    "validate",  # every config a run cannot start from (asks the task registry)
    "presets",  # named RunConfigs
    "model",  # the Flax transformer family
    "optim",  # the optax chain
    "rundir",  # the run directory's files: names, writers, readers (numpy only)
    "actsindex",  # acts/index.json: its schema, its own checksum, the rows and inputs it vouches for
    "integrity",  # checksums.json over a finished run's files; the metrics rows each checkpoint vouches for
    "claim",  # one writer per run directory
    "metricslog",  # metrics.jsonl and tb/
    "cache",  # a cache by hook name: its axes and what a recording kept (numpy only)
    "hooks",  # TransformerLens-style hook points
    "interventions",  # ablations through the hooks
    "train",  # the jitted step and chunk
    "record",  # the recording's plan: names, inputs, shapes, exact bytes
    "recorder",  # the recording streamed to acts/ by a writer thread
    "checkpoint",  # orbax checkpoints
    "run",  # a loaded run (Run, load_run)
    "session",  # the host loop of one run: chunks, checkpoints, metrics, the recorder, Ctrl-C
    "runner",  # starting and resuming a run
    "sweepfiles",  # a sweep's members.csv and grok_steps.png
    "sweephosts",  # a sweep over several processes: joining, agreeing, gathering
    "sweepmembers",  # each member's run directory (recorder, checkpoints); the plan a resume reads
    "sweepprogram",  # a sweep's members as one vmapped program, one step counter
    "sweep",  # many runs in one program
    "bookeval",  # the book's evaluation of a sequence run
    "hard",  # hard examples: the pairs a sequence run decodes wrong, for a round's replay
    "phases",  # a recipe in phases: each phase from the one before, a screen's best member, a round's hard pairs
    "llc",  # the local learning coefficient by SGLD at a run's kept steps
    "rules",  # the verdict rules: pure functions of the measures' numbers
    "plotstyle",  # the figures' look and shared helpers
    "plots_neurons",  # figures of the neurons, the attention and their change over training
    "plots_sequence",  # the book's figures of one sequence run: attention, embeddings, positions
    "plots",  # the paper's other figures; draw_all
    "compare",  # several runs' curves and grok steps overlaid
    "film",  # a run over its recorded steps as an animation
    "page",  # a run on one self-contained HTML page
    "export",  # AdderBoard export
    "transformerlens",  # TransformerLens export
    "cliargs",  # the command line's arguments and --help
    "cli",
    "__init__",
    "__main__",
)


def _runtime_nodes(tree):
    """Every node but those under `if TYPE_CHECKING:` (imports for type hints only, never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if test is not None and "TYPE_CHECKING" in ast.unparse(test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def imports(path: Path) -> set[str]:
    """The miiii modules `path` imports anywhere in it (top level or inside a function), type-checking-only
    imports aside."""
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "miiii":
            out |= {a.name for a in node.names} if node.module == "miiii" else {node.module.split(".")[1]}
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("miiii.")}
    return out - {path.stem}


def test_every_module_is_placed_and_every_import_goes_down():
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules == set(LAYERS), f"place these in LAYERS: {modules ^ set(LAYERS)}"
    rank = {m: i for i, m in enumerate(LAYERS)}
    upward = [f"{p.stem} -> {dep}" for p in PACKAGE.glob("*.py") for dep in imports(p) if rank[dep] >= rank[p.stem]]
    assert not upward, f"imports that go up the layers (or cycle): {upward}"


def test_the_check_sees_function_level_imports_and_skips_type_checking_ones(tmp_path):
    f = tmp_path / "rundir.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from miiii.config import RunConfig\n"
                 "def f():\n    from miiii.run import load_run\n")
    assert imports(f) == {"run"}


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.parametrize("code", [
    "import miiii",
    "from miiii.run import load_run; from miiii.rundir import read_metrics_log; from miiii.cli import main",
])
def test_reading_runs_and_the_package_import_no_jax(code):
    mods = _modules_after(code)
    assert "jax" not in mods and "flax" not in mods and "optax" not in mods


@SLOW
def test_a_finished_runs_metrics_and_activations_read_without_jax(tmp_path):
    from miiii import apply_overrides, get_preset
    from miiii.runner import train_run

    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=20", "chunk=10", "record.every=5"])
    train_run(cfg, tmp_path / "run", progress=False, tensorboard=False)
    mods = _modules_after(f"from miiii.run import load_run\nr = load_run({str(tmp_path / 'run')!r})\n"
                          "assert r.metrics['loss'].shape == (20,) and r.summary and r.params\n"
                          "assert all(len(a) and float(abs(a[0]).sum()) >= 0 for a in r.acts.values())")
    assert "jax" not in mods


def test_presets_command_imports_no_jax():
    out = subprocess.run([sys.executable, "-c", "import sys, runpy\nsys.argv = ['miiii', 'presets']\n"
                          "try:\n    runpy.run_module('miiii', run_name='__main__')\nexcept SystemExit:\n    pass\n"
                          "print('JAX' if 'jax' in sys.modules else 'NOJAX')"],
                         capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "NOJAX", out.stdout[-500:] + out.stderr[-500:]


EXPERIMENTS = PACKAGE.parent / "experiments"


def test_experiments_are_one_package_per_study_of_short_modules_with_plain_imports():
    """experiments/: a package of one package per study, each run as `python -m experiments.NAME` from the repository
    root; no module over 400 lines, and none reaches its siblings through sys.path (plain imports)."""
    assert (EXPERIMENTS / "__init__.py").is_file()
    studies = [d for d in EXPERIMENTS.iterdir() if d.is_dir() and d.name != "__pycache__"]
    assert {d.name for d in studies} >= {"paper", "book", "bench", "adderboard"}
    missing = [f"{d.name}/{f}" for d in studies for f in ("__init__.py", "__main__.py") if not (d / f).is_file()]
    assert not missing, f"a study package without: {missing}"
    files = sorted(EXPERIMENTS.rglob("*.py"))
    long = [f"{p.relative_to(EXPERIMENTS)}: {n}" for p in files if (n := len(p.read_text().splitlines())) > 400]
    assert not long, f"split these: {long}"
    assert not [p.name for p in files if "sys.path" in p.read_text()]
