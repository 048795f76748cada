"""The paper's claims judged as written, over seeds, from each run's measures (measures.run_measures: the JSON a
bundle commits), so results.md regenerates from a bundle's files alone (report.py).

Each `Claim` quotes the paper (verbatim, or marked as a paraphrase where the copy read holds no sentence), names its
location, and judges every seed with one pure rule function (`rules.py`). The printed rule *is* that function's
docstring (`rule_text`), so the rule a reader sees is the rule applied. A verdict errs toward *does not hold*:

- it holds only when it holds in every seed; one seed against it makes it *does not hold*;
- a claim with a control (λ = 0 against λ > 0, ...) applies the same rule to the control run: where the control passes
  too, the rule cannot tell the effect from its absence and the seed is *not testable at this scale*;
- a pooled claim (Table 3's spike) is judged once over all seeds against their spread;
- where the text, the original code or a figure define a number differently, each definition is its own row, named.

`claims(measures)` takes {role: [measures dict per seed, the recorded run first]} for the roles nanda, miiii,
masked, basis, nogrokfast, nodropout (any may be missing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from experiments.paper.measures import task_q
from miiii import analysis as A
from miiii.rules import (  # the rules and their constants; tests reach them as claims.rule_*
    ALPHA,  # noqa: F401 - the permutation test's level, beside the rules that use it
    MIN_ORDER_TASKS,
    MIN_SHARED_TASKS,
    PAPER_STEPS,
    SMALL,
    printed_rule,
    rule_about,
    rule_all_grok,
    rule_band,
    rule_basis,
    rule_did_not_converge,
    rule_first_grok,
    rule_grokfast_faster,
    rule_in_succession,
    rule_more,
    rule_more_diffuse,
    rule_no_particular_order,
    rule_not_delayed,
    rule_one_digit_per_head,
    rule_only_primes,
    rule_order_matters,
    rule_overfits_all_but,
    rule_perfect,
    rule_remaining_later_around,
    rule_slower,
    rule_spike,
)

VERDICTS = ("holds", "does not hold", "not testable")
NON_COMMUTATIVE_ROLES = ("miiii", "nodropout", "masked")  # the study's runs of the miiii task (roles, not tasks)


class Reading(NamedTuple):
    """One seed's reading for a claim: what was measured (text), its numbers (averaged over seeds) and the rule's
    arguments (None: not testable in this seed, `why`)."""

    measured: str
    numbers: dict
    args: tuple | None
    why: str = ""


@dataclass(frozen=True)
class Claim:
    key: str
    text: str  # the paper's words (verbatim unless `paraphrase`)
    source: str  # where: section, figure or table of the paper, or the original code's file
    paper: str  # the paper's number, as printed
    rule: Callable  # pure; its docstring's first paragraph is the printed rule
    roles: tuple[str, ...]
    read: Callable  # {role: measures} -> Reading (pooled: [{role: measures}, ...] -> Reading)
    control: Callable | None = None  # {role: measures} -> the rule's arguments on the control run
    control_roles: tuple[str, ...] = ()
    control_name: str = ""
    pooled: bool = False
    definition: str = ""  # the named definition a row uses, where the paper's numbers have several
    paraphrase: bool = False  # the copy of the paper read has no sentence: the project's summary, marked as such


def rule_text(claim: Claim) -> str:
    """The printed rule: the named definition, the rule function's docstring and the control, in one sentence."""
    doc = printed_rule(claim.rule)
    text = (f"{claim.definition}: " if claim.definition else "") + doc
    if claim.control:
        text += (f" Control: the same rule on {claim.control_name}; where it passes too, the seed is not testable at "
                 "this scale.")
    return text


# ---------------------------------------------------------------- what a claim reads of the measures


def fmt(v) -> str:
    return "–" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def grok(m: dict) -> dict:
    """{q: grok step or None} of a miiii run's measures."""
    return {task_q(n): s for n, s in zip(m["task_names"], m["grok_step"], strict=True)}


def by_q(m: dict, split: str = "valid") -> dict:
    return {task_q(n): a for n, a in zip(m["task_names"], m["final_acc"][split], strict=True)}


def n_grok(g: dict) -> int:
    return sum(s is not None for s in g.values())


def _steps(g: dict, qs) -> str:
    return ", ".join(f"{q}@{fmt(g.get(q))}" for q in qs if q in g)


