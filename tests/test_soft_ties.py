"""Soft ties (train.soft_ties) and tightening (train.init_from into a model that ties a weight the source had free):
the penalty against a numpy sum, its config errors, a strong soft tie that really closes the gap in training, a
tightened start that is the source less the dropped weight, and the AdderBoard study's restore of a run from its
submission, decoded by the JAX model exactly as the submission's own numpy decoder does."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from _runhelp import ROOT, SLOW, load_module

from miiii.cli import main
from miiii.config import ConfigError, apply_overrides
from miiii.presets import get_preset
from miiii.run import load_run
from miiii.rundir import flatten_params
from miiii.soft_ties import check_soft_ties, parse_soft, tie_gap, tightened
from miiii.validate import validate

SMALL = ["model.n_heads=1", "model.d_mlp=2", "model.embed=arc"]  # the board's small decoder (adder-146 is the rest)
BOARD = ["--preset", "adder-146", "--set", "task.name=board", "--set", "n_digits=2", "--set", "n_train=256",
         "--set", "n_valid=32", "--set", "batch_size=64", "--set", "chunk=50", "--set", "eval_every=50",
         *[a for s in SMALL for a in ("--set", s)], "--no-progress"]
GATE = "mlp.W_gate=mlp.W_in"


def test_tie_gap_is_the_summed_squared_gap_over_rules_and_blocks():
    rng = np.random.default_rng(0)
    blocks = {f"blocks_{i}": {"attn": {"W_Q": rng.normal(size=(2, 3, 4)), "W_O": rng.normal(size=(2, 4, 3))},
                              "mlp": {"W_in": rng.normal(size=(3, 2)), "W_gate": rng.normal(size=(3, 2))}}
              for i in range(2)}
    params = {**blocks, "W_E_arc": np.ones(3)}
    want = sum(((b["mlp"]["W_gate"] - b["mlp"]["W_in"]) ** 2).sum()
               + ((b["attn"]["W_O"] - b["attn"]["W_Q"].transpose(0, 2, 1)) ** 2).sum() for b in blocks.values())
    got = tie_gap(jax.tree.map(np.float32, params), (GATE, "attn.W_O=T(attn.W_Q)"))
    np.testing.assert_allclose(float(got), want, rtol=1e-5)
    assert float(tie_gap(params, ())) == 0.0


@pytest.mark.parametrize("overrides, says", [
    (["train.soft_ties=mlp.W_out=Trot(mlp.W_in)", "train.soft_tie_weight=1"], "FOLLOWER=T(MASTER)"),
    (["train.soft_ties=mlp.W_in=mlp.W_nope", "train.soft_tie_weight=1"], "train.soft_ties: model.ties entry"),
    ([f"train.soft_ties={GATE}"], "soft_tie_weight = 0.0"),
    (["train.soft_tie_weight=0.5"], "soft_tie_weight = 0.5"),
    ([f"train.soft_ties={GATE}", "train.soft_tie_weight=-1"], "soft_tie_weight = -1"),
    ([f"train.soft_ties={GATE}", "train.soft_tie_weight=inf"], "soft_tie_weight = inf"),
    ([f"train.soft_ties={GATE}", "train.soft_tie_weight=1", "model.mlp_act=relu"], "SwiGLU's gate"),
    ([f"model.ties={GATE}", "model.mlp_act=relu"], "SwiGLU's gate"),  # a tie the model would not build
])
def test_bad_soft_ties_are_refused(overrides, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        validate(apply_overrides(get_preset("adder-146"), SMALL + overrides))


def test_a_soft_tie_joins_two_free_weights_of_matching_shape():
    from miiii.model import abstract_params, build_model
    from miiii.tasks import make_task

    def shapes(ties):
        cfg = apply_overrides(get_preset("adder-146"), [*SMALL, f"model.ties={ties}", "n_train=8", "n_valid=8"])
        task = make_task(cfg.task)
        return abstract_params(build_model(cfg.model, task), task.n_ctx)

    check_soft_ties((GATE,), shapes(""))  # both free: fine
    with pytest.raises(ConfigError, match="not a parameter"):  # the gate is tied already
        check_soft_ties((GATE,), shapes(GATE))
    with pytest.raises(ConfigError, match="cannot be"):  # W_V (1, 3, 4) is not W_Q (1, 3, 4) transposed
        check_soft_ties(("attn.W_V=T(attn.W_Q)",), shapes(""))
    assert parse_soft(("mlp.W_out=T(mlp.W_in)",)) == {("mlp", "W_out"): ("T", "W_in")}


def test_tightened_drops_exactly_the_newly_tied_weights():
    have = {"blocks_0": {"mlp": {"W_in": 1, "W_gate": 2, "W_out": 3}}, "e": 4}
    want = {"blocks_0": {"mlp": {"W_in": 0, "W_out": 0}}, "e": 0}
    assert tightened(have, want, (GATE,)) == ({"blocks_0": {"mlp": {"W_in": 1, "W_out": 3}}, "e": 4},
                                              ["blocks_0/mlp/W_gate"])
    assert tightened(have, want, ()) is None  # the gate is not tied here: a different model
    assert tightened(have, {**want, "new": 0}, (GATE,)) is None  # a leaf the source lacks
    assert tightened(have, have, (GATE,)) is None  # nothing to drop: the usual init_from check applies
    # only a block's follower whose master this model has: not a namesake elsewhere, not one without its master
    assert tightened({**have, "x": {"W_gate": 5}}, want, (GATE,)) is None
    assert tightened(have, {"blocks_0": {"mlp": {"W_out": 0}}, "e": 0}, (GATE,)) is None  # W_in gone: not a tie


def _gap(run) -> float:
    m = run.params["blocks_0"]["mlp"]
    return float(((m["W_gate"] - m["W_in"]) ** 2).sum())


@pytest.fixture(scope="module")
def soft_and_free(tmp_path_factory):
    root = tmp_path_factory.mktemp("soft")
    common = [*BOARD, "--steps", "150", "--set", "lr=1e-2", "--set", "weight_decay=0"]
    assert main(["train", *common, "--run-dir", str(root / "free")]) == 0
    assert main(["train", *common, "--set", f"train.soft_ties={GATE}", "--set", "train.soft_tie_weight=10",
                 "--run-dir", str(root / "soft")]) == 0
    return load_run(root / "free"), load_run(root / "soft")


@SLOW  # two trainings (its fixture): make test-studies
def test_a_strong_soft_tie_closes_the_gap_the_free_model_keeps(soft_and_free):
    free, soft = soft_and_free
    start = load_run(free.path).params_at(0)["blocks_0"]["mlp"]  # the same seed: both start here
    start_gap = float(((start["W_gate"] - start["W_in"]) ** 2).sum())
    assert _gap(soft) < 1e-3 * start_gap and _gap(free) > 0.1 * start_gap
    # the per-task training loss is the task's alone (at step 0, the same parameters and batch, the two runs log
    # one); `loss`, what is minimised, adds the weight times the gap
    np.testing.assert_array_equal(soft.metrics["train_loss"][0], free.metrics["train_loss"][0])
    np.testing.assert_allclose(soft.metrics["loss"][0] - soft.metrics["train_loss"][0].mean(), 10 * start_gap,
                               rtol=1e-4)


@SLOW  # two trainings and a third: make test-studies (test_tied_now_... holds the same start without training)
def test_init_from_into_a_tied_model_starts_at_the_source_less_the_tied_weight(soft_and_free, tmp_path, capsys):
    _, soft = soft_and_free
    run = tmp_path / "tied"
    assert main(["train", *BOARD, "--steps", "50", "--set", f"model.ties={GATE}", "--init-from", str(soft.path),
                 "--run-dir", str(run)]) == 0
    said = capsys.readouterr()
    assert "blocks_0/mlp/W_gate left out" in said.out + said.err
    start, src = flatten_params(load_run(run).params_at(0)), flatten_params(soft.params)
    assert set(src) - set(start) == {"blocks_0/mlp/W_gate"}
    assert all(np.array_equal(start[k], src[k]) for k in start)
    # a model that ties something the source's weights cannot give is refused, nothing written
    assert main(["train", *BOARD, "--steps", "50", "--set", f"model.ties={GATE}", "--set", "model.d_mlp=4",
                 "--init-from", str(soft.path), "--run-dir", str(tmp_path / "no")]) == 2
    assert "not this model's" in capsys.readouterr().err and not (tmp_path / "no").exists()


SUBMISSION = Path("results/adderboard/submissions/adder-41p-41a1-m7-b17.py")


def test_restore_rebuilds_a_run_that_decodes_as_its_submission(tmp_path, capsys):
    from experiments.adderboard.restore import main as restore
    from miiii.hard import hard_pairs
    from miiii.tokens import draw_distinct

    runs = tmp_path / "runs"
    assert restore([str(SUBMISSION), "--runs", str(runs)]) == 0
    run = load_run(runs / "41a1-m7-b17")
    assert not run.legacy and run.config.train.init_from == str(runs / "41a1-m7-b16")  # checksummed, the setting's
    wrong, tried = hard_pairs(runs / "41a1-m7-b17", 400, seed=77)
    mod = load_module(SUBMISSION)
    model, meta = mod.build_model()
    drawn = draw_distinct(np.random.default_rng(77), 2, 10, 400, set())  # hard.pairs_for's draw
    truly = [tuple(map(int, r)) for r in drawn if mod.add(model, int(r[0]), int(r[1])) != int(r[0] + r[1])]
    assert tried == 400 and [tuple(map(int, r)) for r in wrong] == truly and meta["params"] == 41
    assert 0 < len(truly) < 20  # some wrong (so the comparison bites), as few as a 99 % adder gets wrong
    capsys.readouterr()
    # refused, one line and status 2, nothing written: the folder exists; a sweep; another model's weights; a file
    # that is not there, one without weights, one whose weights are not base64
    (tmp_path / "none.py").write_text("x = 1\n")
    (tmp_path / "bad.py").write_text("RUN = '41a1-m7-b16'\n_WEIGHTS = '@@@'\n")
    (tmp_path / "sweep.py").write_text(SUBMISSION.read_text().replace("RUN = '41a1-m7-b17'", "RUN = '41-start-seeds'"))
    (tmp_path / "other.py").write_text(SUBMISSION.with_name("adder-52p-preset-52-phases.py").read_text()
                                       .replace("RUN = 'phase-4'", "RUN = '41a1-m7-b16'"))
    for args in ([SUBMISSION], [SUBMISSION, "--setting", "41a1-m7-b16"], [tmp_path / "sweep.py"],
                 [tmp_path / "other.py"], [tmp_path / "gone.py"], [tmp_path / "none.py"], [tmp_path / "bad.py"]):
        assert restore([*map(str, args), "--runs", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 7 and "exists" in err and "exports 41a1-m7-b17, not 41a1-m7-b16" in err
    assert "a sweep" in err and "not 41a1-m7-b16's model" in err
    assert "no such file" in err and "no RUN and _WEIGHTS" in err and "do not read" in err
    assert sorted(p.name for p in runs.iterdir()) == ["41a1-m7-b17"]
    again = tmp_path / "again"
    (again / ".41a1-m7-b17.restoring").mkdir(parents=True)  # an earlier restore stopped half-way: not in the way
    assert restore([str(SUBMISSION), "--runs", str(again)]) == 0
    assert sorted(p.name for p in again.iterdir()) == ["41a1-m7-b17"]



def test_tied_now_is_what_the_tied_model_computes():
    """The untied model with tied_now's parameters = the model that ties them, on the tightened parameters."""
    from miiii.model import build_model
    from miiii.soft_ties import tied_now
    from miiii.tasks import make_task

    cfg = apply_overrides(get_preset("adder-146"), [*SMALL, "n_train=8", "n_valid=8"])
    task = make_task(cfg.task)
    x = task.train.x[:4]
    free, tied = (build_model(apply_overrides(cfg, [f"model.ties={t}"]).model, task)
                  for t in ("", f"{GATE},mlp.W_out=T(mlp.W_in)"))
    p = free.init({"params": jax.random.key(1)}, x)["params"]
    rules = (GATE, "mlp.W_out=T(mlp.W_in)")
    assert float(tie_gap(tied_now(p, rules), rules)) == 0.0 and float(tie_gap(p, rules)) > 0
    tight, dropped = tightened(p, tied.init({"params": jax.random.key(2)}, x)["params"], rules)
    assert dropped == ["blocks_0/mlp/W_gate", "blocks_0/mlp/W_out"]
    np.testing.assert_array_equal(np.asarray(free.apply({"params": tied_now(p, rules)}, x)[0]),
                                  np.asarray(tied.apply({"params": tight}, x)[0]))


