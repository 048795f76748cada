"""The search for `miiii-cpu`: a miiii configuration that groks every task on 2 CPU cores, the bar being every task at
validation accuracy >= 0.99 in at least 4 of 5 seeds, in at most 30 minutes a seed.

    python -m experiments.miiii_cpu                  # train the settings not trained yet (runs/miiii-cpu-search/),
                                                     # then write the bundle (default runs/miiii-cpu, a scratch folder)
    python -m experiments.miiii_cpu --only G-miiii-cpu --resume      # continue a stopped setting
    python -m experiments.miiii_cpu --only D-p71-d64-tf09 --no-train --out results/miiii-cpu
    python -m experiments.miiii_cpu.study --bundle results/miiii-cpu [--check]   # results.md from the summary alone

Each setting is one vmapped sweep (or one solo run) of `miiii-p71-cpu` with the changes it names, evaluated every
100 steps; a setting stopped early (Ctrl-C, resumable) is reported at the step it reached. The summary
(`summaries/search.json`) holds, per setting and seed, the number of tasks grokked (validation accuracy reached
0.99) at every evaluated step, the final accuracies, the steps trained and the wall time: the sum of the training
segments the driver timed (wall.json), or, for a setting trained before it kept one, read from the files' times (the
search ran its sweeps side by side on 2 shared cores: a setting's seconds per member-step are an upper bound on a
solo seed's). results.md and grokked.png are regenerated from it alone.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.generated import same_or_say
from miiii.errors import ConfigError, OneLineParser, lead, one_line_errors, out_folder
from miiii.files import write_json_atomic, write_text_atomic

GOAL = dict(threshold=0.99, seeds=4, of=5, minutes=30)
EVAL = ["train.eval_every=100", "train.chunk=500", "ckpt.keep_log=0"]


@dataclass(frozen=True)
class Setting:
    name: str
    why: str  # what the setting asks
    sets: tuple[str, ...]  # --set changes to miiii-p71-cpu (p = 71, d 64, 70 % train, lr 1e-3, wd 1/3, λ 2)
    grid: tuple[str, ...] = ()  # --grid items (crossed)
    steps: int = 10_000
    seeds: int = 1
    solo: bool = False  # one `train` run instead of a sweep
    preset: str = "miiii-p71-cpu"
    own_cadence: bool = False  # the preset's own evaluation, chunk and kept checkpoints (not EVAL's)
    also: tuple[str, ...] = ()  # other sweeps of the same config whose members are this setting's seeds too
    also_command: str = ""  # the command that trains them


SEARCH = (
    Setting("B-p71-d64", "lr and weight decay at the paper-cpu scale", (), ("lr=1e-3,3e-3", "wd=0.333333,1.0")),
    Setting("C1-p71-d128-tf08", "twice the width, 80 % train", ("model.d_model=128", "task.train_frac=0.8"),
            ("lr=1e-3,3e-3",), 8000),
    Setting("C2-p53-d128-tf08", "a smaller p (15 tasks), twice the width, 80 % train",
            ("task.p=53", "model.d_model=128", "task.train_frac=0.8"), ("lr=1e-3,3e-3",), 8000),
    Setting("D-p71-d64-tf09", "more data per token (90 % train); dropout and grokfast's λ",
            ("task.train_frac=0.9",), ("dropout=0.1,0.2", "lamb=2,5"), 12_000),
    Setting("E-p71-d64-tf07-40k", "the paper-cpu recipe, trained 8x longer", (), (), 40_000, solo=True),
    Setting("F-p71-d96-25k", "1.5x the width (room for every task's frequencies at both positions)",
            ("model.d_model=96",), (), 25_000, solo=True),
    Setting("G-miiii-cpu", "the preset miiii-cpu's recipe (F's, 25k steps) at p = 71, over 5 seeds", ("task.p=71",),
            (), 25_000, seeds=5, preset="miiii-cpu", own_cadence=True),
    Setting("H-miiii-cpu-p53", "the preset miiii-cpu as it is: G's recipe at p = 53 (15 tasks; the scale ladder's "
            "rung): seeds 3 and 4 here, seeds 0-2 the ladder's sweep (runs/ladder/p53)", ("task.p=53", "train.seed=3"),
            (), 25_000, seeds=2, preset="miiii-cpu", own_cadence=True, also=("runs/ladder/p53",),
            also_command="python -m miiii sweep --preset miiii-cpu --seeds 3 --set task.p=53 --no-progress --out "
                         "runs/ladder/p53 (make ladder)"),
)


def command(s: Setting, runs: Path) -> list[str]:
    """The `python -m miiii` arguments that train setting `s` into runs/NAME."""
    sets = [a for kv in (*s.sets, *(() if s.own_cadence else EVAL)) for a in ("--set", kv)]
    if s.solo:
        return ["train", "--preset", s.preset, "--steps", str(s.steps), *sets, "--no-progress",
                "--run-dir", str(runs / s.name)]
    return ["sweep", "--preset", s.preset, "--seeds", str(s.seeds), *(["--grid", *s.grid] if s.grid else []),
            "--steps", str(s.steps), *sets, "--no-progress", "--out", str(runs / s.name)]


# ---------------------------------------------------------------- reading the runs


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def member_record(run_dir: Path) -> dict:
    """One seed of a setting: its grid values, how many tasks have grokked by each evaluated step, the final
    validation accuracy of each task, the steps it trained."""
    rows = [r for r in _rows(run_dir) if any(k.startswith("valid_acc/") for k in r)]
    info = json.loads((run_dir / "member.json").read_text()) if (run_dir / "member.json").is_file() else {}
    cfg = json.loads((run_dir / "config.json").read_text())
    tasks = [k.split("/", 1)[1] for k in rows[0] if k.startswith("valid_acc/")] if rows else []
    first: dict[str, int] = {}
    curve = []
    for r in rows:
        for t in tasks:
            v = r.get(f"valid_acc/{t}")
            if t not in first and v is not None and v >= GOAL["threshold"]:
                first[t] = r["step"]
        curve.append([r["step"], len(first)])
    final = {t: rows[-1].get(f"valid_acc/{t}") for t in tasks} if rows else {}
    finished = (run_dir / "summary.json").is_file()  # written at the run's last step, which may not be evaluated
    done = cfg["train"]["steps"] if finished else rows[-1]["step"] + 1 if rows else 0
    return dict(seed=cfg["train"]["seed"], values=info.get("values", {}), tasks=tasks, curve=curve,
                grok_step=first, final=final, steps_done=done)


WALL = "wall.json"  # a setting's training segments, [[start, end], ...] in Unix seconds, written by `train_setting`


def wall_seconds(setting_dir: Path, members: list[Path]) -> float:
    """The setting's wall time on a shared CPU: the sum of its training segments (wall.json: a setting stopped and
    continued later is not charged for the time between), else from its first file (its plan or config) to its
    last metrics line."""
    if (setting_dir / WALL).is_file():
        return round(sum(b - a for a, b in json.loads((setting_dir / WALL).read_text())), 1)
    start = min(p.stat().st_mtime for p in (setting_dir / "sweep-plan.json", setting_dir / "config.json")
                if p.is_file())
    end = max((m / "metrics.jsonl").stat().st_mtime for m in members if (m / "metrics.jsonl").is_file())
    return round(end - start, 1)


def resume_command(s: Setting, runs: Path) -> list[str]:
    """The arguments that continue a stopped setting from its newest checkpoint (bit-identical to not stopping)."""
    return ["train" if s.solo else "sweep", "--resume", str(runs / s.name), "--no-progress"]


def train_setting(s: Setting, runs: Path, resume: bool = False) -> int:
    """Train (or continue) one setting, adding the segment's start and end to its wall.json."""
    from miiii.cli import main as miiii

    start = time.time()
    rc = miiii(resume_command(s, runs) if resume else command(s, runs))
    d = runs / s.name
    if d.is_dir():
        segments = json.loads((d / WALL).read_text()) if (d / WALL).is_file() else []
        write_json_atomic(d / WALL, [*segments, [round(start, 1), round(time.time(), 1)]])
    return rc


