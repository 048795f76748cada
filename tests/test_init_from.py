"""Training in phases (train.init_from, `train --init-from RUN[@STEP]`): the new run starts exactly at the source's
parameters with a fresh optimizer, a kept step can be the start, and a source that is not this model is refused
before anything is written."""

from __future__ import annotations

import numpy as np
import pytest

from miiii.cli import main
from miiii.run import load_run
from miiii.rundir import flatten_params

# _runhelp.RESUME_ARGS' settings but the steps: without log-spaced checkpoints the chunk's program does not depend
# on the steps, so the source is the reference run's programs (the persistent cache) and compiles nothing new
TINY = ["--preset", "miiii-tiny", "--set", "chunk=20", "--set", "ckpt.every=20", "--set", "batch_size=64",
        "--set", "ckpt.keep_log=0", "--no-progress"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("phase") / "a"
    assert main(["train", *TINY, "--steps", "40", "--run-dir", str(run_dir)]) == 0
    return run_dir


def _same(a, b) -> bool:
    a, b = flatten_params(a), flatten_params(b)
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_phase_two_starts_at_phase_ones_parameters(source, tmp_path):
    run_dir = tmp_path / "b"
    assert main(["train", *TINY, "--steps", "20", "--set", "lr=3e-4", "--init-from", str(source),
                 "--run-dir", str(run_dir)]) == 0
    b = load_run(run_dir)
    assert b.config.train.init_from == str(source) and b.config.optim.lr == 3e-4
    assert _same(b.params_at(0), load_run(source).params)
    assert not _same(b.params, load_run(source).params)  # and trained from there


@pytest.mark.study  # a third training: make test-studies (make test keeps its 10-minute budget)
def test_a_kept_step_can_be_the_start(source, tmp_path):
    c = tmp_path / "c"
    assert main(["train", *TINY, "--steps", "20", "--init-from", f"{source}@20", "--run-dir", str(c)]) == 0
    assert _same(load_run(c).params_at(0), load_run(source).params_at(20))  # not its last (40)


@pytest.mark.parametrize("extra, message", [
    (["--set", "model.d_model=16"], "not this model's"),
    (["--init-from-step"], None),
])
def test_a_source_of_another_model_is_refused_and_nothing_written(source, tmp_path, capsys, extra, message):
    if message is None:  # a kept step that was not kept, and a missing directory
        for bad, want in ((f"{source}@9", "kept no checkpoint at step 9"), (str(tmp_path / "nothing"), "not a run")):
            assert main(["train", *TINY, "--steps", "20", "--init-from", bad, "--run-dir", str(tmp_path / "x")]) == 2
            assert want in capsys.readouterr().err and not (tmp_path / "x").exists()
        return
    assert main(["train", *TINY, "--steps", "20", *extra, "--init-from", str(source),
                 "--run-dir", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_a_sweep_refuses_init_from(source, tmp_path, capsys):
    assert main(["sweep", "--preset", "miiii-tiny", "--seeds", "2", "--steps", "20", "--set",
                 f"train.init_from={source}", "--out", str(tmp_path / "s"), "--no-progress"]) == 2
    assert "train.init_from" in capsys.readouterr().err


@pytest.mark.study  # two trainings and a second call: make test-studies
def test_a_phased_preset_trains_its_phases_in_order_and_skips_finished_ones(tmp_path, monkeypatch, capsys):
    from miiii import presets

    tiny = ("miiii-tiny", "train.chunk=20", "ckpt.every=20", "train.batch_size=64", "train.steps=20")
    monkeypatch.setitem(presets.PHASED, "tiny-phases", ("two phases", (tiny, (*tiny, "optim.lr=3e-4"))))
    run = tmp_path / "p"
    assert main(["train", "--preset", "tiny-phases", "--run-dir", str(run), "--no-progress"]) == 0
    one, two = load_run(run / "phase-1"), load_run(run / "phase-2")
    assert two.config.train.init_from == str(run / "phase-1") and two.config.optim.lr == 3e-4
    assert _same(two.params_at(0), one.params)
    capsys.readouterr()
    assert main(["train", "--preset", "tiny-phases", "--run-dir", str(run), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("finished") == 2
    assert main(["train", "--preset", "tiny-phases", "--set", "lr=1", "--run-dir", str(tmp_path / "q")]) == 2
    capsys.readouterr()
    assert main(["train", "--preset", "tiny-phases", "--seed", "5", "--run-dir", str(run), "--no-progress"]) == 2
    assert "give the --seed it was trained with" in capsys.readouterr().err
    seeded = tmp_path / "s"
    assert main(["train", "--preset", "tiny-phases", "--seed", "5", "--run-dir", str(seeded), "--no-progress"]) == 0
    assert [load_run(seeded / f"phase-{k}").config.train.seed for k in (1, 2)] == [5, 5]
    assert not _same(load_run(seeded / "phase-1").params, one.params)
    assert load_run(seeded / "phase-2").config.train.init_from == str(seeded / "phase-1")
    for extra in (["--steps", "5"], ["--init-from", str(run / "phase-1")]):
        assert main(["train", "--preset", "tiny-phases", *extra, "--run-dir", str(tmp_path / "x")]) == 2


@pytest.mark.study  # a sweep, a run and a second call: make test-studies
def test_a_screen_phase_hands_on_its_member_with_the_lowest_training_loss(tmp_path, monkeypatch, capsys):
    """train.screen = 3: phase 1 is one sweep of seeds 7, 8, 9 (its plan a plain sweep's), phase 2 starts from the
    member whose final training loss is lowest (read here from each member's own summary.json), with its seed; a
    rerun finds both finished."""
    import json

    from miiii import presets
    from miiii.phases import phase_summary
    from miiii.sweepmembers import read_json

    tiny = ("miiii-tiny", "train.chunk=10", "ckpt.every=10", "train.batch_size=64", "train.steps=10")
    screen = (*tiny, "train.screen=3", "train.seed=7")
    monkeypatch.setitem(presets.PHASED, "tiny-screen", ("a screen, a phase", (screen, (*tiny, "optim.lr=3e-4"))))
    run = tmp_path / "p"
    assert main(["train", "--preset", "tiny-screen", "--run-dir", str(run), "--no-progress"]) == 0
    members = sorted((run / "phase-1").glob("member_*"))
    losses = [json.loads((m / "summary.json").read_text())["final"]["train"]["loss"] for m in members]
    best = members[int(np.argmin(losses))]
    assert len(members) == 3 and len(set(losses)) == 3
    plan = read_json(run / "phase-1" / "sweep-plan.json")
    assert plan["seeds"] == 3 and plan["config"]["train"]["screen"] == 0 and plan["config"]["train"]["seed"] == 7
    two = load_run(run / "phase-2")
    assert two.config.train.init_from == str(best) and two.config.optim.lr == 3e-4
    assert two.config.train.seed == load_run(best).config.train.seed == 7 + int(np.argmin(losses))
    assert _same(two.params_at(0), load_run(best).params)
    assert phase_summary(run / "phase-1")["resumed_from"] is None
    assert phase_summary(run / "phase-1")["screen"] == dict(members=3, member=int(np.argmin(losses)),
                                                            seed=two.config.train.seed, train_loss=min(losses))
    capsys.readouterr()
    assert main(["train", "--preset", "tiny-screen", "--run-dir", str(run), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("finished") == 2


def test_a_screen_picks_the_lowest_training_loss_of_the_members_that_did_not_diverge(tmp_path):
    from miiii.errors import ConfigError
    from miiii.files import write_json_atomic
    from miiii.phases import screen_pick

    def member(i, loss, gone=None):
        return dict(member=i, seed=10 + i, diverged_at=gone, final=dict(train=dict(loss=loss), valid=dict(loss=0.0)))

    rows = [member(0, 0.9), member(1, 0.2, gone=500), member(2, float("nan")), member(3, 0.5), member(4, 0.5)]
    write_json_atomic(tmp_path / "sweep.json", dict(members=rows))
    pick = screen_pick(tmp_path)  # member 1 diverged, 2's loss is NaN: of 0, 3, 4 the lowest, the first of a tie
    assert (pick["member"], pick["seed"], pick["dir"]) == (3, 13, str(tmp_path / "member_003"))
    write_json_atomic(tmp_path / "sweep.json", dict(members=rows[1:3]))
    with pytest.raises(ConfigError, match="every member of the screen diverged"):
        screen_pick(tmp_path)


def test_a_misplaced_screen_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    from miiii import presets

    tiny = ("miiii-tiny", "train.steps=10")
    screen = (*tiny, "train.screen=3")
    for phases, message in (((tiny, screen), "a recipe's first phase and not its only one"),
                            ((screen,), "a recipe's first phase and not its only one"),
                            (((*tiny, "train.screen=-2"), tiny), "a screen's seeds, at least 1")):
        monkeypatch.setitem(presets.PHASED, "tiny-screen", ("misplaced", phases))
        assert main(["train", "--preset", "tiny-screen", "--run-dir", str(tmp_path / "q"), "--no-progress"]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "q").exists()
    for cmd in (["train", "--run-dir"], ["sweep", "--seeds", "2", "--out"]):
        assert main([*cmd, str(tmp_path / "r"), "--preset", "miiii-tiny", "--set", "train.screen=3"]) == 2
        assert "python -m miiii sweep --seeds N" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_a_phase_named_through_another_path_to_its_folder_keeps_its_saved_paths(tmp_path):
    """phases._as_saved: a phase's train.init_from (with its @STEP) and task.replay given through a symlink to the run
    folder take the spelling its config.json has, so the phase is the one trained; another step, another folder or no
    config.json changes nothing."""
    from miiii.config import apply_overrides
    from miiii.phases import _as_saved
    from miiii.presets import get_preset
    from miiii.rundir import write_config

    run, link = tmp_path / "run", tmp_path / "link"
    (run / "phase-2").mkdir(parents=True)
    (run / "phase-1").mkdir()
    (run / "other").mkdir()
    link.symlink_to(run)
    base = get_preset("miiii-tiny")
    saved = apply_overrides(base, [f"train.init_from={run}/phase-1@20", f"task.replay={run}/phase-2.hard.npy"])
    write_config(run / "phase-2", saved)
    given = apply_overrides(base, [f"train.init_from={link}/phase-1@20", f"task.replay={link}/phase-2.hard.npy"])
    assert _as_saved(given, run / "phase-2") == saved != given
    for other in (f"train.init_from={link}/phase-1@40", f"train.init_from={link}/other@20"):
        moved = apply_overrides(given, [other])
        assert _as_saved(moved, run / "phase-2").train.init_from == moved.train.init_from
    assert _as_saved(given, run / "phase-1") is given
