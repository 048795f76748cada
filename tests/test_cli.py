"""The command line: a run directory as documented, and bad input -> one message, exit 2, nothing written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _runhelp import SLOW

from miiii.config import LOSS_DTYPES, LOSSES
from miiii.optimizers import OPTIMIZERS

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "miiii", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def snapshot(path: Path):
    return sorted((str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*"))


def test_train_writes_the_documented_run_directory(tmp_path, capsys):
    from miiii.cli import main

    run = tmp_path / "r"
    # in this process (test_bad_input_in_a_real_process runs `python -m miiii` itself: a process imports jax for
    # seconds); _runhelp.RESUME_ARGS' programs (the persistent cache; the seed recompiles only the init)
    assert main(["train", "--preset", "miiii-tiny", "--run-dir", str(run), "--steps", "40", "--seed", "2",
                 "--set", "chunk=20", "--set", "ckpt.every=20", "--set", "batch_size=64", "--set", "ckpt.keep_log=0",
                 "--no-progress"]) == 0
    stdout = capsys.readouterr().out
    assert {"config.json", "metrics.npz", "metrics.jsonl", "params.npz", "summary.json", "acts", "ckpt",
            "ckpt.json"} <= {
        p.name for p in run.iterdir()}
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["train"]["steps"] == 40 and cfg["train"]["seed"] == 2 and cfg["task"]["p"] == 23
    m = np.load(run / "metrics.npz")
    qs = [2, 3, 5, 7, 11, 13, 17, 19]
    assert m["task_names"].tolist() == [f"q={q}" for q in qs]
    assert m["step"].tolist() == list(range(40)) and m["loss"].shape == (40,)
    for k in ("train_loss", "train_acc", "valid_loss", "valid_acc"):
        assert m[k].shape == (40, len(qs)) and np.isfinite(m[k]).all()
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["grok_step"]) == {f"q={q}" for q in qs}
    assert {"wall_s", "steps_per_s", "device", "n_params", "final"} <= set(summary)
    assert len(summary["final"]["test"]["task_acc"]) == len(qs)
    assert "run directory" in stdout
    assert (tmp_path / "latest").is_symlink() and (tmp_path / "latest").resolve() == run.resolve()
    assert f"next: python -m miiii figures {run}" in stdout


def test_presets_lists_every_preset():
    from miiii.presets import PRESETS

    res = cli("presets", "--keys")
    assert res.returncode == 0
    for name in PRESETS:
        assert any(line.startswith(name + " ") for line in res.stdout.splitlines())
    assert "optim.lamb" in res.stdout


def test_presets_name_prints_its_whole_config_as_set_takes_it():
    from miiii.config import apply_overrides
    from miiii.presets import get_preset

    res = cli("presets", "nanda-tiny")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if not ln.startswith("#")]
    sets = [ln.replace(" = ", "=", 1) for ln in lines if "=" in ln]
    want = get_preset("nanda-tiny")
    assert len(sets) == sum(len(v) for v in want.to_dict().values())
    plain = [s for s in sets if "(" not in s and "[" not in s]  # tuples print as Python; the rest as --set takes it
    assert apply_overrides(get_preset("nanda"), [s.replace("'", "") for s in plain
                                                  if not s.startswith(("record.", "ckpt."))]).task == want.task
    bad = cli("presets", "nanda-tinyy")
    assert bad.returncode == 2 and "did you mean 'nanda-tiny'" in bad.stderr


BAD = [
    (["train", "--preset", "nope"], "unknown preset"),
    (["train", "--set", "task.name=sorting"], "unknown task"),
    (["train", "--preset", "miiii-tiny", "--set", "p=21"], "prime"),
    (["train", "--preset", "miiii-tiny", "--set", "p=3"], "p >= 5"),
    (["train", "--preset", "nanda-tiny", "--set", "p=-7"], "prime"),
    (["train", "--preset", "nanda-tiny", "--set", "p=1000003"], "not supported"),
    (["train", "--preset", "nanda-tiny", "--set", "train_frac=1.0"], "strictly between"),
    (["train", "--preset", "nanda-tiny", "--set", "train_frac=-0.1"], "strictly between"),
    (["train", "--preset", "nanda-tiny", "--set", "train_frac=nan"], "strictly between"),
    (["train", "--preset", "nanda-tiny", "--set", "valid_size=5000"], "split impossible"),
    (["train", "--preset", "nanda-tiny", "--set", "model.width=3"], "unknown config key"),
    (["train", "--preset", "nanda-tiny", "--set", "d_model=wide"], "takes a int"),
    (["train", "--preset", "nanda-tiny", "--set", "lr"], "key=value"),
    (["train", "--preset", "nanda-tiny", "--steps", "0"], "at least 1"),
    (["train", "--preset", "nanda-tiny", "--steps", "many"], "invalid int"),
    (["train", "--preset", "addition-tiny", "--set", "n_train=9990"], "split impossible"),
    (["train", "--preset", "reversal-tiny", "--set", "batch_size=20000"], "batch_size"),
    (["train", "--preset", "nanda-tiny", "--set", "loss=foo"],
     "train.loss = 'foo': choose one of " + ", ".join(LOSSES)),
    (["train", "--preset", "nanda-tiny", "--set", "optimizer=sgdx"], f"choose one of {', '.join(OPTIMIZERS)}"),
    (["train", "--preset", "nanda-tiny", "--set", "optimizer=adam"], "(did you mean 'adamw'?)"),
    (["train", "--preset", "nanda-tiny", "--set", "loss_dtype=float128"], f"choose one of {', '.join(LOSS_DTYPES)}"),
    (["train", "--preset", "nanda-tiny", "--set", "orthograd=maybe"], "takes a bool"),
    # shapes (a small training set: the check reads the model's shapes after the task is built, 20 s for adder-146's)
    (["train", "--preset", "adder-146", "--set", "n_train=256", "--set", "model.ties=attn.W_V=T(attn.W_Q)"],
     "cannot be T"),
    (["train", "--preset", "adder-146", "--set", "model.pins=mlp.W_in[7]=0"], "not an entry of its shape"),
    (["frobnicate"], "invalid choice"),
    (["sweep", "--preset", "nanda-tiny", "--grid", "d_model=64,128"], "cannot be swept"),
    (["sweep", "--preset", "nanda-tiny", "--grid", "lr=1e-3,fast"], "must be numbers"),
    (["sweep", "--preset", "nanda-tiny", "--seeds", "0"], "at least 1"),
    (["sweep", "--preset", "nanda", "--grid", "lamb=0,2"], "grokfast"),
    (["sweep", "--preset", "nanda-tiny", "--grid"], "--grid: expected at least one argument"),  # not a default sweep
]


def cli_in_process(args, cwd, capsys, monkeypatch) -> tuple[int, str]:
    """`python -m miiii ARGS`'s exit status and stderr, run by cli.main in this process (a subprocess per case
    would import jax 27 times); `test_bad_input_in_a_real_process` checks the process itself on a few cases."""
    from miiii.cli import main

    monkeypatch.chdir(cwd)
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args,msg", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, args, msg, capsys, monkeypatch):
    run = tmp_path / "run"
    extra = ["--run-dir", str(run)] if args[0] == "train" else []
    code, err = cli_in_process([*args, *extra], tmp_path, capsys, monkeypatch)
    assert code == 2, err
    assert msg in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert list(tmp_path.iterdir()) == []  # nothing written, not even runs/


# prime: preset's path in a real process (a ConfigError of `train`, one line, exit 2); its message is checked in
# process by test_bad_input_exits_2_and_writes_nothing[train --preset miiii-tiny --set p=21]
@pytest.mark.parametrize("args,msg", [BAD[0], pytest.param(*BAD[2], marks=SLOW),
                                      next(b for b in BAD if b[0] == ["frobnicate"])],
                         ids=["preset", "prime", "argparse"])
def test_bad_input_in_a_real_process(tmp_path, args, msg):
    run = tmp_path / "run"
    extra = ["--run-dir", str(run)] if args[0] == "train" else []
    res = cli(*args, *extra, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert msg in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) <= 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,hint", [
    (["frobnicate"], "python -m miiii --help"),
    ([], "python -m miiii --help"),
    (["train", "--frobnicate"], "python -m miiii train --help"),  # argparse reports it as the top parser's
    (["--frobnicate", "train"], "python -m miiii --help"),  # before the command: not the command's
    (["sweep", "--seeds", "many"], "python -m miiii sweep --help"),
])
def test_an_argparse_error_points_to_the_help_that_explains_it(tmp_path, args, hint, capsys, monkeypatch):
    code, err = cli_in_process(args, tmp_path, capsys, monkeypatch)
    assert code == 2 and err.strip().splitlines()[-1] == f"(see `{hint}`)", err
    assert list(tmp_path.iterdir()) == []


def test_existing_run_dir_is_never_overwritten(tmp_path, capsys, monkeypatch):
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text("{}")
    before = snapshot(tmp_path)
    # in this process (a real one imports jax for seconds; test_bad_input_in_a_real_process checks the process)
    code, err = cli_in_process(["train", "--preset", "nanda-tiny", "--run-dir", str(run), "--steps", "5"], tmp_path,
                               capsys, monkeypatch)
    assert code == 2 and "already exists" in err
    assert snapshot(tmp_path) == before


def test_a_mistyped_key_or_preset_gets_a_suggestion():
    from miiii.config import ConfigError, apply_overrides
    from miiii.presets import get_preset

    with pytest.raises(ConfigError, match=r"did you mean 'd_model'\?"):
        apply_overrides(get_preset("nanda-tiny"), ["d_modle=32"])
    with pytest.raises(ConfigError, match=r"did you mean 'nanda-tiny'\?"):
        get_preset("nanda-tny")
    with pytest.raises(ConfigError) as e:
        get_preset("zzz")
    assert "did you mean" not in str(e.value)


def test_make_help_lists_every_target_with_a_description():
    import re
    import subprocess
    from pathlib import Path

    makefile = Path(__file__).resolve().parents[1] / "Makefile"
    described = re.findall(r"^([A-Za-z0-9_-]+):.*##", makefile.read_text(), flags=re.M)
    env = {k: v for k, v in os.environ.items() if k != "HELP_WIDTH"}
    shown_ = subprocess.run(["make", "-s", "-f", str(makefile), "help"], capture_output=True, text=True, env=env).stdout
    assert described and all(re.search(rf"^\s+{re.escape(t)}\s", shown_, flags=re.M) for t in described)
    assert "train-addition-10" in described
    assert max(map(len, shown_.splitlines())) <= 100  # a description wraps under itself, not across the terminal


STUDY_CLIS = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "experiments").rglob("*.py")
                    if "def main(argv=None)" in p.read_text())


def study_main(name: str):
    """The study's `main`; skipped where it needs PyTorch, the optional extra, and it is not installed."""
    import importlib

    try:
        return importlib.import_module(name).main
    except (ModuleNotFoundError, SystemExit):  # the bench's PyTorch references
        pytest.importorskip("torch")
        raise


@pytest.mark.parametrize("name", STUDY_CLIS)
def test_every_study_help_says_its_whole_first_sentence_and_fits_the_page(name, capsys):
    """`--help` of each study: its description ends where its sentence ends (not where the docstring's first line
    wraps), a list of names is one NAME (not every choice twice on one unwrapped line), no line is wider than the
    code's."""
    with pytest.raises(SystemExit) as stop:
        study_main(name)(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code in (0, None) and out.startswith("usage:"), out
    described = " ".join(out.split("\n\n")[1].split())
    assert described.endswith("."), described
    assert "[{" not in out.split("\n\n")[0], out.split("\n\n")[0]  # `{a,b} [{a,b} ...]`: choices twice
    assert max(map(len, out.splitlines())) <= 120, max(out.splitlines(), key=len)


@pytest.mark.parametrize("name", STUDY_CLIS)
def test_every_study_refuses_an_unknown_option_in_one_line(name, capsys):
    with pytest.raises(SystemExit) as stop:
        study_main(name)(["--frobnicate"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err  # or a missing argument
