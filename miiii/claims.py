"""The paper's claims judged as written, over seeds (results.md: report.py; what they read of a run: measures.py).

Each `Claim` quotes one sentence of the paper (or one figure's statement), says its rule in one sentence
and judges every seed's runs with a pure rule function (`rule_*`, tested on synthetic inputs both ways).
A verdict errs toward *does not hold*: a claim holds only when it holds in every seed; one seed against it
is enough for *does not hold*; *not testable* says why (a run missing, too few tasks grokked to test an
order, no recording). Where the paper's text and its original code (syrkis/miiii) define a number
differently, both are computed (Table 3's active frequencies, the singular-value marks): see docs/.

`claims(runs)` takes runs keyed by role (nanda, miiii, masked, basis, nogrokfast, nodropout; any may be
missing), each a list of `Run`s in seed order (or one `Run`); the first of a role is its recorded run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from miiii import analysis as A
from miiii.measures import (
    active_counts,
    attention_to_digits,
    by_q,
    embed_gini,
    final_acc,
    freq_count,
    grok_table,
    recorded_neurons,
    svd_marks,
    task_q,
)
from miiii.run import Run

SMALL = (2, 3, 5, 7)
MASKED_FIRST = (11, 13, 17, 19)
PAPER_STEPS = 65_536  # the paper's time axis (epochs = full-batch steps)
MIN_ORDER_TASKS = 8  # fewer grokked tasks than this cannot test "no particular order"
ALPHA = 0.05  # the permutation test's level
VERDICTS = ("holds", "does not hold", "not testable")


class Outcome(NamedTuple):
    """One seed's judgement: what was measured, its numbers (averaged over seeds), and the verdict."""

    measured: str
    numbers: dict
    holds: bool | None  # None: not testable in this seed
    why: str = ""  # why not testable


@dataclass(frozen=True)
class Claim:
    key: str
    text: str  # the paper's sentence (or the figure's statement), quoted
    source: str
    paper: str  # the paper's number, as printed
    rule: str  # the verdict rule in one sentence
    roles: tuple[str, ...]
    judge: Callable[[dict[str, Run]], Outcome]
    recorded: bool = False  # reads the recording: judged on each role's first (recorded) run only
    numbers_note: str = field(default="")


# ---------------------------------------------------------------- rules (pure; tests feed them synthetic tables)


def rule_in_succession(grok: dict, qs=SMALL) -> bool:
    """Every task of `qs` groks, at strictly increasing steps in the order given."""
    steps = [grok.get(q) for q in qs]
    return None not in steps and all(a < b for a, b in zip(steps, steps[1:], strict=False))


def rule_remaining_later_around(grok: dict, small=SMALL, target: float = 40_000) -> bool:
    """Every remaining task groks, each after the last of `small`, with the median within a factor 2 of target."""
    rest = [s for q, s in grok.items() if q not in small]
    first = [grok.get(q) for q in small if q in grok]
    if not rest or None in rest or None in first:
        return False
    return min(rest) > max(first, default=-1) and target / 2 <= float(np.median(rest)) <= 2 * target


def rule_no_particular_order(grok: dict, small=SMALL) -> tuple[bool | None, float, float, int]:
    """(holds, rho, p, n): the remaining tasks' grok steps show no monotone order in q, i.e. the two-sided
    permutation test of Spearman's rho(q, grok step) gives p >= ALPHA; None when fewer than MIN_ORDER_TASKS grok."""
    done = {q: s for q, s in grok.items() if q not in small and s is not None}
    if len(done) < MIN_ORDER_TASKS:
        return None, float("nan"), float("nan"), len(done)
    q, s = list(done), list(done.values())
    p = A.permutation_p(q, s)
    return bool(p >= ALPHA), A.spearman(q, s), p, len(done)


def rule_did_not_converge(grok: dict) -> bool:
    """At most half of the tasks grok (most stay ungrokked in the budget)."""
    return sum(s is not None for s in grok.values()) <= len(grok) / 2


