"""The book's findings (experiments/book/findings*.py): every rule both ways on synthetic measures, including the
case where the untrained control passes too, the carry count against the sums themselves, and findings.md rendered
from a record alone."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.book import findings_rules as F

T, A0, READS = 12, 7, [[2, 6], [1, 5], [0, 4]]  # 3-digit addition: '=' at 7, sum digits at 8..11


def _pattern(rows: dict | None = None) -> list:
    """A causal pattern, uniform over each row's keys, with `rows` {query: {key: mass}} set and the rest of those
    rows spread evenly over their other keys."""
    a = np.tril(np.ones((T, T)))
    a /= a.sum(1, keepdims=True)
    for q, masses in (rows or {}).items():
        rest = [k for k in range(q + 1) if k not in masses]
        a[q] = 0
        a[q, rest] = (1 - sum(masses.values())) / len(rest)
        for k, v in masses.items():
            a[q, k] = v
    return a.tolist()


def _columns(mass: float) -> dict:
    return {A0 + j: {k: mass / 2 for k in keys} for j, keys in enumerate(READS)}


def _previous(mass: float, reading: str = "predicts") -> dict:
    """Digit j's query (A0 + j, or A0 + 1 + j when it holds digit j) on digit j - 1 (at A0 + j)."""
    shift = F.READINGS[reading]
    return {A0 + j + shift: {A0 + j: mass} for j in range(1, T - A0 - shift)}


def _cos(kind: str) -> list:
    d = np.arange(10)
    if kind == "carry":  # falls with the difference of the digits
        return (1 - np.abs(d[:, None] - d[None]) / 9).tolist()
    rng = np.random.default_rng(0)
    c = rng.uniform(-1, 1, (10, 10))
    return ((c + c.T) / 2).tolist()


def _pos(kind: str) -> list:
    """(T, T) positional cosines: 'columns' makes each column's two operand positions each other's nearest."""
    rng = np.random.default_rng(1)
    c = rng.uniform(-0.5, 0.5, (T, T))
    c = (c + c.T) / 2
    if kind == "columns":
        for a, b in READS:
            c[a, b] = c[b, a] = 0.9
    np.fill_diagonal(c, 1.0)
    return c.tolist()


def member(l1=None, l2=None, init_l1=None, init_l2=None, probes=(None, None), init_probes=(None, None),
           cos="random", init_cos="random", task="addition", solved=True, pos="random", init_pos="random") -> dict:
    def side(a, b, pr, c, ps):
        return {"attention": [_pattern(a), _pattern(b)], "digit_cos": _cos(c), "pos_cos": _pos(ps),
                "probes": {"cascade": [_pattern(), _pattern(pr[0])], "no_carry": [_pattern(), _pattern(pr[1])]}}
    reads = READS if task == "addition" else [[4 - j] for j in range(5)]
    return {"seed": 0, "task": task, "n_layers": 2, "answer_start": A0 if task == "addition" else 5, "reads": reads,
            "autoregressive": 1.0 if solved else 0.4, "teacher_forced": 1.0 if solved else 0.4,
            "trained": side(l1, l2, probes, cos, pos), "init": side(init_l1, init_l2, init_probes, init_cos, init_pos)}


def test_layer1_columns_needs_the_majority_on_every_column_and_an_untrained_control_that_fails():
    assert F.rule_layer1_columns(member(l1=_columns(0.8))) is True
    assert F.rule_layer1_columns(member(l1=_columns(0.4))) is False
    assert F.rule_layer1_columns(member(l1={**_columns(0.8), A0 + 2: {0: 0.2, 4: 0.2}})) is False  # one column short
    assert F.rule_layer1_columns(member(l2=_columns(0.8))) is False  # layer 2 aligning is not layer 1
    assert F.rule_layer1_columns(member(l1=_columns(0.8), init_l1=_columns(0.6))) is None  # the control passes too
    assert F.rule_layer1_columns(member(l1=_columns(0.8), solved=False)) is None  # not the model the book describes


def _operands(mass: float) -> dict:
    """Operand b's digit j (positions 6, 5, 4) on operand a's digit j (2, 1, 0)."""
    return {b: {a: mass} for a, b in READS}


def test_layer1_aligning_each_columns_operand_digits():
    assert F.operand_alignment(member(l1=_operands(0.7))) == [0.7, 0.7, 0.7]
    assert F.rule_layer1_operand_columns(member(l1=_operands(0.7))) is True
    assert F.rule_layer1_operand_columns(member(l1={**_operands(0.7), 6: {2: 0.3}})) is False  # the ones: short
    assert F.rule_layer1_operand_columns(member(l2=_operands(0.9))) is False  # layer 2 is not layer 1
    assert F.rule_layer1_operand_columns(member(l1=_operands(0.7), init_l1=_operands(0.6))) is None  # control passes
    assert F.rule_layer1_operand_columns(member(l1=_operands(0.7), solved=False)) is None


