"""The scale ladder: the paper's numeric claims measured at p = 37, 47, 53, 59 and 71, against p.

One recipe at every rung (`miiii-cpu`: the paper's recipe at d 96, 70 % train, 25k steps), plotted against p with the
paper's value at p = 113 marked. It states a trend and whether it points at the paper's number; it claims nothing
about p = 113 itself.

    python -m experiments.paper.ladder              # train the rungs not trained yet (runs/ladder/pP, 3 seeds each),
                                                    # measure them, write the bundle (default runs/ladder-bundle)
    python -m experiments.paper.ladder --no-train --out results/paper-cpu/ladder   # the committed bundle; p = 71
                                                    # is the miiii-cpu search's setting G (the same preset, 5 seeds)
    python -m experiments.paper.ladder --bundle results/paper-cpu/ladder [--check]   # ladder.md and ladder.png
                                                    # from summaries/pP-K.json alone

Each seed's measures (`measures.run_measures`, the JSON the paper bundles commit) are read as the paper's claims
read them. A rung's numbers are over the seeds whose run generalised every task (valid accuracy ≥ 0.99); a rung
where none did shows all its seeds, marked as partly trained (what a run that stopped learning says of the trained
model is not the paper's claim).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.generated import same_or_say
from experiments.paper.measures import task_q
from miiii.analysis import GROK_THRESHOLD
from miiii.errors import ConfigError, OneLineParser, lead, one_line_errors, out_folder
from miiii.files import write_json_atomic, write_text_atomic
from miiii.rules import PAPER_STEPS, SMALL

RUNGS = (37, 47, 53, 59, 71)
SEEDS = 3
PRESET = "miiii-cpu"
PAPER_P = 113
# p = 71 is the miiii-cpu search's setting G: the same preset over 5 seeds (experiments/miiii_cpu), not trained twice
SHARED = {71: Path("runs/miiii-cpu-search/G-miiii-cpu")}
TABLE3 = ("project: dominance, mean + 2 std per step", "original: neuron 0, mean + 1 std")


def valid_size(p: int) -> int:
    """The preset's validation set, or every sample the training set leaves where p² is too small for it (p = 37:
    958 train of 1,369 leave 411): the one change a rung makes besides p."""
    from miiii.presets import get_preset

    task = get_preset(PRESET).task
    return min(task.valid_size, p * p - int(task.train_frac * p * p))


def command(p: int, out: Path, seeds: int = SEEDS) -> list[str]:
    """The `python -m miiii` arguments that train rung p (one vmapped sweep of the preset over `seeds` seeds)."""
    from miiii.presets import get_preset

    fit = [] if valid_size(p) == get_preset(PRESET).task.valid_size else ["--set", f"task.valid_size={valid_size(p)}"]
    return ["sweep", "--preset", PRESET, "--seeds", str(seeds), "--set", f"task.p={p}", *fit, "--no-progress",
            "--out", str(out)]


# ---------------------------------------------------------------- what each quantity reads of one seed's measures


def _grok(m: dict) -> dict[int, int | None]:
    return {task_q(n): s for n, s in zip(m["task_names"], m["grok_step"], strict=True)}


def generalised(m: dict) -> bool:
    return all(s is not None for s in m["grok_step"])


def _remaining_median(m: dict) -> float | None:
    """The median grok step of the tasks q > 7 as a share of the run (a task not grokked: counted at the run's
    end), the paper's 'remaining tasks … around epoch 40000' of 65,536."""
    rest = [s for q, s in _grok(m).items() if q not in SMALL]
    steps = m["run"]["steps"]
    return float(np.median([steps if s is None else s for s in rest])) / steps if rest else None


def _small_last(m: dict) -> float | None:
    """When the last of q = 2, 3, 5, 7 grokked, as a share of the run (None: one did not)."""
    g = _grok(m)
    s = [g.get(q) for q in SMALL]
    return None if None in s else max(s) / m["run"]["steps"]


def _table3(name: str, what: str):
    def read(m: dict):
        t = m.get("table3", {}).get(name)
        return None if t is None else float(max(t["counts"]) if what == "peak" else t["counts"][-1])
    return read


@dataclass(frozen=True)
class Quantity:
    key: str
    label: str  # what the axis and the table say
    read: object  # measures -> float | None
    paper: float | None  # the paper's number at p = 113 (None: the paper prints none)
    source: str