def _pos(role: str, paper: float):
    def read(r):
        v = r[role]["pos_r"]
        return Reading(f"r = {v:.2f}", {"r": v}, (v, paper))
    return read


def _order_matters(r):
    others = [role for role in NON_COMMUTATIVE_ROLES if role in r]
    rs = [r[role]["pos_r"] for role in others]
    text = f"nanda {r['nanda']['pos_r']:.2f}; " + ", ".join(f"{k} {v:.2f}" for k, v in zip(others, rs, strict=True))
    if "basis" in r:
        text += f" (basis, shuffled labels: {r['basis']['pos_r']:.2f}, not in the rule)"
    return Reading(text, {f"r {k}": v for k, v in zip(others, rs, strict=True)}, (r["nanda"]["pos_r"], rs))


def _perfect(r):
    acc = np.asarray(r["miiii"]["final_acc"]["valid"])
    n1, n99 = int((acc >= 1.0).sum()), int((acc >= A.GROK_THRESHOLD).sum())
    return Reading(f"{n1}/{len(acc)} tasks at 1.0, {n99}/{len(acc)} ≥ 0.99, lowest {acc.min():.3f}",
                   {"tasks at 1.0": n1, "lowest accuracy": float(acc.min())}, (acc,))


def _succession(r):
    g = grok(r["miiii"])
    return Reading(_steps(g, SMALL), {f"q={q} step": g.get(q) for q in SMALL}, (g,))


def _around(r):
    m = r["miiii"]
    g, target = grok(m), 40_000 * m["run"]["steps"] / PAPER_STEPS
    rest = [s for q, s in g.items() if q not in SMALL]
    done = [s for s in rest if s is not None]
    text = f"{len(done)}/{len(rest)} grok" + (f", steps {min(done)}–{max(done)}, median {np.median(done):.0f}"
                                             if done else "") + f" (target {target:.0f}); last small q at " + \
        fmt(max((g[q] for q in SMALL if g.get(q) is not None), default=None))
    nums = {"remaining grokked": len(done), "median step": float(np.median(done)) if done else None}
    return Reading(text, nums, (g, target))


def _order(r):
    g = grok(r["miiii"])
    holds, rho, p, n = rule_no_particular_order(g)
    if holds is None:
        return Reading(f"{n} of the remaining tasks grok", {"grokked": n}, None,
                       f"fewer than {MIN_ORDER_TASKS} of the remaining tasks grok: no order to test")
    return Reading(f"ρ(q, grok step) = {rho:.2f}, permutation p = {p:.4f} over {n} tasks", {"ρ": rho, "p": p}, (g,))


def _nogf(r):
    g, c = grok(r["nogrokfast"]), grok(r["miiii"])
    return Reading(f"λ = 0: {n_grok(g)}/{len(g)} grok; control λ = {r['miiii']['run']['lamb']:g}: {n_grok(c)}/"
                   f"{len(c)}", {"grokked with λ = 0": n_grok(g), "grokked with λ > 0": n_grok(c)}, (g,))


def _faster(r):
    with_gf, without = grok(r["miiii"]), grok(r["nogrokfast"])
    both = [q for q in with_gf if with_gf[q] is not None and without.get(q) is not None]
    gain = float(np.median([without[q] - with_gf[q] for q in both])) if both else None
    text = (f"grokked: λ = {r['miiii']['run']['lamb']:g} {n_grok(with_gf)}, λ = 0 {n_grok(without)}; in both "
            f"{len(both)}, median steps saved {fmt(gain)}")
    why = f"fewer than {MIN_SHARED_TASKS} tasks grok in both runs" if len(both) < MIN_SHARED_TASKS else ""
    return Reading(text, {"median steps saved": gain}, (with_gf, without), why)


def _diffuse(r):
    n, m = r["nanda"]["svd"], r["miiii"]["svd"]
    show = lambda d, k: f"{d[k + '_50']} / {d[k + '_90']}"  # noqa: E731
    text = (f"ticks (original, Σσ): nanda {show(n, 'tick_s')}, miiii {show(m, 'tick_s')}; counts Σσ: nanda "
            f"{show(n, 'count_s')}, miiii {show(m, 'count_s')}; counts Σσ²: nanda {show(n, 'count_s2')}, miiii "
            f"{show(m, 'count_s2')}")
    nums = {f"{role} {k}": d[k] for role, d in (("nanda", n), ("miiii", m)) for k in ("tick_s_50", "tick_s_90")}
    return Reading(text, nums, ((n["count_s_50"], n["count_s_90"]), (m["count_s_50"], m["count_s_90"])))


