"""What each of the paper's claims reads from the measures of a study's runs (`measures.py`, committed in a bundle's
`summaries/`): one reader per claim, each returning a `Reading` (the text results.md shows, its numbers, the rule's
arguments, or why the seed is not testable). The claims and their rules: `claims.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from experiments.paper.measures import task_q
from miiii import analysis as A
from miiii.rules import (
    MIN_ORDER_TASKS,
    MIN_SHARED_TASKS,
    NOT_NOTABLE,
    ONE_DIGIT,
    PAPER_STEPS,
    SMALL,
    THRESHOLD_MARGIN,
    kth_lags,
    rest_of_masked,
    rule_no_particular_order,
)
from miiii.tokens import primes_below

NON_COMMUTATIVE_ROLES = ("miiii", "nodropout", "masked")  # the study's runs of the miiii task (roles, not tasks)


class Reading(NamedTuple):
    """One seed's reading for a claim: what was measured (text), its numbers (averaged over seeds) and the rule's
    arguments (None: not testable in this seed, `why`)."""

    measured: str
    numbers: dict
    args: tuple | None
    why: str = ""


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
    if "basis" in r:
        text += f" (control, basis: counts Σσ {show(r['basis']['svd'], 'count_s')})"
    nums = {f"{role} {k}": d[k] for role, d in (("nanda", n), ("miiii", m)) for k in ("tick_s_50", "tick_s_90")}
    return Reading(text, nums, ((n["count_s_50"], n["count_s_90"]), (m["count_s_50"], m["count_s_90"])))


def _fft(key: str):
    def read(r):
        n, m = r["nanda"]["fft"], r["miiii"]["fft"]
        other = "energy_90" if key == "above_mean_2std" else "above_mean_2std"
        text = (f"nanda {n[key]}, miiii {m[key]} of {len(n['norms'])}, {len(m['norms'])} (the other definition: "
                f"nanda {n[other]}, miiii {m[other]}); Gini nanda {n['gini']:.2f}, miiii {m['gini']:.2f}")
        if "basis" in r:
            text += f"; control, basis: {r['basis']['fft'][key]}"
        return Reading(text, {"nanda": n[key], "miiii": m[key]}, (n[key], m[key]))
    return read


def _attention(r):
    a0, a1 = (np.asarray(r["miiii"]["attention"][k]) for k in ("to_x0", "to_x1"))
    text = "to x0 / x1 per head: " + ", ".join(f"{u:.2f}/{v:.2f}" for u, v in zip(a0, a1, strict=True))
    least = float(np.maximum(a0, a1).min())
    why = (f"the least one-digit share {least:.4f} is within {THRESHOLD_MARGIN} of {ONE_DIGIT}: too close to the "
           "threshold to tell" if abs(least - ONE_DIGIT) < THRESHOLD_MARGIN else "")
    return Reading(text, {"least one-digit share": least}, (a0, a1), why)


def _nanda_attention(r):
    a0, a1 = (np.asarray(r["nanda"]["attention"][k]) for k in ("to_x0", "to_x1"))
    text = "to x0 / x1 per head: " + ", ".join(f"{u:.2f}/{v:.2f}" for u, v in zip(a0, a1, strict=True))
    return Reading(text, {"least share on either digit": float(np.minimum(a0, a1).min())}, (a0, a1))


def _basis(r):
    m = r["basis"]
    acc = float(np.mean(m["final_acc"]["valid"]))
    chance = float(np.mean([1 / task_q(n) for n in m["task_names"]]))
    gb, gm = m["fft"]["gini"], (r["miiii"]["fft"]["gini"] if "miiii" in r else None)
    return Reading(f"mean valid accuracy {acc:.3f} (chance {chance:.3f}); Gini of W_E's Fourier norms {gb:.2f}"
                   + (f" (miiii {gm:.2f})" if gm is not None else ""), {"accuracy": acc}, (acc, chance, gb, gm))


def _spike(definition: str, role: str = "miiii") -> Callable:
    def read(seeds):
        rows = [s[role].get("table3", {}).get(definition) for s in seeds]
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
    steps = r["miiii"]["run"]["steps"]
    rest = rest_of_masked(gm)
    n_m, n_p = (sum(g.get(q) is not None for q in rest) for g in (gm, gp))
    lags = kth_lags(gm, gp)
    worst = max((x for x in lags if x is not None), default=None)
    why = "none of the rest groks in either run" if not n_m + n_p else ""
    return Reading(f"the rest ({len(rest)} tasks q > 7 but 11, 13, 17, 19) grokked: masked {n_m}, unmasked {n_p}; "
                   "k-th grok, masked − unmasked: " + (", ".join("not reached" if x is None else f"{x:+.0f}"
                                                                 for x in lags) or "–")
                   + f" (allowed +{NOT_NOTABLE * steps:.0f})", {"largest lag": worst, "rest grokked, masked": n_m,
                                                               "rest grokked, unmasked": n_p}, (gm, gp, steps), why)


def _slower(r):
    n, m = r["nanda"], r["miiii"]
    ns, g = n["grok_step"][0], grok(m)
    done = [s for s in g.values() if s is not None]
    med = float(np.median(done)) if len(done) == len(g) else None
    before = sum(s < ns for s in done) if ns is not None else None
    first = min(g, key=lambda q: g[q] if g[q] is not None else float("inf"))
    recipe = "the same model and recipe" if n["run"]["dropout"] == m["run"]["dropout"] else "different recipes"
    text = (f"nanda groks at {fmt(ns)}; miiii: {len(done)}/{len(g)} tasks grok, median {fmt(med)}, first q = {first} "
            f"at {fmt(g[first])}, {fmt(before)} before nanda ({recipe})")
    why = "nanda does not grok" if ns is None else "" if med is not None else "a miiii task does not grok"
    return Reading(text, {"nanda step": ns, "miiii median": med}, (ns, m["grok_step"]), why)


def _primes_below(n: int) -> list[int]:
    return primes_below(n).tolist()


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