def rule_grokfast_faster(with_gf: dict, without: dict) -> tuple[bool, float | None]:
    """(holds, median speed-up in steps): at least as many tasks grok with grokfast, and over the tasks that grok
    in both runs the median of (step without - step with) is positive."""
    both = [q for q in with_gf if with_gf[q] is not None and without.get(q) is not None]
    n_with, n_without = sum(s is not None for s in with_gf.values()), sum(s is not None for s in without.values())
    gain = float(np.median([without[q] - with_gf[q] for q in both])) if both else None
    return bool(n_with >= n_without and (gain is not None and gain > 0 or n_with > n_without)), gain


def rule_first_grok(grok: dict, expected=MASKED_FIRST) -> bool:
    """The first len(expected) tasks to grok are exactly `expected` (a tie across the boundary fails)."""
    done = sorted((s, q) for q, s in grok.items() if s is not None)
    k = len(expected)
    if len(done) < k or (len(done) > k and done[k][0] == done[k - 1][0]):
        return False
    return {q for _, q in done[:k]} == set(expected)


def rule_all_grok(grok: dict) -> bool:
    return len(grok) > 0 and all(s is not None for s in grok.values())


def rule_perfect(acc) -> bool:
    """Every task's final validation accuracy is exactly 1 (every validation sample right)."""
    return bool(len(acc) and (np.asarray(acc) >= 1.0).all())


def rule_overfits_all_but(train_acc: dict, valid_acc: dict, general=(2, 3)) -> bool:
    """Tasks in `general` generalise (valid >= 0.99); every other task overfits (train >= 0.99, valid < 0.99)."""
    t = A.GROK_THRESHOLD
    return all(valid_acc[q] >= t if q in general else train_acc[q] >= t and valid_acc[q] < t for q in valid_acc)


def rule_spike(counts) -> bool:
    """A transient spike: the largest count at one of the middle fractions exceeds the first and the last."""
    c = list(counts)
    return len(c) >= 3 and max(c[1:-1]) > c[0] and max(c[1:-1]) > c[-1]


def rule_more_diffuse(nanda: tuple, miiii: tuple) -> bool:
    """miiii needs more singular values than nanda for every threshold."""
    return all(m > n for n, m in zip(nanda, miiii, strict=True))


def rule_one_digit_per_head(to_x0, to_x1, share: float = 0.9) -> bool:
    """Every head puts at least `share` of its attention from the output position on one of the two digits."""
    return bool(np.all(np.maximum(to_x0, to_x1) >= share))


# ---------------------------------------------------------------- the claims


def fmt(v) -> str:
    return "–" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def _steps(grok: dict, qs) -> str:
    return ", ".join(f"{q}@{fmt(grok.get(q))}" for q in qs if q in grok)


def _positional(role: str, test) -> Callable:
    def judge(r):
        v = A.pearson(*r[role].params["W_pos"][:2])
        return Outcome(f"r = {v:.2f}", {"r": v}, bool(test(v)))
    return judge


def _perfect(r):
    acc = final_acc(r["miiii"])
    n1, n99 = int((acc >= 1.0).sum()), int((acc >= A.GROK_THRESHOLD).sum())
    return Outcome(f"{n1}/{len(acc)} tasks at 1.0, {n99}/{len(acc)} ≥ 0.99, lowest {acc.min():.3f}",
                   {"tasks at 1.0": n1, "lowest accuracy": float(acc.min())}, rule_perfect(acc))


def _succession(r):
    g = grok_table(r["miiii"])
    return Outcome(_steps(g, SMALL), {f"q={q} step": g.get(q) for q in SMALL}, rule_in_succession(g))


def _around(r):
    run = r["miiii"]
    g, target = grok_table(run), 40_000 * run.config.train.steps / PAPER_STEPS
    rest = [s for q, s in g.items() if q not in SMALL]
    done = [s for s in rest if s is not None]
    text = f"{len(done)}/{len(rest)} grok" + (f", steps {min(done)}–{max(done)}, median {np.median(done):.0f}"
                                             if done else "") + f" (target {target:.0f}); last small q at " + \
        fmt(max((g[q] for q in SMALL if g.get(q) is not None), default=None))
    nums = {"remaining grokked": len(done), "median step": float(np.median(done)) if done else None}
    return Outcome(text, nums, rule_remaining_later_around(g, target=target))