def test_sameweights_tells_a_file_exported_again_from_one_whose_weights_moved(tmp_path, capsys):
    """The check `make adder-41` ends with: the restored 41 exported by today's exporter holds the committed file's
    weights byte for byte; one entry moved by one ulp, or another run's file, is told apart, naming what differs."""
    import base64
    import io

    from experiments.adderboard.restore import main as restore
    from experiments.adderboard.restore import read_submission
    from experiments.adderboard.sameweights import main as same
    from miiii.export import export_adder

    assert restore([str(SUBMISSION), "--runs", str(tmp_path / "runs")]) == 0
    again = tmp_path / "again.py"
    export_adder(tmp_path / "runs" / "41a1-m7-b17", again, name=SUBMISSION.stem)
    assert same([str(again), str(SUBMISSION)]) == 0
    assert "the same run and weights, byte for byte" in capsys.readouterr().out
    run, weights = read_submission(SUBMISSION)
    k = "blocks_0/attn/W_Q"
    weights[k] = weights[k].copy()
    weights[k].flat[3] = np.nextafter(weights[k].flat[3], np.float32(np.inf))
    buf = io.BytesIO()
    np.savez(buf, **weights)
    moved = tmp_path / "moved.py"
    moved.write_text(f"RUN = {run!r}\n_WEIGHTS = {base64.b64encode(buf.getvalue()).decode()!r}\n")
    assert same([str(moved), str(SUBMISSION)]) == 1
    said = capsys.readouterr().out
    assert f"{k}: 1 of {weights[k].size} entries differ" in said and said.count("entries differ") == 1
    assert same([str(SUBMISSION), str(SUBMISSION.with_name("adder-32p-32p-b36.py"))]) == 1
    assert "RUN: 41a1-m7-b17 against 32p-b36" in capsys.readouterr().out
    assert same([str(SUBMISSION), str(tmp_path / "gone.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_make_adder_targets_say_a_run_below_the_bar_was_not_exported(tmp_path):
    """`make adder-41` / `adder-32` compare their export with the committed file; a retrained run that ended below
    the export bar wrote none, and the comparison must say so (exit 1), not fail on "no such file"."""
    import os
    import subprocess

    guard = f"check: ; $(call exported,{tmp_path},adder-41p-41a1-m7-b17.py)"

    def run():
        return subprocess.run(["make", "-s", "--no-print-directory", "--eval", guard, "check"], cwd=ROOT,
                              capture_output=True, text=True, env={**os.environ, "MAKEFLAGS": ""})

    res = run()
    assert res.returncode != 0 and res.stderr.splitlines()[0] == (
        "adder-41p-41a1-m7-b17.py was not written: its run ended below 0.99 exact match on the held-out pairs, so it "
        f"was not exported (its row in {tmp_path}/results.md)")
    (tmp_path / "submissions").mkdir()
    (tmp_path / "submissions" / "adder-41p-41a1-m7-b17.py").write_text("")
    assert (res := run()).returncode == 0 and res.stderr == "", res.stderr
