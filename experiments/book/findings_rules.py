"""The verdict rules of the book's findings: pure functions of the measures `findings.member_measures` keeps
(results/book/findings.json). A rule's docstring (its first paragraph) is the rule findings.md prints. A per-seed
rule returns True (holds in this seed), False or None (not testable in this seed: the same seed's untrained
parameters pass it too, so passing says nothing about training); `miiii.rules.verdict` pools the seeds. An ablation
rule reads every seed of the ablation and of its baseline at once.

Attention is the mean pattern over held-out inputs (heads averaged: the book's model has one), so a mass is the
mean of the per-input masses. Positions: the query at `answer_start + j` writes answer token j; an addition query
that writes sum digit j reads column j of a and of b (`reads`), a reversal query that writes digit j reads input
position n - 1 - j.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

MAJORITY = 0.5  # "attends to": at least half of the query's attention
PERFECT = 0.9  # "a perfect anti-diagonal": at least 0.9 on the mirror position
RANK = 0.5  # the rank correlation that counts as clustering by carry role
SOLVED = 0.99  # held-out exact match of a run that solves the task
FAILED = 0.5  # held-out exact match below which a run fails the task
SAME = 0.05  # teacher-forced and autoregressive exact match this close are one reading


def _attn(m: dict, layer: int, which: str) -> np.ndarray:
    return np.asarray(m[which]["attention"][layer], np.float64)  # (T, T): query, key


def read_mass(m: dict, layer: int, which: str = "trained") -> list[float]:
    """Per answer query j: the mass the layer puts on the positions it reads (`reads[j]`)."""
    a = _attn(m, layer, which)
    return [float(a[m["answer_start"] + j, keys].sum()) for j, keys in enumerate(m["reads"])]


def previous_output_mass(m: dict, layer: int, which: str = "trained") -> float:
    """The mass a query holding an output digit (the second one on) puts on the output digit just before it,
    averaged over those queries."""
    a = _attn(m, layer, which)
    queries = range(m["answer_start"] + 2, a.shape[0])
    return float(np.mean([a[q, q - 1] for q in queries]))


def entropy(pattern, answer_start: int) -> float:
    """The attention rows' entropy (nats), averaged over the answer queries: how spread a layer's reading is."""
    a = np.asarray(pattern, np.float64)[answer_start:]
    return float(np.mean([-(r[r > 0] * np.log(r[r > 0])).sum() for r in a]))


def carry_rank(m: dict, which: str = "trained") -> float:
    """Spearman's rho between the 45 digit pairs' embedding cosines and -|d_i - d_j| (the difference of their carry
    roles: digit d makes a carry with d of the 10 digits it may meet)."""
    cos = np.asarray(m[which]["digit_cos"], np.float64)
    i, j = np.triu_indices(10, 1)
    return float(spearmanr(cos[i, j], -np.abs(i - j)).statistic)


def eight_nine_apart(m: dict, which: str = "trained") -> bool:
    """8 and 9 nearer each other (cosine) than either is to 0 or to 1."""
    cos = np.asarray(m[which]["digit_cos"], np.float64)
    return bool(cos[8, 9] > max(cos[8, 0], cos[8, 1], cos[9, 0], cos[9, 1]))


def solved(m: dict) -> bool:
    """The seed's model solves its task (held-out exact match, autoregressive, at least 0.99): the trained model a
    sentence about what the model learned describes."""
    return m["autoregressive"] >= SOLVED


def _controlled(m: dict, passes) -> bool | None:
    """`passes(which)` on the trained parameters, not testable when the seed does not solve its task or its
    untrained parameters pass too."""
    if not solved(m) or passes("init"):
        return None
    return bool(passes("trained"))


def rule_layer1_columns(m: dict) -> bool | None:
    """holds if layer 1 puts at least half of its attention on the two digits of the query's column (column j of a
    and of b, for the query that writes sum digit j) for every column j; not testable in a seed that does not solve
    the task or whose untrained parameters pass too."""
    return _controlled(m, lambda which: min(read_mass(m, 0, which)) >= MAJORITY)


def rule_columns(m: dict) -> bool | None:
    """holds if, in some layer, every query that writes sum digit j puts at least half of its attention on column j
    of a and of b; not testable in a seed that does not solve the task or whose untrained parameters pass too."""
    return _controlled(m, lambda which: any(min(read_mass(m, i, which)) >= MAJORITY for i in range(m["n_layers"])))


def rule_layer2_carries(m: dict) -> bool | None:
    """holds if layer 2 puts at least half of its attention, averaged over the queries that hold an output digit
    (the second one on), on the output digit just before it, and more than layer 1 does; not testable in a seed
    that does not solve the task or whose untrained parameters pass too."""
    def passes(which):
        two = previous_output_mass(m, 1, which)
        return two >= MAJORITY and two > previous_output_mass(m, 0, which)
    return _controlled(m, passes)


def rule_more_complex(m: dict) -> bool | None:
    """holds if layer 2's attention on 999+001 is more spread (higher entropy, averaged over the answer queries)
    than on 123+456 by more than the same difference in the seed's untrained parameters (in size); does not hold if
    it is not more spread; not testable when it is, by no more than the untrained difference, or in a seed that
    does not solve the task."""
    def diff(which):
        p = m[which]["probes"]
        return entropy(p["cascade"][1], m["answer_start"]) - entropy(p["no_carry"][1], m["answer_start"])
    d = diff("trained")
    if not solved(m):
        return None
    if d <= 0:
        return False
    return True if d > abs(diff("init")) else None


def _mirror(m: dict, at_least: float) -> bool | None:
    return _controlled(m, lambda which: any(min(read_mass(m, i, which)) >= at_least for i in range(m["n_layers"])))


def rule_anti_diagonal(m: dict) -> bool | None:
    """holds if, in some layer, every query that writes reversed digit j puts at least half of its attention on
    input position n - 1 - j; not testable in a seed that does not solve the task or whose untrained parameters
    pass too."""
    return _mirror(m, MAJORITY)


def rule_perfect_anti_diagonal(m: dict) -> bool | None:
    """holds if, in some layer, every query that writes reversed digit j puts at least 0.9 of its attention on input
    position n - 1 - j (a perfect anti-diagonal); not testable in a seed that does not solve the task or whose
    untrained parameters pass too."""
    return _mirror(m, PERFECT)


def rule_carry_role(m: dict) -> bool | None:
    """holds if the digit embeddings' cosine similarity falls with the difference of the digits' carry roles:
    Spearman's rho between the 45 pairs' cosines and -|d_i - d_j| at least 0.5; not testable in a seed that does
    not solve the task or whose untrained embeddings reach 0.5 too."""
    return _controlled(m, lambda which: carry_rank(m, which) >= RANK)


def rule_eight_nine(m: dict) -> bool | None:
    """holds if 8 and 9 are nearer each other (cosine of their embeddings) than either is to 0 or to 1; not
    testable in a seed that does not solve the task or whose untrained embeddings are so too."""
    return _controlled(m, lambda which: eight_nine_apart(m, which))


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([m[key] for m in runs]))


def rule_degraded(ablation: list[dict], base: list[dict]) -> bool:
    """holds if every seed of the ablation ends at least 0.05 below the baseline's median held-out exact match
    (autoregressive)."""
    return all(m["autoregressive"] <= _median(base, "autoregressive") - SAME for m in ablation)


def rule_no_columns(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every seed without positional embeddings fails the task (held-out exact match, autoregressive,
    below 0.5); not testable when the baseline's median seed does not solve it (at least 0.99)."""
    if _median(base, "autoregressive") < SOLVED:
        return None
    return max(m["autoregressive"] for m in ablation) < FAILED


