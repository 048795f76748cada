"""Verma (2026), "Weight Decay Regimes in Grokking Transformers: Cheap Online Diagnostics" (arXiv 2605.20441), judged
at CPU scale: nanda-tiny over a grid of AdamW weight decays, every seed of every value in one vmapped sweep, the
attention diagnostics (metrics.head_similarity, metrics.entropy_spread) read off each member's metrics.npz.

A member's regime is read at its end: *collapse* when its training accuracy ends below FIT (it never fit, or lost
its fit), *grokking* when every task reached validation accuracy 0.99, *memorisation* otherwise (it fit, it did
not generalise within the budget). A weight decay's regime is the one at least MAJORITY of its seeds share, else
*mixed*.
"""

from __future__ import annotations

import numpy as np

from experiments.disputes import Claim, Setting, Study, at_step, grok_step, spread, values_of

WD = "optim.weight_decay"
GRID = (0.0, 0.0158, 0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0)  # their λ_c, then where this scale turns (a pilot)
FIT = 0.9  # training accuracy below this at the end: collapse
MAJORITY = 0.8  # of a weight decay's seeds, to name its regime
CI_LC = (0.0109, 0.0200)  # their boundary's 95 % interval
CI_NU = (0.725, 0.799)  # their exponent's interval
MIN_POINTS = 3  # weight decays a power law is fitted over, at the least
MIN_R2 = 0.9  # a fit that explains less than this is not a power law
IDENTICAL = 0.99  # a head similarity at least this: the heads' patterns are the same
TRACKS = 2.0  # a diagnostic tracks the transition if it moves this many times more across it than the control does
SOURCE = "Verma (2026), arXiv 2605.20441, abstract"
SIDE = "Verma (2026)"
SETTING = "weight decay grid"


def regime(m: dict) -> str:
    if np.mean(list(m["train_end"].values())) < FIT:
        return "collapse"
    return "grokking" if grok_step(m) is not None else "memorisation"


def regimes(members: list[dict]) -> dict[float, str]:
    """Each weight decay's regime: the one at least MAJORITY of its seeds end in, else 'mixed'."""
    out = {}
    for wd in values_of(members, WD):
        rs = [regime(m) for m in members if m["values"][WD] == wd]
        top = max(set(rs), key=rs.count)
        out[wd] = top if rs.count(top) >= MAJORITY * len(rs) else "mixed"
    return out


def _table(reg: dict) -> str:
    return ", ".join(f"{wd:g}: {r}" for wd, r in reg.items())


def rule_separates(runs: dict) -> tuple[bool | None, str]:
    """holds if, in order of weight decay, the regimes (each weight decay's: at least 80 % of its seeds agreeing)
    run memorisation, then grokking, then collapse, each present, with a mixed weight decay only between two
    different regimes; does not hold otherwise (a regime the grid never shows included)."""
    reg = regimes(runs[SETTING])
    seq = list(reg.values())
    bands = [r for i, r in enumerate(seq) if r != "mixed" and (i == 0 or r != seq[i - 1])]
    mixed_ok = all(0 < i < len(seq) - 1 and seq[i - 1] != seq[i + 1] and "mixed" not in (seq[i - 1], seq[i + 1])
                   for i, r in enumerate(seq) if r == "mixed")
    return bands == ["memorisation", "grokking", "collapse"] and mixed_ok, _table(reg)


def boundary(members: list[dict]) -> tuple[float | None, float | None]:
    """(λ_lo, λ_hi): λ_hi the smallest weight decay at which at least 80 % of the seeds grok; λ_lo the largest below
    it at which at most 20 % do (0 included). None where absent."""
    by = {wd: [grok_step(m) is not None for m in members if m["values"][WD] == wd]
          for wd in values_of(members, WD)}
    share = {wd: np.mean(v) for wd, v in by.items()}
    hi = next((wd for wd in share if share[wd] >= MAJORITY), None)
    if hi is None:
        return None, None
    lo = max((wd for wd in share if wd < hi and share[wd] <= 1 - MAJORITY), default=None)
    return lo, hi


def rule_boundary(runs: dict) -> tuple[bool | None, str]:
    """holds if the memorisation-to-grokking boundary lies inside their interval: λ_hi (the smallest weight decay
    at which at least 80 % of the seeds grok) and λ_lo (the largest below it at which at most 20 % do) both within
    [0.0109, 0.0200]; does not hold if the two intervals are disjoint; not testable when they overlap otherwise
    (the grid cannot place it), no weight decay groks, or even the smallest one groks."""
    lo, hi = boundary(runs[SETTING])
    if hi is None:
        return None, "no weight decay where at least 80 % of the seeds grok"
    if lo is None:
        smallest = values_of(runs[SETTING], WD)[0]
        return None, (f"the grid's smallest weight decay ({hi:g}) groks" if hi == smallest else
                      f"no weight decay below {hi:g} (the first where at least 80 % grok) where at most 20 % do")
    said = f"boundary between {lo:g} (≤ 20 % grok) and {hi:g} (≥ 80 %)"
    if CI_LC[0] <= lo and hi <= CI_LC[1]:
        return True, said
    if hi <= CI_LC[0] or lo >= CI_LC[1]:
        return False, said
    return None, said + ": overlaps their interval, the grid cannot place it"