def setting_record(s: Setting, runs: Path) -> dict | None:
    d = runs / s.name
    if not d.is_dir():
        return None
    members = [d] if s.solo else sorted(d.glob("member_*"))
    others = [Path(a) for a in s.also if Path(a).is_dir()]
    if len(others) != len(s.also):
        raise ConfigError(f"{s.name}: its other seeds' sweep {', '.join(s.also)} is missing: train it first")
    wall = wall_seconds(d, members) + sum(wall_seconds(o, sorted(o.glob("member_*"))) for o in others)
    members += [m for o in others for m in sorted(o.glob("member_*"))]
    seeds = sorted((member_record(m) for m in members), key=lambda m: m["seed"])
    if not seeds or not seeds[0]["curve"]:
        return None
    cfg = json.loads((members[0] / "config.json").read_text())
    done = max(m["steps_done"] for m in seeds)
    return dict(name=s.name, why=s.why, sets=list(s.sets), grid=list(s.grid), steps=s.steps, steps_done=done,
                p=cfg["task"]["p"], d_model=cfg["model"]["d_model"], train_frac=cfg["task"]["train_frac"],
                members=len(seeds), wall_s=wall, s_per_member_step=round(wall / max(done * len(seeds), 1), 5),
                command="python -m miiii " + " ".join(command(s, runs)) + (f"`; seeds 0-2: `{s.also_command}"
                                                                          if s.also_command else ""), seeds=seeds)