QUANTITIES = (
    Quantity("generalised", "share of tasks generalised", lambda m: float(np.mean([s is not None for s in
             m["grok_step"]])), 1.0, "§Results, Fig. 5: 'perfect accuracy … across all 29 tasks'"),
    Quantity("small_last", "last of q = 2, 3, 5, 7 to grok (share of the run)", _small_last, None,
             "§Results: 'generalized in succession' (no step printed)"),
    Quantity("remaining", "median grok step of q > 7 (share of the run)", _remaining_median, 40_000 / PAPER_STEPS,
             "§Results: 'the remaining 25 tasks generalized around epoch 40000' of 65,536"),
    Quantity("pos_r", "Pearson r of the two positional embeddings", lambda m: m["pos_r"], -0.64,
             "§Embeddings, Fig. 7: r = −0.64"),
    Quantity("fft", "active frequencies of W_E (above mean + 2 std)", lambda m: float(m["fft"]["above_mean_2std"]),
             None, "Figs. 11–12: 'a broader spectrum' (no count printed)"),
    Quantity("svd50", "singular-value tick at 50 % of Σσ (original)", lambda m: float(m["svd"]["tick_s_50"]), 35.0,
             "Fig. 8's ticks: miiii 35 / 73"),
    Quantity("svd90", "singular-value tick at 90 % of Σσ (original)", lambda m: float(m["svd"]["tick_s_90"]), 73.0,
             "Fig. 8's ticks: miiii 35 / 73"),
    Quantity("t3_peak", f"Table 3 peak |ω| ({TABLE3[0].split(':')[0]})", _table3(TABLE3[0], "peak"), 18.0,
             "Table 3: 0, 0, 10, 18, 10"),
    Quantity("t3_final", f"Table 3 final |ω| ({TABLE3[0].split(':')[0]})", _table3(TABLE3[0], "final"), 10.0,
             "Table 3: 0, 0, 10, 18, 10"),
    Quantity("t3o_peak", f"Table 3 peak |ω| ({TABLE3[1]})", _table3(TABLE3[1], "peak"), 18.0,
             "Table 3: 0, 0, 10, 18, 10"),
)


# ---------------------------------------------------------------- the rungs, from the summaries alone


def rung_seeds(ms: list[dict]) -> tuple[list[dict], bool]:
    """The seeds a rung's numbers are over: those that generalised every task, or all (partly trained) if none."""
    done = [m for m in ms if generalised(m)]
    return (done, True) if done else (ms, False)


def rung_stats(ms: list[dict], q: Quantity) -> tuple[float, float, int] | None:
    used, _ = rung_seeds(ms)
    vals = [v for m in used if (v := q.read(m)) is not None]
    return (float(np.mean(vals)), float(np.std(vals)), len(vals)) if vals else None


def trend(points: list[tuple[int, float]], paper: float | None) -> str:
    """toward: the distance to the paper's number shrinks at every step up the ladder; away: it grows at every step;
    mixed otherwise; with no paper number, the sign of the change at every step (rises, falls, mixed)."""
    if len(points) < 2:
        return "–"
    vals = [v for _, v in points]
    if paper is None:
        d = np.diff(vals)
        return "rises" if np.all(d > 0) else "falls" if np.all(d < 0) else "mixed"
    dist = np.diff([abs(v - paper) for v in vals])
    return "toward" if np.all(dist < 0) else "away" if np.all(dist > 0) else "mixed"


def _cell(st) -> str:
    return "–" if st is None else f"{st[0]:.3g} ± {round(st[1], 6):.2g}"  # a spread of 1e-17 is rounding: 0


