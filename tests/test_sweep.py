"""Sweeps: every vmapped (and sharded) member equals the same config trained alone."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _runhelp import SLOW

from miiii.config import ConfigError, RecordConfig, RunConfig, apply_overrides
from miiii.presets import get_preset
from miiii.rundir import read_metrics_log
from miiii.runner import train_run
from miiii.sweep import make_members, parse_grid, run_sweep

ROOT = Path(__file__).resolve().parents[1]
BASE = ["steps=24", "chunk=12", "p=23", "valid_size=50", "d_model=32", "ckpt.keep_log=0"]  # no log-spaced saves


def solo(member_dir: Path, tmp: Path) -> dict:
    cfg = RunConfig.from_dict(json.loads((member_dir / "config.json").read_text()))
    cfg = replace(cfg, record=RecordConfig())  # the metrics are what is compared
    train_run(cfg, tmp / ("solo-" + member_dir.name), progress=False)
    return dict(np.load(tmp / ("solo-" + member_dir.name) / "metrics.npz"))


def assert_same(a: dict, b: dict):
    for k in ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc"):
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6, err_msg=k)


@SLOW
def test_members_equal_solo_runs(tmp_path):
    # the metrics are what is compared: no recording (test_sweep_resume.py tests the members' recordings)
    cfg = apply_overrides(get_preset("miiii-tiny"), [*BASE, "eval_every=5", "record.acts=", "record.params="])
    grid = parse_grid(["lr=1e-3,3e-3", "dropout=0,0.2"])
    res = run_sweep(cfg, 2, grid, tmp_path / "sw", progress=False)
    assert res["n_members"] == 8 and len(res["points"]) == 4
    for i in (0, 7):  # members that differ in lr, dropout and seed
        d = tmp_path / "sw" / f"member_{i:03d}"
        assert_same(dict(np.load(d / "metrics.npz")), solo(d, tmp_path))
    m = [dict(np.load(tmp_path / "sw" / f"member_{i:03d}" / "metrics.npz")) for i in (0, 1)]
    assert not np.array_equal(m[0]["loss"], m[1]["loss"])  # seeds differ
    for i in (0, 7):  # each member's metrics.jsonl: its evaluated rows of metrics.npz
        log = read_metrics_log(tmp_path / "sw" / f"member_{i:03d}")
        rows = np.arange(0, 24, 5)
        assert log["step"].tolist() == rows.tolist()
        for k in ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc"):
            assert np.array_equal(log[k], np.load(tmp_path / "sw" / f"member_{i:03d}" / "metrics.npz")[k][rows]), k
    assert (tmp_path / "sw" / "grok_steps.png").stat().st_size > 0
    # members.csv: one row per member, its seed and grid values, its summary's final numbers
    import csv

    table = list(csv.DictReader((tmp_path / "sw" / "members.csv").open()))
    assert [int(r["member"]) for r in table] == list(range(8))
    assert list(table[0]) == ["member", "seed", *grid, "train_acc", "valid_acc", "train_loss", "valid_loss",
                              "loss_unit", "grok_step", "diverged_at"]
    assert {r["loss_unit"] for r in table} == {"cross-entropy / ln q"}  # the unit of both loss columns, named
    for r in table:
        summ = json.loads((tmp_path / "sw" / f"member_{int(r['member']):03d}" / "summary.json").read_text())
        assert int(r["seed"]) == summ["seed"] and all(float(r[k]) == summ["values"][k] for k in grid)
        assert float(r["valid_loss"]) == pytest.approx(summ["final"]["valid"]["loss"], rel=1e-5)
        assert float(r["train_acc"]) == pytest.approx(np.mean(summ["final"]["train"]["task_acc"]), rel=1e-5)
        assert r["grok_step"] == ("" if summ["grok_step_all"] is None else str(summ["grok_step_all"]))
    # the summary's final accuracy is the last *evaluated* row (eval_every 5: step 24 has no evaluation)
    summ = json.loads((tmp_path / "sw" / "member_000" / "summary.json").read_text())
    va = m[0]["valid_acc"]
    np.testing.assert_allclose(summ["final_valid_acc"], va[~np.isnan(va).any(-1)][-1])


@pytest.mark.multihost  # make test-multihost: a subprocess over 4 host devices (10-minute budget of make test)
def test_sharded_over_four_devices_equals_solo(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), XLA_FLAGS="--xla_force_host_platform_device_count=4")
    args = [sys.executable, "-m", "miiii", "sweep", "--preset", "nanda-tiny", "--seeds", "3", "--grid", "wd=0.5,1",
            "--out", str(tmp_path / "sw"), "--no-progress", *sum((["--set", s] for s in BASE[:2]), [])]
    res = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "on 4 device(s)" in res.stdout
    summary = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert summary["n_devices"] == 4 and summary["n_members"] == 6
    for i in (1, 5):
        d = tmp_path / "sw" / f"member_{i:03d}"
        assert_same(dict(np.load(d / "metrics.npz")), solo(d, tmp_path))


@pytest.mark.parametrize("item,msg", [("d_model=64,128", "cannot be swept"), ("colour=1,2", "unknown config key"),
                                      ("lr=fast", "must be numbers"), ("lr", "key=v1"),
                                      ("lr=3e-3,3e-3", "more than once"), ("wd=1,0.5,1.0", "gives 1 more than once")])
def test_bad_grid(item, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_grid([item])


def test_lamb_grid_needs_grokfast():
    with pytest.raises(ConfigError, match="grokfast"):
        make_members(get_preset("nanda"), 1, parse_grid(["lamb=0,2"]))


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_minibatch_members_equal_solo_runs_across_epochs(tmp_path):
    """The book's minibatches (a new data order each epoch, under a lax.cond on the step) in a vmapped sweep: the
    members share one unbatched step counter, so the cond stays a cond; each member still equals its solo run
    across two epoch boundaries (8,000 pairs in batches of 512: 15 steps an epoch)."""
    cfg = apply_overrides(get_preset("addition-tiny"), ["steps=36", "chunk=18", "eval_every=6", "record.acts=",
                                                        "record.params=", "ckpt.keep_log=0"])
    run_sweep(cfg, 2, {}, tmp_path / "sw", progress=False)
    d = tmp_path / "sw" / "member_001"  # the second seed: its own data order, not the first member's
    assert_same(dict(np.load(d / "metrics.npz")), solo(d, tmp_path))


@pytest.mark.study  # a sweep of 4 and two solo runs (make test-studies; make test's 10-minute budget)
def test_the_split_is_a_sweep_axis_each_member_on_its_own_split(tmp_path, capsys):
    """--split-seeds N crosses N train/validation splits with the init seeds in one program: each member equals
    the solo run of its own config (its split_seed and seed), the splits really differ, members.csv names both
    seeds, and the summary tells the spread from the init seed from the spread from the split."""
    from miiii.cli import main

    out = tmp_path / "sw"
    args = ["sweep", "--preset", "miiii-tiny", "--seeds", "2", "--split-seeds", "2", "--no-progress", "--out", str(out),
            *[a for kv in (*BASE, "eval_every=4", "record.acts=", "record.params=") for a in ("--set", kv)]]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "grok step spread: from the init seed" in said and "from the split" in said
    res = json.loads((out / "sweep.json").read_text())
    assert [(m["seed"], m["values"]["task.split_seed"]) for m in res["members"]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert res["split_spread"]["n_splits"] in (0, 2)  # each split's mean where its seeds grok
    for i in (0, 3):  # a member of each split, each seed: the solo run of its config
        d = out / f"member_{i:03d}"
        assert json.loads((d / "config.json").read_text())["task"]["split_seed"] == i // 2
        assert_same(dict(np.load(d / "metrics.npz")), solo(d, tmp_path))
    from miiii.runner import prepare

    cfgs = [RunConfig.from_dict(json.loads((out / f"member_{i:03d}" / "config.json").read_text())) for i in (0, 2)]
    a, b = (prepare(c) for c in cfgs)
    assert not np.array_equal(a.train.x, b.train.x)  # the two splits hold different samples
    import csv

    table = list(csv.DictReader((out / "members.csv").open()))
    assert [(r["seed"], r["task.split_seed"]) for r in table] == [("0", "0"), ("1", "0"), ("0", "1"), ("1", "1")]
    assert main([*args[:-len(args) + 1], "--split-seeds", "0", "--out", str(tmp_path / "x")]) == 2
    assert main(["sweep", "--preset", "miiii-tiny", "--split-seeds", "2", "--grid", "split_seed=0,1", "--out",
                 str(tmp_path / "y")]) == 2
    assert main(["sweep", "--preset", "miiii-tiny", "--grid", "split_seed=0.5", "--out", str(tmp_path / "z")]) == 2
    assert "a seed is a whole number" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in "xyz")
