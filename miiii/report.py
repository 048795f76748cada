"""The paper's claims, each beside the value measured on run directories: `results.md` is generated, not typed.

`claims(runs)` takes runs keyed by role (nanda, miiii, masked, basis, nogrokfast; any may be missing)
and returns one row per claim: what the paper says, what was measured, and whether the claim's
qualitative content holds (the CPU-scale pipeline cannot match the paper's numbers, only their sign
and order).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.rundir import Run

SMALL = (2, 3, 5, 7)


def _q(name: str) -> int:
    return int(str(name).split("=")[1])


def grok_table(run: Run) -> dict[int, int | None]:
    """{q: first step with valid accuracy >= 0.99 or None} for a miiii run."""
    m = run.metrics
    steps = A.grok_steps(m["step"], m["valid_acc"])
    return {_q(n): s for n, s in zip(m["task_names"], steps, strict=True)}


def above_chance(acc, qs) -> np.ndarray:
    """Accuracy rescaled so chance (1/q) is 0 and perfect is 1: comparable across tasks with different q."""
    chance = 1 / np.asarray(qs, dtype=float)
    return (np.asarray(acc) - chance) / (1 - chance)


def final_valid_acc(run: Run) -> np.ndarray:
    return np.asarray(run.summary["final"]["valid"]["task_acc"])


def spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return A.pearson(ra, rb) if len(a) > 1 else float("nan")


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def svd_counts(run: Run) -> tuple[int, int, int, int]:
    """(50 %, 90 %) counts of W_E[:p]'s singular values by sum sigma^2, then by sum sigma (the original code)."""
    p = run.config.task.p
    _, S, _ = A.embedding_svd(run.params["W_E"][:p])
    return (A.variance_count(S, 0.5), A.variance_count(S, 0.9),
            A.variance_count(S, 0.5, power=1), A.variance_count(S, 0.9, power=1))


def n_active_embed(run: Run) -> int:
    p = run.config.task.p
    return int(A.active_frequencies(A.freq_norms(run.params["W_E"][:p])).sum())


def freq_count(run: Run, frac: float) -> int:
    """How many non-constant frequencies of W_E[:p] hold `frac` of its Fourier energy (sum of squared norms)."""
    p = run.config.task.p
    norms = np.sort(A.freq_norms(run.params["W_E"][:p])[1:])[::-1]
    return A.variance_count(norms, frac, power=2)


def attention_to_x0(run: Run) -> np.ndarray:
    """(n_heads,) mean attention from the output position to x0 over the whole grid (final parameters)."""
    from miiii.plots import grid_acts

    return grid_acts(run)["blocks.0.attn.hook_pattern"][:, :, -1, 0].mean(0)


def label_of(run: Run) -> str:
    return run.path.name


def recorded_neurons(run: Run):
    from miiii.plots import NEURONS, recorded_grid

    return recorded_grid(run, NEURONS)


def active_over_training(run: Run, fractions=(1 / 256, 1 / 64, 1 / 16, 1 / 4, 1.0)) -> tuple[list, list]:
    """Active-frequency counts of the recorded MLP neurons at the recorded steps nearest to fractions of the run."""
    from miiii.plots import NEURONS, steps_of

    neurons, steps = recorded_neurons(run), steps_of(run, NEURONS)
    p, out_steps, counts = run.config.task.p, [], []
    for f in fractions:
        i = int(np.abs(steps - f * (run.config.train.steps - 1)).argmin())
        a = np.asarray(neurons[i], dtype=np.float64)
        a = a[:, -1] if a.ndim == 3 else a  # (p*p, N)
        counts.append(int(A.active_frequencies(A.frequency_dominance(A.to_grid(a, p))).sum()))
        out_steps.append(int(steps[i]))
    return out_steps, counts


def embed_gini(run: Run) -> float:
    p = run.config.task.p
    return float(A.gini(A.freq_norms(run.params["W_E"][:p])[1:]))