def ladder_md(rungs: dict[int, list[dict]]) -> str:
    ps = sorted(rungs)
    lines = ["# The scale ladder: the paper's numbers against p", "",
             "Generated by `python -m experiments.paper.ladder --bundle DIR` from `summaries/pP-K.json` (each seed's "
             "measures); do not edit.", "",
             f"One recipe at every rung: the preset `{PRESET}` (the paper's recipe at d 96, 70 % train, grokfast "
             "λ 2, dropout 0.1, 25k full-batch steps) with only p changed. A rung's numbers are the mean ± std over "
             f"the seeds whose run generalised every task (validation accuracy ≥ {GROK_THRESHOLD}); where none did, "
             "over all its seeds, marked *partly trained*. The last column is the paper's number at p = "
             f"{PAPER_P} (the paper's runs, 65,536 steps at d 256); the trend columns apply `trend`'s rule "
             f"(*{' '.join(trend.__doc__.split())}*) once over the rungs where some seed generalised every task "
             "(fewer than two such rungs: –) and once over every rung, partly trained ones included (a run that "
             "stopped learning says little of the trained model). It describes this ladder only; nothing here is "
             f"measured at p = {PAPER_P}." + "".join(
                 f" At p = {p} the validation set is the {valid_size(p)} samples the training set leaves (p² is too "
                 "small for the preset's)." for p in ps if valid_size(p) != valid_size(PAPER_P)), "",
             "| | " + " | ".join(f"p = {p}" for p in ps) + " | trend over the rungs that learned | trend over every "
             f"rung (partly trained included) | paper (p = {PAPER_P}) | the paper's words |",
             "| --- |" + " --- |" * (len(ps) + 4)]
    tasks = [len(rungs[p][0]["task_names"]) for p in ps]
    gen = [f"{sum(generalised(m) for m in rungs[p])} of {len(rungs[p])}" for p in ps]
    lines.append("| tasks (primes below p) | " + " | ".join(map(str, tasks)) + " | | | 29 | |")
    lines.append("| seeds that generalised every task | " + " | ".join(gen) + " | | | | |")
    for q in QUANTITIES:
        st = {p: rung_stats(rungs[p], q) for p in ps}
        pts = [(p, s[0]) for p, s in st.items() if s is not None]
        learned = [(p, v) for p, v in pts if rung_seeds(rungs[p])[1]]
        marks = ["" if rung_seeds(rungs[p])[1] else " *partly trained*" for p in ps]
        lines.append(f"| {q.label} | " + " | ".join(_cell(st[p]) + mk for p, mk in zip(ps, marks, strict=True))
                     + f" | {trend(learned, q.paper)} | {trend(pts, q.paper)} | "
                     f"{'–' if q.paper is None else f'{q.paper:.3g}'} | {q.source} |")
    lines += ["", "Per seed: tasks grokked, and the steps at which q = 2, 3, 5, 7 grokked.", "",
              "| p | seed | tasks grokked | q = 2, 3, 5, 7 grok steps | in succession |",
              "| --- | --- | --- | --- | --- |"]
    for p in ps:
        for m in rungs[p]:
            g = _grok(m)
            small = [g.get(q) for q in SMALL]
            succ = None not in small and all(a < b for a, b in zip(small, small[1:], strict=False))
            lines.append(f"| {p} | {m['run']['seed']} | {sum(s is not None for s in g.values())} of {len(g)} | "
                         + ", ".join("–" if s is None else str(s) for s in small) + f" | {'yes' if succ else 'no'} |")
    lines += ["", "![the paper's numbers against p](ladder.png)", ""]
    return "\n".join(lines)


def figure(rungs: dict[int, list[dict]], out: Path) -> Path:
    from miiii.plotstyle import OKABE_ITO, plt, save_figure

    ps = sorted(rungs)
    qs = [q for q in QUANTITIES if q.key not in ("small_last", "t3o_peak")]
    fig, axes = plt.subplots(2, 4, figsize=(13, 6), layout="constrained")
    for ax, q in zip(axes.flat, qs, strict=False):
        for p in ps:  # every seed, faint; the rung's mean ± std over the seeds it counts, bold
            vals = [v for m in rungs[p] if (v := q.read(m)) is not None]
            ax.scatter([p] * len(vals), vals, s=10, color="0.6", zorder=1)
        st = [(p, s) for p in ps if (s := rung_stats(rungs[p], q)) is not None]
        if st:
            ax.errorbar([p for p, _ in st], [s[0] for _, s in st], yerr=[s[1] for _, s in st], color=OKABE_ITO[0],
                        marker="o", capsize=3, zorder=2, label="this ladder (seeds that learned every task)")
            part = [(p, s) for p, s in st if not rung_seeds(rungs[p])[1]]
            ax.scatter([p for p, _ in part], [s[0] for _, s in part], s=40, facecolor="white", edgecolor=OKABE_ITO[0],
                       zorder=3, label="partly trained (no seed learned every task)" if part else None)
        if q.paper is not None:
            ax.scatter([PAPER_P], [q.paper], marker="*", s=140, color=OKABE_ITO[3], zorder=3, label="the paper")
        ax.set(title=q.label, xlabel="p", xticks=[*ps, PAPER_P])
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(qs):]:
        ax.axis("off")
    axes.flat[0].legend(frameon=False, fontsize=8)
    fig.suptitle(f"The scale ladder ({PRESET} at each p; grey: every seed; the star: the paper at p = {PAPER_P}, "
                 "not measured here)", fontsize=10)
    return save_figure(fig, out, "ladder")[0]


