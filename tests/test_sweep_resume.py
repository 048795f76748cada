"""Sweep members as runs of their own (recording, checkpoints, load_run, params_at, figures' names), the disk budget
over all members, and a sweep stopped by Ctrl-C that resumes bit-identical to an uninterrupted one."""

from __future__ import annotations

import functools
import json
import shutil
import signal
import warnings
from pathlib import Path

import _runhelp
import numpy as np
import pytest

from miiii.cli import main
from miiii.config import apply_overrides
from miiii.presets import get_preset
from miiii.run import load_run
from miiii.sweep import parse_grid, resume_sweep, run_sweep

SETS = ["steps=30", "chunk=10", "ckpt.every=10", "ckpt.keep_log=4", "p=23", "valid_size=50", "d_model=32",
        "record.every=5"]
CFG = apply_overrides(get_preset("nanda-tiny"), SETS)
GRID = ["lr=1e-3,3e-3"]
ARGS = ["sweep", "--preset", "nanda-tiny", *sum((["--set", s] for s in SETS), []), "--seeds", "1", "--grid", *GRID,
        "--no-progress", "--no-tensorboard"]


# The sweeps below are trained once a session for every worker (`_runhelp.shared`), test_faults_round3's sweep tests
# read them too: one compile of the sweep's program, which is most of these tests' time. Read, never changed.


@functools.cache
def reference() -> Path:
    """The uninterrupted sweep (two members) the tests compare with."""
    return _runhelp.shared("sweep-lr-grid", lambda d: run_sweep(CFG, 1, parse_grid(GRID), d / "sw", progress=False,
                                                                  tensorboard=False)) / "sw"


@functools.cache
def crashed() -> Path:
    """The sweep stopped by an exception after its checkpoint at step 20 (no sweep.json)."""
    def build(d: Path) -> None:
        with pytest.raises(_runhelp.Crash):
            run_sweep(CFG, 1, parse_grid(GRID), d / "sw", progress=False, tensorboard=False,
                      on_chunk=_runhelp.crash_at(20))

    return _runhelp.shared("sweep-lr-grid-crashed-at-20", build) / "sw"


def test_members_record_keep_checkpoints_and_load_as_runs(tmp_path, monkeypatch):
    sw = reference()
    for i, lr in enumerate((1e-3, 3e-3)):
        run = load_run(sw / f"member_{i:03d}")
        assert run.member == {"index": i, "seed": 0, "values": {"optim.lr": lr}}
        assert run.config.optim.lr == lr
        assert run.acts and run.acts_steps.tolist() == [0, 5, 10, 15, 20, 25, 30]
        assert len(run.acts["blocks.0.mlp.hook_post"]) == len(run.acts_steps)
        assert set(run.kept_steps) >= {0, 1, 3, 10, 30}  # ckpt.keep_log's steps inside chunks too (log_steps)
        np.testing.assert_array_equal(run.params_at(30)["W_E"], run.params["W_E"])  # verified against its checksum
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # step 25 was not kept: the kept step before it, with a warning
            assert run.params_at(25)["W_E"].shape == run.params["W_E"].shape
    # the figures name a member by its values (file names keep its directory), as `figures MEMBER_DIR` draws them
    from miiii import plots

    drawn = []

    def save(fig, out, stem):
        drawn.append((stem, fig.axes[0].get_title().splitlines()[0]))
        plots.plt.close(fig)
        return []

    monkeypatch.setattr(plots, "save_figure", save)
    plots.fig_curves(load_run(sw / "member_001"), tmp_path, "acc")
    assert drawn == [("fig05_accuracy_member_001", "lr=0.003, seed 0")]
    assert (sw / "sweep.json").is_file() and (sw / "sweep-plan.json").is_file()


