"""The output scale as grokking's control: Kumar, Bordelon, Gershman & Pehlevan ("Grokking as the Transition from
Lazy to Rich Training Dynamics", arXiv 2310.06110) against Singh, Misra & Orvieto ("Explaining Grokking in
Transformers through the Lens of Inductive Bias", arXiv 2602.06702), judged side by side on the same runs.

On nanda-tiny: the logits times α (model.logit_scale: Kumar et al.'s output scale) for α in ALPHAS, each α one
vmapped sweep over the learning rates and weight decays of the grid and every seed; and LayerNorm before each block
(pre) or after each residual sum (post; model.ln_position) beside the preset's none. Grokking's delay is a member's
grok step less its fit step; a member that fits and never groks counts at the budget's end.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from experiments.disputes import Claim, Setting, Study, grok_step, grokked_share, median_delay

ALPHAS = (0.5, 1.0, 2.0, 4.0)
LRS, WDS = (1e-3, 3e-3), (0.0, 0.1, 1.0)
BASE = (3e-3, 1.0)  # the preset's learning rate and weight decay
TWICE = 2.0  # "precisely controls" / "strongly modulates" / "confounded": a factor of at least 2
ALPHA = 0.05  # a two-sided Mann-Whitney U test's level
MAJORITY = 0.8
MIN_GROKKED = 3  # members of a cell that grokked, fewer than which its delay ratio is not read
MARGIN = 1.5  # an effect: a delay ratio at least this far from 1, either way
LN = {"LayerNorm none": "α 1", "LayerNorm pre": "LayerNorm pre", "LayerNorm post": "LayerNorm post"}
SETTINGS = (
    *(Setting(f"α {a:g}", (f"model.logit_scale={a:g}",), (("optim.lr", LRS), ("optim.weight_decay", WDS)))
      for a in ALPHAS),
    Setting("LayerNorm pre", ("model.layer_norm=true",)),
    Setting("LayerNorm post", ("model.layer_norm=true", "model.ln_position=post")),
)
KUMAR, SINGH = "Kumar et al. (2024)", "Singh, Misra & Orvieto (2026)"


def at(members: list[dict], lr: float, wd: float) -> list[dict]:
    """The members of a grid setting at one learning rate and weight decay (a plain setting: all, at the preset's)."""
    if not members or not members[0]["values"]:
        return members if (lr, wd) == BASE else []
    return [m for m in members if np.isclose(m["values"]["optim.lr"], lr)
            and np.isclose(m["values"]["optim.weight_decay"], wd)]


def alpha_ratio(runs: dict, lr: float, wd: float) -> float:
    """The median delay at the largest α over the one at the smallest, at one learning rate and weight decay; NaN
    when either α has fewer than MIN_GROKKED members that grokked there (a ratio of censored delays says nothing) or
    either delay is 0 (no ratio: rule_confounded reads it both ways, r and 1 / r)."""
    big, small = (at(runs[f"α {a:g}"], lr, wd) for a in (ALPHAS[-1], ALPHAS[0]))
    if min(sum(grok_step(m) is not None for m in ms) for ms in (big, small)) < MIN_GROKKED:
        return float("nan")
    num, den = median_delay(big), median_delay(small)
    return num / den if num > 0 and den > 0 else float("nan")


def rule_output_scale(runs: dict) -> tuple[bool | None, str]:
    """holds if, at the preset's learning rate and weight decay, the median delay moves strictly one way with α
    over 0.5, 1, 2, 4 (Kumar et al.'s lazier, larger α delays more; the quoted sentence names no direction) and the
    extremes differ by a factor of at least 2 (the output scale sets the delay), at least 3 seeds of every α having
    grokked (a median of delays censored at the budget's end is a bound, not a delay)."""
    cells = [at(runs[f"α {a:g}"], *BASE) for a in ALPHAS]
    meds = [median_delay(ms) for ms in cells]
    grokked = [sum(grok_step(m) is not None for m in ms) for ms in cells]
    steps = list(zip(meds, meds[1:], strict=False))
    one_way = all(b > a for a, b in steps) or all(b < a for a, b in steps)
    lo, hi = min(meds), max(meds)
    ok = one_way and lo > 0 and hi >= TWICE * lo and min(grokked) >= MIN_GROKKED
    return bool(ok), "median delay at α " + ", ".join(f"{a:g}: {d:,.0f} ({g} grokked)" for a, d, g in
                                                      zip(ALPHAS, meds, grokked, strict=True))


def rule_without_wd(runs: dict) -> tuple[bool | None, str]:
    """holds if, without weight decay, some α and learning rate groks in at least 80 % of the seeds."""
    shares = {(a, lr): grokked_share(at(runs[f"α {a:g}"], lr, 0.0)) for a in ALPHAS for lr in LRS}
    best = max(shares, key=shares.get)
    return bool(shares[best] >= MAJORITY), (f"best without weight decay: α {best[0]:g}, lr {best[1]:g}, "
                                            f"{shares[best]:.0%} of the seeds grok")


def rule_ln_position(runs: dict) -> tuple[bool | None, str]:
    """holds if two of LayerNorm's positions (none, pre, post), at the preset's learning rate and weight decay,
    differ in median grok step by a factor of at least 2, with a two-sided Mann-Whitney U test p < 0.05 (a run
    that never groks counts at the budget's end)."""
    steps = {k: [float(grok_step(m) or m["steps"]) for m in at(runs[v], *BASE)] for k, v in LN.items()}
    said, ok = [], False
    names = list(steps)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            f = np.median(steps[a]) / np.median(steps[b])
            p = stats.mannwhitneyu(steps[a], steps[b]).pvalue
            ok |= max(f, 1 / f) >= TWICE and p < ALPHA
            said.append(f"{a.split()[-1]}/{b.split()[-1]} x{f:.2f} (p = {p:.2g})")
    return bool(ok), "median grok steps " + ", ".join(f"{k.split()[-1]} {np.median(v):,.0f}" for k, v in
                                                       steps.items()) + "; " + ", ".join(said)


def rule_confounded(runs: dict) -> tuple[bool | None, str]:
    """holds if the output scale has an effect at the preset's learning rate and weight decay (the median delay at
    α 4 over α 0.5 at least 1.5 from 1, either way) and at some other learning rate and weight decay of the grid that
    ratio lies at least 1.5 from 1 on the other side, or differs from the preset's by a factor of at least 2; cells
    where fewer than 3 members of either α grokked are not read; not testable without an effect at the preset's."""
    base = alpha_ratio(runs, *BASE)
    others = {(lr, wd): alpha_ratio(runs, lr, wd) for lr in LRS for wd in WDS if (lr, wd) != BASE}
    said_others = ", ".join(f"lr {lr:g}, wd {wd:g}: x{r:.2f}" for (lr, wd), r in others.items())
    if not np.isfinite(base) or max(base, 1 / base) < MARGIN:
        return None, f"no effect of α at the preset (x{base:.2f}); {said_others}"
    flipped = lambda r: r <= 1 / MARGIN if base > 1 else r >= MARGIN  # noqa: E731
    ok = any(np.isfinite(r) and (flipped(r) or max(r / base, base / r) >= TWICE) for r in others.values())
    return bool(ok), f"α 4 / α 0.5 delay: x{base:.2f} at the preset; {said_others}"


STUDY = Study(
    name="readout_scale",
    title="The output scale and LayerNorm as grokking's controls: Kumar et al. (2024) against Singh, Misra & "
          "Orvieto (2026), at CPU scale",
    preset="nanda-tiny", steps=3000,
    scale="nanda-tiny ((x0 + x1) mod 37, d 64, one layer, grokfast; AdamW lr 3e-3, weight decay 1 unless the grid "
          "says), 3,000 full-batch steps",
    settings=SETTINGS,
    claims=(
        Claim(KUMAR, "\"We find that the key determinants of grokking are the rate of feature learning -- which can "
                     "be controlled precisely by parameters that scale the network output\"",
              "arXiv 2310.06110 (ICLR 2024), abstract", rule_output_scale),
        Claim(KUMAR, "\"a two layer neural network which exhibits grokking without regularization\" (here the "
                     "one-layer transformer, weight decay 0)", "arXiv 2310.06110 (ICLR 2024), abstract",
              rule_without_wd),
        Claim(SINGH, "\"architectural choices such as the position of Layer Normalization (LN) strongly modulates "
                     "grokking speed\"", "arXiv 2602.06702, abstract", rule_ln_position),
        Claim(SINGH, "\"using readout scale as a control for lazy training can be confounded by learning rate and "
                     "weight decay in our setting\"", "arXiv 2602.06702, abstract", rule_confounded),
    ),
)