def test_columns_in_some_layer():
    assert F.rule_columns(member(l2=_columns(0.8))) is True
    assert F.rule_columns(member(l1=_columns(0.4), l2=_columns(0.3))) is False
    assert F.rule_columns(member(l2=_columns(0.8), init_l1=_columns(0.6))) is None
    assert F.rule_columns(member(l2=_columns(0.8), solved=False)) is None


@pytest.mark.parametrize("reading", F.READINGS)
def test_layer2_carries_needs_the_previous_output_digit_and_more_than_layer1(reading):
    other = "holds" if reading == "predicts" else "predicts"
    assert F.rule_layer2_carries(member(l2=_previous(0.7, reading)), reading) is True
    assert F.rule_layer2_carries(member(l2=_previous(0.7, other)), reading) is False  # the other reading's query
    assert F.rule_layer2_carries(member(l2=_previous(0.3, reading)), reading) is False
    assert F.rule_layer2_carries(member(l1=_previous(0.9, reading), l2=_previous(0.7, reading)), reading) is False
    assert F.rule_layer2_carries(member(l2=_previous(0.7, reading), init_l2=_previous(0.6, reading)), reading) is None


def test_the_holds_reading_reads_one_query_later():
    shifted = {q + 1: keys for q, keys in _columns(0.8).items()}
    assert F.rule_columns(member(l2=shifted), "holds") is True and F.rule_columns(member(l2=shifted)) is False
    lopsided = {A0 + j: {keys[0]: 0.7} for j, keys in enumerate(READS)}  # one operand only
    assert F.rule_columns(member(l1=lopsided)) is False


def test_two_patterns_needs_both_tasks():
    add, rev = member(l2=_columns(0.8)), member(l1={5 + j: {4 - j: 0.95} for j in range(5)}, task="reversal")
    assert F.rule_two_patterns(add, rev) is True
    assert F.rule_two_patterns(member(), rev) is False
    assert F.rule_two_patterns(add, member(task="reversal", solved=False)) is None


def test_column_positions_pair_with_their_control():
    assert F.rule_column_positions(member(pos="columns")) is True
    assert F.rule_column_positions(member()) is False
    assert F.rule_column_positions(member(pos="columns", init_pos="columns")) is None


def test_more_complex_is_a_higher_entropy_on_cascading_carries_beyond_the_untrained_difference():
    sharp = {q: {0: 0.97} for q in range(A0, T)}
    assert F.rule_more_complex(member(probes=(None, sharp))) is True  # cascade spread, no carry sharp
    assert F.rule_more_complex(member(probes=(sharp, None))) is False
    assert F.rule_more_complex(member(probes=(None, sharp), init_probes=(None, sharp))) is None  # as large untrained
    assert F.rule_more_complex(member(probes=(None, sharp), solved=False)) is None


def test_anti_diagonal_in_some_layer_and_its_perfect_reading():
    mirror = lambda v: {5 + j: {4 - j: v} for j in range(5)}  # noqa: E731
    assert F.rule_anti_diagonal(member(l2=mirror(0.95), task="reversal")) is True
    assert F.rule_perfect_anti_diagonal(member(l2=mirror(0.95), task="reversal")) is True
    assert F.rule_anti_diagonal(member(l1=mirror(0.6), task="reversal")) is True
    assert F.rule_perfect_anti_diagonal(member(l1=mirror(0.6), task="reversal")) is False
    assert F.rule_anti_diagonal(member(l1=mirror(0.3), task="reversal")) is False
    assert F.rule_anti_diagonal(member(l1=mirror(0.95), init_l2=mirror(0.7), task="reversal")) is None


def test_embedding_rules_with_their_controls():
    assert F.carry_rank(member(cos="carry")) == pytest.approx(1.0)
    assert F.rule_carry_role(member(cos="carry")) is True
    assert F.rule_carry_role(member()) is False
    assert F.rule_carry_role(member(cos="carry", init_cos="carry")) is None
    assert F.rule_eight_nine(member(cos="carry")) is True  # 8 and 9 nearest, far from 0 and 1
    flipped = member(cos="carry")
    flipped["trained"]["digit_cos"][8][0] = flipped["trained"]["digit_cos"][0][8] = 1.0
    assert F.rule_eight_nine(flipped) is False
    assert F.rule_eight_nine(member(cos="carry", init_cos="carry")) is None


