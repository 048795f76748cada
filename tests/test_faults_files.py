"""Issue 27's faults in the study scripts, export-tl and the run directory's files, one test (or a few) each: bad
input is one `error:` line and exit status 2 before anything trains or is written; every file a run writes is
covered by a checksum its readers check; damaged and hostile run directories are one ConfigError naming the file."""

from __future__ import annotations

import ast
import contextlib
import errno
import functools
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import _runhelp
import numpy as np
import pytest
from _runhelp import ROOT, SLOW, TINY_CFG, TINY_SETS, make_legacy, stopped_run, tree_digest

from experiments.book import modes as book_modes
from experiments.book import same_start
from experiments.book import study as book
from experiments.paper import study as paper_study
from miiii.config import ConfigError, apply_overrides
from miiii.presets import get_preset

# _runhelp's TINY: the same compiled programs, and the same finished and stopped runs (trained once a session)
SETS, CFG = TINY_SETS, TINY_CFG


@functools.cache
def _finished() -> Path:
    return _runhelp.finished_run("nanda-tiny", *SETS).path


def _interrupted() -> Path:
    """CFG stopped after its checkpoint at step 12 (no params.npz, summary.json or checksums.json). Shared: read,
    never changed."""
    return stopped_run(TINY_CFG, 12)


def finished(tmp_path: Path) -> Path:
    shutil.copytree(_finished(), tmp_path / "run")
    return tmp_path / "run"


def interrupted(tmp_path: Path) -> Path:
    shutil.copytree(_interrupted(), tmp_path / "run")
    return tmp_path / "run"


def one_error(err: str, says: str = "") -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err and says in lines[0], err[-3000:]
    return lines[0]


def cli(*args) -> int:
    from miiii.cli import main

    return main([str(a) for a in args])


def rc_of(main, args) -> int:
    """A script's main as its exit status (argparse's own refusals exit through SystemExit)."""
    try:
        return main(args)
    except SystemExit as e:
        return e.code


def flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def flip_digit(path: Path, after: str) -> None:
    """Change the first digit after the text `after` (a digit for another digit: the file stays valid JSON)."""
    text = path.read_text()
    i = text.index(after) + len(after)
    while not text[i].isdigit():
        i += 1
    path.write_text(text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:])


def rewrite_index(run: Path, edit) -> None:
    """index.json edited by `edit(index)`, with its own checksum made to match again (and the manifest removed), so
    what catches the edit is the reader's schema, not a checksum."""
    from miiii.rundir import canonical_sum

    path = run / "acts" / "index.json"
    index = json.loads(path.read_text())
    edit(index)
    index.pop("checksum", None)
    path.write_text(json.dumps(index | {"checksum": canonical_sum(index)}))
    make_legacy(run)


# ---------------------------------------------------------------- 6: python -m experiments.paper


@pytest.fixture()
def paper(monkeypatch):
    mod = paper_study
    for name in ("train_run", "resume_run", "run_sweep"):
        monkeypatch.setattr(mod, name, lambda *a, **k: pytest.fail("the paper study trained before refusing its input"))
    return mod


