"""The paper's checkable sentences about numbers, equations and tables rather than training: each a direct computation
(a function of p, or of the paper's own p = 113 and p = 11), with the rule that judges it and the reader that
computes it. claims.py gives each its row; as with every rule, the printed rule is the rule function's docstring.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from experiments.paper.readings import Reading
from miiii.tokens import primes_below

CLOSE = 1e-9  # an identity holds where both sides agree to this (relative) tolerance at every point read
PAPER_P = 113  # the p the paper's numbers are stated for


def rule_equal(stated, computed) -> bool:
    """holds if the paper's number (or list) is exactly the one computed."""
    return bool(stated == computed)


def rule_close(lhs, rhs) -> bool:
    """holds if the paper's expression equals the computed value within a relative 1e-9 at every point it is
    evaluated (the points are named beside it)."""
    lhs, rhs = np.asarray(lhs, float), np.asarray(rhs, float)
    return bool(lhs.shape == rhs.shape and np.all(np.abs(lhs - rhs) <= CLOSE * np.maximum(1.0, np.abs(rhs))))


def rule_primality_test(passes: list[int], primes: list[int]) -> bool:
    """holds if the numbers the stated test calls prime are exactly the primes among the numbers tested."""
    return sorted(passes) == sorted(primes)


def rule_in_space(chosen: dict, space: dict) -> bool:
    """holds if every hyper-parameter Table 2 reports is one of the values Table 1 searched."""
    return all(v in space[k] for k, v in chosen.items())


def rule_uniform(counts: list[list[int]]) -> bool:
    """holds if, in every task, every class has the same number of the p² samples."""
    return all(min(c) == max(c) for c in counts)


# ---------------------------------------------------------------- the readers


def _p(r) -> int:
    return r["miiii"]["run"]["p"]


def tasks_113(r):
    qs = primes_below(PAPER_P).tolist()
    return Reading(f"primes below {PAPER_P}: {len(qs)} ({qs[0]} … {qs[-1]})", {}, (29, len(qs)))


def largest_113(r):
    q = int(primes_below(PAPER_P).max())
    return Reading(f"the largest prime below {PAPER_P}: {q}, so {q} classes", {}, (109, q))


def p11_samples(r):
    n = np.arange(11 * 11)
    return Reading(f"x0 + 11 x1 for x0, x1 < 11: {n.min()} … {n.max()}, {len(n)} samples", {}, ((120, 121),
                                                                                                (int(n.max()), len(n))))


def p11_tasks(r):
    qs = primes_below(11).tolist()
    return Reading(f"primes below 11: {qs}", {}, ([2, 3, 5, 7], qs))


def samples_113(stated: int):
    def read(r):
        return Reading(f"{PAPER_P}² = {PAPER_P ** 2}; the paper prints {stated:,}", {}, (stated, PAPER_P ** 2))
    return read


def sqrt_test(strict: bool):
    """The numbers the test calls prime against the primes: as written, every natural number 1 ≤ n < p² and the
    primes q < √n; a reading, 2 ≤ n < p² and the primes q ≤ √n (the textbook test)."""
    def read(r):
        p = _p(r)
        start = 1 if strict else 2
        n = np.arange(start, p * p)
        qs = primes_below(p + 1).astype(np.int64)  # every prime up to √n < p
        below = qs[None, :] ** 2 < n[:, None] if strict else qs[None, :] ** 2 <= n[:, None]
        passes = n[~((n[:, None] % qs[None, :] == 0) & below).any(1)].tolist()
        primes = [x for x in primes_below(p * p).tolist() if x >= start]
        wrong = sorted(set(passes) ^ set(primes))
        return Reading(f"p = {p}, n in [{start}, {p * p}): the test calls {len(passes)} numbers prime, {len(primes)} "
                       f"are; wrong: {len(wrong)} ({', '.join(map(str, wrong[:8])) or 'none'}"
                       f"{' …' if len(wrong) > 8 else ''})", {"wrong": len(wrong)}, (passes, primes))
    return read


def tasks_sqrt(r):
    """The tasks (every prime q < p) against every prime below √(p² − 1), the root of the dataset's largest number."""
    p = _p(r)
    root = float(np.sqrt(p * p - 1))
    below = [q for q in primes_below(p * p).tolist() if q < root]
    tasks = primes_below(p).tolist()
    return Reading(f"p = {p}: √{p * p - 1} = {root:.3f}; primes below it: {len(below)}, tasks (primes below p): "
                   f"{len(tasks)}", {}, (tasks, below))


