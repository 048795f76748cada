"""The stability bundle regenerated from its committed summaries alone (no runs, no training): results.md (the
verdicts, the per-setting table, provenance) and collapse.png, so what a reader sees cannot drift from the numbers.

    python -m experiments.stability.bundle results/stability            # rewrite results.md and collapse.png
    python -m experiments.stability.bundle results/stability --check    # exit 1 when results.md differs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from experiments.stability import rules as R
from experiments.stability.study import SETTINGS, TASKS
from miiii.errors import OneLineParser, lead
from miiii.files import write_text_atomic
from miiii.provenance import cell, provenance_table
from miiii.rules import printed_rule as rule_text


def _steps(xs) -> str:
    """Steps as a cell: one value, a range, or never."""
    xs = sorted(x for x in xs if x is not None)
    return "never" if not xs else (f"{xs[0]}" if xs[0] == xs[-1] else f"{xs[0]}–{xs[-1]}")


def _grokked(m: dict) -> str:
    return f"{R.grokked(m)}/{len(m['grok'])}"


def _some(ks: list, steps: dict) -> str:
    """'k of them (at steps)' for the tasks `ks` over their grok steps `steps`."""
    at = [steps[q] for q in ks if steps[q] is not None]
    return f"{len(at)} of them" + (f" (at {_steps(at)})" if at else "")


def say_sc_stops(nowd: dict, wd: dict) -> str:
    """What the SC rule reads in one seed: the tasks that collapse before they grok, how many grok after, how far
    validation accuracy climbs after the onset, and how many of them the control groks."""
    hit = R.collapsed_first(nowd)
    if not hit:
        return "no task collapses at least 200 steps before the end without grokking first"
    gain = f"; valid-acc gain after the onset {np.median([nowd['gain'][q] for q in hit]):+.2f}"
    return (f"{len(hit)} task(s) collapse first (onset {_steps(nowd['onset'][q] for q in hit)}); "
            f"{_some(hit, nowd['grok'])} grok after it{gain}; the control groks {_some(hit, wd['grok'])}")


def say_enables(mitigated: dict, nowd: dict, wd: dict) -> str:
    return f"grokked {_grokked(mitigated)}; no wd {_grokked(nowd)}; weight decay {_grokked(wd)}"


def say_prevents_sc(mitigated: dict) -> str:
    return (f"softmax collapse share at the end {max(mitigated['collapse_end'].values()):.2f} (not StableMax's own "
            "probabilities)")


def say_prevents_nlm(ortho: dict) -> str:
    return f"weight norm {ortho['weight_norm'][0]:.0f} → {ortho['weight_norm'][1]:.0f}"


def say_quick(ortho: dict, wd: dict) -> str:
    both = [q for q, t in ortho["grok"].items() if t is not None and wd["grok"][q] is not None]
    return (f"grokked {_grokked(ortho)} vs {_grokked(wd)}; grok step {_steps(ortho['grok'][q] for q in both)} vs "
            f"{_steps(wd['grok'][q] for q in both)}" if both else f"grokked {_grokked(ortho)} vs {_grokked(wd)}")


def say_precision(f16: dict, f32: dict, f64: dict) -> str:
    return " / ".join(_steps(m["onset"].values()) for m in (f16, f32, f64)) + " (float16 / 32 / 64)"


SOURCE = "Prieto et al. (ICLR 2025), abstract"
FIG2 = ("[paraphrase] the repository's Figure 2 (run_main_experiments.sh trains float16, float32 and float64; "
        "paper_plots.ipynb marks each one's first epoch with \"50% zero terms in the loss\")")
# (claim, quoted source, rule, the settings the rule reads in its argument order, what one seed shows): a claim
# quotes only what its rule tests; a sentence with several parts has a row per part, each quoting its part
CLAIMS = (
    ("\"[…] and eventually leads to SC, stopping learning altogether\"; \"We show that SC prevents grokking\"",
     SOURCE, R.rule_sc_stops, ("no wd", "weight decay"), say_sc_stops),
    ("\"[…] mitigating SC leads to grokking without regularization\" (float64 softmax)",
     SOURCE, R.rule_enables, ("no wd, float64", "no wd", "weight decay"), say_enables),
    ("\"StableMax, a new activation function that prevents SC […]\"", SOURCE, R.rule_prevents_sc,
     ("no wd, StableMax",), say_prevents_sc),
    ("\"StableMax, a new activation function that […] enables grokking without regularization\"", SOURCE,
     R.rule_enables, ("no wd, StableMax", "no wd", "weight decay"), say_enables),
    ("\"⊥Grad, a training algorithm that leads to […] generalization in grokking tasks […]\" (without weight decay)",
     SOURCE, R.rule_enables, ("no wd, ⊥Grad", "no wd", "weight decay"), say_enables),
    ("\"⊥Grad […] leads to quick generalization\" (sooner than with weight decay)", SOURCE, R.rule_quick,
     ("no wd, ⊥Grad", "weight decay"), say_quick),
    ("\"⊥Grad […] by preventing NLM altogether\"", SOURCE, R.rule_prevents_nlm, ("no wd, ⊥Grad",),
     say_prevents_nlm),
    ("\"We show that SC prevents grokking\" (on the float16 runs, whose softmax collapses soonest)", SOURCE,
     R.rule_sc_stops, ("no wd, float16", "weight decay"), say_sc_stops),
    ("collapse comes earlier in lower precision", FIG2, R.rule_precision,
     ("no wd, float16", "no wd", "no wd, float64"), say_precision),
)


def judge(summary: dict, claim) -> list:
    """The claim's per-seed results on one task's summary (seeds in order)."""
    _, _, fn, reads, _ = claim
    members = [summary["settings"][s] for s in reads]
    return [fn(*seed) for seed in zip(*members, strict=True)]


def measured(summary: dict, claim) -> str:
    """What the claim's rule reads in each seed, as one cell."""
    *_, reads, say = claim
    members = [summary["settings"][s] for s in reads]
    return "; ".join(f"seed {seed[0]['seed']}: {say(*seed)}" for seed in zip(*members, strict=True))


