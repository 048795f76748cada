"""results.md of a paper bundle: the claims judged as written (claims.py), each with its rule, the numbers over seeds,
and the sections beside the table (Table 3 and the singular values by both definitions, the frequencies each task
needs, the runs).

A bundle commits `summaries/ROLE-K.json` per run (K: its seed's index, 0 the recorded run; the run's measures,
summary and config) and `summaries/report.json` (title, notes, provenance, run directories); `regenerate(bundle)`
rewrites results.md from those files alone, so the verdicts and the committed numbers cannot drift (a test
regenerates every committed bundle).
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path

import numpy as np

from experiments.paper.claims import claims, fmt, rule_spike
from experiments.paper.measures import FRACTIONS
from miiii.errors import OneLineParser
from miiii.files import write_text_atomic
from miiii.provenance import cell, provenance_table, to_jsonable

NEEDS = 0.1  # nats: a task "needs" frequency k when removing it raises the task's loss by more than this
SUMMARIES = "summaries"
REPORT = "report.json"


def _numbers(row: dict) -> str:
    if row["seeds"] < 2 or row["pooled"]:
        return "–"
    return "; ".join(f"{k} {m:.4g} ± {s:.2g}" + (f" (n = {n})" if n != row["seeds"] else "")
                     for k, (m, s, n) in row["numbers"].items()) or "–"


def table3_section(ms: dict[str, list[dict]]) -> list[str]:
    seeds = [m for m in ms.get("miiii", []) if "table3" in m]
    if not seeds:
        return []
    lines = ["## Table 3 by every definition (the recorded miiii runs)", "",
             "The paper's |ω| = 0, 0, 10, 18, 10 at epochs 256, 1,024, 4,096, 16,384, 65,536 of 65,536 were typed "
             "into its source; the original code (`omega_aux`/`finding_fn`) counts as the rows marked *original*. "
             "Each count is read at the recorded step nearest to the same fractions of the run; one row per seed, "
             "and the spike rule over the seeds' mean and spread.", "",
             "| definition | seed | " + " | ".join(f"{Fraction(f).limit_denominator()} of the run" for f in FRACTIONS)
             + " | spike beyond the seed spread? |", "| --- | --- |" + " --- |" * (len(FRACTIONS) + 1)]
    for name in seeds[0]["table3"]:
        rows = [m["table3"][name] for m in seeds]
        spike = rule_spike([r["counts"] for r in rows])
        for m, r in zip(seeds, rows, strict=True):
            lines.append(f"| {name} | {m['run']['seed']} | " + " | ".join(
                f"{n} (step {s})" for s, n in zip(r["steps"], r["counts"], strict=True)) + " | |")
        c = np.asarray([r["counts"] for r in rows], dtype=float)
        lines.append(f"| {name} | mean ± std | " + " | ".join(f"{a:.1f} ± {b:.1f}" for a, b in zip(
            c.mean(0), c.std(0), strict=True)) + f" | {'–' if spike is None else 'yes' if spike else 'no'} |")
    return lines + [""]


def svd_section(ms: dict[str, list[dict]]) -> list[str]:
    if "nanda" not in ms or "miiii" not in ms:
        return []
    lines = ["## Singular values of W_E by both definitions (mean ± std over seeds)", "",
             "*tick*: the original code's mark, the last 0-based index whose cumulative share of Σσ is below the "
             "threshold (= count − 2); the paper's 5 / 49 and 35 / 73 are ticks. *count*: how many values reach the "
             "share, of Σσ or of Σσ² (explained variance).", "",
             "| run | paper (tick) | tick Σσ 50 % / 90 % | count Σσ | count Σσ² |", "| --- | --- | --- | --- | --- |"]
    for role, paper in (("nanda", "5 / 49"), ("miiii", "35 / 73")):
        marks = [m["svd"] for m in ms[role]]

        def show(k, marks=marks):
            v = [m[k] for m in marks]
            return f"{np.mean(v):.1f}" + (f" ± {np.std(v):.1f}" if len(v) > 1 else "")

        lines.append(f"| {role} ({len(marks)} seeds) | {paper} | {show('tick_s_50')} / {show('tick_s_90')} | "
                     f"{show('count_s_50')} / {show('count_s_90')} | {show('count_s2_50')} / {show('count_s2_90')} |")
    return lines + [""]


def needed_frequencies(ablation: dict, slot: int, min_rise: float = NEEDS) -> list[tuple[int, float]]:
    """(k, loss rise) of the frequencies whose removal raises task `slot`'s loss by more than `min_rise`, most
    harmful first."""
    rise = np.asarray(ablation["loss"])[:, slot] - np.asarray(ablation["base"])[slot]
    order = np.argsort(-rise, kind="stable")
    return [(int(ablation["k"][i]), float(rise[i])) for i in order if rise[i] > min_rise]


def frequency_section(ms: dict[str, list[dict]]) -> list[str]:
    """Which frequencies each task needs: the frequency ablation of each role's first seed."""
    roles = [r for r in ("nanda", "miiii") if r in ms and "freq_ablation" in ms[r][0]]
    if not roles:
        return []
    lines = ["## Which frequencies each task needs (frequency ablation; not in the paper)", "",
             "The first seed's final model on all p² inputs, with frequency k of either digit (every 2-D Fourier "
             "component with ±k in x0 or x1) removed from the MLP neurons (`miiii.interventions`: "
             "`remove_grid_frequencies` through `run_with_hooks`), for k = 1 … p // 2. *Needs*: the frequencies "
             f"whose removal raises that task's loss over the grid by more than {NEEDS} nats, most harmful first "
             "(rise in nats). Figure `fig_freq_ablation_*`.", "",
             "| run | task | grokked at | loss over the grid | needs k (rise) |", "| --- | --- | --- | --- | --- |"]
    for role in roles:
        m = ms[role][0]
        ab = m["freq_ablation"]
        grok = dict(zip(m["task_names"], m["grok_step"], strict=True))
        for slot, name in enumerate(ab["tasks"]):
            need = needed_frequencies(ab, slot)
            shown = ", ".join(f"{k} ({r:.2f})" for k, r in need[:6]) + (f", … {len(need)} in all" if len(need) > 6
                                                                          else "")
            lines.append(f"| {role} | {name} | {fmt(grok.get(name))} | {ab['base'][slot]:.3f} | {shown or '–'} |")
        if role == "nanda":
            lines.append(f"| nanda | (cross-check) | | | the neurons' key frequencies (Nanda et al.'s clusters, "
                         f"≥ 85 % of a neuron's variance): {', '.join(map(str, m['key_freqs'])) or '–'} |")
    return lines + [""]