def _uniform_ce(q: int) -> float:
    """The cross-entropy of a uniform prediction over q classes, averaged over uniformly drawn labels."""
    return float(-np.mean(np.log(np.full(q, 1 / q))))


def ce_ln_n(r):
    ns = list(range(2, PAPER_P + 1))
    return Reading(f"a uniform prediction's cross-entropy over n = 2 … {PAPER_P} classes against ln n", {},
                   ([np.log(n) for n in ns], [_uniform_ce(n) for n in ns]))


def ce_ln_inverse(r):
    qs = primes_below(PAPER_P).tolist()
    return Reading(f"ln(1/q) against a uniform prediction's cross-entropy, q = 2 … {qs[-1]}: q = 2 gives "
                   f"{np.log(1 / 2):.3f} against {_uniform_ce(2):.3f}", {},
                   ([np.log(1 / q) for q in qs], [_uniform_ce(q) for q in qs]))


def _angles(p: int):
    """(w x0, w x1) over x0, x1 < p, and (w s, w c) over s = x0 + x1 ≤ 2p − 2 and c < p, for w = 2πk/p,
    k = 1 … p // 2 (Nanda et al.'s frequencies; Eq. 5 reads x0 + x1 only through their sum)."""
    w = 2 * np.pi * np.arange(1, p // 2 + 1)[:, None, None] / p
    x, s = np.arange(p), np.arange(2 * p - 1)
    return w * x[None, :, None], w * x[None, None, :], w * s[None, :, None], w * x[None, None, :]


def equation(line: str):
    """Eq. 4.1, 4.2 and 5 as printed against the left side, over x0, x1, c < p and every w = 2πk/p."""
    def read(r):
        p = _p(r)
        a, b, s, c = _angles(p)
        left, printed, textbook = {
            "4.1": (np.sin(a + b), np.sin(a) * np.cos(a) + np.cos(a) * np.sin(b), np.sin(a) * np.cos(b)
                    + np.cos(a) * np.sin(b)),
            "4.2": (np.cos(a + b), np.cos(b) * np.cos(b) - np.sin(a) * np.sin(b), np.cos(a) * np.cos(b)
                    - np.sin(a) * np.sin(b)),
            "5": (np.cos(s - c), np.cos(s) * np.cos(c) + np.sin(s) * np.sin(c), None),
        }[line]
        err = float(np.abs(left - printed).max())
        text = f"p = {p}, x0, x1, c < p, w = 2πk/p for k = 1 … {p // 2}: largest |left − right| {err:.3g}"
        if textbook is not None:
            text += f" (the angle-addition formula in its place: {float(np.abs(left - textbook).max()):.1g})"
        return Reading(text, {"largest error": err}, (printed, left))
    return read


TABLE1 = {"dropout": (0, Fraction(1, 2), Fraction(1, 5), Fraction(1, 10)), "lambda": (0, Fraction(1, 2), 2),
          "wd": (0, Fraction(1, 10), Fraction(1, 2), 1), "d": (128, 256), "lr": (3e-4, 1e-4), "heads": (4, 8)}
TABLE2 = {"dropout": Fraction(1, 10), "lambda": Fraction(1, 2), "wd": Fraction(1, 3), "d": 256, "lr": 3e-4,
          "heads": 4}


def table2_in_table1(r):
    out = [k for k, v in TABLE2.items() if v not in TABLE1[k]]
    return Reading("Table 2 outside Table 1: " + (", ".join(f"{k} = {TABLE2[k]} (searched: "
                                                            f"{', '.join(map(str, TABLE1[k]))})" for k in out)
                                                  or "none"), {}, (TABLE2, TABLE1))


def uniform_classes(task: str):
    """Each class's sample count over the p² grid: nanda's (x0 + x1) mod p, or miiii's n mod q for every q < p."""
    def read(r):
        p = _p(r)
        x1, x0 = np.divmod(np.arange(p * p), p)
        if task == "nanda":
            qs, counts = [p], [np.bincount((x0 + x1) % p, minlength=p).tolist()]
        else:
            qs = primes_below(p).tolist()
            counts = [np.bincount(np.arange(p * p) % q, minlength=q).tolist() for q in qs]
        spread = [max(c) - min(c) for c in counts]
        shown = sorted({0, len(qs) - 1})  # the first and the last task
        ends = "; ".join(f"mod {qs[i]}: {min(counts[i])}–{max(counts[i])}" for i in shown)
        return Reading(f"p = {p}, {len(counts)} task(s): samples per class {ends}; largest difference {max(spread)}",
                       {"largest spread": max(spread)}, (counts,))
    return read