def _run(ar, tf=None, by=None):
    return {"autoregressive": ar, "teacher_forced": ar if tf is None else tf,
            "by_carries": by or {"0": [100, ar], "1": [100, ar], "2": [50, ar], "3": [10, ar]}}


def test_ablation_rules_against_their_baseline():
    base = [_run(1.0), _run(0.995), _run(0.1)]  # median 0.995: one seed that never grokked does not decide
    assert F.rule_degraded([_run(0.4), _run(0.94)], base) is True
    assert F.rule_degraded([_run(0.4), _run(0.96)], base) is False  # within 0.05 of the baseline's median
    assert F.rule_no_columns([_run(0.01), _run(0.2)], base) is True
    assert F.rule_no_columns([_run(0.01), _run(0.7)], base) is False
    assert F.rule_no_columns([_run(0.01)], [_run(1.0), _run(0.3), _run(0.2)]) is None  # the baseline fails too
    unaligned, aligned = member() | _run(0.01), member(l2=_columns(0.8)) | _run(0.01)
    assert F.rule_no_column_attention([unaligned, unaligned], base) is True
    assert F.rule_no_column_attention([unaligned, aligned], base) is False
    assert F.rule_degraded([_run(0.4)], [_run(1.0), _run(0.3), _run(0.2)]) is None
    base = [_run(1.0), _run(0.995), _run(0.99)]
    assert F.rule_mismatch([_run(0.0, tf=1.0)], base) is True
    assert F.rule_mismatch([_run(0.0, tf=0.9)], base) is False
    assert F.rule_mismatch([_run(0.0, tf=1.0)], [_run(0.5, tf=1.0)]) is None  # the baseline's readings differ too
    limited = _run(0.8, by={"0": [100, 1.0], "2": [50, 0.5], "3": [10, 0.3]})
    assert F.carry_gap(limited) == pytest.approx(1.0 - (50 * 0.5 + 10 * 0.3) / 60)
    assert F.rule_limited_carries([limited], base) is True
    assert F.rule_limited_carries([limited], [_run(1.0, by={"0": [100, 1.0], "2": [60, 0.3]})]) is False
    assert F.rule_limited_carries([limited], [_run(1.0, by={"0": [100, 1.0], "2": [60, 0.5]})]) is False  # by 0.03
    assert F.rule_limited_carries([limited], [_run(0.8)]) is None  # the baseline does not solve the task
    assert F.rule_limited_carries([_run(0.5, by={"0": [100, 0.5]})], base) is None  # no sums with two carries


def test_stricter_needs_a_gap_in_the_books_model_and_a_control_that_shows_one():
    control = [_run(0.0, tf=1.0)]  # without the causal mask generation parts from the teacher-forced reading
    assert F.rule_stricter(control, [_run(1.0), _run(0.9, tf=0.95)]) is True  # errors compound in one seed
    assert F.rule_stricter(control, [_run(1.0), _run(0.1)]) is False  # equal in every seed (a causal model's lot)
    assert F.rule_stricter(control, [_run(0.9, tf=0.95), _run(0.9, tf=0.8)]) is False  # generation above it in one
    assert F.rule_stricter([_run(1.0)], [_run(0.9, tf=0.95)]) is None  # the control shows no gap: cannot tell