def _order(r):
    g = grok_table(r["miiii"])
    holds, rho, p, n = rule_no_particular_order(g)
    if holds is None:
        return Outcome(f"{n} of the remaining tasks grok", {"grokked": n}, None,
                       f"fewer than {MIN_ORDER_TASKS} of the remaining tasks grok: no order to test")
    return Outcome(f"ρ(q, grok step) = {rho:.2f}, permutation p = {p:.4f} over {n} tasks",
                   {"ρ": rho, "p": p}, holds)


def _nogf(r):
    g = grok_table(r["nogrokfast"])
    n = sum(s is not None for s in g.values())
    return Outcome(f"λ = 0: {n}/{len(g)} grok (last at {fmt(max((s for s in g.values() if s), default=None))})",
                   {"grokked with λ = 0": n}, rule_did_not_converge(g))


def _faster(r):
    with_gf, without = grok_table(r["miiii"]), grok_table(r["nogrokfast"])
    holds, gain = rule_grokfast_faster(with_gf, without)
    n1, n0 = (sum(s is not None for s in t.values()) for t in (with_gf, without))
    return Outcome(f"grokked: λ = {r['miiii'].config.optim.lamb:g} {n1}, λ = 0 {n0}; median steps saved "
                   f"{fmt(gain)}", {"median steps saved": gain}, holds)


def _diffuse(r):
    n, m = svd_marks(r["nanda"]), svd_marks(r["miiii"])
    show = lambda d, k: f"{d[k + '_50']} / {d[k + '_90']}"  # noqa: E731
    text = (f"ticks (original, Σσ): nanda {show(n, 'tick_s')}, miiii {show(m, 'tick_s')}; counts Σσ: nanda "
            f"{show(n, 'count_s')}, miiii {show(m, 'count_s')}; counts Σσ²: nanda {show(n, 'count_s2')}, miiii "
            f"{show(m, 'count_s2')}")
    nums = {f"{role} {k}": d[k] for role, d in (("nanda", n), ("miiii", m)) for k in ("tick_s_50", "tick_s_90")}
    return Outcome(text, nums, rule_more_diffuse((n["count_s_50"], n["count_s_90"]),
                                                 (m["count_s_50"], m["count_s_90"])))


def _fft(r):
    nf, mf = freq_count(r["nanda"]), freq_count(r["miiii"])
    return Outcome(f"frequencies holding 90 % of the energy: nanda {nf}, miiii {mf} (of "
                   f"{r['nanda'].config.task.p // 2}, {r['miiii'].config.task.p // 2}); Gini nanda "
                   f"{embed_gini(r['nanda']):.2f}, miiii {embed_gini(r['miiii']):.2f}",
                   {"nanda": nf, "miiii": mf}, mf > nf)


def _attention(r):
    a0, a1 = attention_to_digits(r["miiii"])
    text = "to x0 / x1 per head: " + ", ".join(f"{u:.2f}/{v:.2f}" for u, v in zip(a0, a1, strict=True))
    return Outcome(text, {"least one-digit share": float(np.maximum(a0, a1).min())}, rule_one_digit_per_head(a0, a1))


def _basis(r):
    run = r["basis"]
    acc = final_acc(run)
    chance = float(np.mean([1 / task_q(n) for n in run.metrics["task_names"]]))
    gb, gm = embed_gini(run), (embed_gini(r["miiii"]) if "miiii" in r else None)
    holds = bool(acc.mean() < chance + 0.05 and (gm is None or gb < gm))
    return Outcome(f"mean valid accuracy {acc.mean():.3f} (chance {chance:.3f}); Gini of W_E's Fourier norms {gb:.2f}"
                   + (f" (miiii {gm:.2f})" if gm is not None else ""), {"accuracy": float(acc.mean())}, holds)


def _spike(definition: str) -> Callable:
    def judge(r):
        run = r["miiii"]
        if recorded_neurons(run) is None:
            return Outcome("no recording of the MLP neurons over the grid", {}, None, "the run has no recording")
        steps, counts = active_counts(run)[definition]
        return Outcome("n_ω = " + ", ".join(f"{c} (step {s})" for s, c in zip(steps, counts, strict=True)),
                       {"peak": max(counts)}, rule_spike(counts))
    return judge