# ---------------------------------------------------------------- the bundle, from its summary alone


def preset_setting(summary: dict) -> dict | None:
    """The search's record of the preset `miiii-cpu` as it is: a setting that trains it at the preset's own p and
    width (the README's line and the timings record both read it)."""
    from miiii.presets import get_preset

    preset, own = get_preset("miiii-cpu"), {s.name for s in SEARCH if s.preset == "miiii-cpu"}
    return next((r for r in summary["settings"] if r["name"] in own and r["p"] == preset.task.p
                 and r["d_model"] == preset.model.d_model), None)


def every_task(seed: dict) -> bool:
    return bool(seed["tasks"]) and len(seed["grok_step"]) == len(seed["tasks"])


def minutes_per_seed(rec: dict) -> float:
    """The setting's wall time per member, as measured (side by side with other settings on 2 cores)."""
    return rec["wall_s"] / 60 / rec["members"]


def meets_goal(rec: dict) -> bool:
    hits = sum(every_task(m) for m in rec["seeds"])
    return (len(rec["seeds"]) >= GOAL["of"] and hits >= GOAL["seeds"]
            and minutes_per_seed(rec) <= GOAL["minutes"])


def label(m: dict) -> str:
    vals = ", ".join(f"{k.split('.')[-1]} {v:g}" for k, v in m["values"].items())
    return f"seed {m['seed']}" + (f", {vals}" if vals else "")


def results_md(summary: dict) -> str:
    recs = summary["settings"]
    lines = ["# miiii-cpu: the search for a miiii that groks every task on a CPU", "",
             "Generated by `python -m experiments.miiii_cpu.study --bundle DIR` from `summaries/search.json`; do not "
             "edit.", "",
             f"The goal: every task at validation accuracy ≥ {GOAL['threshold']} in at least {GOAL['seeds']} of "
             f"{GOAL['of']} seeds, within {GOAL['minutes']} minutes a seed on 2 CPU cores. Every setting starts "
             "from `miiii-p71-cpu` (p = 71, d 64, 70 % train, lr 1e-3, weight decay 1/3, grokfast λ 2, dropout "
             "0.1) and changes what its row says. Wall times were read from the files' times while several settings "
             "shared the 2 cores: they bound a solo seed's time from above.", "",
             "| setting | what it asks | tasks | steps trained | members | wall (min) | min per member | seeds with "
             "every task | most tasks grokked in a seed | goal |", "| --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- | --- |"]
    for r in recs:
        most = max(len(m["grok_step"]) for m in r["seeds"])
        n = len(r["seeds"][0]["tasks"])
        lines.append(f"| {r['name']} | {r['why']} | {n} | {r['steps_done']:,} of {r['steps']:,} | {r['members']} | "
                     f"{r['wall_s'] / 60:.1f} | {minutes_per_seed(r):.1f} | {sum(every_task(m) for m in r['seeds'])} "
                     f"of {len(r['seeds'])} | {most} of {n} | {'met' if meets_goal(r) else 'not met'} |")
    lines += ["", "Per seed: tasks grokked by the last evaluated step, and the tasks that did not (their final "
              "validation accuracy).", "", "| setting | seed | grokked | last grok step | not grokked |",
              "| --- | --- | --- | --- | --- |"]
    for r in recs:
        for m in r["seeds"]:
            missing = ", ".join(f"{t} {m['final'][t]:.2f}" for t in m["tasks"] if t not in m["grok_step"]
                                and m["final"].get(t) is not None)
            last = max(m["grok_step"].values(), default=None)
            lines.append(f"| {r['name']} | {label(m)} | {len(m['grok_step'])} of {len(m['tasks'])} | "
                         f"{'–' if last is None else f'{last:,}'} | {missing or '–'} |")
    met = [r["name"] for r in recs if meets_goal(r)]
    best = max(recs, key=lambda r: max(len(m["grok_step"]) / len(m["tasks"]) for m in r["seeds"]))
    lines += ["", "## Verdict", "",
              (f"Met by: {', '.join(met)}." if met else
               f"No setting searched meets the goal. The nearest: {best['name']} ({best['why']}), whose best seed "
               f"grokked {max(len(m['grok_step']) for m in best['seeds'])} of {len(best['seeds'][0]['tasks'])} tasks "
               f"in {best['steps_done']:,} steps."),
              "", "Commands (each setting's exact training command):", ""]
    lines += [f"- {r['name']}: `{r['command']}`" for r in recs]
    lines += ["", "![tasks grokked against the step](grokked.png)", ""]
    return "\n".join(lines)


