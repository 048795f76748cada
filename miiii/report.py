"""results.md: the paper's claims judged as written (claims.py), each with its rule, the numbers over seeds, and the
sections beside the table (Table 3 and the singular values by both definitions, the frequencies each task needs, the
runs). Generated, not typed.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.claims import as_seeds, claims, fmt, rule_spike
from miiii.measures import FRACTIONS, NEURONS, active_counts, recorded_neurons, svd_marks
from miiii.provenance import cell, provenance_table
from miiii.run import Run


def _numbers(row: dict) -> str:
    if row["seeds"] < 2:
        return "–"
    return "; ".join(f"{k} {m:.4g} ± {s:.2g}" + (f" (n = {n})" if n != row["seeds"] else "")
                     for k, (m, s, n) in row["numbers"].items()) or "–"


def table3_section(runs: dict[str, list[Run]]) -> list[str]:
    run = runs.get("miiii", [None])[0]
    if run is None or recorded_neurons(run) is None:
        return []
    counts = active_counts(run)
    lines = ["## Table 3 by both definitions (the recorded miiii run, seed "
             f"{run.config.train.seed})", "",
             "The paper's |ω| = 0, 0, 10, 18, 10 at epochs 256, 1,024, 4,096, 16,384, 65,536 of 65,536 were typed "
             "into its source; the original code (`omega_aux`/`finding_fn`) counts as the rows marked *original*. "
             "Each row is read at the recorded step nearest to the same fractions of this run.", "",
             "| definition | " + " | ".join(f"{Fraction(f).limit_denominator()} of the run" for f in FRACTIONS)
             + " | spike? |",
             "| --- |" + " --- |" * (len(FRACTIONS) + 1)]
    for name, (steps, c) in counts.items():
        lines.append(f"| {name} | " + " | ".join(f"{n} (step {s})" for s, n in zip(steps, c, strict=True))
                     + f" | {'yes' if rule_spike(c) else 'no'} |")
    return lines + [""]


def svd_section(runs: dict[str, list[Run]]) -> list[str]:
    if "nanda" not in runs or "miiii" not in runs:
        return []
    lines = ["## Singular values of W_E by both definitions (mean ± std over seeds)", "",
             "*tick*: the original code's mark, the last 0-based index whose cumulative share of Σσ is below the "
             "threshold (= count − 2); the paper's 5 / 49 and 35 / 73 are ticks. *count*: how many values reach the "
             "share, of Σσ or of Σσ² (explained variance).", "",
             "| run | paper (tick) | tick Σσ 50 % / 90 % | count Σσ | count Σσ² |", "| --- | --- | --- | --- | --- |"]
    for role, paper in (("nanda", "5 / 49"), ("miiii", "35 / 73")):
        marks = [svd_marks(r) for r in runs[role]]

        def ms(k, marks=marks):
            v = [m[k] for m in marks]
            return f"{np.mean(v):.1f}" + (f" ± {np.std(v):.1f}" if len(v) > 1 else "")

        lines.append(f"| {role} ({len(marks)} seeds) | {paper} | {ms('tick_s_50')} / {ms('tick_s_90')} | "
                     f"{ms('count_s_50')} / {ms('count_s_90')} | {ms('count_s2_50')} / {ms('count_s2_90')} |")
    return lines + [""]


NEEDS = 0.1  # nats: a task "needs" frequency k when removing it raises the task's loss by more than this


def needed_frequencies(ablation: dict, slot: int, min_rise: float = NEEDS) -> list[tuple[int, float]]:
    """(k, loss rise) of the frequencies whose removal raises task `slot`'s loss by more than `min_rise`, most
    harmful first."""
    rise = ablation["loss"][:, slot] - ablation["base"][slot]
    order = np.argsort(-rise)
    return [(int(ablation["k"][i]), float(rise[i])) for i in order if rise[i] > min_rise]


def frequency_section(runs: dict[str, list[Run]]) -> list[str]:
    """Which frequencies each task needs: a frequency-ablation study of the recorded nanda and miiii runs."""
    from miiii.interventions import frequency_ablation

    roles = [r for r in ("nanda", "miiii") if r in runs]
    if not roles:
        return []
    lines = ["## Which frequencies each task needs (frequency ablation; not in the paper)", "",
             "The recorded run's final model on all p² inputs, with frequency k of either digit (every 2-D Fourier "
             "component with ±k in x0 or x1) removed from the MLP neurons (`miiii.interventions`: "
             "`remove_grid_frequencies` through `run_with_hooks`), for k = 1 … p // 2. *Needs*: the frequencies "
             f"whose removal raises that task's loss over the grid by more than {NEEDS} nats, most harmful first "
             "(rise in nats). Figure `fig_freq_ablation_*`.", "",
             "| run | task | grokked at | loss over the grid | needs k (rise) |", "| --- | --- | --- | --- | --- |"]
    for role in roles:
        run = runs[role][0]
        ab = frequency_ablation(run)
        grok = run.summary.get("grok_step", {})
        for slot, name in enumerate(ab["tasks"]):
            need = needed_frequencies(ab, slot)
            shown = ", ".join(f"{k} ({r:.2f})" for k, r in need[:6]) + (f", … {len(need)} in all" if len(need) > 6
                                                                          else "")
            lines.append(f"| {role} | {name} | {fmt(grok.get(name))} | {ab['base'][slot]:.3f} | {shown or '–'} |")
        if role == "nanda":
            grid = A.to_grid(run.cache((NEURONS,))[NEURONS][:, -1], run.config.task.p)
            _, key = A.neuron_key_freqs(A.neuron_freq_fractions(grid))
            lines.append(f"| nanda | (cross-check) | | | the neurons' key frequencies (Nanda et al.'s clusters, "
                         f"≥ 85 % of a neuron's variance): {', '.join(map(str, key)) or '–'} |")
    return lines + [""]


def results_markdown(runs: dict, title: str, notes: str = "", provenance: dict | None = None) -> str:
    runs = as_seeds(runs)
    rows = claims(runs)
    lines = [f"# {title}", "", "Generated by `experiments/paper.py` from the run directories below; do not edit.", ""]
    if provenance:
        lines += provenance_table(provenance)
    if notes:
        lines += [notes, ""]
    lines += ["A verdict tests the sentence as the paper writes it, with the rule beside it, in every seed: *holds* "
              "only if it holds in each; one seed against it makes it *does not hold*; *not testable* says why. "
              "'measured' is the first (recorded) seed; the numbers after it are mean ± std over seeds.", "",
              "| # | claim, as written | source | paper | rule | measured (first seed) | over seeds | holds in | "
              "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, r in enumerate(rows, 1):
        verdict = f"**{r['verdict']}**" + (f" ({r['why']})" if r["verdict"] == "not testable" and r["why"] else "")
        lines.append(f"| {i} | “{cell(r['claim'])}” | {cell(r['source'])} | {cell(r['paper'])} | "
                     f"{cell(r['rule'])} | {cell(r['measured'])} | {cell(_numbers(r))} | "
                     f"{r['holds_in']}/{r['seeds']} | {verdict} |")
    lines += [""] + table3_section(runs) + svd_section(runs) + frequency_section(runs)
    lines += ["## Runs", "", "| role | seeds | run directories | task | p | d_model | λ | steps | init, EMA start, "
              "first token | precision | wall s (first) | grokked per seed |", "|" + " --- |" * 12]
    for role, rs in runs.items():
        c, s = rs[0].config, rs[0].summary
        lam = c.optim.lamb if c.optim.grokfast != "none" else 0
        grokked = ", ".join(f"{sum(v is not None for v in r.summary.get('grok_step', {}).values())}/"
                            f"{len(r.summary.get('grok_step', {}))}" for r in rs)
        dirs = f"`{rs[0].path}`" + (f" + `{rs[1].path.parent}`" if len(rs) > 1 else "")
        lines.append(f"| {role} | {', '.join(str(r.config.train.seed) for r in rs)} | {dirs} | {c.task.name} "
                     f"{c.task.variant} | {c.task.p} | {c.model.d_model} | {lam} | {c.train.steps} | {c.model.init}, "
                     f"{c.optim.ema_init}, {'x1 (high)' if c.task.digit_order == 'high' else 'x0 (low)'} | "
                     f"{s.get('precision', c.train.precision)} | {s.get('wall_s', '–')} | {grokked} |")
    return "\n".join(lines) + "\n"


def write_results(runs: dict, path: str | Path, title: str = "miiii: the paper's claims, judged as written",
                  notes: str = "", provenance: dict | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_markdown(runs, title, notes, provenance))
    return path