def _masked_first(r):
    g = grok_table(r["masked"])
    order = A.grok_order([f"{q}" for q in g], list(g.values()))
    return Outcome("first to grok: " + (", ".join(order[:6]) or "none"), {}, rule_first_grok(g))


def _masked_all(r):
    g = {q: s for q, s in grok_table(r["masked"]).items() if q not in SMALL}  # the masked four are not trained
    n = sum(s is not None for s in g.values())
    return Outcome(f"{n}/{len(g)} trained tasks grok", {"grokked": n}, rule_all_grok(g))


def _nodropout(r):
    run = r["nodropout"]
    tr, va = by_q(run, final_acc(run, "train")), by_q(run, final_acc(run))
    over = [q for q in va if tr[q] >= A.GROK_THRESHOLD and va[q] < A.GROK_THRESHOLD]
    general = [q for q in va if va[q] >= A.GROK_THRESHOLD]
    return Outcome(f"generalise: {', '.join(map(str, general)) or 'none'}; overfit: {len(over)}/{len(va)}",
                   {"overfit": len(over), "generalise": len(general)}, rule_overfits_all_but(tr, va))


SPIKE = "Table 3: the number of active frequencies |ω| over training, a transient spike while the last tasks are " \
        "learned"
CLAIMS = (
    Claim("pos-nanda", "For T_nanda […] the positional embeddings are virtually identical, with a Pearson correlation "
          "of 0.95", "§Embeddings, Fig. 7", "r = 0.95", "holds if r(W_pos[0], W_pos[1]) ≥ 0.9 (virtually identical)",
          ("nanda",), _positional("nanda", lambda r: r >= 0.9)),
    Claim("pos-miiii", "for T_miiii, the positional embeddings have a Pearson correlation of −0.64, indicating that "
          "the embeddings for the two positions are different", "§Embeddings, Fig. 7", "r = −0.64",
          "holds if r(W_pos[0], W_pos[1]) < 0", ("miiii",), _positional("miiii", lambda r: r < 0)),
    Claim("perfect", "The model achieves a perfect accuracy of 1 on the validation set across all 29 tasks",
          "§Model performance, Fig. 5", "29/29 at 1.0",
          "holds if every task's final validation accuracy is exactly 1 (all tasks of the run's p)", ("miiii",),
          _perfect),
    Claim("succession", "tasks corresponding to modulo 2, 3, 5, and 7 generalized in succession",
          "§Model performance", "2, 3, 5, 7", "holds if q = 2, 3, 5, 7 all grok (valid ≥ 0.99) at strictly "
          "increasing steps", ("miiii",), _succession),
    Claim("around-40k", "the remaining 25 tasks generalized around epoch 40,000", "§Model performance, Fig. 5",
          "≈ 40,000 of 65,536", "holds if every other task groks, each after the last of q = 2, 3, 5, 7, with the "
          "median grok step within a factor 2 of 40,000 × (run steps / 65,536)", ("miiii",), _around),
    Claim("no-order", "[the remaining 25 tasks generalized] in no particular order", "§Model performance, Fig. 5",
          "no order", f"holds if a two-sided permutation test (10,000 permutations) of Spearman ρ(q, grok step) over "
          f"the remaining grokked tasks gives p ≥ {ALPHA}; not testable below {MIN_ORDER_TASKS} grokked tasks",
          ("miiii",), _order),
    Claim("lambda-0", "the model did not converge when λ = 0", "§Hyper-parameter optimization", "does not converge",
          "holds if with λ = 0 (the same recipe and budget otherwise) at most half of the tasks grok",
          ("nogrokfast",), _nogf),
    Claim("grokfast-faster", "[grokfast confirms] the utility of the gradient amplification", "§Hyper-parameter "
          "optimization (a separate reading of the same sentence)", "–", "holds if at least as many tasks grok with "
          "λ > 0 as with λ = 0 and the median grok step of the tasks grokked in both is earlier with λ > 0",
          ("miiii", "nogrokfast"), _faster),
    Claim("svd", "The singular values for T_miiii are more diffuse, indicating that a larger number of components "
          "are needed", "§Embeddings, Fig. 8", "ticks nanda 5 / 49, miiii 35 / 73 (original, Σσ)",
          "holds if miiii needs more singular values of W_E than nanda to reach both 50 % and 90 % of Σσ (the "
          "original's normalisation)", ("nanda", "miiii"), _diffuse),
    Claim("fft", "Only a few frequencies are active for T_nanda […] For the T_miiii model, we observe a broader "
          "spectrum of active frequencies", "§Embeddings, Figs. 11–12", "few vs broader",
          "holds if more frequencies of W_E hold 90 % of its Fourier energy for miiii than for nanda",
          ("nanda", "miiii"), _fft),
    Claim("attention", "miiii's heads each attend to one digit", "Fig. 18", "one digit per head",
          "holds if every miiii head puts ≥ 0.9 of its attention from the output position on x0 or on x1",
          ("miiii",), _attention),
    Claim("basis", "the periodicity is understood to be a structure inherent to the data picked up by the model",
          "Fig. 13 (T_basis)", "no periodicity", "holds if the shuffled-label run stays within 0.05 of chance and "
          "its W_E Fourier spectrum is flatter (lower Gini) than miiii's", ("basis",), _basis),
    *(Claim(f"table3-{i}", SPIKE, "Table 3, Fig. 16", "0, 0, 10, 18, 10 at epochs 256 … 65,536",
            f"{d}: holds if the count peaks at one of the middle three fractions (1/64, 1/16, 1/4 of the run) above "
            "both the first (1/256) and the last", ("miiii",), _spike(d), recorded=True)
      for i, d in enumerate(("project: dominance, mean + 2 std per step", "original: neuron 0, mean + 1 std",
                             "original: neuron 0, mean + 2 std", "original: mean over neurons, mean + 1 std",
                             "original: mean over neurons, mean + 2 std"))),
    Claim("masked-first", "the tasks 11, 13, 17, 19 grok first", "Appendix (masked run)", "11, 13, 17, 19 first",
          "holds if the first four tasks to grok are exactly {11, 13, 17, 19}", ("masked",), _masked_first),
    Claim("masked-all", "[11, 13, 17, 19 first,] then all tasks", "Appendix (masked run)", "all tasks",
          "holds if every task that is trained (q > 7) groks", ("masked",), _masked_all),
    Claim("no-dropout", "with dropout off the model overfits every task but q ∈ {2, 3}", "Appendix (no dropout)",
          "overfits all but 2, 3", "holds if q = 2, 3 reach validation ≥ 0.99 and every other task ends with "
          "training ≥ 0.99 and validation < 0.99", ("nodropout",), _nodropout),
)


