"""The machinery the lab's dispute studies share (experiments/<study>/, results/<study>/): a study is a preset, its
settings (one vmapped sweep of every seed each, with a grid of sweepable values inside where it has one), and the
published claims, quoted verbatim, whose rules read every member's summary. This module trains the settings (reusing
finished sweeps), summarises each member from its metrics.npz, writes the bundle's summaries, and renders results.md
from those summaries alone, so a verdict regenerates from committed files.

A rule is `rule(runs) -> (value, measured)`: runs maps each setting's name to its members' summaries (seed order,
grid values in `values`); value is True (holds), False (does not hold) or None (not testable at this scale), and
`measured` the numbers it read, with their spread over seeds. Its docstring's first paragraph is the rule results.md
prints (`miiii.rules.printed_rule`). Where two papers disagree, both are rows on the same runs.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.config import ConfigError, apply_overrides
from miiii.errors import OneLineParser, one_line_errors, out_folder
from miiii.files import write_json_atomic, write_text_atomic
from miiii.presets import get_preset
from miiii.provenance import cell, git_commit, provenance, provenance_table, to_jsonable
from miiii.rules import printed_rule

CURVE_POINTS = 60  # log-spaced steps kept per member: the figure's and the window rules' curves
QUIET = ("record.acts=", "record.params=", "ckpt.keep_log=0")  # a dispute reads metrics.npz only
DIAGNOSTICS = ("head_similarity", "entropy_spread", "weight_norm_total", "max_logit")  # scalar metrics kept as curves
MARK = {True: "holds", False: "does not hold", None: "not testable"}


@dataclass(frozen=True)
class Setting:
    name: str
    sets: tuple[str, ...] = ()  # --set overrides on the study's preset
    grid: tuple[tuple[str, tuple[float, ...]], ...] = ()  # (sweepable key, values): members = values x seeds


@dataclass(frozen=True)
class Claim:
    side: str  # who states it, e.g. "Tveit et al. (2025)"
    quote: str  # verbatim, with […] for what is left out
    where: str  # the source and its location: "arXiv 2504.16041, abstract"
    rule: Callable[[dict], tuple[bool | None, str]]


@dataclass(frozen=True)
class Study:
    name: str  # the folder under experiments/ and results/
    title: str
    preset: str
    steps: int
    scale: str  # said in every row: the preset, task and budget the verdicts speak for
    settings: tuple[Setting, ...]
    claims: tuple[Claim, ...]
    seeds: int = 5
    sets: tuple[str, ...] = field(default=())  # overrides every setting shares


def slug(name: str) -> str:
    """A setting's sweep directory: 'ce, norm 43.5, α 1' -> 'ce-norm-43-5-a-1'."""
    name = name.lower().replace("α", "a").replace("⊥", "ortho")
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-")


def setting_config(study: Study, setting: Setting):
    return apply_overrides(get_preset(study.preset), [*QUIET, f"train.steps={study.steps}", *study.sets,
                                                      *setting.sets])


def member_summary(metrics: dict, config, grid_keys) -> dict:
    """One member's numbers: its seed and grid values; per task the grok step (validation accuracy ≥ 0.99 first),
    the fit step (training accuracy ≥ 0.99 first), the first step at 0.95 (Tveit et al.'s grokking) and the ends;
    and CURVE_POINTS log-spaced points of the mean accuracies and the scalar DIAGNOSTICS (NaN where a run has no such
    metric)."""
    step = np.asarray(metrics["step"])
    names = [str(n) for n in metrics["task_names"]]
    va, ta = np.asarray(metrics["valid_acc"], np.float64), np.asarray(metrics["train_acc"], np.float64)
    at = np.unique(np.geomspace(1, len(step), CURVE_POINTS).astype(int) - 1)
    evaluated = np.nonzero(np.isfinite(va).all(1))[0]
    # the validation accuracy last evaluated at or before each kept step (NaN before the first evaluation)
    last = lambda i: float(va[evaluated[evaluated <= i][-1]].mean()) if (evaluated <= i).any() else np.nan  # noqa
    curve = {"step": [int(step[i]) for i in at],
             "valid_acc": [round(last(i), 4) for i in at],
             "train_acc": [round(float(ta[i].mean()), 4) for i in at]}
    for name in DIAGNOSTICS:
        v = np.asarray(metrics[name], np.float64) if name in metrics else np.full(len(step), np.nan)
        curve[name] = [round(float(v[i]), 5) for i in at]
    sec = lambda k: getattr(getattr(config, k.split(".")[0]), k.split(".")[1])  # noqa: E731
    return {"seed": config.train.seed, "values": {k: float(sec(k)) for k in grid_keys},
            "grok": dict(zip(names, A.grok_steps(step, va), strict=True)),
            "fit": dict(zip(names, A.grok_steps(step, ta, 0.99), strict=True)),
            "reach95": dict(zip(names, A.grok_steps(step, va, 0.95), strict=True)),
            "valid_end": {q: round(float(v), 4) for q, v in zip(names, A.last_evaluated(va), strict=True)},
            "train_end": {q: round(float(v), 4) for q, v in zip(names, ta[-1], strict=True)},
            "steps": int(len(step)), "steps_per_epoch": epoch_steps(config), "curve": curve}