def test_ctrl_c_keeps_the_sweep_and_resume_ends_bit_identical(tmp_path, capsys):
    ref, out = reference(), tmp_path / "sw"
    with pytest.raises(KeyboardInterrupt, match=f"sweep --resume {out}"):
        run_sweep(CFG, 1, parse_grid(GRID), out, progress=False, tensorboard=False,
                  on_chunk=_runhelp.signal_at(20, signal.SIGINT))
    assert not (out / "sweep.json").exists()  # incomplete
    from miiii.compare import expand

    assert expand([out]) == [out / "member_000", out / "member_001"]  # compare reads an incomplete sweep's members
    part = load_run(out / "member_000")  # an interrupted member reads back, cut to what was written
    assert len(part.metrics["step"]) == 20 and part.acts_steps.max() < 20
    # a changed config is refused, nothing changed
    before = _runhelp.tree_digest(out)
    assert main([*ARGS[:-6], "--seeds", "1", "--grid", "lr=1e-3,1e-2", "--resume", str(out)]) == 2
    assert "differ from the sweep's own" in capsys.readouterr().err
    assert main(["sweep", "--resume", str(out), "--set", "wd=0.5"]) == 2  # --set changes the sweep's own config
    assert "differ from the sweep's own" in capsys.readouterr().err
    assert _runhelp.tree_digest(out) == before
    assert main([*ARGS, "--resume", str(out)]) == 0  # the sweep's own arguments given again: no change
    assert "resuming" in capsys.readouterr().err
    res = json.loads((out / "sweep.json").read_text())  # the rate counts the steps this process trained
    assert res["resumed_from"] == 20 and json.loads((ref / "sweep.json").read_text())["resumed_from"] == 0
    assert res["member_steps_per_s"] == pytest.approx(2 * (CFG.train.steps - 20) / res["wall_s"], rel=0.01, abs=0.2)
    for i in (0, 1):
        _runhelp.assert_same_run(ref / f"member_{i:03d}", out / f"member_{i:03d}")
    rows = [json.loads((d / "sweep.json").read_text())["members"] for d in (ref, out)]
    assert [r["final"] for r in rows[0]] == [r["final"] for r in rows[1]]
    assert (out / "members.csv").read_text() == (ref / "members.csv").read_text()
    # a complete sweep is refused
    assert main(["sweep", "--resume", str(out)]) == 2
    assert "the sweep is complete" in capsys.readouterr().err


# make test-studies: test_ctrl_c_keeps_the_sweep_and_resume_ends_bit_identical resumes the same sweep from the same
# checkpoint (step 20) through the same resume_sweep to the same bit-identical end; only how it stopped differs
@_runhelp.SLOW
def test_a_crash_after_a_checkpoint_resumes_bit_identical(tmp_path):
    ref, out = reference(), tmp_path / "sw"
    shutil.copytree(crashed(), out)
    resume_sweep(out, progress=False, tensorboard=False)
    for i in (0, 1):
        _runhelp.assert_same_run(ref / f"member_{i:03d}", out / f"member_{i:03d}")


def test_resume_refuses_what_is_no_resumable_sweep(tmp_path, capsys):
    (tmp_path / "notasweep").mkdir()
    assert main(["sweep", "--resume", str(tmp_path / "notasweep")]) == 2
    assert "not a sweep directory" in capsys.readouterr().err
    assert main(["sweep", "--resume", str(tmp_path / "notasweep"), "--out", str(tmp_path / "x")]) == 2
    assert "leave out --out" in capsys.readouterr().err
    # a member whose config.json was edited
    out = tmp_path / "sw"
    shutil.copytree(reference(), out)
    (out / "sweep.json").unlink()
    cfg = json.loads((out / "member_001" / "config.json").read_text())
    cfg["optim"]["lr"] = 0.5
    (out / "member_001" / "config.json").write_text(json.dumps(cfg))
    assert main(["sweep", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert "member_001/config.json differs" in err and "Traceback" not in err


def test_the_budget_covers_every_member(tmp_path, capsys):
    """One member's recording fits --record-budget, the two members' together do not: refused, nothing written."""
    from miiii.runner import build
    from miiii.tasks import make_task

    one = build(CFG, make_task(CFG.task))[1].nbytes
    out = tmp_path / "sw"
    assert main([*ARGS, "--record-budget", str(one + 1), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"the 2 members' recordings need {2 * one:,} bytes" in err and "Traceback" not in err
    assert not out.exists()
