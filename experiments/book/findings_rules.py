"""The verdict rules of the book's findings: pure functions of the measures `findings.member_measures` keeps
(results/book/findings.json). A rule's docstring (its first paragraph) is the rule findings.md prints. A per-seed
rule returns True (holds in this seed), False or None (not testable in this seed: its model does not solve its
task, so it is not the trained model the sentence describes, or the same seed's untrained parameters pass too);
`miiii.rules.verdict` pools the seeds. An ablation rule reads every seed of the ablation and of its baseline.

Attention is the mean pattern over held-out inputs (heads averaged: the book's model has one), so a mass is the
mean of the per-input masses. Which query stands for answer digit j has two readings, and every attention rule is
applied in both (findings.md shows them side by side): *predicts*, the query at answer_start + j, whose output is
digit j (the causal model's computation); *holds*, the query at answer_start + 1 + j, the position whose token is
digit j (how the book reads its heatmaps, ch. 4 §4.1: "Position 8 (the 9, ones digit of the sum)"). An addition
query for sum digit j reads column j of a and of b (`reads[j]`), a reversal query for digit j input position
n - 1 - j; the carry into digit j comes from digit j - 1, at answer_start + j.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

READINGS = {"predicts": 0, "holds": 1}  # the query for answer digit j: answer_start + j + this
MAJORITY = 0.5  # "attends to": at least half of the query's attention
BOTH = 0.25  # "both operands": each of the column's two digits at least a quarter
PERFECT = 0.9  # "a perfect anti-diagonal": at least 0.9 on the mirror position
RANK = 0.5  # the rank correlation that counts as ordering digits by carry role
MORE_SPREAD = 0.1  # nats: "more complex" layer-2 attention, beyond rounding
SOLVED = 0.99  # held-out exact match of a run that solves the task
FAILED = 0.5  # held-out exact match below which a run fails the task
SAME = 0.05  # accuracies this close are one level


def _attn(m: dict, layer: int, which: str) -> np.ndarray:
    return np.asarray(m[which]["attention"][layer], np.float64)  # (T, T): query, key


def column_queries(m: dict, reading: str) -> list[tuple[int, list[int]]]:
    """(query, the positions it reads) per answer digit j that has a column (or a mirror position), in `reading`."""
    a0, shift = m["answer_start"], READINGS[reading]
    return [(a0 + j + shift, keys) for j, keys in enumerate(m["reads"])]


def read_masses(m: dict, layer: int, reading: str, which: str = "trained") -> list[list[float]]:
    """Per answer digit j: the layer's attention on each position digit j reads (`reads[j]`)."""
    a = _attn(m, layer, which)
    return [[float(a[q, k]) for k in keys] for q, keys in column_queries(m, reading)]


def read_mass(m: dict, layer: int, reading: str = "predicts", which: str = "trained") -> list[float]:
    """Per answer digit j: the layer's attention on all the positions digit j reads, summed."""
    return [sum(v) for v in read_masses(m, layer, reading, which)]


def carry_mass(m: dict, layer: int, reading: str, which: str = "trained") -> list[float]:
    """Per sum digit j >= 1 whose query exists: the layer's attention from digit j's query on the output digit
    before it (digit j - 1, at answer_start + j; in the *predicts* reading that is the query's own position)."""
    a = _attn(m, layer, which)
    a0, shift = m["answer_start"], READINGS[reading]
    return [float(a[a0 + j + shift, a0 + j]) for j in range(1, a.shape[0] - a0 - shift)]


def entropy(pattern, answer_start: int) -> float:
    """The attention rows' entropy (nats), averaged over the answer queries: how spread a layer's reading is."""
    a = np.asarray(pattern, np.float64)[answer_start:]
    return float(np.mean([-(r[r > 0] * np.log(r[r > 0])).sum() for r in a]))


def carry_rank(m: dict, which: str = "trained") -> float:
    """Spearman's rho between the 45 digit pairs' embedding cosines and -|d_i - d_j|: digit d makes a carry with d
    of the 10 digits it may meet, so carry role and numeric closeness are the same order here."""
    cos = np.asarray(m[which]["digit_cos"], np.float64)
    i, j = np.triu_indices(10, 1)
    return float(spearmanr(cos[i, j], -np.abs(i - j)).statistic)


def eight_nine_apart(m: dict, which: str = "trained") -> bool:
    """8 and 9 nearer each other (cosine) than either is to 0 or to 1."""
    cos = np.asarray(m[which]["digit_cos"], np.float64)
    return bool(cos[8, 9] > max(cos[8, 0], cos[8, 1], cos[9, 0], cos[9, 1]))


def column_positions_pair(m: dict, which: str = "trained") -> bool:
    """For every column j, the positional embeddings of its two operand digits are each other's nearest (cosine)
    among the operand digits' positions."""
    cos = np.asarray(m[which]["pos_cos"], np.float64)
    operands = sorted(k for keys in m["reads"] for k in keys)
    for a, b in m["reads"]:
        for x, y in ((a, b), (b, a)):
            if cos[x, y] <= max(cos[x, k] for k in operands if k not in (x, y)):
                return False
    return True


