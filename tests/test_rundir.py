"""The run directory has one owner (miiii/rundir.py): every way of writing one reads back with load_run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from _runhelp import Crash, crash_at

from miiii.cadence import rows_before
from miiii.config import apply_overrides
from miiii.metrics import metric_names
from miiii.presets import get_preset
from miiii.run import load_run
from miiii.rundir import BOOK, CKPT_META, CONFIG, METRICS, PARAMS, SUMMARY
from miiii.runner import resume_run, train_run
from miiii.sweep import run_sweep

CFG = apply_overrides(get_preset("nanda-tiny"), ["steps=24", "chunk=12", "ckpt.every=12", "p=23", "valid_size=50",
                                                 "d_model=32", "record.every=5"])


def assert_complete(run_dir: Path, cfg, recorded: bool):
    run = load_run(run_dir)
    assert run.config == cfg
    steps = cfg.train.steps
    assert list(run.metrics["step"]) == list(range(steps)) and list(run.metrics["task_names"]) == ["mod 23"]
    assert all(len(run.metrics[k]) == steps for k in metric_names())
    assert run.summary["steps"] == steps and "final" in run.summary and "grok_step" in run.summary
    assert set(run.params) >= {"W_E", "W_pos", "blocks_0"} and run.params["W_E"].shape == (24, 32)
    if recorded:
        assert run.acts_index["finished"] and len(run.acts_steps) == rows_before(steps + 1, 5)
        assert list(run.steps_of("blocks.0.mlp.hook_post")) == list(range(0, steps + 1, 5))
    return run


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_train_run_resume_and_sweep_member_read_back_with_load_run(tmp_path):
    train_run(CFG, tmp_path / "solo", progress=False)
    solo = assert_complete(tmp_path / "solo", CFG, True)

    crash = crash_at(12)

    with pytest.raises(Crash):
        train_run(CFG, tmp_path / "resumed", progress=False, on_chunk=crash)
    part = load_run(tmp_path / "resumed")  # interrupted: the rows written so far
    assert len(part.metrics["step"]) == 12 and not part.summary and not part.params
    resume_run(tmp_path / "resumed", progress=False)
    resumed = assert_complete(tmp_path / "resumed", CFG, True)
    for k in metric_names():
        np.testing.assert_array_equal(resumed.metrics[k], solo.metrics[k])

    run_sweep(CFG, 2, {}, tmp_path / "sweep", progress=False)
    member = assert_complete(tmp_path / "sweep" / "member_000", CFG, True)  # a member records as a solo run does
    assert member.summary["seed"] == CFG.train.seed and (tmp_path / "sweep" / "member_000" / CKPT_META).exists()
    np.testing.assert_array_equal(member.params_at(CFG.train.steps)["W_E"], member.params["W_E"])
    np.testing.assert_allclose(member.metrics["loss"], solo.metrics["loss"], rtol=1e-5)


def test_rows_before():
    assert [rows_before(s, 5) for s in (0, 1, 5, 6, 10, 11)] == [0, 1, 1, 2, 2, 3]


def test_no_other_module_names_the_run_files_as_paths():
    """Paths to the run's files are built in rundir.py only (messages may still name them)."""
    names = "|".join(re.escape(n) for n in (CONFIG, METRICS, SUMMARY, PARAMS, CKPT_META, BOOK, "index.json"))
    joined = re.compile(rf"/\s*[\"']({names})[\"']")
    package = Path(__file__).resolve().parents[1] / "miiii"
    offenders = [f.name for f in package.glob("*.py") if f.name != "rundir.py" and joined.search(f.read_text())]
    assert offenders == []


OLD_RUN = Path(__file__).parent / "data" / "run_9fd6c36"  # written by commit 9fd6c36, before the core's split


def test_a_run_written_before_the_split_still_loads_restores_and_resumes(tmp_path):
    import shutil

    from miiii.rundir import flatten_params, read_metrics_log
    from miiii.runner import resume_run

    run_dir = tmp_path / "old"
    shutil.copytree(OLD_RUN, run_dir)
    run = load_run(run_dir)  # every activation row checked against its crc32
    assert run.metrics["loss"].shape == (20,) and run.metrics["grad_norm"].shape[0] == 20
    assert set(run.acts) == {"blocks.0.mlp.hook_post", "blocks.0.attn.hook_pattern", "W_E", "W_pos"}
    assert run.kept_steps == [10, 20]
    at_end = flatten_params(run.params_at(20))  # orbax restores the old checkpoint, verified
    assert all(np.array_equal(at_end[k], v) for k, v in flatten_params(run.params).items())
    log = read_metrics_log(run_dir)
    np.testing.assert_array_equal(log["loss"], run.metrics["loss"][log["step"]])
    assert resume_run(run_dir, progress=False) == run.summary  # finished: nothing to do


def test_an_old_config_reads_with_the_defaults_of_fields_added_since():
    """config.json from before optim.optimizer, optim.orthograd, train.loss and train.loss_dtype: the run it
    describes is the one their defaults give."""
    from miiii.rundir import read_config

    stored = json.loads((OLD_RUN / "config.json").read_text())
    assert "optimizer" not in stored["optim"] and "loss" not in stored["train"]
    cfg = read_config(OLD_RUN)
    assert (cfg.optim.optimizer, cfg.optim.orthograd, cfg.train.loss, cfg.train.loss_dtype) == (
        "adamw", False, "softmax", "float32")


def test_the_old_runs_config_retrains_to_the_same_files(tmp_path):
    """The run directory's layout is unchanged (every file, array name, shape, column and step), and the numbers
    agree with the files the earlier code wrote (to float32 rounding: another CPU may round differently)."""
    import json

    from miiii.rundir import read_config
    from miiii.runner import train_run

    train_run(read_config(OLD_RUN), tmp_path / "new", progress=False, tensorboard=False)
    old, new = OLD_RUN, tmp_path / "new"
    names = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*") if "ckpt" not in p.parts)  # noqa: E731
    assert set(names(new)) - {".lock"} == set(names(old)) - {".lock"} | {"checksums.json"}  # its manifest is new
    for f in ("metrics.npz", "params.npz"):
        a, b = np.load(old / f), np.load(new / f)
        assert set(a.files) <= set(b.files)  # metrics added to the table since come in addition
        for k in a.files:
            assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, (f, k)
            if a[k].dtype.kind == "f":
                np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-6, err_msg=f"{f} {k}")
            else:
                assert np.array_equal(a[k], b[k]), (f, k)
    lines = [(old / "metrics.jsonl").read_text().splitlines(), (new / "metrics.jsonl").read_text().splitlines()]
    for a_line, b_line in zip(*lines, strict=True):  # the earlier columns, in their order, with the same values
        a, b = json.loads(a_line), json.loads(b_line)
        assert list(b)[: len(a)] == list(a)
        np.testing.assert_allclose([b[k] for k in a], [a[k] for k in a], rtol=1e-4, atol=1e-6)
    ia, ib = (json.loads((d / "acts" / "index.json").read_text()) for d in (old, new))
    for name, meta in ia["arrays"].items():
        got = ib["arrays"][name]
        assert {k: got[k] for k in meta if k != "crc32"} == {k: v for k, v in meta.items() if k != "crc32"}, name
        np.testing.assert_allclose(np.load(new / "acts" / meta["file"]), np.load(old / "acts" / meta["file"]),
                                   rtol=2e-3, atol=1e-3, err_msg=name)  # float16 on disk
