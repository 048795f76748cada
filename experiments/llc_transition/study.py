"""Does the local learning coefficient track the memorisation-to-generalisation transition? λ̂ (miiii/llc.py) at
every kept checkpoint of the paper study's CPU runs (experiments/paper: nanda, miiii per task, and the shuffled-label
miiii-basis run as the control), its turn (the kept step where λ̂ peaks) set against each task's grok step, per seed.

    python -m experiments.llc_transition                 # λ̂ of each run of runs/paper-cpu/runs (RUN/llc.json, reused)
    python -m experiments.llc_transition --bundle-only   # results.md from the summaries alone
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from miiii.config import ConfigError
from miiii.errors import OneLineParser, lead, one_line_errors, out_folder
from miiii.files import write_json_atomic, write_text_atomic
from miiii.provenance import cell, to_jsonable
from miiii.rules import printed_rule

ROLES = ("nanda", "miiii", "basis")  # basis: miiii with shuffled labels, the control (nothing to grok)
WINDOW = 2.0  # the turn is within a factor 2 of the grok step, either way
OUT = Path("results/llc_transition")
CLAIM = "[paraphrase] the local learning coefficient tracks the memorisation-to-generalisation transition"
WHO = "developmental interpretability"
WHERE = "devinterp's grokking (modular addition) example: λ̂ turns when the model groks"


def turn(steps, series) -> int:
    """The kept step at which λ̂ peaks."""
    return int(np.asarray(steps)[int(np.nanargmax(series))])


def near(step: float, grok: float) -> bool:
    return grok / WINDOW <= max(step, 1) <= grok * WINDOW


def rule_tracks(run: dict, control: dict | None, controlled: bool = True) -> list[bool | None]:
    """holds for a task of a seed if its λ̂ (per task for miiii) turns: it peaks at a kept step other than the first
    and the last (a λ̂ that only rises or only falls never turns) within a factor 2 of the task's grok step, either
    way; and the shuffled-label control of the same seed does not peak that near the same step (if it does, or for
    miiii if it is missing, a unit that turns there is not testable, and one that does not turn there still does
    not hold; nanda's runs have no shuffled control and are judged without one). A task that never grokked is not
    testable. The claim holds only when every unit that can test it holds, with at least 2."""
    out = []
    for k, name in enumerate(run["task_names"]):
        grok = run["grok"].get(name)
        if grok is None:
            out.append(None)
            continue
        series = np.asarray(run["llc_tasks"])[:, k]
        peak = int(np.nanargmax(series))
        turns = bool(0 < peak < len(series) - 1 and near(int(np.asarray(run["steps"])[peak]), grok))
        # the control can only take a turn away (it may not be the transition's), never excuse a missing one
        unexplained = (control is None and controlled) or (
            control is not None and near(turn(control["steps"], control["llc"]), grok))
        out.append(None if turns and unexplained else turns)
    return out


def summarise(run_dir: Path, role: str, seed: int, report: dict) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"role": role, "seed": seed, "run": str(run_dir), "steps": report["steps"], "llc": report["llc"],
            "llc_std": report["llc_std"], "llc_tasks": report["llc_tasks"], "task_names": report["task_names"],
            "grok": summary.get("grok_step") or {}, "config": report["config"], "nbeta": report["nbeta"]}


def measure(runs: Path, cfg) -> list[dict]:
    """Each role's seeds under `runs` (ROLE, ROLE-s1, ...: seed offset 0, 1, ..., experiments.paper.seed_dir's):
    RUN/llc.json when it is there, else computed. A run's seed is its name's, so miiii-s2 meets basis-s2 as its
    control even where an s1 is missing."""
    from miiii.llc import llc_over_run
    from miiii.run import load_run
    from miiii.rundir import read_llc_report, write_llc_report

    out = []
    for role in ROLES:
        seeds = {int(m[1] or 0): d for d in Path(runs).iterdir() if (m := re.fullmatch(rf"{role}(?:-s(\d+))?", d.name))}
        if not seeds:
            raise ConfigError(f"{runs} holds no {role} run (expected {role}, {role}-s1, ...: experiments.paper's)")
        for seed, d in sorted(seeds.items()):
            report = read_llc_report(d)
            if report is None:
                report = llc_over_run(load_run(d), None, cfg)
                write_llc_report(d, report)
                print(f"{d}: λ̂ at {len(report['steps'])} kept steps", flush=True)
            out.append(summarise(d, role, seed, report))
    return out


def pooled(units: list) -> str:
    """Every unit that can test it holds, at least 2 do: holds; one against: does not hold; else not testable."""
    if any(u is False for u in units):
        return "does not hold"
    return "holds" if sum(u is True for u in units) >= 2 else "not testable"


def judge(summaries: list[dict]) -> dict:
    by = {(s["role"], s["seed"]): s for s in summaries}
    rows = {}
    for role in ("nanda", "miiii"):
        units = []
        for s in (s for s in summaries if s["role"] == role):
            units += rule_tracks(s, by.get(("basis", s["seed"])), controlled=True) if role == "miiii" else \
                rule_tracks(s, None, controlled=False)
        rows[role] = {"units": units, "verdict": pooled(units)}
    return rows


def render(data: dict) -> str:
    rows = judge(data["runs"])
    lines = ["# Does the LLC track the transition? At CPU scale", "",
             f"Generated by `python -m experiments.llc_transition` from `summaries/llc.json` (`--bundle-only` "
             f"regenerates it). λ̂ by SGLD at every kept checkpoint of `{data['source']}` (ε {data['llc']['lr']:g}, γ "
             f"{data['llc']['gamma']:g}, {data['llc']['chains']} chains x {data['llc']['draws']} draws, batch "
             f"{data['llc']['batch']}); the control is the shuffled-label miiii-basis run of each seed.", "",
             "| # | who | claim | where | rule | measured (units ✓ ✗ –) | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    mark = {True: "✓", False: "✗", None: "–"}
    for i, (role, r) in enumerate(rows.items(), 1):
        reading = "nanda, its one task" if role == "nanda" else "miiii, each task (control: basis, same seed)"
        lines.append(f"| {i} | {WHO} | {CLAIM} ({reading}) | {WHERE} | {cell(printed_rule(rule_tracks))} | "
                     f"{''.join(mark[u] for u in r['units'])} | **{r['verdict']}** |")
    lines += ["", "## Per run", "",
              "![λ̂ against the step, grok steps dotted](llc.png)", "",
              "| role | seed | λ̂ peaks at | grok steps (first, last task) | λ̂ first → peak → last |",
              "| --- | --- | --- | --- | --- |"]
    for s in data["runs"]:
        g = [v for v in s["grok"].values() if v is not None]
        lines.append(f"| {s['role']} | {s['seed']} | {turn(s['steps'], s['llc']):,} | "
                     f"{(f'{min(g):,}, {max(g):,}' if g else 'none')} | {s['llc'][0]:.1f} → "
                     f"{max(s['llc']):.1f} → {s['llc'][-1]:.1f} |")
    return "\n".join(lines) + "\n"


def figure(data: dict, out: Path) -> Path:
    """λ̂ against the step, one panel per role, one line per seed (its spread over chains shaded), each seed's grok
    steps marked on its line (miiii: the first and the last task), so the turn and the transition read off together."""
    import matplotlib.pyplot as plt

    from miiii.plotstyle import OKABE_ITO, write_png

    fig, axes = plt.subplots(1, len(ROLES), figsize=(4 * len(ROLES), 3.2), layout="constrained")
    for ax, role in zip(axes, ROLES, strict=True):
        for s in (s for s in data["runs"] if s["role"] == role):
            steps, llc, sd = (np.asarray(s[k], float) for k in ("steps", "llc", "llc_std"))
            colour = OKABE_ITO[s["seed"] % len(OKABE_ITO)]
            ax.plot(np.maximum(steps, 1), llc, color=colour, marker=".", label=f"seed {s['seed']}")
            ax.fill_between(np.maximum(steps, 1), llc - sd, llc + sd, color=colour, alpha=0.2, lw=0)
            g = [v for v in s["grok"].values() if v is not None]
            for step in {min(g), max(g)} if g else ():
                ax.axvline(step, color=colour, ls=":", lw=1)
        ax.set(xscale="log", xlabel="step (kept checkpoints)", title=f"{role}" + (" (shuffled labels)" if role ==
               "basis" else ""))
        ax.legend(frameon=False, fontsize=7)
    axes[0].set_ylabel("λ̂ (dotted: grok steps, first and last task)")
    path = out / "llc.png"
    write_png(fig, path)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m experiments.llc_transition", description=lead(__doc__))
    ap.add_argument("--runs", type=Path, default=Path("runs/paper-cpu/runs"),
                    help="the paper study's run directories: nanda, nanda-s1, ..., miiii, ..., basis, ... (default "
                         "runs/paper-cpu/runs, make paper-cpu's)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"the bundle (default {OUT})")
    ap.add_argument("--draws", type=int, default=200, help="SGLD draws per chain (default 200)")
    ap.add_argument("--chains", type=int, default=4, help="chains per checkpoint (default 4)")
    ap.add_argument("--bundle-only", action="store_true", help="results.md from the summaries, no LLC")
    ap.add_argument("--check", action="store_true", help="exit 1 when results.md differs from its summaries")
    return one_line_errors(study, ap.parse_args(argv))


def study(args) -> int:
    from experiments.generated import same_or_say

    held = args.out / "summaries" / "llc.json"
    if not (args.bundle_only or args.check):
        from miiii.llc import LLCConfig

        out_folder(args.out)
        cfg = LLCConfig(chains=args.chains, draws=args.draws)
        runs = measure(args.runs, cfg)
        held.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(held, to_jsonable({"source": str(args.runs), "llc": cfg.to_dict(), "runs": runs}))
    text = render(json.loads(held.read_text()))
    if args.check:
        return same_or_say(args.out / "results.md", text, "python -m experiments.llc_transition --bundle-only")
    write_text_atomic(args.out / "results.md", text)
    figure(json.loads(held.read_text()), args.out)
    print(f"wrote {args.out / 'results.md'} and llc.png")
    return 0
