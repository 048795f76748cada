"""The verdict rules of Prieto et al.'s claims: pure functions of one seed's per-setting summaries (what
`study.member_summary` extracts from a sweep member). A rule's docstring (its first paragraph) is the rule
results.md prints: the code and its description change together. Each returns True (holds in this seed), False
(does not hold) or None (not testable in this seed); `verdict` pools the seeds the way every study here does.
"""

from __future__ import annotations

import numpy as np

from miiii.rules import verdict  # noqa: F401 - how the seeds pool, as in every study

ONSET = 0.5  # a task is in Softmax Collapse once half of its training samples are (their notebook's "50% zero terms")
WINDOW = 100  # steps averaged at each end of a validation-accuracy gain
STALLED = 0.02  # "stopping learning altogether": a gain below 2 accuracy points from the onset to the end


def grokked(s: dict) -> int:
    """How many tasks of a member grokked (validation accuracy >= 0.99 at some step)."""
    return sum(v is not None for v in s["grok"].values())


def collapsed_first(nowd: dict) -> list[str]:
    """The tasks that reach Softmax Collapse before they grok (or never grok), with a gain measured after the onset
    (an onset within the last 200 steps has none)."""
    return [q for q, t in nowd["onset"].items() if t is not None and nowd["gain"][q] is not None
            and (nowd["grok"][q] is None or nowd["grok"][q] > t)]


def rule_sc_stops(nowd: dict, wd: dict) -> bool | None:
    """holds if, without weight decay (float32 softmax), at least one task reaches Softmax Collapse (half of its
    training samples with a correct-class probability of exactly 1) before it groks, none of those tasks groks
    afterwards, their median validation-accuracy gain from the onset to the end (means over 100 steps) is below
    0.02, and the same seed with weight decay (the control) groks every one of them; not testable when no task
    collapses at least 200 steps before the end without grokking first, or when the control does not grok them."""
    hit = collapsed_first(nowd)
    if not hit or any(wd["grok"][q] is None for q in hit):
        return None
    return bool(all(nowd["grok"][q] is None for q in hit) and np.median([nowd["gain"][q] for q in hit]) < STALLED)


def rule_prevents_sc(mitigated: dict) -> bool | None:
    """holds if no task reaches Softmax Collapse in StableMax's own probabilities; not testable here, since the
    collapse these runs record reads the softmax of the logits (train.loss=stablemax does not change the metric),
    which a StableMax run is not trained through (that softmax does collapse: 1.00 at the end, the per-setting
    table)."""
    return None


def rule_prevents_nlm(ortho: dict) -> bool | None:
    """holds if ⊥Grad's updates have no component along the weights once the training set is fit (Prieto et al.'s
    naïve loss minimisation: the gradient aligned with the weights, scaling the logits); not testable here, since
    these runs record neither the gradient's alignment with the weights nor the update's, and the weight norm they do
    record grows under any update, orthogonal or not (the per-setting table)."""
    return None


def rule_enables(mitigated: dict, nowd: dict, wd: dict) -> bool | None:
    """holds if the mitigated run without weight decay groks at least as many tasks as the same seed with weight
    decay, and more than the float32 softmax run without weight decay; not testable when that run groks as many
    tasks as the weight-decay run (there is nothing left to enable)."""
    if grokked(nowd) >= grokked(wd):
        return None
    return bool(grokked(mitigated) >= grokked(wd) and grokked(mitigated) > grokked(nowd))


def rule_quick(ortho: dict, wd: dict) -> bool | None:
    """holds if ⊥Grad without weight decay groks at least as many tasks as the same seed with weight decay, and the
    median grok step of the tasks that grok in both runs is earlier with ⊥Grad; not testable when no task groks in
    both."""
    both = [q for q, t in ortho["grok"].items() if t is not None and wd["grok"][q] is not None]
    if not both:
        return None
    return bool(grokked(ortho) >= grokked(wd) and np.median([wd["grok"][q] - ortho["grok"][q] for q in both]) > 0)


def rule_precision(f16: dict, f32: dict, f64: dict) -> bool | None:
    """holds if every task that reaches Softmax Collapse in float16 (without weight decay) reaches it strictly
    earlier than in float32, and in float32 no later than in float64 (a run that never collapses counts as collapsing
    after its end); not testable when no task collapses in float16."""
    late = lambda t: np.inf if t is None else t  # noqa: E731
    tasks = [q for q, t in f16["onset"].items() if t is not None]
    if not tasks:
        return None
    return bool(all(f16["onset"][q] < late(f32["onset"][q]) <= late(f64["onset"][q]) for q in tasks))