def read_bundle(bundle: Path) -> dict[int, list[dict]]:
    rungs: dict[int, list[dict]] = {}
    for f in sorted((bundle / "summaries").glob("p*-*.json")):
        m = json.loads(f.read_text())
        rungs.setdefault(m["run"]["p"], []).append(m)
    if not rungs:
        raise ConfigError(f"{bundle / 'summaries'} holds no pP-K.json: nothing to draw")
    return {p: sorted(ms, key=lambda m: m["run"]["seed"]) for p, ms in rungs.items()}


def write_bundle(bundle: Path, check: bool = False) -> int:
    rungs = read_bundle(bundle)
    text = ladder_md(rungs)
    if check:
        return same_or_say(bundle / "ladder.md", text, f"python -m experiments.paper.ladder --bundle {bundle}")
    write_text_atomic(bundle / "ladder.md", text)
    figure(rungs, bundle)
    print(f"wrote {bundle / 'ladder.md'} and ladder.png")
    return 0


# ---------------------------------------------------------------- training and measuring


def _rung_arg(text: str) -> tuple[int, Path]:
    p, _, path = text.partition("=")
    if not p.isdigit() or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected P=DIR, e.g. 71=runs/miiii-cpu-search/G-miiii-cpu")
    return int(p), Path(path)


def measure(p: int, sweep_dir: Path) -> list[dict]:
    """run_measures of every member of a rung's sweep (a member not at its last step is refused: a rung is read
    trained to the end)."""
    from experiments.paper.measures import run_measures
    from miiii.run import load_run

    members = sorted(sweep_dir.glob("member_*"))
    if not members:
        raise ConfigError(f"{sweep_dir} holds no member_*: train rung p = {p} first (python -m miiii "
                          f"{' '.join(command(p, sweep_dir))})")
    out = []
    for d in members:
        run = load_run(d)
        if run.config.task.p != p:
            raise ConfigError(f"{d} is a p = {run.config.task.p} run, not p = {p}")
        if "final" not in run.summary:
            raise ConfigError(f"{d} stopped before its last step: continue it with python -m miiii sweep --resume "
                              f"{sweep_dir}")
        out.append(run_measures(run))
    return out


def main(argv=None) -> int:
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--runs", type=Path, default=Path("runs/ladder"),
                    help="where the rungs train (runs/ladder/pP; p = 71 is read from the miiii-cpu search's "
                         f"{SHARED[71]}, the same preset over 5 seeds)")
    ap.add_argument("--rung", type=_rung_arg, action="append", default=[], metavar="P=DIR",
                    help="read rung P from this sweep directory instead of runs/ladder/pP (repeatable)")
    ap.add_argument("--p", type=int, nargs="+", default=list(RUNGS), help=f"the rungs (default {RUNGS})")
    ap.add_argument("--seeds", type=int, default=SEEDS, help="seeds a rung trains with (default %(default)s)")
    ap.add_argument("--no-train", action="store_true", help="measure the rungs as they are")
    ap.add_argument("--out", type=Path, default=Path("runs/ladder-bundle"),
                    help="the bundle (default runs/ladder-bundle, scratch; --out results/paper-cpu/ladder rewrites "
                         "the committed one)")
    ap.add_argument("--bundle", type=Path, default=None, help="regenerate BUNDLE's ladder.md and ladder.png from "
                                                              "its summaries alone")
    ap.add_argument("--check", action="store_true", help="with --bundle: exit 1 when ladder.md differs")
    return one_line_errors(run, ap.parse_args(argv))


def run(args) -> int:
    if args.bundle is not None:
        return write_bundle(args.bundle, args.check)
    if not 1 <= args.seeds <= 256:
        raise ConfigError(f"--seeds {args.seeds}: expected 1 to 256")
    dirs = {p: SHARED.get(p, args.runs / f"p{p}") for p in args.p} | dict(args.rung)
    out_folder(args.out)
    if not args.no_train:
        from miiii.cli import main as miiii

        for p, d in sorted(dirs.items()):
            if not d.exists() and miiii(command(p, d, args.seeds)) != 0:
                return 1
    measured = {p: measure(p, d) for p, d in sorted(dirs.items())}
    (args.out / "summaries").mkdir(parents=True, exist_ok=True)
    for p, ms in measured.items():
        for m in ms:
            write_json_atomic(args.out / "summaries" / f"p{p}-{m['run']['seed']}.json", m)
    return write_bundle(args.out)


if __name__ == "__main__":
    sys.exit(main())