def claims(runs: dict[str, Run]) -> list[dict]:
    """One dict per claim: claim, paper, measured, holds (True/False/None when the runs needed are missing)."""
    rows = []

    def add(claim, paper, measured, holds):
        rows.append(dict(claim=claim, paper=paper, measured=measured, holds=holds))

    nanda, miiii, masked, basis, nogf, nodrop = (
        runs.get(k) for k in ("nanda", "miiii", "masked", "basis", "nogrokfast", "nodropout"))
    if nanda is not None:
        r = A.pearson(*nanda.params["W_pos"][:2])
        add("nanda: positional embeddings of x0 and x1 correlate positively (commutative task)", "r = 0.95",
            f"r = {r:.2f}", r > 0)
    if miiii is not None:
        r = A.pearson(*miiii.params["W_pos"][:2])
        extra = f" (basis, random labels, also non-commutative: r = {A.pearson(*basis.params['W_pos'][:2]):.2f})" \
            if basis is not None else ""
        add("miiii: positional embeddings of x0 and x1 correlate negatively (non-commutative)", "r = -0.64",
            f"r = {r:.2f}{extra}", r < 0)
        g = grok_table(miiii)
        small = [g.get(q) for q in SMALL if q in g]
        done = [s for s in small if s is not None]
        add("miiii: tasks q = 2, 3, 5, 7 grok in that order", "2, 3, 5, 7 in succession",
            ", ".join(f"q={q}@{_fmt(g.get(q))}" for q in SMALL if q in g),
            len(done) == len(small) and done == sorted(done))
        rest = {q: s for q, s in g.items() if q not in SMALL}
        rest_done = [s for s in rest.values() if s is not None]
        last_small = max(done) if done else None
        measured = f"{len(rest_done)}/{len(rest)} grok" + (
            f", steps {min(rest_done)}–{max(rest_done)} (median {int(np.median(rest_done))}) of "
            f"{miiii.config.train.steps}" if rest_done else f" within {miiii.config.train.steps} steps")
        add("miiii: the other tasks grok later, together (paper: the 25 others around epoch 40,000 of 65,536)",
            "25/25 after q = 7", measured,
            bool(rest) and len(rest_done) == len(rest) and (last_small is None or min(rest_done) >= last_small))
        qs = [q for q, s in g.items() if s is not None]
        rho = spearman(qs, [g[q] for q in qs]) if len(qs) > 1 else float("nan")
        acc = final_valid_acc(miiii)
        above = above_chance(acc, list(g))
        rho_acc = spearman(list(g), above)
        add("miiii: small primes generalise first: Spearman ρ of q and grok step (grokked tasks) > 0, and of q and "
            "final validation accuracy above chance, (acc - 1/q) / (1 - 1/q), < 0",
            "2, 3, 5, 7 first", f"{len(qs)}/{len(g)} tasks grok, ρ(q, step) = {rho:.2f}; ρ(q, accuracy) = "
            f"{rho_acc:.2f}; above chance by q: " + ", ".join(f"{q}: {a:.2f}" for q, a in zip(g, above, strict=True)),
            bool((len(qs) < 2 or rho > 0) and rho_acc < 0 and len(qs) > 0))
        add("miiii: every task reaches validation accuracy 1", "29/29 tasks, accuracy 1.0",
            f"{int((acc >= A.GROK_THRESHOLD).sum())}/{len(acc)} tasks ≥ 0.99; mean {acc.mean():.2f}",
            bool((acc >= A.GROK_THRESHOLD).all()))
    if nanda is not None and miiii is not None:
        n50, n90, n50s, n90s = svd_counts(nanda)
        m50, m90, m50s, m90s = svd_counts(miiii)
        add("singular values of W_E: miiii's spectrum is more diffuse than nanda's (components for 50 % / 90 %)",
            "Σσ: nanda 5 / 49, miiii 35 / 73",
            f"Σσ²: nanda {n50} / {n90}, miiii {m50} / {m90}; Σσ: nanda {n50s} / {n90s}, miiii {m50s} / {m90s}",
            m50 > n50 and m90 >= n90)
        na, ma = n_active_embed(nanda), n_active_embed(miiii)
        nf, mf = freq_count(nanda, 0.9), freq_count(miiii, 0.9)
        add("FFT of W_E: few frequencies for nanda, a broader spectrum for miiii (Figs. 11-12); judged by the "
            "frequencies holding 90 % of the Fourier energy (a flat spectrum has no outlier above mean + 2 std)",
            "few vs many",
            f"90 % energy: nanda {nf}, miiii {mf} (of {nanda.config.task.p // 2}, {miiii.config.task.p // 2}); "
            f"active (mean + 2 std): nanda {na}, miiii {ma}; Gini: nanda {embed_gini(nanda):.2f}, "
            f"miiii {embed_gini(miiii):.2f}", mf > nf)
    if nanda is not None and miiii is not None:
        a_n, a_m = attention_to_x0(nanda), attention_to_x0(miiii)
        dev = lambda a: float(np.abs(a - 0.5).max())  # noqa: E731
        add("attention from the output position: miiii's heads each lean to one digit, nanda's split evenly "
            "(Fig. 18; mean attention a to x0 per head, and the largest abs(a - 0.5))", "miiii one digit per head",
            f"nanda {', '.join(f'{v:.2f}' for v in a_n)} ({dev(a_n):.2f}); "
            f"miiii {', '.join(f'{v:.2f}' for v in a_m)} ({dev(a_m):.2f})", dev(a_m) > dev(a_n))
    if basis is not None:
        acc = final_valid_acc(basis)
        chance = np.mean([1 / _q(n) for n in basis.metrics["task_names"]])
        gb = embed_gini(basis)
        ref = f"; miiii {embed_gini(miiii):.2f}" if miiii is not None else ""
        add("basis (shuffled labels): no structure is learned", "no periodicity (Fig. 13)",
            f"mean valid accuracy {acc.mean():.3f} (chance {chance:.3f}); Gini of W_E Fourier norms {gb:.2f}{ref}",
            bool(acc.mean() < chance + 0.05 and (miiii is None or gb < embed_gini(miiii))))
    if nogf is not None:
        acc, g = final_valid_acc(nogf), grok_table(nogf)
        n0 = sum(s is not None for s in g.values())
        measured = f"λ = 0: {n0}/{len(g)} grok, mean final valid accuracy {acc.mean():.3f}"
        holds = None
        if miiii is not None:
            ref, gr = final_valid_acc(miiii), grok_table(miiii)
            n1 = sum(s is not None for s in gr.values())
            measured += f"; λ = {miiii.config.optim.lamb:g}: {n1}/{len(gr)} grok, {ref.mean():.3f}"
            holds = bool(n0 < n1 or (n0 == n1 and acc.mean() < ref.mean() - 0.02))
        add("miiii without grokfast (λ = 0) does not converge in the same budget (fewer tasks grok, or lower "
            "accuracy by > 0.02)", "does not converge", measured, holds)
    rec = next((r for r in (miiii, nanda) if r is not None and recorded_neurons(r) is not None), None)
    if rec is not None:
        steps, counts = active_over_training(rec)
        add(f"{label_of(rec)}: active MLP frequencies (mean + 2 std) over training spike while the last tasks are "
            "learned, then fall (Table 3; here at the same fractions of the run: 1/256, 1/64, 1/16, 1/4, 1)",
            "n_ω = 0, 0, 10, 18, 10",
            "n_ω = " + ", ".join(f"{c} (step {s})" for s, c in zip(steps, counts, strict=True)),
            bool(max(counts) > counts[-1] and max(counts) > counts[0]))
    if masked is not None:
        g = grok_table(masked)
        order = A.grok_order([f"q={q}" for q in g], list(g.values()))
        add("masked (q = 2, 3, 5, 7 out of the loss): 11, 13, 17, 19 grok first", "11, 13, 17, 19 first",
            "order: " + (", ".join(order[:8]) or "none grok"),
            bool(order) and set(order[:4]) <= {"q=11", "q=13", "q=17", "q=19"})
    if nodrop is not None:  # the appendix shows this run's curves; the paper states no number for it
        acc, g = final_valid_acc(nodrop), grok_table(nodrop)
        measured = (f"dropout 0: {sum(s is not None for s in g.values())}/{len(g)} grok, mean final valid accuracy "
                    f"{acc.mean():.3f}")
        if miiii is not None:
            gr = grok_table(miiii)
            measured += (f"; dropout {miiii.config.model.dropout:g}: {sum(s is not None for s in gr.values())}/"
                         f"{len(gr)} grok, {final_valid_acc(miiii).mean():.3f}")
        add("appendix: miiii without dropout (accuracy curves: fig05_accuracy_nodropout)", "shown, no number",
            measured, None)
    return rows