def epoch_steps(config) -> int:
    """Optimizer steps in one epoch of this config (1 at full batch), so times compare across batch sizes."""
    from miiii.tasks import split_sizes
    from miiii.train import steps_per_epoch

    n_train = config.task.n_train if config.task.is_sequence else split_sizes(config.task)[0]
    return steps_per_epoch(config.train, n_train)


def read_member(run_dir: Path, grid_keys) -> dict:
    from miiii.run import load_run

    run = load_run(run_dir)
    return member_summary(run.metrics, run.config, grid_keys)


def train_setting(study: Study, setting: Setting, seeds: int, runs: Path, progress: bool) -> tuple[list[dict], float]:
    """The setting's sweep (a finished one under runs/ is reused), its members' summaries and its wall seconds."""
    from miiii.sweep import member_dir, run_sweep

    out = Path(runs) / slug(setting.name)
    grid = dict(setting.grid)
    n = seeds * int(np.prod([len(v) for v in grid.values()])) if grid else seeds
    if not (out / "sweep.json").is_file():
        if out.exists():
            raise ConfigError(f"{out} holds an unfinished sweep (no sweep.json); remove it and run again")
        t = time.perf_counter()
        run_sweep(setting_config(study, setting), seeds, grid, out, progress=progress, tensorboard=False)
        (out / "trained_by.json").write_text(json.dumps({"commit": git_commit(), "date": time.strftime("%Y-%m-%d")}))
        print(f"{study.name} / {setting.name}: {n} members in {time.perf_counter() - t:.0f} s", flush=True)
    found = sorted(p for p in out.glob("member_*") if p.is_dir())
    if len(found) != n:
        raise ConfigError(f"{out} holds {len(found)} members, not {n}; remove it or pass the seeds it was run with")
    wall = float(json.loads((out / "sweep.json").read_text())["wall_s"])
    return [read_member(member_dir(out, i), list(grid)) for i in range(n)], wall


# ---------------------------------------------------------------- the bundle


def judge(study: Study, runs: dict) -> list[dict]:
    rows = []
    for i, c in enumerate(study.claims, 1):
        value, measured = c.rule(runs)
        rows.append({"n": i, "side": c.side, "quote": c.quote, "where": c.where, "rule": printed_rule(c.rule),
                     "measured": measured, "verdict": MARK[value]})
    return rows


def render(study: Study, summary: dict) -> str:
    """results.md from the summaries alone."""
    runs = summary["runs"]
    rows = judge(study, runs)
    lines = [f"# {study.title}", "",
             f"Generated by `python -m experiments.{study.name}` from `summaries/` (regenerate without training: "
             f"`python -m experiments.{study.name} --bundle-only`). Scale: {study.scale}. "
             f"{summary['seeds']} seeds per setting (each setting one vmapped sweep), {summary['steps']:,} steps. "
             "A verdict tests the sentence as quoted, by the rule beside it, and errs toward *does not hold*; "
             "*not testable* says this scale cannot decide it.", "",
             "| # | who | claim (verbatim) | where | rule | measured | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['n']} | {r['side']} | {cell(r['quote'])} | {cell(r['where'])} | {cell(r['rule'])} | "
              f"{cell(r['measured'])} | **{r['verdict']}** |" for r in rows]
    lines += ["", "## Settings", "", "| setting | overrides | members | grokked | median grok step | wall |",
              "| --- | --- | --- | --- | --- | --- |"]
    for s in study.settings:
        ms = runs[s.name]
        groks = [all(v is not None for v in m["grok"].values()) for m in ms]
        steps = [max(m["grok"].values()) for m, ok in zip(ms, groks, strict=True) if ok]
        med = f"{np.median(steps):,.0f}" if steps else "–"
        sets = ", ".join(f"`{x}`" for x in (*s.sets, *(f"{k}={','.join(f'{v:g}' for v in vs)}" for k, vs in s.grid)))
        lines.append(f"| {s.name} | {sets or 'the preset'} | {len(ms)} | {sum(groks)} | {med} | "
                     f"{summary['wall_s'][s.name]:,.0f} s |")
    lines += ["", "## Provenance", "", *provenance_table(summary["provenance"])]
    return "\n".join(lines)