def rule_mismatch(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every seed without the causal mask reaches at least 0.99 held-out exact match teacher-forced but
    below 0.5 autoregressively, while every baseline seed's two readings lie within 0.05; not testable when a
    baseline seed's do not."""
    if any(abs(m["teacher_forced"] - m["autoregressive"]) > SAME for m in base):
        return None
    return all(m["teacher_forced"] >= SOLVED and m["autoregressive"] < FAILED for m in ablation)


def carry_gap(m: dict) -> float | None:
    """Exact match on sums without a carry minus exact match on sums with two or more (None when a group is
    empty)."""
    by = {int(k): v for k, v in m["by_carries"].items()}
    none, many = by.get(0), [v for k, v in by.items() if k >= 2 and v[0]]
    if not none or not none[0] or not many:
        return None
    return none[1] - sum(n * a for n, a in many) / sum(n for n, _ in many)


def rule_limited_carries(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every one-layer seed's exact match on held-out sums with two or more carries falls short of its
    exact match on sums without a carry by at least 0.05 more than the baseline's median seed's does; not testable
    when a seed lacks either group."""
    a, b = [carry_gap(m) for m in ablation], [carry_gap(m) for m in base]
    if None in a or None in b:
        return None
    return min(a) >= float(np.median(b)) + SAME


def rule_lr_fails(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if no seed at lr 1e-3 solves the task within the book's budget (held-out exact match, autoregressive,
    at least 0.99) while the baseline at lr 0.01 does in some seed; not testable when no baseline seed does."""
    if not any(m["autoregressive"] >= SOLVED for m in base):
        return None
    return all(m["autoregressive"] < SOLVED for m in ablation)
