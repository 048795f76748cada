"""Omnigrok (Liu, Michaud & Tegmark, arXiv 2210.01117): a large initial weight norm makes grokking appear, and
holding the weight norm fixed removes it. Judged on nanda-tiny: the preset's initialisation scaled by 3
(model.init_scale), and both scales with the global norm held at the preset's initial norm after every step
(optim.fixed_norm, weight decay off, as their constrained runs train). Grokking's delay is a member's grok step less
its fit step (disputes.delay); a member that fits and never groks counts at the budget's end.
"""

from __future__ import annotations

from experiments.disputes import Claim, Setting, Study, grokked_share, median_delay

INIT_NORM = 29.0  # nanda-tiny's global weight norm at initialisation (28.97-29.16 over seeds 0-2; tested)
LARGE = 3.0  # the large initialisation: every initial weight times this
MORE = 1.5  # "grokking appears": the median delay grows by at least this factor
GONE = 0.25  # "eliminate grokking": a median delay at most this share of the free run's
MAJORITY = 0.8
HELD = ("optim.weight_decay=0", f"optim.fixed_norm={INIT_NORM:g}")
SETTINGS = (
    Setting("init x1", ()),
    Setting("init x3", (f"model.init_scale={LARGE:g}",)),
    Setting("init x1, norm held", HELD),
    Setting("init x3, norm held", (f"model.init_scale={LARGE:g}", *HELD)),
)
SOURCE = "arXiv 2210.01117"
SIDE = "Liu, Michaud & Tegmark (2022)"


def _said(runs: dict, *settings: str) -> str:
    return "; ".join(f"{s}: median delay {median_delay(runs[s]):,.0f} steps, {grokked_share(runs[s]):.0%} grok"
                     for s in settings)


def rule_large_init(runs: dict) -> tuple[bool | None, str]:
    """holds if, with the preset's weight decay, the initialisation scaled by 3 still groks in at least 80 % of
    the seeds and its median delay (grok step less fit step) is at least 1.5 times the preset's; not testable when
    the preset shows no delay (a median of 0) or never fits."""
    base = median_delay(runs["init x1"])
    if not base > 0:
        return None, _said(runs, "init x1", "init x3")
    ok = grokked_share(runs["init x3"]) >= MAJORITY and median_delay(runs["init x3"]) >= MORE * base
    return bool(ok), _said(runs, "init x1", "init x3")


def rule_eliminate(runs: dict) -> tuple[bool | None, str]:
    """holds if, with the global weight norm held at the preset's initial norm after every step (no weight decay),
    every seed of both initialisations groks and each median delay is at most a quarter of the free preset's; not
    testable when the free preset shows no delay."""
    free = median_delay(runs["init x1"])
    held = ("init x1, norm held", "init x3, norm held")
    if not free > 0:
        return None, _said(runs, "init x1", *held)
    ok = all(grokked_share(runs[s]) == 1.0 and median_delay(runs[s]) <= GONE * free for s in held)
    return bool(ok), _said(runs, "init x1", *held)


STUDY = Study(
    name="omnigrok",
    title="Omnigrok (Liu, Michaud & Tegmark 2022): the initial weight norm and grokking, at CPU scale",
    preset="nanda-tiny", steps=3000,
    scale="nanda-tiny ((x0 + x1) mod 37, d 64, one layer, grokfast, AdamW lr 3e-3, weight decay 1), 3,000 "
          f"full-batch steps; the norm held at {INIT_NORM:g}, the preset's initial norm",
    settings=SETTINGS,
    claims=(
        Claim(SIDE, "[paraphrase] a large initial weight norm makes grokking appear (their LU mechanism: training "
                    "that starts at a norm w above the generalising w_c memorises first and generalises only as w "
                    "shrinks; \"Grokking can result from a mismatch between training and test loss against model "
                    "weight norm\")", f"{SOURCE} (ICLR 2023), §1, A1; the LU mechanism of §2-3", rule_large_init),
        Claim(SIDE, "\"In the reverse direction, we are able to eliminate grokking for algorithmic datasets.\" (by "
                    "constraining the weight norm)", f"{SOURCE}, abstract", rule_eliminate),
    ),
)
