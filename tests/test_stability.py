"""The stability study (experiments/stability): its rules both ways on synthetic members, the summary it extracts
against a hand computation, and the committed bundle equal to its regeneration from its summaries."""

from pathlib import Path

import numpy as np
import pytest

from experiments.stability import bundle
from experiments.stability import rules as R
from experiments.stability.study import SETTINGS, member_summary, slug

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "results" / "stability"


def m(grok=None, onset=None, gain=None):
    """A member summary of tasks a and b (None everywhere unless given)."""
    base = {"a": None, "b": None}
    return {"grok": {**base, **(grok or {})}, "onset": {**base, **(onset or {})}, "gain": {**base, **(gain or {})}}


def test_sc_stops_needs_a_collapse_that_stalls_where_the_control_groks():
    nowd = m(onset={"a": 300}, gain={"a": 0.0})
    wd = m(grok={"a": 900, "b": 500})
    assert R.rule_sc_stops(nowd, wd) is True
    assert R.rule_sc_stops(m(onset={"a": 300}, gain={"a": 0.05}), wd) is False  # still learning after the onset
    assert R.rule_sc_stops(m(grok={"a": 800}, onset={"a": 300}, gain={"a": 0.0}), wd) is False  # grokked after it
    assert R.rule_sc_stops(m(grok={"a": 200}, onset={"a": 300}, gain={"a": 0.0}), wd) is None  # grokked before it
    assert R.rule_sc_stops(m(), wd) is None  # no collapse
    assert R.rule_sc_stops(nowd, m(grok={"b": 500})) is None  # the control does not grok the collapsed task
    assert R.rule_sc_stops(m(onset={"a": 2900}), wd) is None  # too late to tell (no gain measured)


def test_enables_needs_the_control_to_fall_short_and_the_mitigation_to_match_weight_decay():
    wd, nowd = m(grok={"a": 1, "b": 2}), m(grok={"a": 1})
    assert R.rule_enables(m(grok={"a": 5, "b": 9}), nowd, wd) is True
    assert R.rule_enables(m(grok={"b": 9}), nowd, wd) is False  # no more than without it
    assert R.rule_enables(m(grok={"a": 5, "b": 9}), m(grok={"a": 1, "b": 7}), wd) is None  # nothing to enable


def test_quick_compares_grok_steps_with_the_weight_decay_run():
    wd = m(grok={"a": 100, "b": 400})
    assert R.rule_quick(m(grok={"a": 50, "b": 200}), wd) is True
    assert R.rule_quick(m(grok={"a": 150, "b": 500}), wd) is False
    assert R.rule_quick(m(grok={"a": 50}), wd) is False  # earlier, but fewer tasks
    assert R.rule_quick(m(), wd) is None


def test_precision_orders_the_onsets_with_never_as_last():
    f64 = m()
    assert R.rule_precision(m(onset={"a": 10}), m(onset={"a": 50}), f64) is True
    assert R.rule_precision(m(onset={"a": 10}), m(), f64) is True  # float32 never collapses: after float16
    assert R.rule_precision(m(onset={"a": 60}), m(onset={"a": 50}), f64) is False
    assert R.rule_precision(m(onset={"a": 10}), m(onset={"a": 50}), m(onset={"a": 40})) is False  # float64 first
    assert R.rule_precision(m(), m(onset={"a": 50}), f64) is None


def test_verdict_pools_seeds_toward_does_not_hold():
    assert R.verdict([True, True, True]) == "holds"
    assert R.verdict([True, None, True]) == "not testable"
    assert R.verdict([True, None, False]) == "does not hold"
    assert R.verdict([]) == "not testable"


def test_member_summary_against_a_hand_computation():
    T = 1000
    step = np.arange(T)
    va = np.zeros((T, 2))
    va[:, 0] = np.where(step >= 400, 1.0, 0.2)  # task 0 groks at 400
    va[:, 1] = np.linspace(0.1, 0.3, T)  # task 1 creeps up
    col = np.zeros((T, 2))
    col[300:, 1] = 0.6  # task 1 collapses at 300
    s = member_summary(step, ["q0", "q1"], va, va, col, np.linspace(1, 9, T), np.linspace(30, 40, T))
    assert s["grok"] == {"q0": 400, "q1": None}
    assert s["onset"] == {"q0": None, "q1": 300}
    assert s["gain"]["q0"] is None
    want = va[T - R.WINDOW:, 1].mean() - va[300:300 + R.WINDOW, 1].mean()
    assert s["gain"]["q1"] == pytest.approx(want, abs=1e-4)
    assert s["max_logit_end"] == 9.0 and s["weight_norm"] == [30.0, 40.0]
    assert s["curve"]["step"][0] == 0 and s["curve"]["step"][-1] == T - 1


