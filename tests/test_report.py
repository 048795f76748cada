"""Verdict rules of results.md on synthetic inputs, each in both directions, and the original code's definitions
(Fig. 8's ticks, Table 3's count) checked against literal transcriptions of that code."""

import inspect
import json
import math

import numpy as np
import pytest
from _runhelp import ROOT

from experiments.paper import claims as R
from experiments.paper.report import load_summaries
from miiii import analysis as A
from miiii import rules

PRIMES_113 = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101,
              103, 107, 109]
REST = [q for q in PRIMES_113 if q not in R.SMALL]


def full_scale_table(rng_seed=0):
    """The H100 run's shape: 2, 3, 7 early, 5 at 8,867, the other 25 between 12,661 and 43,574, strongly ordered
    by q (Spearman rho about 0.95)."""
    rng = np.random.default_rng(rng_seed)
    steps = np.linspace(12_661, 43_574, len(REST)) + rng.normal(0, 1500, len(REST))
    return {2: 78, 3: 179, 5: 8_867, 7: 289} | {q: int(s) for q, s in zip(REST, steps, strict=True)}


def test_no_particular_order_does_not_hold_on_the_full_scale_table():
    g = full_scale_table()
    holds, rho, p, n = R.rule_no_particular_order(g)
    assert n == 25 and rho > 0.9 and p < 0.001 and holds is False


def test_no_particular_order_holds_for_shuffled_steps_and_is_untestable_with_few_tasks():
    g = full_scale_table()
    steps = [g[q] for q in REST]
    shuffled = dict(zip(REST, np.random.default_rng(3).permutation(steps).tolist(), strict=True))
    holds, rho, p, _ = R.rule_no_particular_order({2: 1, 3: 2, 5: 3, 7: 4} | shuffled)
    assert holds is True and abs(rho) < 0.4 and p >= R.ALPHA
    few = {q: (100 * i if i < 5 else None) for i, q in enumerate(REST)}
    assert R.rule_no_particular_order(few)[0] is None


def test_lambda_zero_does_not_converge_rule():
    nogf = full_scale_table() | {109: None}  # the full-scale λ = 0 run: 28/29 grok, just later
    assert R.rule_did_not_converge(nogf) is False
    stalled = {q: (100 if q in (2, 3) else None) for q in PRIMES_113}
    assert R.rule_did_not_converge(stalled) is True


def test_grokfast_faster_is_the_printed_rule():
    with_gf = full_scale_table()
    later = {q: s * 2 for q, s in with_gf.items()} | {109: None}
    assert R.rule_grokfast_faster(with_gf, later) is True  # more grok, each earlier
    assert R.rule_grokfast_faster(later, with_gf) is False  # fewer grok and later: grokfast would be slower
    more_but_later = {q: s * 2 for q, s in with_gf.items()} | {109: 50_000}
    assert R.rule_grokfast_faster(more_but_later, with_gf | {109: None}) is False  # "or more tasks grok" is not it
    assert R.rule_grokfast_faster({2: 1, 3: 2}, {2: 5, 3: 9}) is None  # fewer than 3 tasks grok in both