def _quote(row: dict) -> str:
    return f"[paraphrase] {cell(row['claim'])}" if row["paraphrase"] else f"“{cell(row['claim'])}”"


def _holds_in(row: dict) -> str:
    if row["pooled"]:
        return f"pooled over {row['seeds']}"
    return row.get("counted") or f"{row['holds_in']}/{row['seeds']}"


def results_markdown(ms: dict[str, list[dict]], title: str, notes: str = "", provenance: dict | None = None,
                     dirs: dict[str, list[str]] | None = None) -> str:
    """results.md from each role's measures (seed order, the recorded run first)."""
    rows = claims(ms)
    lines = [f"# {title}", "", "Generated by `python -m experiments.paper` through the measures in `summaries/` "
             "(`python -m experiments.paper.report BUNDLE` regenerates it without the runs); do not edit.", ""]
    if provenance:
        resumed = sum(bool(m["run"].get("resumed_from")) for seeds in ms.values() for m in seeds)
        if resumed and "wall time" in provenance:  # each run's wall_s times the steps after its resume only
            provenance = provenance | {"wall time": f"{provenance['wall time']} ({resumed} of them resumed: "
                                                    "timed from the resume, their earlier steps not counted)"}
        lines += provenance_table(provenance)
    if notes:
        lines += [notes, ""]
    lines += ["A verdict tests the sentence as the paper writes it (verbatim in quotes; *[paraphrase]* where the copy "
              "of the paper read has no sentence for it), with the rule beside it, in every seed: *holds* only if it "
              "holds in each; one seed against it makes it *does not hold*; *not testable* says why, including when "
              "a control run passes the same rule. 'measured' is the first (recorded) seed; the numbers after it are "
              "mean ± std over seeds.", "",
              "| # | claim | source | paper | rule | measured (first seed) | over seeds | holds in | verdict |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(rows, 1):
        verdict = f"**{r['verdict']}**" + (f" ({r['why']})" if r["verdict"] == "not testable" and r["why"] else "")
        lines.append(f"| {i} | {_quote(r)} | {cell(r['source'])} | {cell(r['paper'])} | {cell(r['rule'])} | "
                     f"{cell(r['measured'])} | {cell(_numbers(r))} | {_holds_in(r)} | {verdict} |")
    lines += [""] + table3_section(ms) + svd_section(ms) + frequency_section(ms)
    lines += ["## Runs", "", "| role | seeds | run directories | task | p | d_model | λ | steps | init, EMA start, "
              "first token | precision | wall s (first) | grokked per seed |", "|" + " --- |" * 12]
    for role, seeds in ms.items():
        c = seeds[0]["run"]
        grokked = ", ".join(f"{sum(s is not None for s in m['grok_step'])}/{len(m['grok_step'])}" for m in seeds)
        where = ", ".join(f"`{d}`" for d in (dirs or {}).get(role, [])) or "–"
        lines.append(f"| {role} | {', '.join(str(m['run']['seed']) for m in seeds)} | {where} | {c['task']} "
                     f"{c['variant']} | {c['p']} | {c['d_model']} | {c['lamb']:g} | {c['steps']} | {c['init']}, "
                     f"{c['ema_init']}, {'x1 (high)' if c['digit_order'] == 'high' else 'x0 (low)'} | "
                     f"{c['precision']} | {wall_cell(c)} | {grokked} |")
    return "\n".join(lines) + "\n"


def wall_cell(run: dict) -> str:
    """The first seed's training time; a resumed run's summary times the steps after its resume only, said so."""
    at = run.get("resumed_from")
    return fmt(run["wall_s"]) + (f" (steps {at:,} on: resumed)" if at else "")


# ---------------------------------------------------------------- the bundle's files


def write_summaries(runs: dict, bundle: str | Path, title: str, notes: str = "",
                    provenance: dict | None = None) -> dict:
    """Each run's measures, summary and config as `summaries/ROLE-K.json`, and the report's own inputs as
    `summaries/report.json`; returns {role: [measures]}. `runs`: {role: [Run, ...]} in seed order."""
    from experiments.paper.measures import run_measures

    out = Path(bundle) / SUMMARIES
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()  # a bundle holds one study's runs: no summary of an earlier one stays beside them
    ms, dirs = {}, {}
    for role, rs in runs.items():
        ms[role], dirs[role] = [], []
        for k, run in enumerate(rs):
            m = run_measures(run)
            record = {"measures": m, "summary": to_jsonable(run.summary), "config": run.config.to_dict()}
            write_text_atomic(out / f"{role}-{k}.json", json.dumps(record, indent=1, sort_keys=True) + "\n")
            ms[role].append(m)
            dirs[role].append(str(run.path))
    report = {"title": title, "notes": notes, "provenance": provenance or {}, "dirs": dirs, "roles": list(runs)}
    write_text_atomic(out / REPORT, json.dumps(report, indent=1) + "\n")
    return ms


def load_summaries(bundle: str | Path) -> tuple[dict[str, list[dict]], dict]:
    """({role: [measures in seed order]}, report.json) of a bundle."""
    out = Path(bundle) / SUMMARIES
    report = json.loads((out / REPORT).read_text())
    ms = {}
    for role in report["roles"]:
        files = sorted(out.glob(f"{role}-*.json"), key=lambda f: int(f.stem.rsplit("-", 1)[1]))
        files = [f for f in files if re.fullmatch(rf"{re.escape(role)}-\d+", f.stem)]
        ms[role] = [json.loads(f.read_text()) for f in files]
        for d in ms[role]:  # summaries written before measures kept it: the run's summary.json has it
            d["measures"]["run"].setdefault("resumed_from", d.get("summary", {}).get("resumed_from"))
        ms[role] = [d["measures"] for d in ms[role]]
    return ms, report


def regenerate(bundle: str | Path) -> str:
    """results.md's text from the bundle's committed summaries alone."""
    ms, report = load_summaries(bundle)
    return results_markdown(ms, report["title"], report["notes"], report["provenance"], report["dirs"])


def write_results(runs: dict, bundle: str | Path, title: str = "miiii: the paper's claims, judged as written",
                  notes: str = "", provenance: dict | None = None) -> Path:
    """Summaries first, then results.md regenerated from them (the committed path is the only path)."""
    write_summaries(runs, bundle, title, notes, provenance)
    path = Path(bundle) / "results.md"
    write_text_atomic(path, regenerate(bundle))
    return path


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m experiments.paper.report",
                       description="Regenerate a paper bundle's results.md from its summaries/ (no runs, no training).")
    ap.add_argument("bundles", nargs="+", type=Path, help="bundle folders, e.g. results/paper-cpu")
    ap.add_argument("--check", action="store_true", help="exit 1 when a committed results.md differs")
    args = ap.parse_args(argv)
    bad = 0
    for b in args.bundles:
        if not (b / SUMMARIES / REPORT).is_file():
            print(f"error: {b} has no {SUMMARIES}/{REPORT}: not a paper bundle", file=__import__("sys").stderr)
            return 2
        text = regenerate(b)
        if args.check:
            same = (b / "results.md").is_file() and (b / "results.md").read_text() == text
            bad += not same
            print(f"{b}: {'up to date' if same else 'differs from its summaries'}")
        else:
            write_text_atomic(b / "results.md", text)
            print(f"wrote {b / 'results.md'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
