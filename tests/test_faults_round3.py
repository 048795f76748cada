"""The third round of faults, one test per class: a grid's repeated value refused; `page` on every run the docs
promise (a finished sweep member, an unfinished run); `film`'s unbounded frame counts and frame rates refused before
any frame is drawn; a study's out-of-range counts refused before it trains."""

from __future__ import annotations

from signal import SIGTERM

import pytest
from _runhelp import TINY_CFG, signal_at, stopped_run, tree_digest
from test_sweep_resume import crashed as crashed_sweep
from test_sweep_resume import reference as finished_sweep

from miiii.cli import main
from miiii.config import apply_overrides
from miiii.presets import get_preset

TINY = ["p=11", "task.valid_size=20", "model.d_model=16", "model.d_mlp=32", "steps=20", "chunk=10",
        "ckpt.keep_log=0"]
# The runs and sweeps the tests read are shared (_runhelp's TINY, test_sweep_resume's sweep), trained once a
# session (`_runhelp.shared`): a config of this file's own would be one more compile, most of these tests' time.


def _one_error(capsys, says: str) -> None:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in err, err[-2000:]


def test_a_grid_value_given_twice_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", "--preset", "nanda-tiny", "--grid", "lr=3e-3,3e-3", "--out", str(out), "--no-progress"]) == 2
    _one_error(capsys, "more than once")
    assert not out.exists()


@pytest.fixture(scope="module")
def member_and_unfinished():
    """A finished sweep member (30 steps, lr 3e-3 of a grid over lr) and a run stopped after its first chunk (step 12
    of 24: resumable, no summary.json). Shared: read, never changed."""
    return finished_sweep() / "member_001", stopped_run(TINY_CFG, 12)


@pytest.mark.parametrize("which", ["sweep member", "unfinished run"])
def test_page_works_on_a_sweep_member_and_an_unfinished_run(member_and_unfinished, tmp_path, which):
    run = member_and_unfinished[which == "unfinished run"]
    before = tree_digest(run)
    out = tmp_path / "page.html"
    assert main(["page", str(run), "--out", str(out), "--no-film"]) == 0
    text = out.read_text()
    assert "<h2>Grok step per task" in text and "<h2>Config" in text
    if which == "unfinished run":
        assert "12 steps of 24" in text and "has not finished" in text
    else:
        assert "30 steps" in text and "parameters" in text
    assert tree_digest(run) == before  # a page reads a run, never writes into it


@pytest.mark.parametrize(("args", "says"), [(["--frames", "1000000000000"], "--frames"),
                                            (["--frames", "0"], "--frames"), (["--fps", "nan"], "--fps"),
                                            (["--fps", "inf"], "--fps"), (["--fps", "1e-300"], "--fps"),
                                            (["--fps", "0"], "--fps")],
                         ids=["frames huge", "frames 0", "fps nan", "fps inf", "fps tiny", "fps 0"])
def test_film_refuses_unbounded_frames_and_rates_before_drawing(member_and_unfinished, tmp_path, capsys, args, says):
    out = tmp_path / "film.gif"
    assert main(["film", str(member_and_unfinished[0]), "--out", str(out), *args]) == 2
    _one_error(capsys, says)
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize(("module", "args", "says"), [
    ("experiments.stability", ["--steps", "0"], "--steps"),
    ("experiments.stability", ["--steps", "-5"], "--steps"),
    ("experiments.paper", ["--smoke", "--seeds", "1000000000"], "--seeds"),
    ("experiments.book", ["--ablation-epochs", "0"], "--ablation-epochs"),
    ("experiments.book", ["--ablation-epochs", "-3"], "--ablation-epochs"),
], ids=["stability steps 0", "stability steps -5", "paper seeds 1e9", "book ablation 0", "book ablation -3"])
def test_a_study_refuses_out_of_range_counts_before_it_trains(tmp_path, monkeypatch, capsys, module, args, says):
    import importlib

    monkeypatch.chdir(tmp_path)
    mod = importlib.import_module(module + (".__main__" if module == "experiments.stability" else ".study"))
    try:
        rc = mod.main([*args, "--out", str(tmp_path / "out")])
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    _one_error(capsys, says)
    assert not (tmp_path / "out").exists()


