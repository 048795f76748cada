"""Train the stability study's sweeps and extract what its verdicts read: one vmapped sweep of every seed per
(task, setting), each member summarised into a small JSON-able dict (`member_summary`) that the bundle keeps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from experiments.stability.rules import ONSET, WINDOW
from miiii import analysis as A
from miiii.config import ConfigError, apply_overrides
from miiii.presets import get_preset
from miiii.provenance import git_commit
from miiii.run import load_run
from miiii.sweep import member_dir, run_sweep

TASKS = {"nanda": "nanda-cpu", "miiii": "miiii-tiny"}  # the study's tasks and the CPU preset each starts from
STEPS = {"miiii": 10_000}  # instead of the preset's 3,000, so that more of its tasks can grok
NO_WD = ("optim.weight_decay=0",)
# (name, --set overrides on the preset): the control first, then the four runs without weight decay
SETTINGS = (
    ("weight decay", ()),
    ("no wd", NO_WD),
    ("no wd, float16", NO_WD + ("train.loss_dtype=float16",)),
    ("no wd, float64", NO_WD + ("train.loss_dtype=float64",)),
    ("no wd, StableMax", NO_WD + ("train.loss=stablemax", "train.loss_dtype=float64")),  # float64: as their code
    ("no wd, ⊥Grad", NO_WD + ("optim.orthograd=true",)),
)
CURVE_POINTS = 60  # log-spaced steps kept per member for the figure
QUIET = ("record.acts=", "record.params=", "ckpt.keep_log=0")  # the study reads metrics.npz only
TRAINED_BY = "trained_by.json"  # in each sweep directory: the commit and date that trained it


def slug(setting: str) -> str:
    """'no wd, ⊥Grad' -> 'no-wd-orthograd': the setting's sweep directory name."""
    return setting.replace("⊥Grad", "orthograd").replace(",", "").replace(" ", "-").lower()


def setting_config(task: str, setting: str, steps: int | None = None):
    cfg = apply_overrides(get_preset(TASKS[task]), [*QUIET, *dict(SETTINGS)[setting]])
    steps = steps or STEPS.get(task)
    return cfg if steps is None else apply_overrides(cfg, [f"train.steps={steps}"])


def _window_mean(va: np.ndarray, start: int, stop: int) -> float:
    return float(np.nanmean(va[start:stop]))


def member_summary(step: np.ndarray, names, valid_acc: np.ndarray, train_acc: np.ndarray, collapse: np.ndarray,
                   max_logit: np.ndarray, weight_norm: np.ndarray) -> dict:
    """One member's numbers, per task: grok step (first validation accuracy >= 0.99), collapse onset (first step with
    at least ONSET of the training samples collapsed), the validation-accuracy gain from the onset to the end (means
    over WINDOW steps; None when the onset leaves fewer than 2 * WINDOW steps to tell), and the ends of the run; plus
    CURVE_POINTS log-spaced points of the mean validation accuracy and the largest collapse share, for the figure.
    step (T,), valid_acc/train_acc/collapse (T, K), max_logit/weight_norm (T,)."""
    names = [str(n) for n in names]
    grok = A.grok_steps(step, valid_acc)
    onset, gain = {}, {}
    for k, q in enumerate(names):
        hit = np.nonzero(collapse[:, k] >= ONSET)[0]
        onset[q] = int(step[hit[0]]) if len(hit) else None
        ok = len(hit) and hit[0] + 2 * WINDOW <= len(step)
        gain[q] = (round(_window_mean(valid_acc[:, k], len(step) - WINDOW, len(step))
                         - _window_mean(valid_acc[:, k], hit[0], hit[0] + WINDOW), 4) if ok else None)
    at = np.unique(np.geomspace(1, len(step), CURVE_POINTS).astype(int) - 1)
    return {"grok": dict(zip(names, grok, strict=True)), "onset": onset, "gain": gain,
            "valid_end": {q: round(float(v), 4) for q, v in zip(names, A.last_evaluated(valid_acc), strict=True)},
            "train_end": {q: round(float(v), 4) for q, v in zip(names, train_acc[-1], strict=True)},
            "collapse_end": {q: round(float(v), 4) for q, v in zip(names, collapse[-1], strict=True)},
            "max_logit_end": round(float(max_logit[-1]), 2),
            "weight_norm": [round(float(weight_norm[0]), 2), round(float(weight_norm[-1]), 2)],
            "curve": {"step": [int(step[i]) for i in at],
                      "valid_acc": [round(float(np.nanmean(valid_acc[i])), 4) for i in at],
                      "collapse": [round(float(collapse[i].max()), 4) for i in at]}}


def read_member(run_dir: Path) -> dict:
    """`member_summary` of a trained member directory, with its seed and weight decay."""
    run = load_run(run_dir)
    m = run.metrics
    s = member_summary(np.asarray(m["step"]), list(m["task_names"]), np.asarray(m["valid_acc"], np.float64),
                       np.asarray(m["train_acc"], np.float64), np.asarray(m["softmax_collapse"], np.float64),
                       np.asarray(m["max_logit"], np.float64), np.asarray(m["weight_norm_total"], np.float64))
    return {"seed": run.config.train.seed, "weight_decay": run.config.optim.weight_decay, **s}


def sweep_dir(runs: Path, task: str, setting: str) -> Path:
    return Path(runs) / f"{task}-{slug(setting)}"


def trained_by(runs: Path, task: str, setting: str) -> str:
    """The commit that trained the setting's sweep (its trained_by.json), or 'unknown'."""
    path = sweep_dir(runs, task, setting) / TRAINED_BY
    return json.loads(path.read_text())["commit"] if path.is_file() else "unknown"


def sweep_seconds(runs: Path, task: str, setting: str) -> float:
    """The wall time the setting's sweep took (its sweep.json's wall_s: compiling and training)."""
    return float(json.loads((sweep_dir(runs, task, setting) / "sweep.json").read_text())["wall_s"])


def train_setting(task: str, setting: str, seeds: int, runs: Path, steps: int | None, progress: bool) -> list[dict]:
    """The setting's sweep (reused when a finished one is there), then each member's summary."""
    out = sweep_dir(runs, task, setting)
    if not (out / "sweep.json").is_file():
        if out.exists():
            raise ConfigError(f"{out} holds an unfinished sweep (no sweep.json); remove it and run again")
        t = time.perf_counter()
        run_sweep(setting_config(task, setting, steps), seeds, {}, out, progress=progress, tensorboard=False)
        (out / TRAINED_BY).write_text(json.dumps({"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M %Z")}))
        print(f"{task} / {setting}: {seeds} seeds in {time.perf_counter() - t:.0f} s", flush=True)
    found = sorted(p for p in out.glob("member_*") if p.is_dir())
    if len(found) != seeds:
        raise ConfigError(f"{out} holds {len(found)} members, not {seeds}; remove it or pass --seeds {len(found)}")
    return [read_member(member_dir(out, i)) for i in range(seeds)]
