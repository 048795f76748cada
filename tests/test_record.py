"""Recording: what is on disk equals a fresh forward pass, the byte estimate is exact, memory stays flat."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest
from _runhelp import SLOW, Crash, crash_at

from miiii.checkpoint import Checkpoints
from miiii.cli import main
from miiii.config import ConfigError, apply_overrides
from miiii.hooks import HookedModel
from miiii.presets import get_preset
from miiii.record import npy_nbytes, param_path
from miiii.run import load_run
from miiii.runner import build, train_run
from miiii.tasks import make_task

ACTS = "blocks.0.mlp.hook_post,blocks.0.attn.hook_pattern,blocks.0.hook_resid_post,logits"
# chunk 15 is not a multiple of record.every 10: chunks hold 2 or 1 recorded steps
# (the regular checkpoints only: the test compares the recording with each)
SMALL = ["steps=60", "chunk=15", "batch_size=64", "ckpt.every=15", "ckpt.keep=5", "ckpt.keep_log=0",
         f"record.acts={ACTS}", "record.params=W_E,W_pos", "record.neurons=0:8,100", "record.every=10",
         "record.params_every=5", "record.dtype=float32"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    # dropout 0.1: recording must be in eval mode; 30 steps (SMALL's 60 are the log-spaced test's): still chunks
    # with 2 and with 1 recorded steps
    cfg = apply_overrides(get_preset("miiii-tiny"), [*SMALL, "steps=30"])
    run_dir = tmp_path_factory.mktemp("rec") / "run"
    return cfg, run_dir, train_run(cfg, run_dir, progress=False)


def test_recorded_equals_forward_pass_at_checkpointed_step(small_run):
    cfg, run_dir, _ = small_run
    run = load_run(run_dir)
    task = make_task(cfg.task)
    trainer, rec = build(cfg, task)
    ckpts = Checkpoints(run_dir, cfg.ckpt.keep)
    assert ckpts.steps() == [0, 15, 30]
    x = np.load(run_dir / "acts" / "inputs.npy")
    p = cfg.task.p
    i = np.arange(p * p)
    assert x.shape == (p * p, 3) and (x[:, 0] + x[:, 1] * p == i).all()  # row i is the number n = x0 + x1 p
    neurons = [*range(8), 100]
    template = jax.eval_shape(trainer.init, 0)
    for t in ckpts.steps():
        params = ckpts.restore(t, template).params
        _, acts = trainer.apply(params, x)
        want = {
            "blocks.0.mlp.hook_post": np.asarray(acts["blocks.0.mlp.hook_post"])[:, -1][:, neurons],
            "blocks.0.attn.hook_pattern": np.asarray(acts["blocks.0.attn.hook_pattern"])[:, :, -1],
            "blocks.0.hook_resid_post": np.asarray(acts["blocks.0.hook_resid_post"])[:, -1],
            "logits": np.asarray(acts["logits"]),
        }
        if t % 10:
            assert t not in run.acts_steps
            want = {}
        else:
            row = list(run.acts_steps).index(t)
        for name, w in want.items():
            np.testing.assert_allclose(run.acts[name][row], w, rtol=2e-5, atol=2e-6, err_msg=f"{name} at step {t}")
        r = t // 5
        assert run.steps_of("W_E")[r] == t
        np.testing.assert_array_equal(run.acts["W_E"][r], np.asarray(params["W_E"]))
        np.testing.assert_array_equal(run.acts["W_pos"][r], np.asarray(params["W_pos"]))
    # a step off would show: consecutive recorded rows differ by more than the tolerance
    assert not np.allclose(run.acts["blocks.0.hook_resid_post"][1], run.acts["blocks.0.hook_resid_post"][2], rtol=1e-4)
    assert list(run.acts_steps) == list(range(0, 31, 10))
    idx = json.loads((run_dir / "acts" / "index.json").read_text())
    assert idx["arrays"]["blocks.0.mlp.hook_post"]["axes"] == ["step", "input", "neuron"]
    assert idx["arrays"]["blocks.0.attn.hook_pattern"]["axes"] == ["step", "input", "head", "key_pos"]
    assert idx["arrays"]["W_E"]["shape"] == [7, p + 1, cfg.model.d_model] and idx["finished"]
    assert rec.arrays["W_E"].count == 7
    ckpts.close()


def test_bytes_estimate_equals_bytes_written(small_run):
    cfg, run_dir, summary = small_run
    written = sum(f.stat().st_size for f in (run_dir / "acts").glob("*.npy"))
    assert summary["record_bytes"] == written > 0
    index = json.loads((run_dir / "acts" / "index.json").read_text())
    for name, meta in index["arrays"].items():
        assert (run_dir / "acts" / meta["file"]).stat().st_size == npy_nbytes(meta["shape"], meta["dtype"]), name
        assert np.load(run_dir / "acts" / meta["file"], mmap_mode="r").shape == tuple(meta["shape"])


def test_over_budget_recording_is_refused_before_any_file(tmp_path, capsys):
    run_dir = tmp_path / "never"
    rc = main(["train", "--preset", "nanda-tiny", "--run-dir", str(run_dir), "--record-budget", "100kB",
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and not run_dir.exists()
    assert "bytes" in err and "record.every" in err and "--record-budget" in err and "Traceback" not in err


def test_every_full_preset_default_recording_fits_two_gib():
    for name in ("nanda", "miiii", "miiii-masked", "miiii-basis", "addition", "reversal"):
        cfg = get_preset(name)
        task = make_task(cfg.task)
        _, rec = build(cfg, task)
        assert 0 < rec.nbytes <= 2 * 2**30, name
        assert {"W_E", "W_pos"} <= set(rec.arrays), name
        assert any(n.endswith("hook_pattern") for n in rec.arrays), name


def test_bad_names_are_refused_with_the_known_names():
    cfg = get_preset("nanda-tiny")
    task = make_task(cfg.task)
    with pytest.raises(ConfigError, match="blocks.0.mlp.hook_post"):
        build(apply_overrides(cfg, ["record.acts=blocks.0.mlp.hook_postt"]), task)
    with pytest.raises(ConfigError, match="W_E"):
        build(apply_overrides(cfg, ["record.params=W_X"]), task)
    with pytest.raises(ConfigError, match="neurons"):
        build(apply_overrides(cfg, ["record.neurons=0,256"]), task)
    assert param_path("blocks.0.attn.W_Q") == ("blocks_0", "attn", "W_Q")


@SLOW
def test_host_memory_stays_flat_over_many_chunks(tmp_path):
    """50 chunks recording ~0.3 MB per step (150 MB in all): RSS late in the run stays within 40 MB of early on."""
    cfg = apply_overrides(get_preset("miiii-tiny"), ["steps=500", "chunk=10", "batch_size=64", "ckpt.every=250",
                                                     "record.every=1", "record.neurons=", "record.params_every=1",
                                                     "record.dtype=float32",
                                                     "ckpt.keep_log=0"])  # the recording's memory alone
    rss = {}
    page = os.sysconf("SC_PAGE_SIZE")

    def sample(step):
        rss[step] = int(Path("/proc/self/statm").read_text().split()[1]) * page

    summary = train_run(cfg, tmp_path / "run", progress=False, on_chunk=sample)
    assert summary["record_bytes"] > 120e6  # what RAM would have to hold if chunks were kept
    early = max(v for k, v in rss.items() if 30 <= k <= 120)
    late = max(v for k, v in rss.items() if k >= 380)
    assert late - early < 40e6, f"RSS grew by {(late - early) / 1e6:.1f} MB: {rss}"


@SLOW
def test_chunks_shorter_than_the_recording_interval(tmp_path):
    """Chunks of 4 steps with record.every 10: most chunks have no due step for the activations."""
    cfg = apply_overrides(get_preset("miiii-tiny"), ["steps=20", "chunk=4", "record.every=10", "record.params_every=2",
                                                     "ckpt.every=8", "record.dtype=float32"])
    train_run(cfg, tmp_path / "run", progress=False)
    run = load_run(tmp_path / "run")
    assert list(run.acts_steps) == [0, 10, 20]
    assert len(run.acts["W_E"]) == 11 and list(run.steps_of("W_E")) == list(range(0, 21, 2))
    np.testing.assert_array_equal(run.acts["W_E"][-1], run.params["W_E"])


@pytest.mark.study  # make test-studies: a long end-to-end run kept out of make test's 10 minutes
def test_log_spaced_recording_holds_the_every_step_rows_at_its_steps(small_run, tmp_path):
    """record.log = 25 over 60 steps records step 0 and the distinct round(geomspace(1, 60, 25)) steps: every step
    early, sparser later. Its rows are, bit for bit, the rows an every-step recording holds at those steps; a run
    killed after a checkpoint resumes to the same files; the byte estimate stays exact."""
    from miiii.cadence import log_steps
    from miiii.runner import resume_run

    dense = apply_overrides(get_preset("miiii-tiny"), [*SMALL, "record.every=1", "record.params_every=1"])
    logged = apply_overrides(dense, ["record.log=25"])
    train_run(dense, tmp_path / "dense", progress=False)

    crash = crash_at(30)

    with pytest.raises(Crash):
        train_run(logged, tmp_path / "log", progress=False, on_chunk=crash)
    resume_run(tmp_path / "log", progress=False)
    a, b = load_run(tmp_path / "dense"), load_run(tmp_path / "log")
    steps = np.asarray(log_steps(60, 25))
    assert steps[:10].tolist() == list(range(10)) and np.all(np.diff(steps[-4:]) > 1)  # dense early, sparse late
    for name in ACTS.split(","):
        np.testing.assert_array_equal(b.steps_of(name), steps)
        np.testing.assert_array_equal(b.acts[name], a.acts[name][steps], err_msg=name)
    np.testing.assert_array_equal(b.acts_steps, steps)
    np.testing.assert_array_equal(b.acts["W_E"], a.acts["W_E"])  # parameters keep params_every
    on_disk = sum(f.stat().st_size for f in (tmp_path / "log" / "acts").glob("*.npy"))
    trainer_rec = build(logged, make_task(logged.task))[1]
    assert on_disk == trainer_rec.nbytes


def test_any_hook_point_records_with_its_byte_estimate(tmp_path):
    """record.acts takes every hook point run.model.hook_names() lists: the ones the training pass does not emit
    come from the hooked forward pass on the same parameters (the run's last record = the final parameters)."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=20", "chunk=10", "record.every=10", "record.params=",
                                                     "record.inputs=grid:5", "record.positions=all",
                                                     "record.dtype=float32", "record.neurons=",
                                                     "ckpt.keep_log=0"])  # no log-spaced snapshots: one program
    names = HookedModel.of(cfg, make_task(cfg.task)).hook_names()
    cfg = apply_overrides(cfg, [f"record.acts={','.join(names)}"])
    summary = train_run(cfg, tmp_path / "run", progress=False, tensorboard=False)
    run = load_run(tmp_path / "run")
    assert set(run.acts) == set(names) and set(names) >= {"blocks.0.attn.hook_q", "blocks.0.mlp.hook_pre"}
    on_disk = sum(f.stat().st_size for f in (tmp_path / "run" / "acts").glob("*.npy"))
    assert summary["record_bytes"] == on_disk  # the estimate printed before anything was written, to the byte
    x = np.load(tmp_path / "run" / "acts" / "inputs.npy")
    _, cache = run.model.run_with_cache(run.params, x, names)
    emitted = set(build(cfg, make_task(cfg.task))[1].via_hooks)
    assert emitted and "blocks.0.mlp.hook_post" not in emitted  # the training pass's own stay as they were
    for n in emitted:
        np.testing.assert_allclose(run.acts[n][-1], np.asarray(cache[n]), rtol=1e-5, atol=1e-6, err_msg=n)
        assert run.acts_index["arrays"][n]["axes"][0] == "step"
    # which token positions a "pos" axis holds: the training pass computes its last block at the last position only
    arrays = run.acts_index["arrays"]
    assert arrays["blocks.0.mlp.hook_pre"]["pos_index"] == [0, 1, 2]
    assert arrays["blocks.0.mlp.hook_post"]["pos_index"] == [2] and run.acts["blocks.0.mlp.hook_post"].shape[2] == 1


def test_an_unknown_hook_point_lists_the_models_hook_points():
    cfg = apply_overrides(get_preset("nanda-tiny"), ["record.acts=blocks.0.mlp.hook_pree"])
    with pytest.raises(ConfigError, match=r"unknown activation.*hook_pree.*blocks\.0\.attn\.hook_q"):
        build(cfg, make_task(cfg.task))
