"""The verdict rules of the paper's claims: pure functions of numbers a run's measures hold, each tested on synthetic
inputs both ways (tests/test_report.py). A rule's docstring (its first paragraph) is the rule results.md prints
(`claims.rule_text`): the code and its description change together.
"""

from __future__ import annotations

import inspect

import numpy as np

from miiii import analysis as A
from miiii.errors import lead


def printed_rule(fn) -> str:
    """A rule function's docstring, its first paragraph on one line: the rule a results.md prints (this module's
    rules, claims.rule_text; experiments/stability/rules.py's)."""
    return lead(inspect.getdoc(fn))


MIN_LEARNED = 2  # seeds whose model learned its task, fewer than which a claim about the trained model cannot hold


def verdict(per_seed: list, learned: list[bool] | None = None) -> str:
    """holds only when it holds in every seed; one seed against it makes it does not hold; a seed that cannot test
    it (and none against) makes it not testable.

    With `learned`: a seed whose model did not learn its task is set aside (it is not the trained model the sentence
    describes), and holding needs at least 2 seeds that learned."""
    if learned is not None:
        per_seed = [v for v, ok in zip(per_seed, learned, strict=True) if ok]
    if any(v is False for v in per_seed):
        return "does not hold"
    if not per_seed or any(v is None for v in per_seed):
        return "not testable"
    if learned is not None and len(per_seed) < MIN_LEARNED:
        return "not testable"
    return "holds"


def seeds_counted(per_seed: list, learned: list[bool]) -> str:
    """'k/n' of the seeds that learned, with those set aside named by count: what a verdict with `learned` read."""
    kept = [v for v, ok in zip(per_seed, learned, strict=True) if ok]
    out = f"{sum(v is True for v in kept)}/{len(kept)}"
    return out + (f" of the seeds that learned, {len(per_seed) - len(kept)} did not" if len(kept) < len(per_seed)
                  else "")


SMALL = (2, 3, 5, 7)
MASKED_FIRST = (11, 13, 17, 19)
PAPER_STEPS = 65_536  # the paper's time axis (epochs = full-batch steps)
MIN_ORDER_TASKS = 8  # fewer grokked tasks than this cannot test "no particular order"
MIN_SHARED_TASKS = 3  # fewer tasks grokked in both runs than this cannot compare their grok steps
ALPHA = 0.05  # the permutation test's level
BAND = 0.2  # a reported correlation is reproduced within +-0.2
NOT_NOTABLE = 0.1  # "not notably delayed": at most 10 % of the run behind

def rule_in_succession(grok: dict) -> bool:
    """holds if q = 2, 3, 5, 7 all grok (validation accuracy ≥ 0.99) at strictly increasing steps."""
    steps = [grok.get(q) for q in SMALL]
    return None not in steps and all(a < b for a, b in zip(steps, steps[1:], strict=False))


def rule_remaining_later_around(grok: dict, target: float) -> bool:
    """holds if every other task groks, each after the last of q = 2, 3, 5, 7, with the median grok step within a
    factor 2 of 40,000 × (run steps / 65,536)."""
    rest = [s for q, s in grok.items() if q not in SMALL]
    first = [grok.get(q) for q in SMALL if q in grok]
    if not rest or None in rest or None in first:
        return False
    return min(rest) > max(first, default=-1) and target / 2 <= float(np.median(rest)) <= 2 * target


def rule_no_particular_order(grok: dict) -> tuple[bool | None, float, float, int]:
    """holds if a two-sided permutation test (10,000 permutations) of Spearman ρ(q, grok step) over the tasks other
    than q = 2, 3, 5, 7 that grok gives p ≥ 0.05; not testable when fewer than 8 of them grok."""
    done = {q: s for q, s in grok.items() if q not in SMALL and s is not None}
    if len(done) < MIN_ORDER_TASKS:
        return None, float("nan"), float("nan"), len(done)
    q, s = list(done), list(done.values())
    p = A.permutation_p(q, s)
    return bool(p >= ALPHA), A.spearman(q, s), p, len(done)


