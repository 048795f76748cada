"""Faults and bad input: damaged checkpoints fall back, one writer per run, a full disk stops cleanly,
damaged run files are named, and 20+ bad inputs each give one message, exit 2, and no file."""

from __future__ import annotations

import errno
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _runhelp import SLOW, TINY, TINY_CFG, assert_same_run, crashed_tiny, tiny_reference, tree_digest

import miiii.recorder
from miiii.cli import main
from miiii.config import ConfigError, RunConfig, apply_overrides
from miiii.errors import RunError
from miiii.presets import get_preset
from miiii.run import load_run
from miiii.runner import resume_run, train_run
from miiii.tasks import TaskConfig
from miiii.validate import validate

# _runhelp's TINY (24 steps, checkpoints 0, 12, 24), its finished run and its run stopped after checkpoint 24
# (`crashed_tiny`): programs compiled and runs trained once a session for both files. What resumes must restore
# besides the parameters (the EMA, the key, the data order: miiii-tiny's minibatches and dropout) is test_resume's.


@SLOW
def test_flipped_byte_in_newest_checkpoint_falls_back_and_finishes_bit_identical(tmp_path, capsys):
    run_dir = crashed_tiny(tmp_path)
    newest = run_dir / "ckpt" / "24"
    data = max((p for p in newest.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "checkpoint 24" in err and ("damaged" in err or "does not restore" in err), err
    assert "resuming" in err and "from step 12" in err
    assert_same_run(tiny_reference(), run_dir)


def test_checksum_mismatch_alone_is_caught(tmp_path, capsys):
    """orbax restores a silently altered checkpoint; only our checksum notices (here: the stored sum changed)."""
    run_dir = crashed_tiny(tmp_path)
    meta = json.loads((run_dir / "ckpt.json").read_text())
    meta["checksums"]["24"] = "0" * 64
    (run_dir / "ckpt.json").write_text(json.dumps(meta))
    resume_run(run_dir, progress=False)
    err = capsys.readouterr().err
    assert "checkpoint 24 is damaged (checksum mismatch)" in err and "from step 12" in err
    assert_same_run(tiny_reference(), run_dir)


def test_no_good_checkpoint_is_an_error_and_changes_nothing(tmp_path, capsys):
    run_dir = crashed_tiny(tmp_path)
    meta = json.loads((run_dir / "ckpt.json").read_text())
    meta["checksums"] = {k: "0" * 64 for k in meta["checksums"]}
    (run_dir / "ckpt.json").write_text(json.dumps(meta))
    before = tree_digest(run_dir)
    assert main(["train", "--resume", str(run_dir)]) == 2
    assert "no checkpoint can be resumed" in capsys.readouterr().err
    assert tree_digest(run_dir) == before


def test_disk_full_while_writing_activations_stops_with_file_and_free_space(tmp_path, monkeypatch):
    real = miiii.recorder._write_rows
    calls = {"n": 0}

    def full_disk(f, offset, rows):
        calls["n"] += 1
        if calls["n"] > 5:  # the second chunk's rows (five files a chunk): the disk fills up
            raise OSError(errno.ENOSPC, "No space left on device")
        real(f, offset, rows)

    monkeypatch.setattr(miiii.recorder, "_write_rows", full_disk)
    with pytest.raises(RunError) as e:
        train_run(TINY_CFG, tmp_path / "run", progress=False)
    msg = str(e.value)
    assert "acts/" in msg and ".npy" in msg and "No space left on device" in msg and "bytes free" in msg
    assert "--resume" in msg
    monkeypatch.setattr(miiii.recorder, "_write_rows", real)  # space freed
    resume_run(tmp_path / "run", progress=False)
    assert_same_run(tiny_reference(), tmp_path / "run")


def test_disk_full_exit_status_and_message_from_the_cli(tmp_path, monkeypatch, capsys):
    def full_disk(f, offset, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(miiii.recorder, "_write_rows", full_disk)
    rc = main(["train", *TINY, "--run-dir", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert rc == 1 and last.startswith("error: writing ") and "bytes free" in last and "Traceback" not in err


def damaged_copy(tmp_path: Path, what: str) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_reference(), run_dir)
    if what == "metrics":
        p = run_dir / "metrics.npz"
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    elif what == "acts":
        p = run_dir / "acts" / "blocks.0.mlp.hook_post.npy"
        p.write_bytes(p.read_bytes()[: p.stat().st_size - 1000])
    elif what == "config":
        cfg = json.loads((run_dir / "config.json").read_text())
        cfg["optim"]["lr"] = 0.5
        (run_dir / "config.json").write_text(json.dumps(cfg))
    elif what == "config-garbage":
        (run_dir / "config.json").write_text("{not json")
    return run_dir


@pytest.mark.parametrize(("what", "says"), [("metrics", "metrics.npz is damaged"),
                                            ("acts", "blocks.0.mlp.hook_post.npy is damaged"),
                                            ("config", "was edited"), ("config-garbage", "config.json is damaged")])
def test_damaged_run_files_are_named_on_resume_and_load_run(tmp_path, capsys, what, says):
    run_dir = damaged_copy(tmp_path, what)
    before = tree_digest(run_dir)
    assert main(["train", "--resume", str(run_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err, err
    assert tree_digest(run_dir) == before
    with pytest.raises(ConfigError, match=says.split()[0]):
        load_run(run_dir)


# ---------------------------------------------------------------- the bad-input suite

BAD_CLI = {
    "non-prime p": (["--set", "p=12"], "prime"),
    "negative p": (["--set", "p=-7"], "prime"),
    "huge p": (["--set", "p=100003"], "above 1000"),
    "train_frac 0": (["--set", "train_frac=0"], "train_frac"),
    "train_frac 1": (["--set", "train_frac=1"], "train_frac"),
    "train_frac negative": (["--set", "train_frac=-0.1"], "train_frac"),
    "train_frac nan": (["--set", "train_frac=nan"], "train_frac"),
    "unknown preset": (["--preset", "nandaa"], "unknown preset"),
    "unknown task": (["--set", "task.name=division"], "unknown task"),
    "unknown key": (["--set", "model.width=3"], "unknown config key"),
    "ambiguous key": (["--set", "every=5"], "ambiguous"),
    "wrong type": (["--set", "d_model=wide"], "takes a int"),
    "steps zero": (["--steps", "0"], "train.steps"),
    "steps negative": (["--steps", "-5"], "train.steps"),
    "dropout 1.5": (["--set", "dropout=1.5"], "dropout"),
    "negative lr": (["--set", "lr=-1"], "optim.lr"),
    "unknown activation": (["--set", "record.acts=blocks.0.mlp.hook_pree"], "unknown activation"),
    "unknown parameter": (["--set", "record.params=W_X"], "unknown parameter"),
    "neuron out of range": (["--set", "record.neurons=0,9999"], "out of range"),
    "neurons not ints": (["--set", "record.neurons=a,b"], "comma-separated ints"),
    "every zero": (["--set", "record.every=0"], "record.every"),
    "empty sub-grid": (["--set", "record.inputs=grid:0"], "must lie in"),
    "unknown inputs": (["--set", "record.inputs=everything"], "choose grid"),
    "probes without probes": (["--set", "record.inputs=probes"], "record.probes"),
    "bad dtype": (["--set", "record.dtype=int8"], "record.dtype"),
    "keep one checkpoint": (["--set", "ckpt.keep=1"], "ckpt.keep"),
    "budget not a size": (["--record-budget", "lots"], "--record-budget"),
    "over budget": (["--record-budget", "1kB"], "more than --record-budget"),
    "resume and run-dir": (["--resume", "{tmp}/x", "--run-dir", "{tmp}/y"], "leave out --run-dir"),
    "resume nothing": (["--resume", "{tmp}/nothing"], "not a run directory"),
    "grid on a sequence task": (["--preset", "addition-tiny", "--set", "record.inputs=grid"], "no input grid"),
    "probe of the wrong task": (["--preset", "addition-tiny", "--set", "record.probes=12345"], "does not fit"),
}


@pytest.mark.parametrize("case", list(BAD_CLI))
def test_bad_cli_input_one_message_exit_2_no_files(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args, says = BAD_CLI[case]
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--run-dir" not in args and "--resume" not in args:
        args += ["--run-dir", str(tmp_path / "run")]
    assert main(["train", "--preset", "nanda-tiny", "--no-progress", *args] if "--preset" not in args
                else ["train", "--no-progress", *args]) == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error: ") and says in lines[0], err
    assert "Traceback" not in err and not out
    assert list(tmp_path.iterdir()) == [], "a bad input wrote files"


def test_bad_cli_input_on_an_existing_directory_changes_nothing(tmp_path, capsys):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "keep.txt").write_text("mine")
    before = tree_digest(tmp_path)
    assert main(["train", "--preset", "nanda-tiny", "--run-dir", str(tmp_path / "old")]) == 2
    assert "not empty" in capsys.readouterr().err
    assert tree_digest(tmp_path) == before


def test_bad_api_input_raises_one_config_error(tmp_path):
    cfg = get_preset("nanda-tiny")
    cases = [
        lambda: validate(replace(cfg, task=TaskConfig(name="nanda", p=4))),
        lambda: train_run(apply_overrides(cfg, ["steps=0"]), tmp_path / "r", progress=False),
        lambda: train_run(apply_overrides(cfg, ["record.acts=logitz"]), tmp_path / "r", progress=False),
        lambda: load_run(tmp_path / "nothing"),
        lambda: resume_run(tmp_path / "nothing"),
        lambda: RunConfig.from_dict({"bogus": {}}),
        lambda: RunConfig.from_dict({"record": {"everyy": 3}}),
        lambda: apply_overrides(cfg, ["record.neurons=1:x"]),
    ]
    for case in cases:
        with pytest.raises(ConfigError):
            case()
    assert list(tmp_path.iterdir()) == []


def test_presets_bad_flag_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["presets", "--bogus"])
    assert e.value.code == 2 and "error:" in capsys.readouterr().err


def test_acts_are_readable_with_numpy_alone():
    run_dir = tiny_reference()
    index = json.loads((run_dir / "acts" / "index.json").read_text())
    for meta in index["arrays"].values():
        a = np.load(run_dir / "acts" / meta["file"], mmap_mode="r")
        assert list(a.shape) == meta["shape"] and len(meta["axes"]) == a.ndim and np.isfinite(a[-1]).all()


@pytest.mark.parametrize("where", ["metrics", "checkpoint"])
def test_write_error_in_metrics_or_checkpoint_leaves_a_resumable_run(tmp_path, monkeypatch, where):
    import orbax.checkpoint as ocp

    import miiii.rundir

    calls = {"n": 0}

    def fail_third(real):
        def patched(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 3:  # metrics.npz: checkpoint 12's; the checkpoint: 24
                raise OSError(errno.EIO, "Input/output error")
            return real(*args, **kwargs)
        return patched

    if where == "metrics":
        monkeypatch.setattr(miiii.rundir, "save_npz_atomic", fail_third(miiii.rundir.save_npz_atomic))
    else:
        monkeypatch.setattr(ocp.CheckpointManager, "save", fail_third(ocp.CheckpointManager.save))
    with pytest.raises(RunError) as e:
        train_run(TINY_CFG, tmp_path / "run", progress=False)
    msg = str(e.value)
    named = "metrics.npz" if where == "metrics" else "ckpt/24"
    assert named in msg and "Input/output error" in msg and "bytes free" in msg, msg
    monkeypatch.undo()
    resume_run(tmp_path / "run", progress=False)
    assert_same_run(tiny_reference(), tmp_path / "run")