def test_carries_counts_what_the_sums_carry():
    from experiments.book.findings import carries
    from miiii.tokens import encode_addition

    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 1000, 500), rng.integers(0, 1000, 500)
    a[:3], b[:3] = [999, 123, 500], [1, 456, 500]
    want = [sum((a_ // 10**j % 10 + b_ // 10**j % 10 + (a_ % 10**j + b_ % 10**j >= 10**j)) >= 10 for j in range(3))
            for a_, b_ in zip(a, b, strict=True)]
    got = carries(encode_addition(a, b, 3)[:, :-1], 3)
    assert got.tolist() == want and got[:3].tolist() == [3, 0, 1]


def test_findings_md_renders_every_claim_with_its_printed_rule():
    from experiments.book import findings_md
    from miiii.rules import printed_rule

    add = [member(l1=_columns(0.8), cos="carry") | _run(1.0) for _ in range(3)]
    rev = [member(l1={5 + j: {4 - j: 0.95} for j in range(5)}, task="reversal") | _run(1.0) for _ in range(3)]
    for i, m in enumerate(add + rev):
        m["seed"] = i % 3
    data = {"configs": {k: {"preset": "addition", "sets": []} for k in
                        ("addition", "reversal", "no_pos_embed", "no_causal_mask", "one_layer", "lr_1e-3")},
            "sweeps": {"addition": add, "reversal": rev, "no_pos_embed": [member() | _run(0.0)] * 3,
                       "lr_1e-3": [_run(0.2)] * 3,
                       "no_causal_mask": [_run(0.0, tf=1.0)] * 3, "one_layer": [_run(0.5)] * 3},
            "trained_by": {"addition": {"commit": "abc1234def", "date": "today"}},
            "measured_by": {"commit": "abc1234def", "device": "cpu", "jax": "0"}, "attn_samples": 1000}
    text = findings_md.render(data)
    for claim in (*findings_md.SEED_CLAIMS, *findings_md.ABLATION_CLAIMS):
        assert printed_rule(claim[3]) in text
    assert text.count("**holds** (3/3)") == 7  # predicts reading: layer-1 columns, both tasks, columns in some
    # layer, both anti-diagonal rows; both digit-embedding rules
    assert text.count("| **holds** |") == 6 and "| **does not hold** |" in text  # limited carries: gaps are equal


def test_lr_rules_need_a_baseline_that_solves_it():
    base = [_run(1.0), _run(0.3)]
    assert F.rule_lr_never_solves([_run(0.1), _run(0.9)], base) is True
    assert F.rule_lr_never_solves([_run(0.1), _run(0.995)], base) is False
    assert F.rule_lr_never_solves([_run(0.1)], [_run(0.3)]) is None  # the baseline does not solve it either
    assert F.rule_lr_fails([_run(0.1), _run(0.4)], base) is True
    assert F.rule_lr_fails([_run(0.1), _run(0.9)], base) is False  # never solves, but does not fail
    assert F.rule_lr_fails([_run(0.1)], [_run(0.3)]) is None


@pytest.mark.study
def test_findings_smoke_trains_measures_and_renders_what_the_bundle_regenerates(tmp_path):
    """The whole study at --smoke (six 2-seed sweeps of the tiny presets): findings.json holds every member's
    measures, findings.md is what the bundle renders from that file alone, and a second call reuses the sweeps."""
    import json

    from experiments.book import findings, findings_md

    args = ["--smoke", "--seeds", "2", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out")]
    assert findings.main(args) == 0
    data = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert set(data["sweeps"]) == set(findings.CONFIGS) and all(len(v) == 2 for v in data["sweeps"].values())
    m = data["sweeps"]["addition"][0]
    assert sum(n for n, _ in m["by_carries"].values()) == findings.config("addition", smoke=True).task.n_valid
    assert np.allclose(np.asarray(m["trained"]["attention"]).sum(-1), 1, atol=0.01)  # rows of a pattern
    assert (tmp_path / "out" / "findings.md").read_text() == findings_md.render(data)
    assert (tmp_path / "out" / "findings_attention.png").is_file()
    stamp = (tmp_path / "runs" / "addition" / "sweep.json").stat().st_mtime
    assert findings.main([*args, "--train-only"]) == 0
    assert (tmp_path / "runs" / "addition" / "sweep.json").stat().st_mtime == stamp  # reused, not retrained
    assert findings.main([*args[:2], "3", *args[3:], "--train-only"]) == 2  # 3 seeds is another plan: refused


def test_a_sweep_of_another_plan_is_refused_not_reused(tmp_path):
    """A finished or interrupted sweep under runs/NAME is reused or resumed only when its plan is the config's own."""
    import json

    from experiments.book import findings
    from miiii.config import ConfigError

    out = tmp_path / "addition"
    out.mkdir()
    with pytest.raises(ConfigError, match="not a sweep of this study"):
        findings.train("addition", 2, tmp_path, progress=False, smoke=True)
    plan = {"config": findings.config("reversal", smoke=True).to_dict(), "seeds": 2, "grid": {}}
    (out / "sweep-plan.json").write_text(json.dumps(plan))
    (out / "sweep.json").write_text("{}")
    with pytest.raises(ConfigError, match="another config or seed count"):
        findings.train("addition", 2, tmp_path, progress=False, smoke=True)


def test_one_layer_sufficient_but_harder_to_train():
    def seeds(*acc):
        return [{"autoregressive": a} for a in acc]
    assert F.rule_sufficient_but_harder(seeds(1.0, 0.1, 0.1), seeds(1.0, 1.0, 0.1)) is True
    assert F.rule_sufficient_but_harder(seeds(0.1, 0.1, 0.1), seeds(1.0, 1.0, 0.1)) is False  # never sufficient
    assert F.rule_sufficient_but_harder(seeds(1.0, 1.0, 0.1), seeds(1.0, 1.0, 0.1)) is False  # no harder
    assert F.rule_sufficient_but_harder(seeds(1.0, 0.1, 0.1), seeds(1.0, 0.1, 0.1)) is None  # baseline unsolved