def write_bundle(study: Study, out: Path, check: bool = False) -> int:
    from experiments.generated import same_or_say

    summary = json.loads((out / "summaries" / "runs.json").read_text())
    text = render(study, summary)
    if check:
        return same_or_say(out / "results.md", text, f"python -m experiments.{study.name} --bundle-only")
    write_text_atomic(out / "results.md", text)
    print(f"wrote {out / 'results.md'}")
    return 0


def run_study(study: Study, args) -> int:
    out = args.out or Path("results") / study.name
    if args.bundle_only or args.check:
        return write_bundle(study, out, check=args.check)
    if args.seeds < 1:
        raise ConfigError(f"--seeds {args.seeds}: give at least 1")
    out_folder(out)
    out_folder(args.runs, "--runs")
    held = out / "summaries" / "runs.json"
    if held.is_file() and json.loads(held.read_text())["seeds"] > args.seeds:
        raise ConfigError(f"{out} holds {json.loads(held.read_text())['seeds']} seeds per setting; --seeds "
                          f"{args.seeds} would replace them with fewer: pass more or another --out")
    from miiii.compile_cache import setup_compile_cache
    from miiii.run import load_run
    from miiii.sweep import member_dir

    setup_compile_cache()
    runs, wall = {}, {}
    for s in study.settings:
        runs[s.name], wall[s.name] = train_setting(study, s, args.seeds, args.runs, not args.no_progress)
    first = load_run(member_dir(Path(args.runs) / slug(study.settings[0].name), 0))
    (out / "summaries").mkdir(parents=True, exist_ok=True)
    write_json_atomic(held, to_jsonable({
        "study": study.name, "preset": study.preset, "steps": study.steps, "seeds": args.seeds,
        "command": f"python -m experiments.{study.name}" + (f" --seeds {args.seeds}" if args.seeds != study.seeds
                                                              else ""),
        "wall_s": {k: round(v, 1) for k, v in wall.items()}, "runs": runs,
        "provenance": provenance(first.summary, first.config.train.precision)}))
    return write_bundle(study, out)


def main(study: Study, argv=None) -> int:
    ap = OneLineParser(prog=f"python -m experiments.{study.name}", description=study.title)
    ap.add_argument("--seeds", type=int, default=study.seeds, help=f"seeds per setting (default {study.seeds})")
    ap.add_argument("--runs", type=Path, default=Path("runs") / study.name,
                    help=f"where the sweeps go; a finished one there is reused (default runs/{study.name})")
    ap.add_argument("--out", type=Path, default=None, help=f"the bundle (default results/{study.name})")
    ap.add_argument("--bundle-only", action="store_true", help="rewrite results.md from the summaries, no training")
    ap.add_argument("--check", action="store_true", help="exit 1 when results.md differs from its summaries")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    return one_line_errors(lambda a: run_study(study, a), ap.parse_args(argv))


# ---------------------------------------------------------------- what rules read


def values_of(members: list[dict], key: str) -> list[float]:
    return sorted({m["values"][key] for m in members})


def grok_step(m: dict) -> int | None:
    """The member's grok step: the last of its tasks' (every task grokked), else None."""
    steps = list(m["grok"].values())
    return None if any(s is None for s in steps) else max(steps)


def spread(xs) -> str:
    """'median (min–max), n' of the numbers, or '–'."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    return f"{np.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f}), n = {len(xs)}"


def at_step(m: dict, name: str, step: float) -> float:
    """A curve's value at `step`, interpolated in log time over the kept points."""
    c = m["curve"]
    return float(np.interp(np.log1p(step), np.log1p(c["step"]), c[name]))


def delay(m: dict) -> float | None:
    """Grokking's delay in a member: its grok step less its fit step (training accuracy ≥ 0.99 on every task); None
    when it never groks."""
    g, fits = grok_step(m), list(m["fit"].values())
    if g is None or any(f is None for f in fits):
        return None
    return float(g - max(fits))


def delays(members: list[dict], censor: bool = True) -> list[float]:
    """Each member's delay; a member that fit but never grokked counts at the budget's end (a lower bound), with
    `censor`; members that never fit are left out."""
    out = []
    for m in members:
        d = delay(m)
        fits = list(m["fit"].values())
        if d is None and censor and all(f is not None for f in fits):
            d = float(m["steps"] - max(fits))
        if d is not None:
            out.append(d)
    return out


def median_delay(members: list[dict]) -> float:
    """The median of the members' `delays` (censored at the budget's end), NaN when none fit."""
    ds = delays(members)
    return float(np.median(ds)) if ds else float("nan")


def grokked_share(members: list[dict]) -> float:
    return float(np.mean([grok_step(m) is not None for m in members])) if members else 0.0