def test_in_succession_and_remaining_later_around():
    g = full_scale_table()
    assert R.rule_in_succession(g) is False  # 7 (289) groks before 5 (8,867)
    assert R.rule_in_succession(g | {5: 200}) is True
    assert R.rule_in_succession(g | {3: 78}) is False  # a tie is not a succession
    assert R.rule_in_succession(g | {7: None}) is False
    assert R.rule_remaining_later_around(g, 40_000) is True  # median ~28,000, all after 8,867
    assert R.rule_remaining_later_around(g | {11: 5_000}, 40_000) is False  # one before q = 5
    assert R.rule_remaining_later_around(g | {11: None}, 40_000) is False
    assert R.rule_remaining_later_around(g, 2_000) is False  # far from the target
    assert R.rule_remaining_later_around({q: s // 16 for q, s in g.items()}, 40_000 / 16) is True  # scaled


def test_masked_rules():
    g = {q: 100 * (i + 1) for i, q in enumerate([11, 17, 13, 19, 23, 29, 31])}
    assert R.rule_first_grok(g) is True
    assert R.rule_first_grok(g | {23: 150}) is False
    assert R.rule_first_grok(g | {23: 400}) is False  # tied with 19 across the boundary
    assert R.rule_all_grok(g) is True and R.rule_all_grok(g | {31: None}) is False and R.rule_all_grok({}) is False


def test_overfits_all_but_two_and_three():
    train = {q: 1.0 for q in (2, 3, 5, 7, 11)}
    valid = {2: 1.0, 3: 0.995, 5: 0.4, 7: 0.3, 11: 0.1}
    assert R.rule_overfits_all_but(train, valid) is True
    assert R.rule_overfits_all_but(train, valid | {5: 0.999}) is False  # 5 generalised too
    assert R.rule_overfits_all_but(train | {7: 0.5}, valid) is False  # 7 does not even fit
    assert R.rule_overfits_all_but(train, valid | {3: 0.5}) is False


def test_spike_must_rise_and_fall_by_more_than_the_seed_spread():
    assert R.rule_spike([[0, 0, 10, 18, 10], [0, 1, 11, 17, 9], [1, 0, 9, 19, 11]]) is True  # the paper's Table 3
    assert R.rule_spike([[3, 3, 3, 4, 3], [2, 3, 2, 3, 2], [3, 2, 3, 3, 3]]) is False  # any +1 is not a spike
    assert R.rule_spike([[2, 3, 2, 3, 4], [2, 35, 33, 2, 2]]) is False  # one seed's spike within the spread
    assert R.rule_spike([[0, 0, 10, 18, 10]]) is None  # one seed: no spread to beat
    assert R.rule_spike([[5, 5, 5, 5, 5], [5, 5, 5, 5, 5]]) is False


def test_perfect_diffuse_more_band_and_attention_rules():
    assert R.rule_perfect([1.0, 1.0]) is True and R.rule_perfect([1.0, 0.999]) is False
    assert R.rule_more_diffuse((7, 47), (42, 80)) is True and R.rule_more_diffuse((7, 47), (42, 47)) is False
    assert R.rule_more(2, 19) is True and R.rule_more(2, 1) is False and R.rule_more(3, 3) is False
    assert R.rule_one_digit_per_head(np.array([1.0, 0.97, 0.0, 0.02]), np.array([0.0, 0.02, 1.0, 0.95])) is True
    assert R.rule_one_digit_per_head(np.array([0.5, 1.0]), np.array([0.5, 0.0])) is False
    for least in (0.9004, 0.8995):  # within the margin of the threshold, either side: undecided, never a pass
        assert R.rule_one_digit_per_head(np.array([least, 1.0]), np.array([0.0, 0.0])) is None
    assert R.rule_one_digit_per_head(np.array([0.911, 1.0]), np.array([0.0, 0.0])) is True
    assert R.rule_one_digit_per_head(np.array([0.889, 1.0]), np.array([0.0, 0.0])) is False
    assert R.rule_both_digits_per_head(np.array([0.5, 0.3]), np.array([0.45, 0.6])) is True
    assert R.rule_both_digits_per_head(np.array([0.5, 0.95]), np.array([0.45, 0.02])) is False  # one head, one digit
    assert R.rule_band(-0.6, -0.64) is True and R.rule_band(-0.92, -0.64) is False  # a magnitude, not a sign
    assert R.rule_band(-0.06, -0.64) is False and R.rule_band(0.9, 0.95) is True
    assert R.rule_basis(0.2, 0.19, 0.1, 0.5) is True and R.rule_basis(0.5, 0.19, 0.1, 0.5) is False
    assert R.rule_basis(0.2, 0.19, 0.6, 0.5) is False


def test_positional_cause_needs_every_run_of_the_non_commutative_task():
    assert R.rule_order_matters(0.95, [-0.64, -0.5, -0.3]) is True
    assert R.rule_order_matters(0.95, [-0.06, 0.19]) is False  # without dropout the same task correlates positively
    assert R.rule_order_matters(0.5, [-0.64]) is False  # nanda's positions differ too: order is not the cause
    assert R.rule_order_matters(0.95, []) is False


def test_masked_not_delayed_reads_the_rest_count_by_count():
    """'the rest are not notably delayed': the rest are q > 7 but 11, 13, 17, 19; the masked run's k-th grok among
    them at most 10 % of the run after the unmasked run's k-th."""
    plain = {q: 1000 + 10 * q for q in [11, 13, 17, 19, 23, 29, 31]}
    assert R.rule_not_delayed(plain | {2: None}, plain, 5000) is True
    assert R.rule_not_delayed({q: s + 500 for q, s in plain.items()}, plain, 5000) is True  # exactly 10 % later
    assert R.rule_not_delayed({q: s + 1000 for q, s in plain.items()}, plain, 5000) is False  # 20 % later
    assert R.rule_not_delayed(plain | {31: None}, plain, 5000) is False  # the masked run never reaches the third
    # the first four grokking early do not make up for the rest: only 23, 29, 31 are counted
    early = {11: 5, 13: 6, 17: 7, 19: 8}
    assert R.rule_not_delayed(early | {23: None, 29: None, 31: None}, plain, 5000) is False
    assert R.rule_not_delayed(early | {23: None}, {q: None for q in early} | {23: None}, 5000) is None  # none of the
    # rest groks in either run: nothing to time
    # the masked run groks tasks of the rest the unmasked one never does: ahead, not delayed (the CPU bundle's seed 2)
    assert R.rule_not_delayed({31: 3125, 41: 4500, 23: None}, {31: None, 41: None, 23: None}, 5000) is True
    # the CPU bundle's seed 0: 2915, 3155, 4979 against 4218, 4372, 4941 (the third +38 of an allowed +500)
    assert R.rule_not_delayed({23: None, 31: 3155, 53: 2915, 61: None, 67: 4979},
                              {23: 4218, 31: 4372, 53: None, 61: 4941, 67: None}, 5000) is True
    # the unmasked run's k-th in the run's last 10 %, the masked run not there yet: it could still be within 10 %
    assert R.rule_not_delayed({23: None, 29: None}, {23: 4800, 29: None}, 5000) is None
    assert R.rule_not_delayed({23: None, 29: None}, {23: 4000, 29: 4800}, 5000) is False  # the first decides


def test_harder_slower_needs_every_task_to_grok():
    assert R.rule_slower(300, [100, 200, 400, 500, 600]) is True  # the median task after nanda
    assert R.rule_slower(300, [100, 200, 250, 260, 400]) is False
    assert R.rule_slower(300, [100, 200, 5000, None, None]) is None  # a task never grokking is not slower, untimed
    assert R.rule_slower(None, [100]) is None


def _claim(readings, rule=R.rule_perfect, **kw):
    it = iter(readings)
    return R.Claim("k", "text", "src", "paper", rule, ("miiii",), lambda runs: next(it), **({"learned": ()} | kw))


@pytest.mark.parametrize("holds,verdict", [
    ((True, True, True), "holds"),
    ((True, False, True), "does not hold"),
    ((None, True, True), "not testable"),
    ((None, None, None), "not testable"),
    ((None, False, True), "does not hold"),
])
def test_a_claim_holds_only_in_every_seed(holds, verdict):
    reads = [R.Reading(f"seed {i}", {"x": float(i)}, None if h is None else ([1.0] if h else [0.5],), "why")
             for i, h in enumerate(holds)]
    row = R.judge(_claim(reads), {"miiii": [{}, {}, {}]})
    assert row["verdict"] == verdict and row["seeds"] == 3
    assert row["holds_in"] == sum(h is True for h in holds) and row["tested"] == sum(h is not None for h in holds)
    assert row["numbers"]["x"] == (1.0, pytest.approx(np.std([0, 1, 2])), 3)
    assert R.judge(_claim(reads), {"nanda": [{}]}) is None  # a role it needs is missing: no row


def test_a_rule_the_control_passes_too_is_not_testable():
    stalled = {q: (100 if q in (2, 3) else None) for q in PRIMES_113}
    converged = {q: 100 for q in PRIMES_113}
    for control, verdict in ((stalled, "not testable"), (converged, "holds")):
        claim = R.Claim("k", "t", "s", "p", R.rule_did_not_converge, ("nogrokfast",),
                        lambda r: R.Reading("m", {}, (stalled,)), control=lambda r, c=control: (c,),
                        control_roles=("miiii",), control_name="the λ > 0 run", learned=())
        row = R.judge(claim, {"miiii": [{}] * 3, "nogrokfast": [{}] * 3})
        assert row["verdict"] == verdict, (control, row)
        assert "Control: the same rule on the λ > 0 run" in row["rule"]
    row = R.judge(claim, {"nogrokfast": [{}]})  # the control run is missing: never a pass by default
    assert row["verdict"] == "not testable" and "control" in row["why"]


def test_the_printed_rule_is_the_applied_rule_function():
    for claim in R.CLAIMS:
        doc = " ".join(inspect.getdoc(claim.rule).split("\n\n")[0].split())
        assert doc.startswith("holds if"), claim.key
        assert R.rule_text(claim).startswith(f"{claim.definition}: {doc}" if claim.definition else doc), claim.key
    defs = {c.key: c.definition for c in R.CLAIMS}
    assert len({defs[k] for k in defs if k.startswith("fft-")}) == 2  # both definitions of "active", named
    assert len({defs[k] for k in defs if k.startswith("table3-")}) == 5


def test_svd_tick_is_the_original_codes_index():
    rng = np.random.default_rng(0)
    for _ in range(20):
        S = np.sort(rng.gamma(0.5, size=60))[::-1]
        for frac in (0.5, 0.9):
            cum = (S / S.sum()).cumsum()
            literal = int(np.where(cum < frac)[0].max())  # jnp.where((S / S.sum()).cumsum() < frac)[0].max()
            assert A.svd_tick(S, frac) == literal == A.variance_count(S, frac, power=1) - 2


def test_original_neuron_spectrum_matches_the_original_scope_fn():
    p, n, t = 7, 3, 4
    acts = np.random.default_rng(1).normal(size=(t, p * p, n))  # rows in this project's order n = x0 + x1 p
    for i in range(t):
        # the original: rearrange(acts, "(x0 x1) n -> n x0 x1")[:5, 1:, 1:] on rows n = x1 p + x0 (high digit first)
        neurs = acts[i].T.reshape(n, p, p)[:, 1:, 1:]
        literal = np.abs(np.fft.rfft2(neurs)).mean(1)
        np.testing.assert_allclose(A.original_neuron_spectrum(acts[i:i + 1], p)[0], literal, rtol=1e-12)


def test_original_active_counts_follow_omega_aux():
    t, f = 400, 9
    rng = np.random.default_rng(0)
    series = rng.uniform(0.9, 1.1, size=(t, f))
    series[150:250, 3:6] += 8.0  # three frequencies light up in the middle of training
    steps = np.arange(t)
    log_steps, counts = A.original_active_counts(series, steps, n_std=1)
    assert len(counts) == 3 * (f - 1) and np.all(np.diff(log_steps) >= 0)
    mid = (log_steps > 160) & (log_steps < 240)
    assert counts[mid].min() == 3 and counts[log_steps < 100].max() == 0 and counts[log_steps > 300].max() == 0
    # a literal transcription of omega_aux (every step recorded, so the log axis indexes steps as the original did)
    conv = np.stack([np.convolve(c, np.ones(3) / 3, mode="valid") for c in series.T])
    idx = np.clip(np.logspace(0, np.log10(conv.shape[1]), 3 * (f - 1)).astype(int) - 1, 0, conv.shape[1] - 1)
    m = conv[:, idx]
    m = m / m.sum(1, keepdims=True)
    literal = (m > m.mean() + m.std()).sum(0)
    agree = np.mean(literal == counts)
    assert agree > 0.9, agree  # the same pipeline; the log axis is placed over steps (not row indices) here


LEARNED = {"grok_step": [10, 20], "run": {"seed": 0}}  # a run that generalised every task


def _fft_measures(energy: int) -> dict:
    return {"fft": {"energy_90": energy, "above_mean_2std": energy, "norms": [1.0] * 35, "gini": 0.5}, **LEARNED}


@pytest.mark.parametrize(("basis", "verdict"), [(31, "not testable"), (1, "holds")])
def test_a_comparison_the_shuffled_label_run_passes_too_is_not_testable(basis, verdict):
    """'a broader spectrum of active frequencies' (miiii 19 against nanda 2): judged with the shuffled-label run in
    miiii's place as the control; where basis passes the same rule (31 > 2), the seed says nothing of what miiii
    learned."""
    claim = next(c for c in R.CLAIMS if c.key == "fft-energy_90")
    runs = {"nanda": [_fft_measures(2)] * 2, "miiii": [_fft_measures(19)] * 2, "basis": [_fft_measures(basis)] * 2}
    row = R.judge(claim, runs)
    assert row["verdict"] == verdict, row
    assert "shuffled-label" in row["rule"]
    runs["miiii"] = [_fft_measures(1)] * 2  # the rule failing on miiii itself stays a failure, whatever the control
    assert R.judge(claim, runs)["verdict"] == "does not hold"


@pytest.mark.parametrize(("basis_steps", "verdict"), [
    ([None] * 3, "holds"),  # the control never groks: it cannot pass a rule that times generalisation
    ([10, 20, 30], "holds"),  # the control's median before nanda's: it fails the rule
    ([60, 70, 80], "not testable"),  # the control passes the same rule: the seed cannot tell miiii from it
])
def test_harder_slower_is_controlled_by_the_shuffled_label_run(basis_steps, verdict):
    """'miiii generalises slower': miiii's median grok step after nanda's, every miiii task grokking (a task that
    never groks counted as late let the shuffled-label run, which never generalises, pass the same rule); the rule is
    applied to basis in miiii's place, and where it passes too the seed is not testable."""
    claim = next(c for c in R.CLAIMS if c.key == "harder-slower")

    def m(steps, dropout=0.1):
        return {"grok_step": steps, "task_names": [f"q={q}" for q in (2, 3, 5)][: len(steps)],
                "run": {"steps": 100, "dropout": dropout, "seed": 0}}
    runs = {"nanda": [m([50])] * 2, "miiii": [m([10, 60, 70])] * 2, "basis": [m(basis_steps)] * 2}
    row = R.judge(claim, runs)
    assert row["verdict"] == verdict, row
    assert "where it passes too, the seed is not testable" in row["rule"]
    runs["miiii"] = [m([10, 20, 60])] * 2  # q = 2 and 3 before nanda: the median task is not slower
    assert R.judge(claim, runs)["verdict"] == "does not hold"
    runs["miiii"] = [m([10, None, None])] * 2  # miiii did not learn: the seed says nothing, whatever basis does
    row = R.judge(claim, runs)
    assert row["verdict"] == "not testable" and "miiii run of seed 0 did not generalise: 1/3" in row["why"]


def _perfect_measures(steps: list, acc: list) -> dict:
    return {"grok_step": steps, "final_acc": {"valid": acc}, "run": {"seed": 0}}


@pytest.mark.parametrize(("steps", "acc", "verdict"), [
    ([10, 20], [1.0, 0.995], "does not hold"),  # learned every task, one short of 1.0: the claim fails
    ([10, 20], [1.0, 1.0], "holds"),
    ([10, None], [1.0, 0.5], "not testable"),  # the control did not learn: never 'does not hold'
])
def test_a_claim_about_what_was_learned_is_not_testable_where_the_control_did_not_learn(steps, acc, verdict):
    claim = next(c for c in R.CLAIMS if c.key == "perfect")
    row = R.judge(claim, {"miiii": [_perfect_measures(steps, acc)] * 2})
    assert row["verdict"] == verdict, row
    if verdict == "not testable":
        assert "the miiii run of seed 0 did not generalise: 1/2 tasks" in row["why"]


def test_a_seed_that_did_not_learn_is_set_aside_and_two_that_learned_are_needed():
    claim = next(c for c in R.CLAIMS if c.key == "perfect")
    good, unlearned = _perfect_measures([10, 20], [1.0, 1.0]), _perfect_measures([10, None], [1.0, 0.5])
    row = R.judge(claim, {"miiii": [good, unlearned, good]})
    assert row["verdict"] == "holds" and row["counted"] == "2/2 of the seeds that learned, 1 did not"
    row = R.judge(claim, {"miiii": [good, unlearned, unlearned]})
    assert row["verdict"] == "not testable" and row["why"].startswith("1 of 3 seeds learned (at least 2 needed)")
    bad = _perfect_measures([10, 20], [1.0, 0.995])
    assert R.judge(claim, {"miiii": [bad, unlearned, unlearned]})["verdict"] == "does not hold"  # one learned seed
    # against it is enough
    assert rules.verdict([True, None, True], [True, False, True]) == "holds"
    assert rules.verdict([True, None, None], [True, False, False]) == "not testable"
    assert rules.verdict([None, True, True], [True, True, True]) == "not testable"  # a control passing is not set aside


def test_claims_about_p_alone_need_no_learning_and_every_other_claim_does():
    alone = {c.key for c in R.CLAIMS if not c.learned}
    facts = {c.key for c in R.FACTS}
    assert facts < alone and all(R.CALC in c.source for c in R.FACTS)
    # when the masked run groks against the unmasked one is judged over what each run groks
    assert alone - facts == {"no-zeros-0", "no-zeros-p", "prime-count", "task-count", "masked-not-delayed"}
    assert all("miiii" in c.learned or c.roles == ("nanda",) for c in R.CLAIMS if c.learned)


def test_a_pooled_claim_reads_only_the_seeds_whose_control_learned():
    seen = []
    claim = R.Claim("k", "t", "s", "p", R.rule_spike, ("miiii",),
                    lambda seeds: seen.append(len(seeds)) or R.Reading("m", {}, None, "w"), pooled=True)
    runs = {"miiii": [_perfect_measures([1, 2], [1, 1]), _perfect_measures([1, None], [1, 0]),
                      _perfect_measures([1, 2], [1, 1])]}
    R.judge(claim, runs)
    assert seen == [2]
    runs["miiii"] = runs["miiii"][1:2]
    row = R.judge(claim, runs)
    assert seen == [2] and row["verdict"] == "not testable" and "did not generalise" in row["why"]


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


@pytest.mark.parametrize("p", [11, 13, 71])
def test_the_no_zeros_claim_against_trial_division(p):
    """As written ('primes are the only samples whose target vector contains no zeros') it fails for every p: n = 1
    has no zero and every prime below p is a multiple of itself; past one digit (p <= n < p²) it holds."""
    qs = [q for q in range(2, p) if _is_prime(q)]
    for key, start in (("no-zeros-0", 0), ("no-zeros-p", p)):
        claim = next(c for c in R.CLAIMS if c.key == key)
        reading = claim.read({"miiii": {"run": {"p": p}}})
        no_zero, primes = reading.args
        assert no_zero == [n for n in range(start, p * p) if all(n % q for q in qs)]
        assert primes == [n for n in range(start, p * p) if _is_prime(n)]
        assert R.rule_only_primes(*reading.args) is (start == p)


def test_about_is_within_a_quarter_both_ways():
    n = 5041
    true = sum(_is_prime(k) for k in range(n))
    assert R.rule_about(n / math.log(n), true) and not R.rule_about(n * math.log(n), true)
    assert not R.rule_about(true * 1.3, true) and R.rule_about(true * 0.8, true)


def test_the_task_count_claim_counts_the_primes_below_p():
    claim = next(c for c in R.CLAIMS if c.key == "task-count")
    reading = claim.read({"miiii": {"run": {"p": 113}, "task_names": [f"q={q}" for q in PRIMES_113]}})
    stated, true = reading.args
    assert true == 29 == len(PRIMES_113) and stated == pytest.approx(113 * math.log(113))
    assert R.rule_about(*reading.args) is False and R.rule_about(113 / math.log(113), 29) is True


def _masked_seed(masked: dict, plain: dict, steps: int = 5000) -> dict:
    def m(g):
        return {"task_names": [f"q={q}" for q in g], "grok_step": list(g.values()), "run": {"steps": steps, "seed": 0}}
    return {"masked": m(masked), "miiii": m(plain)}


@pytest.mark.parametrize(("masked", "verdict"), [
    ({2: None, 23: 2000, 29: 2500, 31: None}, "holds"),  # ahead of the unmasked run, which did not learn either
    ({2: None, 23: 4000, 29: None, 31: None}, "does not hold"),  # 1,500 steps behind its first, never a second
])
def test_masked_not_delayed_is_judged_though_neither_run_finished(masked, verdict):
    claim = next(c for c in R.CLAIMS if c.key == "masked-not-delayed")
    plain = {2: 100, 23: 2500, 29: 3000, 31: None}  # 3 of 4 tasks: this run did not generalise every task
    seeds = [_masked_seed(masked, plain)] * 2
    row = R.judge(claim, {role: [s[role] for s in seeds] for role in ("masked", "miiii")})
    assert row["verdict"] == verdict, row
    assert "k-th grok, masked − unmasked" in row["measured"]


@pytest.mark.parametrize("bundle", ["paper-cpu", "paper-cpu-original"])
def test_no_does_not_hold_rests_on_a_seed_whose_model_did_not_learn(bundle):
    """A claim about what a model learned reads 'does not hold' only where a seed whose runs all generalised fails
    it; a seed whose run did not learn is never counted against it."""
    ms, _ = load_summaries(ROOT / "results" / bundle)
    for claim in R.CLAIMS:
        row = R.judge(claim, ms)
        if row is None or claim.pooled or not claim.learned or row["verdict"] != "does not hold":
            continue
        n = row["seeds"]
        seeds = [{role: v[i] for role, v in ms.items() if i < len(v)} for i in range(n)]
        against = [s for s in seeds if not R.not_learned(claim, s)
                   and R.judge_seed(claim, claim.read(s), s).holds is False]
        assert against, (bundle, claim.key, row["why"])
        for s in seeds:
            if R.not_learned(claim, s):
                assert R.judge_seed(claim, claim.read(s), s).holds is None, (bundle, claim.key)


def test_a_resumed_run_s_time_says_it_counts_from_the_resume():
    """summary.json's wall_s times a resumed run's last segment only: the runs table says from which step, also for
    summaries written before the measures kept the step (read from the file's own summary)."""
    from experiments.paper.report import wall_cell

    assert wall_cell({"wall_s": 116.4, "resumed_from": 38912}) == "116.40 (steps 38,912 on: resumed)"
    assert wall_cell({"wall_s": 116.4, "resumed_from": None}) == "116.40"
    ms, _ = load_summaries(ROOT / "results" / "paper")
    raw = json.loads((ROOT / "results" / "paper" / "summaries" / "miiii-0.json").read_text())
    assert ms["miiii"][0]["run"]["resumed_from"] == raw["summary"]["resumed_from"] > 0
    from experiments.paper.report import regenerate

    assert "in all (1 of them resumed: timed from the resume" in regenerate(ROOT / "results" / "paper")