def _fft(key: str):
    def read(r):
        n, m = r["nanda"]["fft"], r["miiii"]["fft"]
        other = "energy_90" if key == "above_mean_2std" else "above_mean_2std"
        text = (f"nanda {n[key]}, miiii {m[key]} of {len(n['norms'])}, {len(m['norms'])} (the other definition: "
                f"nanda {n[other]}, miiii {m[other]}); Gini nanda {n['gini']:.2f}, miiii {m['gini']:.2f}")
        return Reading(text, {"nanda": n[key], "miiii": m[key]}, (n[key], m[key]))
    return read


def _attention(r):
    a0, a1 = (np.asarray(r["miiii"]["attention"][k]) for k in ("to_x0", "to_x1"))
    text = "to x0 / x1 per head: " + ", ".join(f"{u:.2f}/{v:.2f}" for u, v in zip(a0, a1, strict=True))
    return Reading(text, {"least one-digit share": float(np.maximum(a0, a1).min())}, (a0, a1))


def _basis(r):
    m = r["basis"]
    acc = float(np.mean(m["final_acc"]["valid"]))
    chance = float(np.mean([1 / task_q(n) for n in m["task_names"]]))
    gb, gm = m["fft"]["gini"], (r["miiii"]["fft"]["gini"] if "miiii" in r else None)
    return Reading(f"mean valid accuracy {acc:.3f} (chance {chance:.3f}); Gini of W_E's Fourier norms {gb:.2f}"
                   + (f" (miiii {gm:.2f})" if gm is not None else ""), {"accuracy": acc}, (acc, chance, gb, gm))


def _spike(definition: str) -> Callable:
    def read(seeds):
        rows = [s["miiii"].get("table3", {}).get(definition) for s in seeds]
        rows = [x for x in rows if x is not None]
        if not rows:
            return Reading("no recording of the MLP neurons over the grid", {}, None, "no run has a recording")
        c = np.asarray([x["counts"] for x in rows], dtype=float)
        text = "n_ω mean ± std over seeds: " + ", ".join(f"{m:.1f} ± {s:.1f}" for m, s in zip(c.mean(0), c.std(0),
                                                                                           strict=True))
        why = "fewer than 2 recorded seeds: no seed spread" if len(rows) < 2 else ""
        return Reading(text, {"peak": float(c.mean(0).max())}, ([x["counts"] for x in rows],), why)
    return read


def _masked_first(r):
    g = grok(r["masked"])
    order = A.grok_order([f"{q}" for q in g], list(g.values()))
    return Reading("first to grok: " + (", ".join(order[:6]) or "none"), {}, (g,))


def _masked_all(r):
    g = {q: s for q, s in grok(r["masked"]).items() if q not in SMALL}  # the masked four are not trained
    return Reading(f"{n_grok(g)}/{len(g)} trained tasks grok", {"grokked": n_grok(g)}, (g,))


def _not_delayed(r):
    gm, gp = grok(r["masked"]), grok(r["miiii"])
    both = [q for q in gm if q not in SMALL and gm[q] is not None and gp.get(q) is not None]
    delay = float(np.median([gm[q] - gp[q] for q in both])) if both else None
    n_m, n_p = (sum(s is not None for q, s in g.items() if q not in SMALL) for g in (gm, gp))
    why = f"fewer than {MIN_SHARED_TASKS} tasks q > 7 grok in both runs" if len(both) < MIN_SHARED_TASKS else ""
    return Reading(f"tasks q > 7 grokked: masked {n_m}, unmasked {n_p}; in both {len(both)}, median delay "
                   f"{fmt(delay)} steps", {"median delay": delay}, (gm, gp, r["miiii"]["run"]["steps"]), why)


def _slower(r):
    n, m = r["nanda"], r["miiii"]
    ns = n["grok_step"][0]
    steps = max(n["run"]["steps"], m["run"]["steps"])
    med = float(np.median([steps + 1 if s is None else s for s in m["grok_step"]]))
    recipe = "the same model and recipe" if n["run"]["dropout"] == m["run"]["dropout"] else "different recipes"
    return Reading(f"nanda groks at {fmt(ns)}; miiii's median task at {med:.0f} ({n_grok(grok(m))}/"
                   f"{len(m['grok_step'])} grok; {recipe})", {"nanda step": ns, "miiii median": med},
                   (ns, m["grok_step"], steps), "nanda does not grok" if ns is None else "")