def test_a_sweep_resume_refused_for_one_damaged_member_touches_no_other(tmp_path, capsys):
    """member_001 lost its metrics.npz: `sweep --resume` must refuse before it cuts any member back (their later
    checkpoints, metrics and recordings stay byte for byte): without the check the common step falls to 0 and
    member_000's checkpoints 10 and 20 go."""
    import shutil

    shutil.copytree(crashed_sweep(), tmp_path / "sw")  # stopped after its checkpoint at step 20 of 30
    (tmp_path / "sw" / "member_001" / "metrics.npz").unlink()
    before = tree_digest(tmp_path / "sw")
    assert main(["sweep", "--resume", str(tmp_path / "sw"), "--no-progress"]) == 2
    _one_error(capsys, "metrics.npz")
    assert tree_digest(tmp_path / "sw") == before


def test_divergence_is_judged_on_parameters_and_logits_not_the_loss_alone():
    """A member whose parameters (or logits) are NaN while its loss stays finite is diverged from that step."""
    import numpy as np

    from miiii.sweepfiles import DIVERGENCE_SIGNALS, mark_diverged

    steps = 6
    for signal in DIVERGENCE_SIGNALS:
        hist = {k: np.ones((2, steps), np.float32) for k in DIVERGENCE_SIGNALS}
        hist["valid_acc"] = np.ones((2, steps, 3), np.float32)
        hist[signal][1, 3:] = np.nan  # member 1: only this signal goes bad
        diverged = np.full(2, -1)
        assert mark_diverged(hist, diverged, 0, steps) == [1], signal
        assert list(diverged) == [-1, 3] and np.isnan(hist["valid_acc"][1, 3:]).all()
        assert np.isfinite(hist["valid_acc"][0]).all()


def test_a_stablemax_member_at_lr_inf_is_marked_diverged(tmp_path):
    """StableMax keeps the loss finite on NaN parameters: the sweep still marks the member diverged, not grokked."""
    import json

    out = tmp_path / "sw"
    sets = [*TINY, "loss=stablemax", "record.acts=", "record.params="]  # nothing recorded: a smaller program
    assert main(["sweep", "--preset", "nanda-tiny", "--seeds", "1", "--grid", "lr=3e-3,inf", "--no-progress",
                 "--no-tensorboard", "--out", str(out), *[a for kv in sets for a in ("--set", kv)]]) == 0
    res = json.loads((out / "sweep.json").read_text())
    by_lr = {m["values"]["optim.lr"]: m for m in res["members"]}
    assert by_lr[float("inf")]["diverged_at"] is not None and by_lr[3e-3]["diverged_at"] is None


def test_an_edited_member_json_is_refused_where_it_is_read(member_and_unfinished, tmp_path):
    """member.json edited to another seed or grid value no longer matches the member's config.json."""
    import json
    import shutil

    from miiii.config import ConfigError
    from miiii.run import load_run

    d = tmp_path / "member"
    shutil.copytree(member_and_unfinished[0], d)
    assert load_run(d).member["seed"] == 0
    info = json.loads((d / "member.json").read_text())
    (d / "member.json").write_text(json.dumps(info | {"seed": 7}))
    with pytest.raises(ConfigError, match="member.json is damaged.*train.seed = 7"):
        _ = load_run(d).member


def test_a_sweep_plan_edited_to_a_subset_is_refused(tmp_path, capsys):
    """sweep-plan.json's grid cut to one of its two values: the resume would finish half the members and call the
    sweep complete; it is refused, nothing changed."""
    import json
    import shutil

    shutil.copytree(crashed_sweep(), tmp_path / "sw")  # lr 1e-3 and 3e-3, stopped at step 20
    plan = json.loads((tmp_path / "sw" / "sweep-plan.json").read_text())
    plan["grid"]["optim.lr"] = plan["grid"]["optim.lr"][:1]
    (tmp_path / "sw" / "sweep-plan.json").write_text(json.dumps(plan))
    before = tree_digest(tmp_path / "sw")
    assert main(["sweep", "--resume", str(tmp_path / "sw"), "--no-progress"]) == 2
    _one_error(capsys, "makes 1 members but")
    assert tree_digest(tmp_path / "sw") == before