def results_markdown(runs: dict[str, Run], title: str, notes: str = "") -> str:
    rows = claims(runs)
    lines = [f"# {title}", "", "Generated by `experiments/paper.py` from the run directories below; do not edit.", ""]
    if notes:
        lines += [notes, ""]
    lines += ["| claim | paper | measured | holds |", "| --- | --- | --- | --- |"]
    mark = {True: "yes", False: "**no**", None: "–"}
    cell = lambda v: str(v).replace("|", "/")  # noqa: E731  (a '|' would split the markdown cell)
    for r in rows:
        lines.append(f"| {cell(r['claim'])} | {cell(r['paper'])} | {cell(r['measured'])} | {mark[r['holds']]} |")
    lines += ["", "## Runs", "", "| role | run directory | task | p | d_model | λ | steps | wall s | grokked |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for role, run in runs.items():
        c, s = run.config, run.summary
        g = s.get("grok_step", {})
        lam = c.optim.lamb if c.optim.grokfast != "none" else 0
        lines.append(f"| {role} | `{run.path}` | {c.task.name} {c.task.variant} | {c.task.p} | {c.model.d_model} | "
                     f"{lam} | {c.train.steps} | {s.get('wall_s', '–')} | "
                     f"{sum(v is not None for v in g.values())}/{len(g)} |")
    return "\n".join(lines) + "\n"


def write_results(runs: dict[str, Run], path: str | Path, title: str = "miiii: the paper's claims, measured",
                  notes: str = "") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_markdown(runs, title, notes))
    return path