def _primes_below(n: int) -> list[int]:
    sieve = np.ones(n, bool)
    sieve[:2] = False
    for k in range(2, int(n**0.5) + 1):
        if sieve[k]:
            sieve[k * k::k] = False
    return [int(x) for x in np.flatnonzero(sieve)]


def _no_zero(lower: str):
    """The samples n (from 0, or from p as the paper's grid has them past one digit) whose remainders mod every
    prime q < p are all non-zero, beside the primes among them: a function of p alone, no training."""
    def read(r):
        p = r["miiii"]["run"]["p"]
        qs, start = _primes_below(p), 0 if lower == "0" else p
        n = np.arange(start, p * p)
        no_zero = n[np.all(n[:, None] % np.asarray(qs)[None, :] != 0, axis=1)].tolist()
        primes = [x for x in _primes_below(p * p) if x >= start]
        extra, missed = sorted(set(no_zero) - set(primes)), sorted(set(primes) - set(no_zero))
        text = (f"p = {p}: {len(no_zero)} samples without a zero, {len(primes)} primes in [{start}, {p * p}); "
                f"not prime: {extra[:5] or 'none'}; primes with a zero: {len(missed)} ({missed[:5] or 'none'}"
                f"{' …' if len(missed) > 5 else ''})")
        return Reading(text, {"samples without a zero": len(no_zero), "primes": len(primes)}, (no_zero, primes))
    return read


def _prime_count(r):
    """π(n) against the paper's n ln n at n = p², the grid's size."""
    n = r["miiii"]["run"]["p"] ** 2
    true = len(_primes_below(n))
    stated = n * float(np.log(n))
    return Reading(f"n = p² = {n}: π(n) = {true}; n ln n = {stated:,.0f}; n / ln n = {n / np.log(n):,.0f}",
                   {"pi(n)": true, "n ln n": stated}, (stated, true))


def _task_count(r):
    """The number of tasks (the primes below p) against the paper's p ln p."""
    p = r["miiii"]["run"]["p"]
    true, stated = len(_primes_below(p)), p * float(np.log(p))
    return Reading(f"p = {p}: {true} tasks (primes below p; {len(m) if (m := r['miiii'].get('task_names')) else '?'} "
                   f"in the run); p ln p = {stated:,.0f}; p / ln p = {p / np.log(p):,.0f}",
                   {"tasks": true, "p ln p": stated}, (stated, true))


def _nodropout(r):
    m = r["nodropout"]
    tr, va = by_q(m, "train"), by_q(m)
    over = [q for q in va if tr[q] >= A.GROK_THRESHOLD and va[q] < A.GROK_THRESHOLD]
    general = [q for q in va if va[q] >= A.GROK_THRESHOLD]
    return Reading(f"generalise: {', '.join(map(str, general)) or 'none'}; overfit: {len(over)}/{len(va)}",
                   {"overfit": len(over), "generalise": len(general)}, (tr, va))


# ---------------------------------------------------------------- the claims

SEC_HP = "§Results and analysis › Hyper-parameter optimization"
SEC_PERF = "§Results and analysis › Model performance, Fig. 5"
SEC_EMB = "§Results and analysis › Embeddings"
SEC_TASK = "§Introduction (about the task itself: a function of p, no training)"
TABLE3 = ("project: dominance, mean + 2 std per step", "original: neuron 0, mean + 1 std",
          "original: neuron 0, mean + 2 std", "original: mean over neurons, mean + 1 std",
          "original: mean over neurons, mean + 2 std")
FFT = {"above_mean_2std": "figures' definition (Figs. 11–12: a frequency whose norm is above mean + 2 std of the "
                          "non-constant frequencies)",
       "energy_90": "energy definition (the fewest frequencies holding 90 % of W_E's Fourier energy)"}