def test_a_finished_run_without_its_manifest_is_damaged_not_legacy(member_and_unfinished, tmp_path, capsys):
    """checksums.json deleted and summary.json edited (valid accuracy 1.0, grok step 7): ckpt.json says the run was
    written with a manifest, so load_run, figures and --resume refuse it instead of accepting it with a warning."""
    import json
    import shutil

    from miiii.config import ConfigError
    from miiii.run import load_run

    run = tmp_path / "run"
    shutil.copytree(member_and_unfinished[0], run)
    (run / "checksums.json").unlink()
    s = json.loads((run / "summary.json").read_text())
    s["grok_step"] = {k: 7 for k in s["grok_step"]}
    (run / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ConfigError, match="checksums.json is missing"):
        load_run(run)
    assert main(["figures", str(run), "--out", str(tmp_path / "fig")]) == 2
    _one_error(capsys, "checksums.json is missing")
    assert not (tmp_path / "fig").exists()


# every command that draws into a path: (argv builder, what the path is)
OUTPUTS = {
    "film": (lambda run, out: ["film", str(run), "--out", str(out)], "file"),
    "page": (lambda run, out: ["page", str(run), "--out", str(out), "--no-film"], "file"),
    "figures": (lambda run, out: ["figures", str(run), "--out", str(out)], "dir"),
    "compare": (lambda run, out: ["compare", str(run), str(run.parent / "member_000"), "--out", str(out)], "dir"),
}


@pytest.mark.parametrize("where", ["inside the run", "in its tb", "a dir for a file", "a file for a dir",
                                   "read-only parent"])
@pytest.mark.parametrize("command", list(OUTPUTS))
def test_every_output_path_is_checked_before_anything_is_drawn(member_and_unfinished, tmp_path, capsys, command,
                                                                 where):
    import os

    run = member_and_unfinished[0]
    argv, kind = OUTPUTS[command]
    name = "x.gif" if command == "film" else "x.html" if command == "page" else "x"
    (tmp_path / "dir.gif").mkdir()
    (tmp_path / "afile").write_text("mine")
    ro = tmp_path / "ro"
    ro.mkdir()
    out = {"inside the run": run / name, "in its tb": run / "tb" / name,
           "a dir for a file": tmp_path / ("dir.gif" if kind == "file" else "afile"),
           "a file for a dir": tmp_path / ("afile" if kind == "dir" else "dir.gif"),
           "read-only parent": ro / name}[where]
    if where == "a file for a dir" and kind == "file":
        out = tmp_path / "afile" / name  # a file where its folder should be
    if where == "read-only parent" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    ro.chmod(0o555)
    before, before_tmp = tree_digest(run), tree_digest(tmp_path)
    try:
        assert main(argv(run, out)) == 2
    finally:
        ro.chmod(0o755)
    _one_error(capsys, "--out")
    assert tree_digest(run) == before and tree_digest(tmp_path) == before_tmp


@pytest.mark.study  # make test-studies: two runs of two tasks trained end to end
def test_compare_puts_each_runs_grok_steps_under_its_own_task_names(tmp_path):
    """nanda's one task and miiii's q=2 are different tasks: the grok figure's ticks are the union of the names, each
    run's points at its own."""
    from miiii import compare as C
    from miiii.runner import train_run

    runs = []
    for preset in ("nanda-tiny", "miiii-tiny"):
        train_run(apply_overrides(get_preset(preset), TINY), tmp_path / preset, progress=False, tensorboard=False)
        runs.append(tmp_path / preset)
    seen = {}
    real = C.save_figure

    def keep(fig, out, name):
        seen[name] = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        return real(fig, out, name)

    C.save_figure = keep
    try:
        C.compare(runs, tmp_path / "cmp")
    finally:
        C.save_figure = real
    assert seen["compare_grok"] == ["mod 11", "q=2", "q=3", "q=5", "q=7"]  # nanda's task beside miiii's four