def figure(summary: dict, out: Path) -> Path:
    from miiii.plotstyle import OKABE_ITO, plt, save_figure

    recs = summary["settings"]
    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    for i, r in enumerate(recs):
        for j, m in enumerate(r["seeds"]):
            c = np.asarray(m["curve"], float)
            frac = c[:, 1] / len(m["tasks"])
            ax.plot(c[:, 0] + 1, frac, color=OKABE_ITO[i % len(OKABE_ITO)], lw=1, alpha=0.85,
                    label=r["name"] if j == 0 else None)
    ax.set(xscale="log", ylim=(-0.02, 1.02), xlabel="step + 1 (log)",
           ylabel=f"share of tasks grokked (valid acc ≥ {GOAL['threshold']})",
           title="miiii-cpu search: tasks grokked against the step, every seed")
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.legend(frameon=False, fontsize=8, loc="upper left")
    return save_figure(fig, out, "grokked")[0]


def write_bundle(summary: dict, out: Path, check: bool = False) -> int:
    text = results_md(summary)
    if check:
        return same_or_say(out / "results.md", text, f"python -m experiments.miiii_cpu.study --bundle {out}")
    write_text_atomic(out / "results.md", text)
    figure(summary, out)
    return 0


def collect(runs: Path, only: list[str] | None) -> dict:
    recs = [r for s in SEARCH if not only or s.name in only if (r := setting_record(s, runs)) is not None]
    if not recs:
        raise ConfigError(f"no setting of the search has metrics under {runs}")
    return {"goal": GOAL, "settings": recs}


def main(argv=None) -> int:
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--runs", type=Path, default=Path("runs/miiii-cpu-search"), help="where the settings train")
    ap.add_argument("--out", type=Path, default=Path("runs/miiii-cpu"),
                    help="the bundle (default runs/miiii-cpu, a scratch folder; --out results/miiii-cpu rewrites the "
                         "committed one)")
    ap.add_argument("--only", nargs="+", default=None, choices=[s.name for s in SEARCH], help="these settings only")
    ap.add_argument("--no-train", action="store_true", help="write the bundle from the runs as they are")
    ap.add_argument("--resume", action="store_true",
                    help="continue the settings that were stopped before their last step (a finished one says "
                         "'nothing to do'); the time between is not charged to the setting")
    ap.add_argument("--bundle", type=Path, default=None,
                    help="regenerate BUNDLE's results.md and grokked.png from its summaries/search.json alone")
    ap.add_argument("--check", action="store_true", help="with --bundle: exit 1 when results.md differs")
    args = ap.parse_args(argv)
    return one_line_errors(study, args)


def study(args) -> int:
    if args.bundle is not None:
        summary = json.loads((args.bundle / "summaries" / "search.json").read_text())
        return write_bundle(summary, args.bundle, args.check)
    out_folder(args.out)
    if not args.no_train:
        for s in SEARCH:
            if not args.only or s.name in args.only:
                fresh = not (args.runs / s.name).exists()
                if (fresh or args.resume) and (rc := train_setting(s, args.runs, resume=not fresh)) != 0:
                    return 130 if rc == 130 else 1  # stopped (its one line said so) or failed
    summary = collect(args.runs, args.only)
    (args.out / "summaries").mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "summaries" / "search.json", summary)
    return write_bundle(summary, args.out)


if __name__ == "__main__":
    sys.exit(main())