# A comparison of miiii with nanda that the shuffled-label run passes as well says nothing about what miiii learned:
# where it does, the seed is not testable at this scale.
BASIS_CONTROL = "the shuffled-label run (basis) in miiii's place"
CLAIMS = (
    Claim("pos-nanda", "For T_nanda, which involves a commutative task, the positional embeddings are virtually "
          "identical, with a Pearson correlation of 0.95", f"{SEC_EMB}, Fig. 7", "r = 0.95", rule_band, ("nanda",),
          _pos("nanda", 0.95)),
    Claim("pos-miiii", "for T_miiii, the positional embeddings have a Pearson correlation of −0.64, indicating that "
          "the embeddings for the two positions are different", f"{SEC_EMB}, Fig. 7", "r = −0.64", rule_band,
          ("miiii",), _pos("miiii", -0.64)),
    Claim("pos-cause", "This difference is expected due to the non-commutative nature of the task, where the order of "
          "x0 and x1 matters", f"{SEC_EMB}, Fig. 7", "nanda +0.95, miiii −0.64", rule_order_matters,
          ("nanda", "miiii", "nodropout"), _order_matters),
    Claim("perfect", "The model achieves a perfect accuracy of 1 on the validation set across all 29 tasks", SEC_PERF,
          "29/29 at 1.0", rule_perfect, ("miiii",), _perfect),
    Claim("succession", "tasks corresponding to modulo 2, 3, 5, and 7 generalized in succession", SEC_PERF,
          "2, 3, 5, 7", rule_in_succession, ("miiii",), _succession),
    Claim("around-40k", "the remaining 25 tasks generalized around epoch 40000", SEC_PERF, "≈ 40,000 of 65,536",
          rule_remaining_later_around, ("miiii",), _around),
    Claim("no-order", "the remaining 25 tasks generalized around epoch 40000 in no particular order", SEC_PERF,
          "no order", rule_no_particular_order, ("miiii",), _order),
    Claim("harder-slower", "as T_miiii is harder than T_nanda the model can be expected to generalize slower when "
          "trained on the former", "§Introduction", "slower", rule_slower, ("nanda", "miiii"), _slower,
          control=lambda r: _slower({"nanda": r["nanda"], "miiii": r["basis"]}).args, control_roles=("nanda", "basis"),
          control_name=BASIS_CONTROL),
    Claim("lambda-0", "Notably, the model did not converge when λ = 0", SEC_HP, "does not converge",
          rule_did_not_converge, ("nogrokfast",), _nogf, control=lambda r: (grok(r["miiii"]),),
          control_roles=("miiii",), control_name="the λ > 0 run that should converge"),
    Claim("grokfast-faster", "confirming the utility of the gradient amplification method proposed by Lee et al. "
          "(2024) in the context of T_miiii", SEC_HP, "–", rule_grokfast_faster, ("miiii", "nogrokfast"), _faster),
    Claim("svd", "The singular values for T_miiii are more diffuse, indicating that a larger number of components "
          "are needed to capture the variance in the embeddings compared to T_nanda", f"{SEC_EMB}, Fig. 8",
          "ticks nanda 5 / 49, miiii 35 / 73 (original, Σσ)", rule_more_diffuse, ("nanda", "miiii"), _diffuse,
          definition="counts of Σσ (the original code's normalisation; its ticks are count − 2)",
          control=lambda r: _diffuse({"nanda": r["nanda"], "miiii": r["basis"]}).args, control_roles=("nanda", "basis"),
          control_name=BASIS_CONTROL),
    *(Claim(f"fft-{key}", "Only a few frequencies are active for T_nanda […] For the T_miiii model, we observe a "
            "broader spectrum of active frequencies", f"{SEC_EMB}, Figs. 11–12", "few vs broader", rule_more,
            ("nanda", "miiii"), _fft(key), definition=FFT[key],
            control=lambda r, key=key: _fft(key)({"nanda": r["nanda"], "miiii": r["basis"]}).args,
            control_roles=("nanda", "basis"), control_name=BASIS_CONTROL) for key in FFT),
    Claim("basis", "Comparing with T_basis in figure Figure 13, the periodicity is understood to be a structure "
          "inherent to the data picked up by the model", f"{SEC_EMB}, Fig. 13", "no periodicity", rule_basis,
          ("basis",), _basis),
    Claim("attention", "miiii's heads each attend to one digit", "Fig. 18 (the figure's reading; no sentence)",
          "one digit per head", rule_one_digit_per_head, ("miiii",), _attention, paraphrase=True),
    *(Claim(f"table3-{i}", "the number of active frequencies |ω| over training: a transient spike while the last "
            "tasks are learned", "Table 3, Fig. 16", "0, 0, 10, 18, 10 at epochs 256 … 65,536", rule_spike,
            ("miiii",), _spike(d), pooled=True, definition=d, paraphrase=True) for i, d in enumerate(TABLE3)),
    Claim("masked-first", "in the masked run the tasks 11, 13, 17, 19 grok first", "Appendix (masked run)",
          "11, 13, 17, 19 first", rule_first_grok, ("masked",), _masked_first, paraphrase=True),
    Claim("masked-all", "[in the masked run, 11, 13, 17, 19 first,] then all tasks", "Appendix (masked run)",
          "all tasks", rule_all_grok, ("masked",), _masked_all, paraphrase=True),
    Claim("masked-not-delayed", "[in the masked run] the rest are not notably delayed", "Appendix (masked run)",
          "not notably delayed", rule_not_delayed, ("masked", "miiii"), _not_delayed, paraphrase=True),
    Claim("no-dropout", "with dropout off the model overfits every task but q ∈ {2, 3}", "Appendix (no dropout)",
          "overfits all but 2, 3", rule_overfits_all_but, ("nodropout",), _nodropout, paraphrase=True),
    *(Claim(f"no-zeros-{lower}", "primes are the only samples whose target vector contains no zeros, since it is not a "
            "multiple of any of the factors q", SEC_TASK, "no zeros ⇔ prime", rule_only_primes, ("miiii",),
            _no_zero(lower), definition=what) for lower, what in
      (("0", "as written: every sample, 0 ≤ n < p²"), ("p", "a reading: the samples past one digit, p ≤ n < p²"))),
    Claim("prime-count", "There are about n ln(n) primes less than n", SEC_TASK, "n ln n", rule_about, ("miiii",),
          _prime_count),
    Claim("task-count", "two splits (train/valid) about p ln(p) tasks", "§Methods › Visualization (a "
          "function of p, no training)", "p ln p", rule_about, ("miiii",), _task_count),
)