def test_compare_reads_a_run_that_has_not_finished(member_and_unfinished, tmp_path):
    from miiii import compare as C

    paths = C.compare([member_and_unfinished[1], member_and_unfinished[0]], tmp_path / "cmp")
    assert any(p.name == "compare_loss.png" for p in paths)


def test_a_resume_refuses_an_npy_whose_header_was_edited(tmp_path, capsys):
    """The rows' crc32s do not cover an .npy header: an edit of it (here fortran_order, same length) is refused by
    the resume before anything changes, instead of a run that finishes and then fails to load."""
    import shutil

    shutil.copytree(stopped_run(TINY_CFG, 12), tmp_path / "run")  # stopped at step 12 of 24
    npy = next((tmp_path / "run" / "acts").glob("*hook_post*.npy"))
    raw = npy.read_bytes()
    assert b"'fortran_order': False" in raw[:128]
    npy.write_bytes(raw.replace(b"'fortran_order': False", b"'fortran_order': True ", 1))
    before = tree_digest(tmp_path / "run")
    assert main(["train", "--resume", str(tmp_path / "run"), "--no-progress"]) == 2
    _one_error(capsys, "header")
    assert tree_digest(tmp_path / "run") == before


def test_a_study_whose_run_is_stopped_ends_in_its_one_line_and_status_130(tmp_path, monkeypatch, capsys):
    """A study's run stopped at a checkpoint ends as `train` does: the run's own line (where the checkpoint is),
    status 130, no traceback. The trainer's Interrupted (what its Ctrl-C and SIGTERM handler raises) is simulated."""
    from experiments.paper import study
    from miiii.session import Interrupted

    def stopped(role, cfg, run_dir, reuse, progress):
        raise Interrupted(f"interrupted: checkpoint at step 8 of 20 written to {run_dir}")

    monkeypatch.setattr(study, "train_role", stopped)
    out = tmp_path / "b"  # --reuse: no timed plan segment first
    rc = study.main(["--smoke", "--roles", "miiii", "--steps", "20", "--out", str(out), "--reuse", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and err == [f"interrupted: checkpoint at step 8 of 20 written to {out / 'runs' / 'miiii'}"]


def test_a_ctrl_c_swallowed_after_a_study_s_last_safe_point_still_ends_in_130(capsys):
    """As the CLI's commands: a study that returns 0 while a stop waits (remembered where it could not be raised, or
    asked in the chunk that ended its last run) was stopped once its work was done, and says so; once."""
    from miiii import errors

    errors._pending[0] = True
    assert errors.one_line_errors(lambda: 0) == 130
    assert capsys.readouterr().err.strip() == errors.DONE_THEN_STOPPED
    assert errors.one_line_errors(lambda: 0) == 0 and errors.one_line_errors(lambda: 3) == 3


TINY_RUN = TINY_CFG  # 24 steps in chunks of 12


def test_a_stop_asked_in_a_run_s_last_chunk_stops_what_comes_next_once(tmp_path):
    """SIGTERM in the chunk that ends a run, inside a command or study (errors.carrying_stops): the run finishes
    whole, and the stop is not lost with it: the next start-up (a study's seeds' sweep, a phase) stops before
    anything is kept, and only that one. Seen on a GPU, where the driver's SIGTERM landed in `make paper`'s
    recorded run's last chunk and the study went on to compile its sweep. Outside (a notebook) the stop ends with
    the complete run; a stop that ended a run early, or one remembered meanwhile, is served there."""
    from miiii import errors
    from miiii.runner import train_run
    from miiii.session import Interrupted
    from miiii.sweep import run_sweep

    with errors.carrying_stops():
        summary = train_run(TINY_RUN, tmp_path / "run", progress=False, on_chunk=signal_at(24, SIGTERM),
                            tensorboard=False)
        assert summary["steps"] == 24 and (tmp_path / "run" / "summary.json").is_file()
        assert errors.interrupt_pending()
        with pytest.raises(Interrupted):
            run_sweep(TINY_RUN, 2, {}, tmp_path / "sweep", progress=False, tensorboard=False)
        assert not (tmp_path / "sweep").exists() and not errors.interrupt_pending()
        assert train_run(TINY_RUN, tmp_path / "next", progress=False, tensorboard=False)["steps"] == 24
        with pytest.raises(Interrupted):  # stopped at step 12 of 24: served
            train_run(TINY_RUN, tmp_path / "early", progress=False, on_chunk=signal_at(12, SIGTERM), tensorboard=False)
        assert not errors.interrupt_pending()
        with pytest.raises(Interrupted):  # a Ctrl-C remembered mid-run (a gc callback swallowed it): served too
            train_run(TINY_RUN, tmp_path / "gc", progress=False, tensorboard=False,
                      on_chunk=lambda step: errors.remember_interrupt() if step == 12 else None)
        assert not errors.interrupt_pending()
    summary = train_run(TINY_RUN, tmp_path / "nb", progress=False, on_chunk=signal_at(24, SIGTERM), tensorboard=False)
    assert summary["steps"] == 24 and not errors.interrupt_pending()  # a notebook's next run is not stopped


def test_a_paper_study_stopped_in_a_run_s_last_chunk_writes_no_report(tmp_path, monkeypatch, capsys):
    """The study's safe points sit between its trainings and before its report: a run that ended with a stop asked
    (remembered) ends the study in 130 with its one line, no figures and no results.md."""
    from experiments.paper import study
    from miiii import errors

    def finished_then_stopped(role, cfg, run_dir, reuse, progress):
        errors.remember_interrupt()

    monkeypatch.setattr(study, "train_role", finished_then_stopped)
    out = tmp_path / "b"
    rc = study.main(["--smoke", "--roles", "miiii", "--steps", "20", "--out", str(out), "--reuse", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 130 and err == [study.STOPPED]
    assert not (out / "results.md").exists() and not (out / "figures").exists()


def test_a_paper_study_resumes_its_interrupted_seeds_sweep_with_reuse(tmp_path):
    """`--reuse` continues an interrupted seeds' sweep (sweep-plan.json, no sweep.json), as it continues an
    interrupted recorded run, once its plan is the one asked for; checked before anything trains. Without --reuse,
    with another plan, or a folder that is neither, it is refused."""
    from experiments.paper.study import plan, seeds_config
    from miiii.config import ConfigError
    from miiii.sweepmembers import write_plan

    out = tmp_path / "b"
    sweep = out / "runs" / "miiii-seeds"
    sweep.mkdir(parents=True)
    with pytest.raises(ConfigError, match="neither a finished sweep nor an interrupted one"):
        plan(out, True, ["miiii"], True, 20, seeds=3)
    cfg = plan(out, True, ["miiii"], True, 20, seeds=1)["miiii"]  # the role's config, no sweep
    write_plan(sweep, seeds_config(cfg), 2, {})
    with pytest.raises(ConfigError, match="pass --reuse"):
        plan(out, True, ["miiii"], False, 20, seeds=3)
    for seeds, steps in ((4, 20), (3, 30)):
        with pytest.raises(ConfigError, match="interrupted sweep of other seeds or settings"):
            plan(out, True, ["miiii"], True, steps, seeds=seeds)
    assert set(plan(out, True, ["miiii"], True, 20, seeds=3)) == {"miiii"}


def test_a_study_whose_training_command_was_stopped_ends_in_130_not_1(tmp_path, monkeypatch):
    """The adderboard study trains each setting through the CLI in-process: a setting stopped (130, its one line
    printed there) stops the study with 130, a failed one with 1; nothing after it trains."""
    import miiii.cli
    from experiments.adderboard import study

    calls = []
    for rc, expect in ((130, 130), (2, 1)):
        monkeypatch.setattr(miiii.cli, "main", lambda argv, rc=rc: calls.append(argv) or rc)
        assert study.main(["--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]) == expect
    assert len(calls) == 2  # one setting each time, none after it
