"""Resume: an interrupted run (SIGINT, SIGKILL of a real process) finishes bit-identical to an uninterrupted one."""

from __future__ import annotations

import json
import shutil
import signal

import jax
import numpy as np
import pytest
from _runhelp import (
    RESUME_ARGS,
    SLOW,
    assert_same_run,
    reference_run,
    resume_cfg,
    start_cli,
    tree_digest,
    wait_for_checkpoint,
)

from miiii.checkpoint import Checkpoints
from miiii.cli import main
from miiii.config import apply_overrides
from miiii.run import load_run
from miiii.rundir import read_metrics_log
from miiii.runner import build, resume_run, train_run
from miiii.tasks import make_task


def test_sigint_finishes_the_chunk_checkpoints_and_resumes_bit_identical(tmp_path):
    ref = reference_run()
    run_dir = tmp_path / "run"
    proc = start_cli([*RESUME_ARGS, "--run-dir", str(run_dir)])
    wait_for_checkpoint(run_dir, proc, at_least=20)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert f"--resume {run_dir}" in err and "Traceback" not in err
    stopped = max(int(s) for s in json.loads((run_dir / "ckpt.json").read_text())["checksums"])
    assert 20 <= stopped < 160
    part = load_run(run_dir)  # an interrupted run reads back, cut to what was written
    assert len(part.metrics["step"]) == stopped and part.acts_steps.max() < stopped
    assert len(part.acts["blocks.0.mlp.hook_post"]) == len(part.acts_steps)
    resume_run(run_dir, progress=False)
    assert_same_run(ref, run_dir)


def test_sigkill_mid_run_leaves_a_resumable_directory(tmp_path, capsys):
    ref = reference_run()
    run_dir = tmp_path / "run"
    proc = start_cli([*RESUME_ARGS, "--run-dir", str(run_dir)])
    wait_for_checkpoint(run_dir, proc, at_least=20)
    # one writer per run directory: a second one is refused while the first lives ...
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
    assert f"another live process (pid {proc.pid})" in capsys.readouterr().err
    wait_for_checkpoint(run_dir, proc, at_least=40)
    proc.kill()  # SIGKILL: no handler runs, possibly in the middle of writing a checkpoint
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists()
    rc = main(["train", "--resume", str(run_dir), "--no-progress"])  # ... and allowed once it is dead
    assert rc == 0
    assert_same_run(ref, run_dir)


def test_resume_refuses_a_changed_config_or_a_foreign_directory(tmp_path, capsys):
    ref = tmp_path / "ref"
    shutil.copytree(reference_run(), ref)  # the shared run is not resumed, even to "already finished"
    before = tree_digest(ref)
    assert main(["train", "--resume", str(ref), "--set", "lr=0.5", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "differs" in err and "optim.lr" in err and "Traceback" not in err
    assert main(["train", "--resume", str(ref), "--seed", "7"]) == 2
    assert "train.seed" in capsys.readouterr().err
    assert tree_digest(ref) == before
    other = tmp_path / "notarun"
    (other / "sub").mkdir(parents=True)
    (other / "notes.txt").write_text("hello")
    before = tree_digest(other)
    assert main(["train", "--resume", str(other)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert tree_digest(other) == before
    # the same preset and overrides as the run itself are not a change
    assert main(["train", "--resume", str(ref), *[a for a in RESUME_ARGS], "--no-progress"]) == 0
    assert "already finished" in capsys.readouterr().err


def test_nan_loss_stops_naming_the_step_and_keeps_a_restorable_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # nothing recorded: a smaller program to compile (this config's own; seconds), and no part of what is checked
    sets = ["lr=1e4", "warmup_steps=40", "record.acts=", "record.params="]
    rc = main(["train", *RESUME_ARGS, "--steps", "40", *[a for s in sets for a in ("--set", s)], "--run-dir",
               str(run_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "at step" in err and ("became nan" in err or "became inf" in err), err
    cfg = apply_overrides(resume_cfg(), ["steps=40", *sets])
    trainer, _ = build(cfg, make_task(cfg.task))
    ckpts = Checkpoints(run_dir, cfg.ckpt.keep)
    state, skipped = ckpts.restore_good(jax.eval_shape(trainer.init, 0))
    ckpts.close()
    assert state is not None and not skipped
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(jax.device_get(state.params)))
    assert f"checkpoint is step {int(state.step)}" in err
    with np.load(run_dir / "metrics.npz") as m:  # the diverging steps are kept for diagnosis
        assert not np.isfinite(m["loss"]).all()
        log = read_metrics_log(run_dir)  # in metrics.jsonl too (null for NaN or inf: JSON has neither)
        assert log["step"].tolist() == m["step"].tolist()
        for k in ("loss", "train_loss", "valid_acc"):
            assert np.array_equal(log[k], np.where(np.isfinite(m[k]), m[k], np.nan), equal_nan=True), k
    assert "NaN" not in (run_dir / "metrics.jsonl").read_text()


# make test-studies: in make test, test_sigint_finishes_the_chunk_checkpoints_and_resumes_bit_identical resumes this
# config bit-identical after a stop between chunks, and test_faults' fallback tests, test_hardening's and
# test_faults_files' interrupted runs resume after an exception from on_chunk
@SLOW
@pytest.mark.parametrize("stop_after", [40])
def test_in_process_crash_after_a_checkpoint_resumes_bit_identical(tmp_path, stop_after):
    """A run that dies between chunks (here: an exception from on_chunk) resumes from its last checkpoint."""

    class Crash(Exception):
        pass

    def crash(step):
        if step == stop_after:
            raise Crash

    with pytest.raises(Crash):
        train_run(resume_cfg(), tmp_path / "run", progress=False, on_chunk=crash)
    resume_run(tmp_path / "run", progress=False)
    assert_same_run(reference_run(), tmp_path / "run")
