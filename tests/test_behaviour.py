"""The tiny presets really show the phenomenon on a CPU, asserted on the files each run wrote."""

import json
from dataclasses import replace

import numpy as np
import pytest
from _runhelp import finished_run

from miiii.config import RecordConfig, apply_overrides
from miiii.presets import get_preset
from miiii.runner import train_run

pytestmark = pytest.mark.optimized  # tests/conftest.py: compiled as users compile


def train(preset, tmp_path):
    run = tmp_path / preset
    train_run(apply_overrides(get_preset(preset), ["ckpt.keep_log=0"]), run, progress=False)  # learning, not saving
    return dict(np.load(run / "metrics.npz")), json.loads((run / "summary.json").read_text())


def test_nanda_tiny_groks():
    """The preset's own run (its recording and checkpoints), trained once for the session's tests that read it
    (_runhelp.finished_run)."""
    run = finished_run("nanda-tiny")
    m, s = run.metrics, run.summary
    grok = s["grok_step"]["mod 37"]
    assert grok is not None and s["final"]["test"]["task_acc"][0] >= 0.99
    # grokking, not plain learning: the training set is fit long before validation catches up
    fit = int(np.argmax(m["train_acc"][:, 0] >= 0.99))
    assert fit < grok / 2 and np.nanmax(m["valid_acc"][: fit + 1, 0]) < 0.6


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_miiii_tiny_learns_small_primes_first(tmp_path):
    m, s = train("miiii-tiny", tmp_path)
    acc = dict(zip(s["task_names"], s["final"]["valid"]["task_acc"], strict=True))  # 4 seeds: q=3 0.91-0.94
    assert acc["q=2"] >= 0.95 and acc["q=3"] >= 0.8
    large = np.mean([acc[f"q={q}"] for q in (11, 13, 17, 19)])
    assert large < acc["q=3"] - 0.3  # the large primes are memorised, not yet generalised
    assert s["final"]["train"]["task_acc"][-1] >= 0.95


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_addition_tiny_jumps_to_exact_match(tmp_path):
    """The plateau, then the jump, in seed 0 or, where this machine's numerics leave seed 0 on the plateau, seed 1.
    The jump's timing is chaotic: a 4-seed sweep jumped between steps 750 and 1,500 on every seed, while the same
    seed 0 trained alone stayed near 5 % for all 3,000 steps on one 2-core machine and jumped on another."""
    results = []
    for seed in (0, 1):
        cfg = replace(get_preset("addition-tiny"), train=replace(get_preset("addition-tiny").train, seed=seed),
                      record=RecordConfig(), ckpt=replace(get_preset("addition-tiny").ckpt, keep_log=0))  # the jump
        # is in the metrics: no recording, no log-spaced checkpoints
        run = tmp_path / f"s{seed}"
        train_run(cfg, run, progress=False)
        m, s = dict(np.load(run / "metrics.npz")), json.loads((run / "summary.json").read_text())
        valid = m["valid_acc"][:, 0]
        assert valid[~np.isnan(valid)][0] < 0.05  # every seed starts on the plateau
        results.append(s)
        if s["final"]["valid"]["task_acc"][0] >= 0.95:
            break
    s = results[-1]
    assert s["final"]["valid"]["task_acc"][0] >= 0.95 and s["valid_autoregressive_acc"] >= 0.95


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
@pytest.mark.parametrize("preset", ["reversal-tiny"])
def test_reversal_tiny_reaches_exact_match(tmp_path, preset):
    m, s = train(preset, tmp_path)
    assert s["final"]["valid"]["task_acc"][0] >= 0.99 and s["valid_autoregressive_acc"] >= 0.99
    assert s["final"]["train"]["loss"] < 0.86  # near the floor 4 ln 10 / 11 = 0.8373