# ---------------------------------------------------------------- judging over seeds


def as_seeds(runs: dict) -> dict[str, list[Run]]:
    return {k: (v if isinstance(v, list) else [v]) for k, v in runs.items()}


def judge(claim: Claim, runs: dict[str, list[Run]]) -> dict | None:
    """The claim over every seed that has all its runs; None when a role it needs is missing."""
    if any(role not in runs for role in claim.roles):
        return None
    n = 1 if claim.recorded else min(len(runs[role]) for role in claim.roles)
    seeds = [{role: rs[i] for role, rs in runs.items() if i < len(rs)} for i in range(n)]
    outs = [claim.judge(s) for s in seeds]
    tested = [o for o in outs if o.holds is not None]
    k = sum(o.holds for o in tested)
    if any(o.holds is False for o in tested):
        verdict = "does not hold"
    elif tested and len(tested) == len(outs):
        verdict = "holds"
    else:
        verdict = "not testable"
    why = next((o.why for o in outs if o.holds is None), "")
    numbers = {}
    for name in outs[0].numbers:
        vals = [o.numbers.get(name) for o in outs if o.numbers.get(name) is not None]
        if vals:
            numbers[name] = (float(np.mean(vals)), float(np.std(vals)), len(vals))
    return dict(key=claim.key, claim=claim.text, source=claim.source, paper=claim.paper, rule=claim.rule,
                measured=outs[0].measured, seeds=len(outs), tested=len(tested), holds_in=k, verdict=verdict,
                why=why, numbers=numbers, per_seed=[o.measured for o in outs])


def claims(runs: dict) -> list[dict]:
    """One row per claim whose runs are present (see `judge`)."""
    runs = as_seeds(runs)
    return [row for c in CLAIMS if (row := judge(c, runs)) is not None]
