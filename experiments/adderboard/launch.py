"""How the study trains a setting: the `python -m miiii` command that starts it (a targeted round's after its hard
pairs are drawn), or, for a run a stopped study left unfinished, the one that continues it in place; and the derived
folders (gauge.py) a setting starts from or draws its hard pairs from, written before it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from experiments.adderboard.hard import source
from experiments.adderboard.recipes import HARD_PAIRS, REPLAY_N, Setting
from experiments.adderboard.settings import DERIVED
from miiii.errors import ConfigError
from miiii.hard import hard_union, save_atomic
from miiii.hard import replay_copies as copies_for


def hard_file(s: Setting, runs: Path) -> Path:
    """Where a targeted round's united hard pairs are written (beside its run, which must not exist before it)."""
    return runs / f"{s.name}.hard.npy"


def hard_command(s: Setting, runs: Path) -> str:
    """The command that writes a targeted round's hard pairs (the study keeps each source's beside its run)."""
    return (f"python -m experiments.adderboard.hard {' '.join(str(runs / h) for h in s.hard)} --pairs {HARD_PAIRS} "
            f"--out {hard_file(s, runs)}")


def find_hard(s: Setting, runs: Path) -> None:
    """A targeted round's hard pairs, written before it trains (its sources' runs must have finished)."""
    wrong, _ = hard_union([source(str(runs / h), 0) for h in s.hard], HARD_PAIRS, keep=True)
    save_atomic(hard_file(s, runs), wrong)


def replay_copies(s: Setting, runs: Path) -> int:
    """How often a targeted round repeats its hard pairs: to about its hard_share of the rows, beside REPLAY_N
    training pairs (its run, once trained, records the count it used in config.json)."""
    from miiii.rundir import CONFIG

    trained = runs / s.name / CONFIG
    if trained.is_file():
        return json.loads(trained.read_text())["task"]["replay_copies"]
    if not hard_file(s, runs).is_file():
        raise ConfigError(f"{s.name}: {hard_file(s, runs)} is missing; its hard pairs are found before it trains")
    try:
        return copies_for(REPLAY_N, s.hard_share, len(np.load(hard_file(s, runs))))
    except ConfigError as e:
        raise ConfigError(f"{s.name}: {', '.join(s.hard)}: {e}") from None


def unfinished(s: Setting, runs: Path) -> bool:
    """RUNS/NAME is a run a stopped study left behind: there, but without the file a finished run writes last
    (summary.json; a sweep's sweep.json) and not restored from its submission. A phased setting's preset resumes its
    own phases."""
    from experiments.adderboard.restore import RESTORED
    from miiii.rundir import SUMMARY
    from miiii.sweepmembers import RESULT

    d = runs / s.name
    end = SUMMARY if s.init_from else RESULT
    return not s.phased and d.is_dir() and not (d / end).is_file() and not (d / RESTORED).is_file()


def resume_command(s: Setting, runs: Path) -> list[str]:
    """Continues an unfinished run in place (its config.json holds what it was started with, its hard pairs too)."""
    return ["train" if s.init_from else "sweep", "--resume", str(runs / s.name), "--no-progress"]


def command(s: Setting, runs: Path) -> list[str]:
    """The `python -m miiii` arguments that train setting `s` into runs/NAME (a targeted round's after find_hard)."""
    sets = [a for kv in s.sets for a in ("--set", kv)]
    if s.hard:
        sets += ["--set", f"task.replay={hard_file(s, runs)}", "--set", f"task.replay_copies={replay_copies(s, runs)}"]
    if s.phased:
        seed = [] if s.seed is None else ["--seed", str(s.seed)]
        return ["train", "--preset", s.phased, *seed, "--run-dir", str(runs / s.name), "--no-progress"]
    if s.init_from:
        return ["train", "--preset", "adder-146", "--steps", str(s.steps), *sets, "--seed", str(s.seed or 0),
                "--init-from", str(runs / s.init_from), "--run-dir", str(runs / s.name), "--no-progress"]
    return ["sweep", "--preset", "adder-146", "--seeds", str(s.seeds), *(["--grid", *s.grid] if s.grid else []),
            "--steps", str(s.steps), *sets, "--no-progress", "--out", str(runs / s.name)]


def derive(name: str, runs: Path) -> None:
    """RUNS/NAME written by gauge.py when NAME is a derived folder (settings.DERIVED) not written yet."""
    from experiments.adderboard.gauge import gauge

    for d in DERIVED:
        if d.name == name and not (runs / name).exists():
            gauge(d.source_run(runs), runs / name, head_free=d.head_free, temperature=d.temperature, at=d.at)