def rule_did_not_converge(grok: dict) -> bool:
    """holds if at most half of the tasks grok."""
    return sum(s is not None for s in grok.values()) <= len(grok) / 2


def rule_grokfast_faster(with_gf: dict, without: dict) -> bool | None:
    """holds if at least as many tasks grok with λ > 0 as with λ = 0 and the median grok step of the tasks that grok
    in both runs is earlier with λ > 0; not testable when fewer than 3 tasks grok in both."""
    both = [q for q in with_gf if with_gf[q] is not None and without.get(q) is not None]
    if len(both) < MIN_SHARED_TASKS:
        return None
    n_with, n_without = (sum(s is not None for s in t.values()) for t in (with_gf, without))
    return bool(n_with >= n_without and np.median([without[q] - with_gf[q] for q in both]) > 0)


def rule_first_grok(grok: dict) -> bool:
    """holds if the first four tasks to grok are exactly {11, 13, 17, 19} (a tie across the boundary fails)."""
    done = sorted((s, q) for q, s in grok.items() if s is not None)
    k = len(MASKED_FIRST)
    if len(done) < k or (len(done) > k and done[k][0] == done[k - 1][0]):
        return False
    return {q for _, q in done[:k]} == set(MASKED_FIRST)


def rule_all_grok(grok: dict) -> bool:
    """holds if every task that is trained (q > 7: the masked four take no part in the loss) groks."""
    return len(grok) > 0 and all(s is not None for s in grok.values())


def rest_of_masked(grok: dict) -> list[int]:
    """The masked run's "rest": the tasks q > 7 other than 11, 13, 17, 19 (those that grok first)."""
    return [q for q in grok if q not in SMALL and q not in MASKED_FIRST]


def kth_lags(masked: dict, plain: dict) -> list[float | None]:
    """For each k the unmasked run reaches among the rest: the masked run's k-th grok step among them minus the
    unmasked run's k-th (None: the masked run had not reached k tasks by its last step)."""
    rest = rest_of_masked(masked)
    u, t = (sorted(s for q, s in g.items() if q in rest and s is not None) for g in (masked, plain))
    return [u[k] - tk if k < len(u) else None for k, tk in enumerate(t)]


def rule_not_delayed(masked: dict, plain: dict, steps: int) -> bool | None:
    """holds if, over the rest (the tasks q > 7 other than 11, 13, 17, 19), the masked run's count of grokked tasks
    never falls more than 10 % of the run's steps behind the unmasked run's: for every k the unmasked run reaches,
    the masked run's k-th grok step among the rest is at most 0.1 × steps after the unmasked run's k-th (a task
    only the masked run groks puts it ahead); not testable when none of the rest groks in either run, or when the
    masked run has not reached k and the unmasked run's k-th lies within the run's last 10 % (it could still)."""
    rest = rest_of_masked(masked)
    if not any(g.get(q) is not None for g in (masked, plain) for q in rest):
        return None
    allowed, undecided = NOT_NOTABLE * steps, False
    t = sorted(s for q, s in plain.items() if q in rest and s is not None)
    for tk, lag in zip(t, kth_lags(masked, plain), strict=True):
        if lag is None and tk + allowed > steps:
            undecided = True
        elif lag is None or lag > allowed:
            return False
    return None if undecided else True


def rule_slower(nanda_step, miiii_steps: list) -> bool | None:
    """holds if nanda and every miiii task grok and the median of miiii's grok steps is later than nanda's grok
    step; not testable when nanda or any miiii task does not grok (a run that never generalises is not timed: a
    task that never groks counting as late would let the shuffled-label control pass)."""
    if nanda_step is None or not miiii_steps or any(s is None for s in miiii_steps):
        return None
    return bool(np.median(miiii_steps) > nanda_step)


def rule_perfect(acc) -> bool:
    """holds if every task's final validation accuracy is exactly 1 (all tasks of the run's p)."""
    return bool(len(acc) and (np.asarray(acc) >= 1.0).all())