def _mark(v) -> str:
    return {True: "✓", False: "✗", None: "–"}[v]


def _median(xs) -> str:
    xs = [x for x in xs if x is not None]
    return f"{np.median(xs):.0f}" if xs else "–"


def setting_rows(task: str, summary: dict) -> list[str]:
    rows = []
    for setting, _ in SETTINGS:
        ms = summary["settings"][setting]
        k = len(ms[0]["grok"])
        rows.append(" | ".join([
            f"| {task}", setting, ", ".join(f"{R.grokked(m)}/{k}" for m in ms),
            ", ".join(_median(m["grok"].values()) for m in ms),
            ", ".join(_median(m["onset"].values()) for m in ms),
            ", ".join(f"{max(m['collapse_end'].values()):.2f}" for m in ms),
            ", ".join(f"{np.mean(list(m['valid_end'].values())):.2f}" for m in ms),
            ", ".join(f"{m['max_logit_end']:.0f}" for m in ms),
            ", ".join(f"{m['weight_norm'][0]:.0f} → {m['weight_norm'][1]:.0f}" for m in ms)]) + " |")
    return rows


def results_md(summaries: dict, report: dict) -> str:
    first = next(iter(summaries.values()))
    seeds = len(first["settings"][SETTINGS[0][0]])
    lines = [
        "# Grokking at the edge of numerical stability: Prieto et al.'s claims at CPU scale", "",
        "Generated by `python -m experiments.stability.bundle` from `summaries/`. Each task trains every setting as "
        f"one vmapped sweep of {seeds} seeds (0 … {seeds - 1}); everything but the setting is the preset's (grokfast "
        "included: see experiments/stability/README.md). ✓ holds in the seed, ✗ does not, – cannot be tested in it.",
        "", "| task | preset | steps | weight decay of the control | trained by | its sweeps' wall time |",
        "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {t} | `{s['preset']}` | {s['steps']:,} | {s['weight_decay']} | `{s['command']}` | "
              f"{sum(s['wall_s'].values()) / 60:.0f} min (compiling included) |" for t, s in summaries.items()]
    lines += ["",
        "## Verdicts", "",
        "| # | claim | source | task | measured, per seed | per seed | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, claim in enumerate(CLAIMS, 1):
        for task, s in summaries.items():
            per = judge(s, claim)
            lines.append(f"| {i} | {cell(claim[0])} | {cell(claim[1])} | {task} | {cell(measured(s, claim))} | "
                         f"{' '.join(map(_mark, per))} | **{R.verdict(per)}** |")
    lines += ["", "Rules (errs toward *does not hold*; "
              f"{rule_text(R.verdict)}):", ""]
    lines += [f"{i}. {rule_text(c[2])} Settings read: {'; '.join(c[3])}." for i, c in enumerate(CLAIMS, 1)]
    lines += ["", "## Every setting, per seed", "",
              "Grok: first step with validation accuracy ≥ 0.99. Collapse: the share of a task's training samples "
              "whose softmax (in the loss's precision) gives the correct class exactly 1; onset: the first step it "
              f"reaches {R.ONSET}. Values per seed, in seed order.", "",
              "| task | setting | tasks grokked | median grok step | median collapse onset | largest collapse at end "
              "| mean valid acc at end | max logit at end | weight norm start → end |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task, s in summaries.items():
        lines += setting_rows(task, s)
    lines += ["", "![validation accuracy and collapse per setting](collapse.png)", "", "## Provenance", ""]
    trained = {f"sweeps of {t} trained at": ", ".join(s["trained_by"]) for t, s in summaries.items()}
    lines += provenance_table({**report["provenance"], **trained})
    return "\n".join(lines)


def draw(summaries: dict, path: Path) -> None:
    """Mean validation accuracy and the largest collapse share per setting (one line per seed), one row per task."""
    import matplotlib.pyplot as plt

    from miiii.plotstyle import write_png

    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(len(summaries), 2, figsize=(9, 3.1 * len(summaries)), squeeze=False,
                             constrained_layout=True)
    for row, (task, s) in zip(axes, summaries.items(), strict=True):
        for c, (setting, _) in enumerate(SETTINGS):
            for j, m in enumerate(s["settings"][setting]):
                x = np.asarray(m["curve"]["step"]) + 1
                kw = dict(color=colors[c % len(colors)], lw=1.2, alpha=0.8, label=setting if j == 0 else None)
                row[0].plot(x, m["curve"]["valid_acc"], **kw)
                row[1].plot(x, m["curve"]["collapse"], **kw)
        for ax, label in zip(row, ("mean validation accuracy", "largest collapse share"), strict=True):
            ax.set(xscale="log", xlabel="step + 1", ylabel=label, ylim=(-0.03, 1.03), title=f"{task}: {label}")
        row[1].axhline(R.ONSET, color="0.5", lw=0.8, ls=":")
    axes[0, 1].legend(fontsize=7, loc="upper left")
    write_png(fig, path)
    plt.close(fig)


def read(out: Path) -> tuple[dict, dict]:
    summaries = {t: json.loads((out / "summaries" / f"{t}.json").read_text())
                 for t in TASKS if (out / "summaries" / f"{t}.json").is_file()}
    return summaries, json.loads((out / "summaries" / "report.json").read_text())


def write(out: Path, figures: bool = True) -> str:
    summaries, report = read(out)
    text = results_md(summaries, report)
    write_text_atomic(out / "results.md", text)
    if figures:
        draw(summaries, out / "collapse.png")
    return text


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m experiments.stability.bundle", description=lead(__doc__))
    ap.add_argument("out", type=Path, nargs="?", default=Path("results/stability"),
                    help="the bundle (default results/stability)")
    ap.add_argument("--check", action="store_true", help="exit 1 when results.md differs from its summaries")
    args = ap.parse_args(argv)
    if not (args.out / "summaries" / "report.json").is_file():
        print(f"error: {args.out} holds no summaries/report.json", file=sys.stderr)
        return 2
    if args.check:
        summaries, report = read(args.out)
        same = (args.out / "results.md").read_text() == results_md(summaries, report)
        print(f"{args.out / 'results.md'}: {'up to date' if same else 'differs from its summaries'}")
        return 0 if same else 1
    write(args.out)
    print(f"wrote {args.out / 'results.md'} and {args.out / 'collapse.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
