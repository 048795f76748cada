"""analysis.py's tests of significance are scipy.stats now: each gives the hand-written test it replaced (copied
below as the reference) on the inputs the committed bundles use: every miiii grok table in
results/paper-cpu*/summaries/ (q against grok step, as claims.rule_no_particular_order takes them) and every
comparison in results/book/gap.json (Fisher on the counts, rank-sum on the jump epochs, as the book study)."""

import json
import math
from itertools import combinations, permutations
from pathlib import Path

import numpy as np
import pytest

from experiments.paper import claims as R
from miiii import analysis as A

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the hand-written tests, as they were (9fd6c36)


def _ranks(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for v in np.unique(x):  # ties: the mean of their ranks
        r[x == v] = r[x == v].mean()
    return r


def old_spearman(a, b) -> float:
    if len(a) < 2:
        return float("nan")
    return A.pearson(_ranks(a), _ranks(b))


def old_permutation_p(a, b, n_perm: int = 10_000, seed: int = 0) -> float:
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    obs = abs(ra @ rb)
    perms = np.random.default_rng(seed).permuted(np.tile(rb, (n_perm, 1)), axis=1)  # (n_perm, n)
    return float((1 + (np.abs(perms @ ra) >= obs - 1e-9).sum()) / (n_perm + 1))


def old_fisher_exact_p(k1: int, n1: int, k2: int, n2: int) -> float:
    k, n = k1 + k2, n1 + n2
    prob = {x: math.comb(k, x) * math.comb(n - k, n1 - x) / math.comb(n, n1)
            for x in range(max(0, k - n2), min(k, n1) + 1)}
    return float(min(1.0, sum(q for q in prob.values() if q <= prob[k1] * (1 + 1e-9))))


def old_rank_sum_p(a, b, max_exact: int = 200_000, seed: int = 0) -> float:
    r = _ranks(np.concatenate([np.asarray(a, float), np.asarray(b, float)]))
    n, m = len(r), len(a)
    if m == 0 or m == n:
        return 1.0
    centre = m * (n + 1) / 2
    obs = abs(r[:m].sum() + m - centre)
    if math.comb(n, m) <= max_exact:
        sums = np.array([r[list(c)].sum() for c in combinations(range(n), m)])
        return float((np.abs(sums + m - centre) >= obs - 1e-9).mean())
    rng = np.random.default_rng(seed)
    sums = np.array([r[rng.permutation(n)[:m]].sum() for _ in range(max_exact)])
    return float((1 + (np.abs(sums + m - centre) >= obs - 1e-9).sum()) / (max_exact + 1))


# ---------------------------------------------------------------- the committed inputs


def grok_tables() -> list[tuple[str, list[int], list[int]]]:
    """(name, q, grok step) of every miiii table: the remaining tasks that grokked (the rule's input), and all
    tasks that grokked (more pairs: up to 7)."""
    out = []
    for f in sorted(ROOT.glob("results/paper-cpu*/summaries/*.json")):
        record = json.loads(f.read_text())
        grok = record.get("summary", record).get("grok_step") or {}
        table = {int(k[2:]): s for k, s in grok.items() if k.startswith("q=")}
        if not table:
            continue
        done = {q: s for q, s in table.items() if s is not None}
        rest = {q: s for q, s in done.items() if q not in R.SMALL}
        name = str(f.relative_to(ROOT / "results"))
        out += [(f"{name} remaining", list(rest), list(rest.values())),
                (f"{name} all", list(done), list(done.values()))]
    return out


GROK = grok_tables()


def gap_comparisons() -> list[tuple[str, dict, dict, dict]]:
    gap = json.loads((ROOT / "results/book/gap.json").read_text())
    samples = {s["key"]: s for s in gap["samples"]}
    return [(f"{c['a']} | {c['b']}", samples[c["a"]]["distribution"], samples[c["b"]]["distribution"], c)
            for c in gap["comparisons"]]


GAP = gap_comparisons()


def test_the_committed_inputs_are_all_there():
    assert len(GROK) >= 2 * 15 and len(GAP) == 11
    sizes = {len(q) for _, q, _ in GROK}
    assert min(sizes) <= 7 < max(sizes)  # both of permutation_p's regimes: every pairing, and n_perm sampled ones


# ---------------------------------------------------------------- Spearman's rho and its permutation test


@pytest.mark.parametrize("name, q, s", GROK, ids=[g[0] for g in GROK])
def test_spearman_is_the_old_rho_to_float_rounding(name, q, s):
    old, new = old_spearman(q, s), A.spearman(q, s)
    assert (np.isnan(old) and np.isnan(new)) or new == pytest.approx(old, rel=1e-15, abs=1e-15)
    assert f"{old:.2f}" == f"{new:.2f}"  # as results.md prints it


def _exact_permutation_p(q, s) -> float:
    """Every pairing once: the exact two-sided p of |rho|."""
    ra, rb = _ranks(q), _ranks(s)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    obs = abs(ra @ rb)
    hits = [abs(ra @ rb[list(p)]) >= obs - 1e-9 for p in permutations(range(len(q)))]
    return sum(hits) / len(hits)


@pytest.mark.parametrize("name, q, s", GROK, ids=[g[0] for g in GROK])
def test_permutation_p_on_the_grok_tables_is_exact_and_within_the_old_sampling_error(name, q, s):
    """Up to 7 pairs: 7! <= 10,000, so scipy counts every pairing; the old test sampled 10,000 of them. From 8 pairs
    on both draw the same 10,000 pairings from the same seed: the same p bit for bit (enumerating 8! or more
    pairings here would not end)."""
    new = A.permutation_p(q, s)
    if len(q) < 2:
        assert new == 1.0 and (not q or old_permutation_p(q, s) == 1.0)  # no pairs: the old code's mean of nothing
        return
    old = old_permutation_p(q, s)
    if math.factorial(len(q)) > 10_000:
        assert new == old
        return
    assert new == pytest.approx(_exact_permutation_p(q, s), abs=1e-15)
    sd = math.sqrt(new * (1 - new) / 10_000)
    assert abs(new - old) <= 4 * sd + 1 / 10_001, (new, old)
    assert (new >= R.ALPHA) == (old >= R.ALPHA)  # the rule's verdict, were the table large enough to test


def _large_tables():
    """Tables the report does test (8 to 29 remaining tasks): the committed steps, pooled across seeds so that
    more tasks are in one table, and synthetic ones with ties, ordered and not."""
    pooled: dict[int, int] = {}
    for _, q, s in GROK:
        for qi, si in zip(q, s, strict=True):
            pooled.setdefault(qi, si)
    yield "committed steps pooled", list(pooled), list(pooled.values())
    rng = np.random.default_rng(1)
    for n in (8, 9, 12, 17, 25, 29):
        q = sorted(rng.choice(113, n, replace=False).tolist())
        s = rng.integers(100, 5000, n)
        s[:3] = s[0]  # ties
        yield f"n={n} shuffled", q, s.tolist()
        yield f"n={n} ordered", q, np.sort(s).tolist()


LARGE = list(_large_tables())


@pytest.mark.parametrize("name, q, s", LARGE, ids=[t[0] for t in LARGE])
def test_permutation_p_from_8_pairs_on_draws_the_old_pairings_bit_for_bit(name, q, s):
    assert len(q) >= 8
    assert A.permutation_p(q, s) == old_permutation_p(q, s)
    assert A.permutation_p(q, s, n_perm=500, seed=7) == old_permutation_p(q, s, n_perm=500, seed=7)
    assert A.spearman(q, s) == pytest.approx(old_spearman(q, s), rel=1e-15, abs=1e-15)


# ---------------------------------------------------------------- Fisher and the rank sum on results/book/gap.json


@pytest.mark.parametrize("name, a, b, stored", GAP, ids=[g[0] for g in GAP])
def test_fisher_and_rank_sum_give_the_old_p_bit_for_bit_on_every_gap_comparison(name, a, b, stored):
    new = A.fisher_exact_p(a["grokked"], a["n"], b["grokked"], b["n"])
    assert new == old_fisher_exact_p(a["grokked"], a["n"], b["grokked"], b["n"]) == stored["p_grokked"]
    new = A.rank_sum_p(a["censored"], b["censored"])
    assert new == old_rank_sum_p(a["censored"], b["censored"]) == stored["p_jump"]
    for seed in (0, 3):  # the sampled path (more splits than max_exact): the same splits from the same seed
        assert (A.rank_sum_p(a["censored"], b["censored"], max_exact=300, seed=seed)
                == old_rank_sum_p(a["censored"], b["censored"], max_exact=300, seed=seed))


def test_fisher_on_the_pooled_counts_as_gap_md_reports_them():
    """The book study's pooled_by_loop (experiments/book/records.py): every wd 0.01 sample's counts pooled per loop."""
    gap = json.loads((ROOT / "results/book/gap.json").read_text())
    loops: dict[str, list[int]] = {}
    for smp in gap["samples"]:
        if smp["wd"] == 0.01:
            cur = loops.setdefault("PyTorch" if smp["key"].startswith("PyTorch") else "miiii", [0, 0])
            cur[0] += smp["distribution"]["grokked"]
            cur[1] += smp["distribution"]["n"]
    (k1, n1), (k2, n2) = loops["miiii"], loops["PyTorch"]
    assert A.fisher_exact_p(k1, n1, k2, n2) == old_fisher_exact_p(k1, n1, k2, n2)
    assert f"{A.fisher_exact_p(k1, n1, k2, n2):.3f}" in (ROOT / "results/book/gap.md").read_text()


@pytest.mark.parametrize("a, b", [([1], [2, 2]), ([3, 1, 2], [5]), ([1, 1], [2, 2, 2]), ([7, 7, 7], [7, 7]),
                                  ([5, 8, 9, 12, 15], [151, 151, 60, 70]), ([], [1, 2])])
def test_rank_sum_p_small_groups_and_ties_as_before(a, b):
    assert A.rank_sum_p(a, b) == old_rank_sum_p(a, b)


def test_fisher_exact_p_every_table_of_up_to_8_seeds_each():
    for n1 in range(1, 9):
        for n2 in range(1, 9):
            for k1 in range(n1 + 1):
                for k2 in range(n2 + 1):
                    assert A.fisher_exact_p(k1, n1, k2, n2) == pytest.approx(old_fisher_exact_p(k1, n1, k2, n2),
                                                                             rel=1e-12), (k1, n1, k2, n2)