def rule_overfits_all_but(train_acc: dict, valid_acc: dict) -> bool:
    """holds if q = 2, 3 reach validation ≥ 0.99 and every other task ends with training ≥ 0.99 and validation
    < 0.99."""
    t = A.GROK_THRESHOLD
    return all(valid_acc[q] >= t if q in (2, 3) else train_acc[q] >= t and valid_acc[q] < t for q in valid_acc)


def rule_spike(counts_by_seed) -> bool | None:
    """holds if the mean count over seeds at one of the middle three fractions (1/64, 1/16, 1/4 of the run) exceeds
    the mean at both the first (1/256) and the last fraction by more than the seed spread (the largest range,
    max − min over seeds, at any fraction); not testable with fewer than 2 seeds."""
    c = np.asarray(counts_by_seed, dtype=float)  # (seeds, 5)
    if c.ndim != 2 or len(c) < 2 or c.shape[1] < 3:
        return None
    mean, spread = c.mean(0), (c.max(0) - c.min(0)).max()
    peak = mean[1:-1].max()
    return bool(peak - mean[0] > spread and peak - mean[-1] > spread)


def rule_more(nanda: int, miiii: int) -> bool:
    """holds if miiii's W_E has more active frequencies than nanda's."""
    return miiii > nanda


def rule_more_diffuse(nanda: tuple, miiii: tuple) -> bool:
    """holds if miiii needs more singular values of W_E than nanda to reach both 50 % and 90 % of Σσ."""
    return all(m > n for n, m in zip(nanda, miiii, strict=True))


def rule_band(r: float, paper: float) -> bool:
    """holds if the Pearson correlation r(W_pos[0], W_pos[1]) lies within ± 0.2 of the paper's value (a magnitude,
    not a sign)."""
    return bool(abs(r - paper) <= BAND)


def rule_order_matters(nanda_r: float, miiii_rs: list) -> bool:
    """holds if nanda's positional correlation is at least 0.9 (its commutative task: one embedding for both
    positions) while every run of the non-commutative miiii task (λ > 0, without dropout, masked) has a negative
    one."""
    return bool(nanda_r >= 0.9 and len(miiii_rs) > 0 and all(r < 0 for r in miiii_rs))


ONE_DIGIT, THRESHOLD_MARGIN = 0.9, 0.01
BOTH_DIGITS = 0.25  # "attends to both": at least a quarter of the head's attention on each digit


def rule_both_digits_per_head(to_x0, to_x1) -> bool:
    """holds if every nanda head puts at least 0.25 of its attention from the output position on x0 and at least
    0.25 on x1 (the commutative task's heads read both digits, where miiii's each read one)."""
    return bool(np.all(np.minimum(to_x0, to_x1) >= BOTH_DIGITS))


def rule_one_digit_per_head(to_x0, to_x1) -> bool | None:
    """holds if every miiii head puts ≥ 0.9 of its attention from the output position on x0 or on x1; a least share
    within 0.01 of 0.9 either way is too close to the threshold to tell (not testable)."""
    least = float(np.min(np.maximum(to_x0, to_x1)))
    if abs(least - ONE_DIGIT) < THRESHOLD_MARGIN:
        return None
    return least >= ONE_DIGIT


def rule_basis(acc: float, chance: float, gini_basis: float, gini_miiii: float | None) -> bool:
    """holds if the shuffled-label run's mean validation accuracy stays within 0.05 of chance and its W_E Fourier
    spectrum is flatter (a lower Gini of the frequency norms) than miiii's."""
    return bool(acc < chance + 0.05 and (gini_miiii is None or gini_basis < gini_miiii))


def rule_only_primes(no_zero: list[int], primes: list[int]) -> bool:
    """holds if the samples whose target vector holds no zero are exactly the primes among them."""
    return sorted(no_zero) == sorted(primes)


ABOUT = 0.25  # "about": within 25 % of the true value


def rule_about(stated: float, true: float) -> bool:
    """holds if the paper's estimate lies within 25 % of the true value."""
    return bool(abs(stated - true) <= ABOUT * abs(true))