def power_law(members: list[dict]) -> tuple[float, float, list] | None:
    """(ν, R², points) of log t = a - ν log(λ - λ_c) over the weight decays from the boundary up whose regime is
    grokking (t: the median grok step over their seeds, a seed that never groks counted at the budget's end; λ_c:
    the geometric mean of λ_lo and λ_hi); None with fewer than MIN_POINTS."""
    lo, hi = boundary(members)
    if lo is None or hi is None:
        return None
    lc = float(np.sqrt(lo * hi)) if lo > 0 else hi / 2
    reg = regimes(members)
    pts = []
    for wd in values_of(members, WD):
        ms = [m for m in members if m["values"][WD] == wd]
        if wd >= hi and reg[wd] == "grokking":
            pts.append((wd, float(np.median([grok_step(m) or m["steps"] for m in ms]))))
    if len(pts) < MIN_POINTS:
        return None
    x, y = np.log([wd - lc for wd, _ in pts]), np.log([t for _, t in pts])
    slope, icpt = np.polyfit(x, y, 1)
    r2 = 1 - np.sum((y - (slope * x + icpt)) ** 2) / np.sum((y - y.mean()) ** 2)
    return float(-slope), float(r2), pts


def rule_exponent(runs: dict) -> tuple[bool | None, str]:
    """holds if the median grok step over the weight decays from the boundary up whose regime is grokking (at least
    3 of them; a seed that never groks counted at the budget's end) follows a power law in λ - λ_c (least squares
    in log-log, R² ≥ 0.9; λ_c the geometric mean of the boundary's two ends) with an exponent ν inside their
    interval [0.725, 0.799]; does not hold otherwise; not testable without a boundary or with fewer than 3 such
    weight decays."""
    fit = power_law(runs[SETTING])
    if fit is None:
        return None, "fewer than 3 weight decays above a boundary"
    nu, r2, pts = fit
    said = f"ν = {nu:.3f}, R² = {r2:.2f} over " + ", ".join(f"{wd:g} ({t:,.0f})" for wd, t in pts)
    return bool(r2 >= MIN_R2 and CI_NU[0] <= nu <= CI_NU[1]), said


def movement(m: dict, name: str, t: float) -> float:
    """How far a diagnostic moves across the window [t/2, 2t] of a member's curve."""
    return abs(at_step(m, name, 2 * t) - at_step(m, name, t / 2))


def rule_tracks(runs: dict) -> tuple[bool | None, str]:
    """holds if both diagnostics move across grokking: for each grokking seed, its change from half to twice its
    grok step against the median change over that same window in the seeds that memorise without grokking (the
    control); the median over grokking seeds of that ratio is at least 2 for each diagnostic, and the diagnostic
    moves at all; not testable with fewer than 3 seeds of either."""
    ms = runs[SETTING]
    grok = [m for m in ms if regime(m) == "grokking"]
    memo = [m for m in ms if regime(m) == "memorisation"]
    if len(grok) < 3 or len(memo) < 3:
        return None, f"{len(grok)} grokking and {len(memo)} memorising seeds"
    out, ok = [], True
    for name in ("head_similarity", "entropy_spread"):
        g = np.array([movement(m, name, grok_step(m)) for m in grok])
        c = np.array([np.median([movement(x, name, grok_step(m)) for x in memo]) for m in grok])
        ratio = float(np.median(g / np.maximum(c, 1e-12)))
        ok &= bool(np.median(g) > 0 and ratio >= TRACKS)
        out.append(f"{name}: {np.median(g):.3g} across grokking, x{ratio:.3g} the control's over the same windows")
    return bool(ok), "; ".join(out) + f" ({len(grok)} grokking, {len(memo)} memorising seeds)"


def rule_identical_at_collapse(runs: dict) -> tuple[bool | None, str]:
    """holds if every seed of every weight decay whose regime is collapse ends with a head similarity of at least
    0.99 (identical attention patterns: every pair of heads' patterns the same up to scale); not testable when no
    weight decay collapses."""
    reg = regimes(runs[SETTING])
    coll = [wd for wd, r in reg.items() if r == "collapse"]
    if not coll:
        return None, "no weight decay collapses"
    ends = {wd: [m["curve"]["head_similarity"][-1] for m in runs[SETTING] if m["values"][WD] == wd] for wd in coll}
    # each seed compared, not min(v): Python's min skips a NaN (a diverged seed's) that is not first
    return bool(all(x >= IDENTICAL for v in ends.values() for x in v)), "final head similarity at " + "; ".join(
        f"{wd:g}: {', '.join(f'{x:.2f}' for x in v)}" for wd, v in ends.items())


def grok_spread(runs: dict) -> str:
    return spread([grok_step(m) for m in runs[SETTING]])


STUDY = Study(
    name="wd_regimes",
    title="Weight decay regimes in grokking (Verma 2026), at CPU scale",
    preset="nanda-tiny", steps=3000,
    scale="nanda-tiny ((x0 + x1) mod 37, d 64, one layer, grokfast, AdamW lr 3e-3), 3,000 full-batch steps",
    settings=(Setting(SETTING, grid=((WD, GRID),)),),
    claims=(
        Claim(SIDE, "\"the weight-decay axis separates memorization, developmental grokking, and collapse\"", SOURCE,
              rule_separates),
        Claim(SIDE, "\"A near-transition logistic fit localizes the memorization-to-developmental boundary at "
                    "λ_c=0.0158 (95% CI [0.0109, 0.0200], N=210)\"", SOURCE, rule_boundary),
        Claim(SIDE, "\"a power-law fit gives an empirical exponent ν=0.757 (CI [0.725, 0.799])\"", SOURCE,
              rule_exponent),
        Claim(SIDE, "\"collapse (λ=10, identical attention patterns)\"", "Verma (2026), arXiv 2605.20441v1, "
              "abstract (the HTML version's)", rule_identical_at_collapse),
        Claim(SIDE, "\"two cheap online diagnostics, mean pairwise attention-head cosine similarity and entropy "
                    "standard deviation, that track training dynamics from attention activations alone\"", SOURCE,
              rule_tracks),
    ),
)
