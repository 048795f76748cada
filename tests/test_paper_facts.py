"""The paper's sentences about numbers, equations and tables (experiments/paper/facts.py), each rule both ways against
an independent computation, and each row's verdict."""

from fractions import Fraction

import numpy as np
import pytest

from experiments.paper import claims as R
from experiments.paper import facts as F


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


def _row(key: str, p: int = 71) -> dict:
    claim = next(c for c in R.CLAIMS if c.key == key)
    return R.judge(claim, {"miiii": [{"run": {"p": p, "seed": s}, "task_names": []} for s in range(2)]})


@pytest.mark.parametrize(("key", "verdict"), [
    ("tasks-113", "holds"), ("largest-113", "holds"), ("p11-samples", "holds"), ("p11-tasks", "holds"),
    ("samples-113", "holds"), ("vector-113", "does not hold"),  # 1 × 12796 against 113² = 12,769
    ("sqrt-test-lt", "does not hold"), ("sqrt-test-le", "holds"), ("tasks-sqrt", "holds"),
    ("uniform-nanda", "holds"), ("uniform-miiii", "does not hold"),  # q does not divide p²: one sample apart
    ("ce-ln-n", "holds"), ("ce-ln-inverse", "does not hold"),  # ln(1/q) < 0, a cross-entropy is not
    ("eq-4.1", "does not hold"), ("eq-4.2", "does not hold"), ("eq-5", "holds"),
    ("table2-in-table1", "does not hold"),  # wd 1/3 is not among Table 1's 0, 1/10, 1/2, 1
])
def test_every_fact_row_and_its_verdict(key, verdict):
    row = _row(key)
    assert row["verdict"] == verdict, row
    assert row["counted"] is None and "(a computation, no training)" in row["source"]


@pytest.mark.parametrize("p", [11, 13, 71, 113])
def test_the_square_root_test_against_trial_division(p):
    """As written ('any prime less than its square root') the test calls 1 and every square of a prime prime; with
    'at most' (from n = 2) it is exact."""
    for key, strict in (("sqrt-test-lt", True), ("sqrt-test-le", False)):
        claim = next(c for c in R.CLAIMS if c.key == key)
        passes, primes = claim.read({"miiii": {"run": {"p": p}}}).args
        start = 1 if strict else 2
        assert primes == [n for n in range(start, p * p) if _is_prime(n)]
        wrong = sorted(set(passes) ^ set(primes))
        squares = [q * q for q in range(2, p) if _is_prime(q) and q * q < p * p]
        assert wrong == ([1, *squares] if strict else [])
        assert F.rule_primality_test(passes, primes) is (not strict)


def test_equal_close_in_space_and_uniform_rules_both_ways():
    assert F.rule_equal(29, 29) and not F.rule_equal(12796, 113**2)
    assert F.rule_equal([2, 3, 5, 7], [2, 3, 5, 7]) and not F.rule_equal([2, 3, 5], [2, 3, 5, 7])
    assert F.rule_close([np.log(3)], [np.log(3) * (1 + 1e-12)]) and not F.rule_close([-np.log(3)], [np.log(3)])
    assert not F.rule_close([1.0, 2.0], [1.0])  # different points: never equal
    assert F.rule_in_space(F.TABLE2 | {"wd": Fraction(1, 2)}, F.TABLE1) and not F.rule_in_space(F.TABLE2, F.TABLE1)
    assert F.rule_uniform([[3, 3], [2, 2, 2]]) and not F.rule_uniform([[3, 3], [2, 3]])


@pytest.mark.parametrize("p", [11, 71, 113])
def test_the_equations_as_printed_and_the_class_counts(p):
    r = {"miiii": {"run": {"p": p}}}
    for line in ("4.1", "4.2"):  # the printed right sides: sin(w x0) cos(w x0) ..., cos(w x1) cos(w x1) ...
        assert not F.rule_close(*F.equation(line)(r).args)
    assert F.rule_close(*F.equation("5")(r).args)
    # nanda's classes: each residue p times; miiii's: n mod q over 0 … p² − 1, q not dividing p²
    (nanda,) = F.uniform_classes("nanda")(r).args
    (miiii,) = F.uniform_classes("miiii")(r).args
    assert nanda == [[p] * p]
    qs = [q for q in range(2, p) if _is_prime(q)]
    assert miiii == [[sum(1 for n in range(p * p) if n % q == c) for c in range(q)] for q in qs]
    assert all(max(c) - min(c) == 1 for c in miiii)