@pytest.mark.parametrize(("args", "says"), [
    (["--steps", "0"], "train.steps"), (["--set", "nokey=1"], "nokey"), (["--set", "p=4"], "task.p"),
    (["--out", "{tmp}/afile"], "not a directory"), (["--seeds", "0"], "--seeds"),
    (["--seeds", "2", "--set", "steps=-3"], "train.steps"),
], ids=["steps 0", "unknown key", "p 4", "out a file", "seeds 0", "negative steps"])
def test_paper_refuses_bad_input_before_training_with_one_line(paper, tmp_path, monkeypatch, capsys, args, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine")
    before = tree_digest(tmp_path), sorted(p.name for p in tmp_path.iterdir())
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert rc_of(paper.main, ["--smoke", "--no-progress", *args]) == 2
    one_error(capsys.readouterr().err, says)
    assert (tree_digest(tmp_path), sorted(p.name for p in tmp_path.iterdir())) == before


def test_paper_checks_every_role_before_the_first_trains(paper, tmp_path, monkeypatch, capsys):
    real = paper.role_config
    monkeypatch.setattr(paper, "role_config", lambda role, smoke, variant: apply_overrides(
        real(role, smoke, variant), ["model.n_heads=5"] if role == "basis" else []))  # d 96: not a multiple
    assert paper.main(["--smoke", "--no-progress", "--out", str(tmp_path / "out")]) == 2
    one_error(capsys.readouterr().err, "n_heads = 5")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 7: torch, the optional extra

no_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")


@no_torch
def test_torch_book_without_torch_says_how_to_install_it():
    module = [sys.executable, "-m", "experiments.book.torch_loop"]
    res = subprocess.run([*module, "--seeds", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    one_error(res.stderr, "pip install -e '.[bench]'")
    res = subprocess.run([*module, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0 and "Traceback" not in res.stderr and "--export-start" in res.stdout, res.stderr
    assert "pip install -e '.[bench]'" in res.stdout


@no_torch
def test_book_torch_without_torch_refuses_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(book_modes, "train_run", lambda *a, **k: pytest.fail("the book study trained before refusing"))
    out = tmp_path / "out"
    assert book.main(["--smoke", "--seeds", "2", "--only-seeds", "--torch", "--out", str(out)]) == 2
    one_error(capsys.readouterr().err, "pip install -e '.[bench]'")
    assert not out.exists()


# ---------------------------------------------------------------- 8: refusals leave nothing, one line each


def test_figures_of_two_runs_of_one_name_leaves_no_out_folder(tmp_path, capsys):
    run = _finished()
    assert cli("figures", run, run, "--out", tmp_path / "X") == 2
    one_error(capsys.readouterr().err, "distinct names")
    assert not (tmp_path / "X").exists()


BOOK_BAD = {
    "unknown unstated key": (["--unstated", "foo=1"], "foo"),
    "unstated with no values": (["--unstated", "wd="], "key=v1,v2"),
    "unstated lr": (["--unstated", "lr=1,2"], "weight decay"),
    "unstated negative wd": (["--unstated", "wd=-1"], "weight_decay"),
    "gap with no inputs": (["--gap"], "holds none of"),
    "out a file": (["--smoke", "--only-seeds", "--out", "{tmp}/afile"], "not a directory"),
    "only-seeds with unstated": (["--unstated", "wd=0.1", "--only-seeds"], "--unstated runs alone"),
    "seeds 0": (["--seeds", "0"], "--seeds"),
}


@pytest.mark.parametrize("case", list(BOOK_BAD))
def test_book_refuses_bad_input_with_one_line_and_no_out_folder(case, tmp_path, monkeypatch, capsys):
    for name in ("train_run", "run_sweep"):
        monkeypatch.setattr(book_modes, name, lambda *a, **k: pytest.fail("the book study trained before refusing"))
    args, says = BOOK_BAD[case]
    (tmp_path / "afile").write_text("mine")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    assert rc_of(book.main, args) == 2
    one_error(capsys.readouterr().err, says)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and (tmp_path / "afile").read_text() == "mine"


def test_same_start_refuses_a_garbage_start_file_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(same_start, "train_from", lambda *a, **k: pytest.fail("trained before refusing"))
    starts, out = tmp_path / "starts", tmp_path / "out"
    starts.mkdir()
    np.savez(starts / "start_s0.npz", seed=0, orders=np.zeros((1, 2), np.uint16), step_loss=np.zeros(2),
             step_loss_warmup0=np.zeros(2), torch_version="2.x")
    (starts / "start_s1.npz").write_bytes(b"garbage, not a zip")
    assert same_start.main(["--starts", str(starts), "--out", str(out)]) == 2
    one_error(capsys.readouterr().err, "start_s1.npz")
    assert not out.exists()


# ---------------------------------------------------------------- 9: export-tl


def test_export_tl_refuses_a_path_inside_a_run(tmp_path, capsys):
    run = finished(tmp_path)
    before = tree_digest(run)
    for out in (run / "ckpt" / "999", run / "exports" / "tl", run):
        assert cli("export-tl", run, out) == 2
        one_error(capsys.readouterr().err, "inside the run directory")
        assert tree_digest(run) == before and not (run / "exports").exists() and not (run / "ckpt" / "999").exists()


@pytest.mark.parametrize("tl", [3, 4])
@pytest.mark.parametrize("name", ['x")+print("INJECTED")+("', 'a"quote', "back\\slash", "new\nline", "it's"])
def test_the_printed_snippet_reads_any_path_as_a_literal(tmp_path, name, tl):
    from miiii.transformerlens import load_lines

    out = tmp_path / name
    tree = ast.parse(load_lines(out, tl))
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert {f"{out}/config.json", f"{out}/model.safetensors"} <= strings, strings
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "print" not in calls


def test_export_tl_prints_a_snippet_that_runs_nothing_from_the_path(tmp_path, capsys):
    out = tmp_path / 'x")+print("INJECTED")+("'
    assert cli("export-tl", _finished(), out) == 0
    snippets = [block for block in capsys.readouterr().out.split("\n\n") if block.startswith("import json")]
    assert len(snippets) == 2 and (out / "config.json").is_file()  # TransformerLens 3's lines and 4's
    for snippet in snippets:
        strings = {n.value for n in ast.walk(ast.parse(snippet)) if isinstance(n, ast.Constant)}
        assert f"{out}/config.json" in strings


def test_export_tl_on_a_full_disk_leaves_nothing_and_exits_1(tmp_path, monkeypatch, capsys):
    import miiii.transformerlens as tl

    def full(f, parts):
        f.write(parts[0][: len(parts[0]) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tl, "_write_parts", full)
    out = tmp_path / "deep" / "tl"
    assert cli("export-tl", _finished(), out) == 1
    line = one_error(capsys.readouterr().err, "No space left on device")
    assert line.startswith("error: writing ")
    assert list(tmp_path.iterdir()) == [], "a failed export left files or folders"


# ---------------------------------------------------------------- 10: every file covered by a checksum


def test_a_finished_run_has_a_manifest_of_every_file(tmp_path):
    from miiii.integrity import read_manifest

    files = read_manifest(_finished())
    assert set(files) >= {"config.json", "metrics.npz", "metrics.jsonl", "params.npz", "summary.json", "ckpt.json",
                          "acts/index.json", "acts/inputs.npy"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a run with a manifest loads without the legacy warning
        from miiii.run import load_run

        assert not load_run(_finished()).legacy


DAMAGE = {  # name: (damage(run), the file the error names)
    "inputs.npy flipped": (lambda r: flip(r / "acts" / "inputs.npy", -1), "inputs.npy"),
    "summary.json digit": (lambda r: flip_digit(r / "summary.json", '"wall_s": '), "summary.json"),
    "metrics.jsonl value": (lambda r: flip_digit(r / "metrics.jsonl", '"loss": '), "metrics.jsonl"),
    "params.npz other values": (lambda r: _add_one(r / "params.npz"), "params.npz"),
    "index.json crc32 lists deleted": (lambda r: (r / "acts" / "index.json").write_text(
        (r / "acts" / "index.json").read_text().replace('"crc32": [', '"crc32_": [')), "index.json"),
    "index.json digit": (lambda r: flip_digit(r / "acts" / "index.json", '"crc32": ['), "index.json"),
    "manifest digit": (lambda r: flip_digit(r / "checksums.json", '"metrics.npz": "'), "checksums.json"),
    "manifest entry removed": (lambda r: _drop_entry(r, "metrics.jsonl"), "metrics.jsonl has no checksum"),
    "tb/ added": (lambda r: ((r / "tb").mkdir(), (r / "tb" / "events").write_text("x")), "tb/events"),
}


def _add_one(path: Path) -> None:
    """Rewrite an .npz as a valid zip with other values."""
    with np.load(path) as z:
        changed = {k: z[k] + 1 for k in z.files}
    np.savez(path, **changed)


def _drop_entry(run: Path, name: str) -> None:
    from miiii.rundir import canonical_sum

    m = json.loads((run / "checksums.json").read_text())
    del m["files"][name]
    m.pop("checksum")
    (run / "checksums.json").write_text(json.dumps(m | {"checksum": canonical_sum(m)}))


@pytest.mark.parametrize("case", list(DAMAGE))
def test_one_changed_byte_in_any_file_of_a_finished_run_is_caught_on_load(case, tmp_path, capsys):
    from miiii.run import load_run

    run = finished(tmp_path)
    damage, says = DAMAGE[case]
    if case == "index.json crc32 lists deleted":
        w_e = run / "acts" / "W_E.npy"
        flip(w_e, np.load(w_e, mmap_mode="r").offset + 3)  # a flipped data byte that the lists would catch
    damage(run)
    with pytest.raises(ConfigError, match=says.replace(".", r"\.")) as e:
        load_run(run)
    assert "\n" not in str(e.value)
    assert cli("figures", run, "--out", tmp_path / "figs") == 2
    one_error(capsys.readouterr().err, says)
    assert not (tmp_path / "figs").exists()


@pytest.mark.parametrize("case", ["summary.json digit", "summary.json garbage", "metrics.jsonl value",
                                  "inputs.npy flipped", "params.npz other values"])
def test_resume_of_a_finished_run_writes_a_damaged_rebuildable_file_again(case, tmp_path, capsys):
    from miiii.run import load_run

    run = finished(tmp_path)
    if case == "summary.json garbage":
        (run / "summary.json").write_text("{not json")
    else:
        DAMAGE[case][0](run)
    capsys.readouterr()
    assert cli("train", "--resume", run, "--no-progress") == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "nothing to do" not in err and "Traceback" not in err, err
    loaded = load_run(run)  # every file as its new manifest says
    assert loaded.summary["steps"] == 24 and not loaded.legacy
    for name in ("metrics.jsonl", "acts/inputs.npy"):
        assert (run / name).read_bytes() == (_finished() / name).read_bytes(), name
    _runhelp.assert_same_run(_finished(), run)
    assert cli("train", "--resume", run, "--no-progress") == 0
    assert "nothing to do" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["metrics.npz", "config.json"])
def test_resume_of_a_finished_run_refuses_damage_it_cannot_undo(case, tmp_path, capsys):
    run = finished(tmp_path)
    if case == "metrics.npz":
        with np.load(run / "metrics.npz") as z:
            changed = {k: z[k] + 1 if k == "loss" else z[k] for k in z.files}
        np.savez(run / "metrics.npz", **changed)
    else:
        (run / "config.json").write_text((run / "config.json").read_text() + " ")
    before = tree_digest(run)
    assert cli("train", "--resume", run, "--no-progress") == 2
    one_error(capsys.readouterr().err, f"{case} is damaged")
    assert tree_digest(run) == before


def test_damaged_inputs_of_an_interrupted_run_are_caught_and_written_again_on_resume(tmp_path, capsys):
    from miiii.run import load_run

    run = interrupted(tmp_path)
    flip(run / "acts" / "inputs.npy", -2)
    with pytest.raises(ConfigError, match=r"inputs\.npy is damaged"):
        load_run(run)
    capsys.readouterr()
    assert cli("train", "--resume", run, "--no-progress") == 0
    assert "inputs.npy is damaged" in capsys.readouterr().err
    _runhelp.assert_same_run(_finished(), run)
    assert (run / "acts" / "inputs.npy").read_bytes() == (_finished() / "acts" / "inputs.npy").read_bytes()


@pytest.mark.parametrize("case", ["digit", "lists deleted"])
def test_index_json_of_an_interrupted_run_is_checked_as_itself(case, tmp_path, capsys):
    """No manifest yet: index.json's own checksum names index.json (not the array whose crc32 changed), and rows
    whose checksum list is gone are refused even in an index without that checksum."""
    from miiii.run import load_run

    run = interrupted(tmp_path)
    index = run / "acts" / "index.json"
    if case == "digit":
        flip_digit(index, '"crc32": [')
        says = r"index\.json is damaged or was edited: its content does not match"
    else:
        rewrite_index(run, lambda ix: [a.update(crc32=[]) for a in ix["arrays"].values()])
        says = "have no checksum"
    with pytest.raises(ConfigError, match=says):
        load_run(run)
    before = tree_digest(run)
    assert cli("train", "--resume", run, "--no-progress") == 2
    one_error(capsys.readouterr().err)
    assert tree_digest(run) == before


def test_a_legacy_run_loads_with_a_warning(tmp_path):
    from miiii.run import load_run

    run = finished(tmp_path)
    make_legacy(run)
    with pytest.warns(UserWarning, match="legacy"):
        assert load_run(run).legacy


# ---------------------------------------------------------------- 11: hostile run directories


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """The body fails with a TimeoutError instead of waiting forever (a FIFO read blocks)."""
    def hung(*_):
        raise TimeoutError(f"still running after {seconds} s")

    signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)


def test_a_fifo_in_place_of_an_activation_file_is_refused_not_waited_on(tmp_path):
    from miiii.run import load_run

    run = finished(tmp_path)
    (run / "acts" / "W_E.npy").unlink()
    os.mkfifo(run / "acts" / "W_E.npy")
    with no_hang():
        with pytest.raises(ConfigError, match=r"W_E\.npy .*not a regular file"):
            load_run(run)


INDEX_EDITS = {
    "every 0": lambda ix: ix["arrays"]["W_E"].update(every=0),
    "complete_step abc": lambda ix: ix.update(complete_step="abc", finished=False),
    "crc32 garbage": lambda ix: ix["arrays"]["W_E"].update(crc32="garbage"),
    "arrays a list": lambda ix: ix.update(arrays=[1, 2]),
    "no shape": lambda ix: ix["arrays"]["W_E"].pop("shape"),
    "dtype a number": lambda ix: ix["arrays"]["W_E"].update(dtype=3),
    "finished a string": lambda ix: ix.update(finished="yes"),
}


@pytest.mark.parametrize("case", list(INDEX_EDITS))
def test_malformed_index_values_are_one_config_error_naming_index_json(case, tmp_path, capsys):
    from miiii.run import load_run

    run = finished(tmp_path)
    rewrite_index(run, INDEX_EDITS[case])
    with pytest.raises(ConfigError, match=r"index\.json is damaged or was edited"):
        load_run(run)
    assert cli("figures", run, "--out", tmp_path / "figs") == 2
    one_error(capsys.readouterr().err, "index.json")


@pytest.mark.parametrize("name", ["config.json", "summary.json", "acts/index.json", "ckpt.json", "metrics.jsonl"])
def test_json_nested_too_deep_is_a_config_error(name, tmp_path):
    from miiii.run import load_run

    run = finished(tmp_path)
    make_legacy(run)
    (run / name).write_text("[" * 200_000 + "]" * 200_000 + ("\n" if name.endswith("l") else ""))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy warning
        if name == "ckpt.json":  # load_run reads it leniently; the resume strictly
            from miiii.rundir import read_ckpt_meta

            with pytest.raises(ConfigError, match="ckpt.json"):
                read_ckpt_meta(run)
        elif name == "metrics.jsonl":
            from miiii.rundir import read_metrics_log

            with pytest.raises(ConfigError, match="metrics.jsonl"):
                read_metrics_log(run)
        else:
            with pytest.raises(ConfigError, match=name.split("/")[-1].replace(".", r"\.")):
                load_run(run)


@pytest.mark.parametrize("kind", ["finished", "interrupted"])
def test_a_file_in_place_of_tb_is_refused_by_resume_before_anything_changes(kind, tmp_path, capsys):
    run = finished(tmp_path) if kind == "finished" else interrupted(tmp_path)
    shutil.rmtree(run / "tb", ignore_errors=True)
    (run / "tb").write_text("not a folder")
    make_legacy(run)
    before = tree_digest(run)
    capsys.readouterr()
    assert cli("train", "--resume", run, "--no-progress") == 2
    err = capsys.readouterr().err
    one_error(err, "tb is damaged")
    assert len(err.strip().splitlines()) == 1 and tree_digest(run) == before


def test_an_activation_symlink_out_of_the_run_is_refused(tmp_path):
    from miiii.run import load_run

    run = finished(tmp_path)
    outside = tmp_path / "elsewhere.npy"
    shutil.copy(run / "acts" / "W_E.npy", outside)
    (run / "acts" / "W_E.npy").unlink()
    (run / "acts" / "W_E.npy").symlink_to(outside)
    with pytest.raises(ConfigError, match="leads out of the run directory"):
        load_run(run)


def test_a_config_edited_past_the_limits_is_refused_on_load(tmp_path):
    from miiii.run import load_run

    run = finished(tmp_path)
    for path in (run / "config.json", run / "ckpt.json"):  # both copies, so only validation can tell
        d = json.loads(path.read_text())
        (d.get("config", d))["task"]["p"] = 2**31 - 1
        path.write_text(json.dumps(d))
    make_legacy(run)
    with no_hang():
        with pytest.raises(ConfigError, match=r"config\.json is damaged or was edited into something invalid"):
            load_run(run)


@SLOW
def test_an_unfinished_runs_metrics_rows_are_checked_against_their_checkpoint(tmp_path):
    """metrics.npz of an unfinished run is rewritten at every checkpoint, so checksums.json cannot cover it: ckpt.json
    keeps, per checkpoint, the checksum of the rows before its step. A changed value there stops the resume; one
    after it (rows the resume replays) does not matter."""
    from _runhelp import Crash, crash_at

    from miiii.runner import resume_run, train_run

    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=24", "chunk=6", "ckpt.every=6", "record.acts=",
                                                     "record.params="])

    def interrupted(name):
        run = tmp_path / name
        try:
            train_run(cfg, run, progress=False, tensorboard=False, on_chunk=crash_at(12))
        except Crash:
            pass
        return run

    def change(run, row):
        m = dict(np.load(run / "metrics.npz"))
        m["loss"] = m["loss"].copy()
        m["loss"][row] += 1.0
        np.savez(run / "metrics.npz", **m)

    before = interrupted("before")
    change(before, 3)
    with pytest.raises(ConfigError, match=r"metrics.npz is damaged: its rows before step 12"):
        resume_run(before, progress=False, tensorboard=False)
    after = interrupted("after")
    m = dict(np.load(after / "metrics.npz"))
    if len(m["step"]) > 12:  # rows past the checkpoint, if the crash left any, are replayed
        change(after, 13)
    resume_run(after, progress=False, tensorboard=False)
    assert json.loads((after / "summary.json").read_text())["steps"] == 24
