"""examples/: each script runs on a tiny nanda run with kept checkpoints (the ablation study on a two-member sweep of
it), and what it prints is what the library computes; --help works and bad input is one error line, exit 2."""

from __future__ import annotations

import numpy as np
import pytest
from _runhelp import ROOT, finished_run, load_module

from miiii.analysis import neuron_freq_fractions, neuron_key_freqs, to_grid
from miiii.cli import main as cli_main

EXAMPLES = {name: ROOT / "examples" / f"{name}.py" for name in ("fourier_neurons", "ablation_sweep", "before_after")}
# test_figures.py's TINY, so that its nanda run, trained once per session (`finished_run`), serves both files: kept
# steps 0, 1, 6, 40 (a few, cheaply), p = 13, no grokking in 40 steps
TINY = ("p=13", "task.train_frac=0.5", "task.valid_size=30", "model.d_model=32", "model.d_mlp=64", "steps=40",
        "train.chunk=40", "ckpt.keep_log=3")


@pytest.fixture(scope="module")
def tiny():
    return finished_run("nanda-tiny", *TINY)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "sw"
    # no recording, no log-spaced checkpoints: the study reads the final parameters only, and the chunk compiles
    # without the recording's programs
    assert cli_main(["sweep", "--preset", "nanda-tiny", "--seeds", "2", "--steps", "30", "--out", str(out),
                     "--set", "record.acts=", "--set", "record.params=", "--set", "ckpt.keep_log=0",
                     "--no-progress"]) == 0
    return out


def script(name):
    return load_module(EXAMPLES[name])


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_says_what_it_does_and_refuses_bad_input(name, tmp_path, capsys):
    mod = script(name)
    assert f"python examples/{name}.py" in mod.__doc__  # the command line, as the studies' docstrings give it
    with pytest.raises(SystemExit) as e:
        mod.main(["--help"])
    assert e.value.code == 0 and "runs/latest" in capsys.readouterr().out
    assert mod.main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_fourier_neurons_prints_every_kept_step(tiny, tmp_path, capsys):
    capsys.readouterr()
    assert script("fourier_neurons").main([str(tiny.path), "--out", str(tmp_path / "n.png")]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == tiny.kept_steps and (tmp_path / "n.png").stat().st_size > 1000
    # the last kept step is the final model: its key frequencies are the library's, computed here directly
    grid = to_grid(tiny.cache(("blocks.0.mlp.hook_post",))["blocks.0.mlp.hook_post"][:, -1], tiny.config.task.p)
    freq, keys = neuron_key_freqs(neuron_freq_fractions(grid))
    assert int(rows[-1][1]) == int((freq > 0).sum()) and " ".join(rows[-1][3:]) == str(keys.tolist())


def test_ablation_study_over_a_sweeps_members(sweep, capsys):
    from miiii.run import load_run

    mod = script("ablation_sweep")
    capsys.readouterr()
    assert mod.main([str(sweep)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in out[2:]] == ["seed 0", "seed 1"]  # one row per member, named by its seed
    run = load_run(sweep / "member_001")
    a = mod.ablations(run, 0, 2)
    # the unablated loss is the trainer's own evaluation: its per-split losses (over ln p) weighted over the grid
    final, p = run.summary["final"], run.config.task.p
    sizes = {s: len(run.inputs(s)) for s in ("train", "valid", "test")}
    grid = sum(final[s]["loss"] * n for s, n in sizes.items()) / p**2 * np.log(p)
    assert a["loss"] == pytest.approx(grid, rel=1e-4) and a["neurons"] == pytest.approx(a["loss"])  # none zeroed
    assert len(a["heads"]) == run.config.model.n_heads and len(a["needs"]) == 2
    assert all(1 <= k <= p // 2 and v > 0 for k, v in a["needs"]) and a["needs"][0][1] >= a["needs"][1][1]


def test_before_and_after_compares_two_kept_steps(tiny, capsys):
    mod = script("before_after")
    capsys.readouterr()
    assert mod.main([str(tiny.path)]) == 0  # 40 steps do not grok: the first and last kept steps
    out = capsys.readouterr().out.splitlines()
    first, last = tiny.kept_steps[0], tiny.kept_steps[-1]
    assert f"comparing steps {first} and {last} (it did not grok" in out[0]
    rows = {line[:40].strip(): line[40:].split() for line in out[2:]}
    # the final model's train accuracy is what training measured at its last step
    assert float(rows["train accuracy"][1]) == pytest.approx(tiny.summary["final"]["train"]["task_acc"][0], abs=1e-3)
    # and its train loss is summary.json's, in summary.json's unit (named on the first line)
    assert float(rows["train loss"][1]) == pytest.approx(tiny.summary["final"]["train"]["loss"], rel=1e-3)
    assert f"losses in {tiny.summary['loss_unit']}" in out[0]
    assert mod.main([str(tiny.path), "--before", "7"]) == 2
    assert "step 7 was not kept" in capsys.readouterr().err


def test_ablation_study_refuses_an_unfinished_sweep_in_one_line(tmp_path, capsys):
    unfinished = tmp_path / "sw"
    unfinished.mkdir()
    (unfinished / "sweep-plan.json").write_text("{}")  # the plan a sweep writes first; no sweep.json: interrupted
    assert script("ablation_sweep").main([str(unfinished)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unfinished sweep" in err and "--resume" in err