def test_every_setting_has_its_own_sweep_directory():
    names = [slug(s) for s, _ in SETTINGS]
    assert len(set(names)) == len(names) and all(n.replace("-", "").isalnum() for n in names)


def test_rules_print_their_docstrings():
    for claim in bundle.CLAIMS:
        assert bundle.rule_text(claim[2]).startswith("holds if")


@pytest.mark.skipif(not (BUNDLE / "summaries" / "report.json").is_file(), reason="no committed stability bundle")
def test_committed_bundle_equals_its_regeneration():
    summaries, report = bundle.read(BUNDLE)
    assert (BUNDLE / "results.md").read_text() == bundle.results_md(summaries, report)
    assert set(summaries) == {"nanda", "miiii"}
    for s in summaries.values():
        assert {len(ms) for ms in s["settings"].values()} == {3}  # >= 3 seeds in every setting


def test_prevents_sc_is_not_judged_on_the_softmax_a_stablemax_run_does_not_train_through():
    from experiments.stability import rules as SR

    assert SR.rule_prevents_sc({"onset": {"q=2": None}}) is None
    assert SR.rule_prevents_sc({"onset": {"q=2": 133}}) is None
    assert "softmax of the logits" in " ".join(SR.rule_prevents_sc.__doc__.split())


def test_collapsed_first_is_what_the_sc_rule_and_its_measured_cell_read():
    nowd = m(grok={"a": 800, "b": 100}, onset={"a": 300, "b": 200}, gain={"a": 0.0, "b": 0.0})
    assert R.collapsed_first(nowd) == ["a"]  # b grokked before its collapse
    assert R.collapsed_first(m(onset={"a": 2900})) == []  # no gain measured: too late to tell
    wd = m(grok={"a": 700})
    said = bundle.say_sc_stops(nowd, wd)
    assert "1 task(s) collapse first (onset 300)" in said and "1 of them (at 800) grok after it" in said
    assert "the control groks 1 of them (at 700)" in said
    assert bundle.say_sc_stops(m(), wd).startswith("no task collapses")


def test_prevents_nlm_is_not_judged_on_the_weight_norm():
    grown, kept = m() | {"weight_norm": [40.0, 150.0]}, m() | {"weight_norm": [40.0, 40.0]}
    assert R.rule_prevents_nlm(grown) is None and R.rule_prevents_nlm(kept) is None
    assert "weight norm" in " ".join(R.rule_prevents_nlm.__doc__.split())
    assert bundle.say_prevents_nlm(grown) == "weight norm 40 → 150"


def test_a_row_quotes_only_the_part_of_a_sentence_its_rule_tests():
    """StableMax's and ⊥Grad's sentences each have several parts: every row quotes its own part and no other's."""
    parts = {R.rule_prevents_sc: ("prevents SC", ("enables",)),
             R.rule_prevents_nlm: ("NLM", ("quick", "generalization in")),
             R.rule_quick: ("quick", ("NLM", "grokking tasks"))}
    for claim, _, rule, reads, _ in bundle.CLAIMS:
        if rule in parts:
            want, others = parts[rule]
            assert want in claim and not any(o in claim for o in others), claim
        if rule is R.rule_enables and any("StableMax" in s or "⊥Grad" in s for s in reads):
            assert "prevents SC" not in claim and "quick" not in claim and "NLM" not in claim, claim


@pytest.mark.skipif(not (BUNDLE / "summaries" / "report.json").is_file(), reason="no committed stability bundle")
def test_the_float16_row_says_when_the_collapsed_runs_grok():
    from experiments.headline import stability_rows

    text = (BUNDLE / "results.md").read_text()
    f16 = [ln for ln in text.splitlines() if "on the float16 runs" in ln and "| nanda |" in ln]
    assert len(f16) == 1 and "collapse first (onset" in f16[0] and "grok after it" in f16[0]
    rows = stability_rows(BUNDLE / "results.md")
    verdicts = [v.split(" (")[0] for r in rows.values() for v in r.values()]
    assert set(verdicts) <= {"holds", "does not hold", "not testable"}
    assert len(rows) == len(bundle.CLAIMS)