def solved(m: dict) -> bool:
    """The seed's model solves its task (held-out exact match, autoregressive, at least 0.99)."""
    return m["autoregressive"] >= SOLVED


def _controlled(m: dict, passes) -> bool | None:
    """`passes(which)` on the trained parameters; not testable when the seed does not solve its task or its
    untrained parameters pass too."""
    if not solved(m) or passes("init"):
        return None
    return bool(passes("trained"))


def _aligns(m: dict, layer: int, reading: str, which: str) -> bool:
    return all(sum(v) >= MAJORITY and min(v) >= BOTH for v in read_masses(m, layer, reading, which))


def rule_layer1_columns(m: dict, reading: str = "predicts") -> bool | None:
    """holds if, for every column j, layer 1 puts at least half of digit j's query's attention on column j of a and
    of b, at least a quarter on each; not testable in a seed that does not solve the task or whose untrained
    parameters pass too."""
    return _controlled(m, lambda which: _aligns(m, 0, reading, which))


def operand_alignment(m: dict, layer: int = 0, which: str = "trained") -> list[float]:
    """Per column j: the layer's attention from operand b's digit j (the later of the column's two digits, so the
    causal model lets it read the earlier) on operand a's digit j."""
    a = _attn(m, layer, which)
    return [float(a[max(x, y), min(x, y)]) for x, y in m["reads"]]


def rule_layer1_operand_columns(m: dict) -> bool | None:
    """holds if, for every column j, layer 1 at operand b's digit j puts at least half of its attention on operand
    a's digit j (the same column); not testable in a seed that does not solve the task or whose untrained
    parameters pass too."""
    return _controlled(m, lambda which: all(v >= MAJORITY for v in operand_alignment(m, 0, which)))


def rule_columns(m: dict, reading: str = "predicts") -> bool | None:
    """holds if, in some layer, for every column j, digit j's query puts at least half of its attention on column j
    of a and of b, at least a quarter on each; not testable in a seed that does not solve the task or whose
    untrained parameters pass too."""
    return _controlled(m, lambda which: any(_aligns(m, i, reading, which) for i in range(m["n_layers"])))


def rule_layer2_carries(m: dict, reading: str = "predicts") -> bool | None:
    """holds if, for every sum digit j >= 1, layer 2 puts at least half of digit j's query's attention on the output
    digit before it (digit j - 1), and more than layer 1 does; not testable in a seed that does not solve the task
    or whose untrained parameters pass too."""
    def passes(which):
        two, one = carry_mass(m, 1, reading, which), carry_mass(m, 0, reading, which)
        return min(two) >= MAJORITY and all(t > o for t, o in zip(two, one, strict=True))
    return _controlled(m, passes)


def rule_more_complex(m: dict) -> bool | None:
    """holds if layer 2's attention on 999+001 is more spread (higher entropy, averaged over the answer queries)
    than on 123+456 by at least 0.1 nats and by more than the same difference in the seed's untrained parameters;
    does not hold if it is not more spread by 0.1 nats; not testable when it is but no more than untrained, or in a
    seed that does not solve the task."""
    def diff(which):
        p = m[which]["probes"]
        return entropy(p["cascade"][1], m["answer_start"]) - entropy(p["no_carry"][1], m["answer_start"])
    d = diff("trained")
    if not solved(m):
        return None
    if d < MORE_SPREAD:
        return False
    return True if d > abs(diff("init")) else None


def _mirror(m: dict, at_least: float, reading: str) -> bool | None:
    return _controlled(m, lambda which: any(min(read_mass(m, i, reading, which)) >= at_least
                                            for i in range(m["n_layers"])))


def rule_anti_diagonal(m: dict, reading: str = "predicts") -> bool | None:
    """holds if, in some layer, every query of reversed digit j puts at least half of its attention on input
    position n - 1 - j; not testable in a seed that does not solve the task or whose untrained parameters pass
    too."""
    return _mirror(m, MAJORITY, reading)


def rule_perfect_anti_diagonal(m: dict, reading: str = "predicts") -> bool | None:
    """holds if, in some layer, every query of reversed digit j puts at least 0.9 of its attention on input
    position n - 1 - j (a perfect anti-diagonal); not testable in a seed that does not solve the task or whose
    untrained parameters pass too."""
    return _mirror(m, PERFECT, reading)


def rule_two_patterns(add: dict, rev: dict, reading: str = "predicts") -> bool | None:
    """holds if the seed's addition model aligns columns (`rule_columns`) and its reversal model attends
    anti-diagonally (`rule_anti_diagonal`); does not hold if either does not; not testable if either is not."""
    both = (rule_columns(add, reading), rule_anti_diagonal(rev, reading))
    return False if False in both else (None if None in both else True)