# ---------------------------------------------------------------- judging over seeds


def _holds(result) -> bool | None:
    return result[0] if isinstance(result, tuple) else result


class Outcome(NamedTuple):
    measured: str
    numbers: dict
    holds: bool | None
    why: str = ""


def judge_seed(claim: Claim, reading: Reading, seed: dict | None) -> Outcome:
    """One seed (or the pooled seeds): the rule on the reading, then on the control where the claim has one."""
    if reading.args is None:
        return Outcome(reading.measured, reading.numbers, None, reading.why)
    holds = _holds(claim.rule(*reading.args))
    if holds is None:
        return Outcome(reading.measured, reading.numbers, None, reading.why or "the rule cannot be applied")
    if holds and claim.control is not None:
        if seed is None or any(role not in seed for role in claim.control_roles):
            return Outcome(reading.measured, reading.numbers, None, "the control run is missing")
        if _holds(claim.rule(*claim.control(seed))):
            return Outcome(reading.measured + "; the control passes the same rule", reading.numbers, None,
                           f"at this scale the control, {claim.control_name}, passes the same rule")
    return Outcome(reading.measured, reading.numbers, bool(holds))


def judge(claim: Claim, runs: dict[str, list[dict]]) -> dict | None:
    """The claim over every seed that has all its runs; None when a role it needs is missing."""
    if any(role not in runs for role in claim.roles):
        return None
    n = min(len(runs[role]) for role in claim.roles)
    seeds = [{role: ms[i] for role, ms in runs.items() if i < len(ms)} for i in range(n)]
    if claim.pooled:
        outs = [judge_seed(claim, claim.read(seeds), None)]
    else:
        outs = [judge_seed(claim, claim.read(s), s) for s in seeds]
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
    return dict(key=claim.key, claim=claim.text, paraphrase=claim.paraphrase, source=claim.source, paper=claim.paper,
                rule=rule_text(claim), measured=outs[0].measured, seeds=n, pooled=claim.pooled, tested=len(tested),
                holds_in=k, verdict=verdict, why=why, numbers=numbers, per_seed=[o.measured for o in outs])


def claims(runs: dict[str, list[dict]]) -> list[dict]:
    """One row per claim whose runs are present (see `judge`)."""
    return [row for c in CLAIMS if (row := judge(c, runs)) is not None]