def rule_carry_role(m: dict) -> bool | None:
    """holds if the digit embeddings' cosine similarity falls with the difference of the digits' carry roles:
    Spearman's rho between the 45 pairs' cosines and -|d_i - d_j| at least 0.5 (a digit d carries with d of the 10
    digits, so this is also numeric closeness: the rule cannot tell the two apart); not testable in a seed that
    does not solve the task or whose untrained embeddings reach 0.5 too."""
    return _controlled(m, lambda which: carry_rank(m, which) >= RANK)


def rule_eight_nine(m: dict) -> bool | None:
    """holds if 8 and 9 are nearer each other (cosine of their embeddings) than either is to 0 or to 1; not
    testable in a seed that does not solve the task or whose untrained embeddings are so too."""
    return _controlled(m, lambda which: eight_nine_apart(m, which))


def rule_column_positions(m: dict) -> bool | None:
    """holds if, for every column j, the positional embeddings of its two operand digits (position 2 and 6 for the
    ones) are each other's nearest (cosine) among the operand digits' positions; not testable in a seed that does
    not solve the task or whose untrained positions are so too."""
    return _controlled(m, lambda which: column_positions_pair(m, which))


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([m[key] for m in runs]))


def rule_degraded(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every seed of the ablation ends at least 0.05 below the baseline's median held-out exact match
    (autoregressive); not testable when the baseline's median seed does not solve the task (at least 0.99)."""
    if _median(base, "autoregressive") < SOLVED:
        return None
    return all(m["autoregressive"] <= _median(base, "autoregressive") - SAME for m in ablation)


def rule_sufficient_but_harder(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if at least one one-layer seed solves the task (held-out exact match, autoregressive, at least 0.99:
    sufficient) and fewer one-layer seeds solve it than two-layer seeds of the baseline (harder to train within the
    budget); not testable when the baseline's median seed does not solve the task. With three seeds a side, one
    seed decides."""
    if _median(base, "autoregressive") < SOLVED:
        return None
    solves = [sum(m["autoregressive"] >= SOLVED for m in ms) for ms in (ablation, base)]
    return solves[0] >= 1 and solves[0] < solves[1]


def rule_no_columns(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every seed without positional embeddings fails the task (held-out exact match, autoregressive,
    below 0.5); not testable when the baseline's median seed does not solve it (at least 0.99)."""
    if _median(base, "autoregressive") < SOLVED:
        return None
    return max(m["autoregressive"] for m in ablation) < FAILED


def rule_no_column_attention(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if in no seed without positional embeddings does any layer align columns (at least half of digit j's
    query's attention on column j of a and of b, a quarter on each, for every j), in either reading of the query;
    not testable when the baseline's median seed does not solve the task."""
    if _median(base, "autoregressive") < SOLVED:
        return None
    return not any(_aligns(m, i, r, "trained") for m in ablation for i in range(m["n_layers"]) for r in READINGS)


def rule_mismatch(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every seed without the causal mask reaches at least 0.99 held-out exact match teacher-forced but
    below 0.5 autoregressively, while every baseline seed's two readings lie within 0.05; not testable when a
    baseline seed's do not."""
    if any(abs(m["teacher_forced"] - m["autoregressive"]) > SAME for m in base):
        return None
    return all(m["teacher_forced"] >= SOLVED and m["autoregressive"] < FAILED for m in ablation)


def rule_stricter(control: list[dict], base: list[dict]) -> bool | None:
    """holds if in some seed of the book's model (`addition`, causal) the held-out exact match decoded
    autoregressively is below the teacher-forced one (errors compound) and in none above it; does not hold if the
    two are equal in every seed; not testable when the control (the model without the causal mask, whose generation
    must part from its teacher-forced reading) shows no such gap either. For a causal model decoded greedily the two
    exact matches agree by construction: an answer is right in one reading exactly when it is in the other."""
    if not any(m["autoregressive"] < m["teacher_forced"] for m in control):
        return None
    gaps = [m["teacher_forced"] - m["autoregressive"] for m in base]
    return max(gaps) > 0 and min(gaps) >= 0


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
    when a seed lacks either group or the baseline's median seed does not solve the task."""
    a, b = [carry_gap(m) for m in ablation], [carry_gap(m) for m in base]
    if None in a or None in b or _median(base, "autoregressive") < SOLVED:
        return None
    return min(a) >= float(np.median(b)) + SAME


def rule_lr_never_solves(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if no seed at lr 1e-3 solves the task within the book's budget (held-out exact match, autoregressive,
    at least 0.99) while the baseline at lr 0.01 does in some seed; not testable when no baseline seed does."""
    if not any(m["autoregressive"] >= SOLVED for m in base):
        return None
    return all(m["autoregressive"] < SOLVED for m in ablation)


def rule_lr_fails(ablation: list[dict], base: list[dict]) -> bool | None:
    """holds if every seed at lr 1e-3 fails the task within the book's budget (held-out exact match,
    autoregressive, below 0.5) while the baseline at lr 0.01 solves it in some seed; not testable when no baseline
    seed does."""
    if not any(m["autoregressive"] >= SOLVED for m in base):
        return None
    return all(m["autoregressive"] < FAILED for m in ablation)
