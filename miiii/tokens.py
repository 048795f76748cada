"""How the tasks' numbers become tokens: the grid's inputs [x0, x1, p], the book's vocabulary and its addition and
reversal sequences (encoded, decoded, drawn without repeats, read from a probe's text), the book's edge cases, and
the primes. The tasks themselves, and which of these each one uses: tasks.py.
"""

from __future__ import annotations

import math

import numpy as np

# Book vocabulary: digits 0-9, then these four.
PLUS, EQUALS, EOS, PAD = 10, 11, 12, 13
BOOK_VOCAB = 14
TOKEN_TEXT = [str(i) for i in range(10)] + ["+", "=", "<EOS>", "<PAD>"]


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % r for r in range(2, math.isqrt(n) + 1))


def primes_below(p: int) -> np.ndarray:
    return np.array([q for q in range(2, p) if is_prime(q)], dtype=np.int32)


def digit_positions(digit_order: str) -> tuple[int, int]:
    """Input positions of (x0, x1), the low and the high digit of n = x0 + x1*p, in a grid task's tokens."""
    return (1, 0) if digit_order == "high" else (0, 1)


def grid_inputs(p: int, digit_order: str = "low", size: int | None = None) -> np.ndarray:
    """The inputs of the size x size corner of the grid (default: all p^2) in (x1-major, x0-minor) order, row i =
    (x0, x1) = (i % size, i // size), so for the whole grid row i holds the number n = i (the order
    `analysis.to_grid` expects). Tokens [x0, x1, p], or [x1, x0, p] with digit_order "high" (the original's)."""
    k = size or p
    x1, x0 = np.divmod(np.arange(k * k), k)
    x = np.full((k * k, 3), p, np.int32)
    x[:, list(digit_positions(digit_order))] = np.stack([x0, x1], axis=1)
    return x


def digits(v: np.ndarray, n: int) -> np.ndarray:
    """(N,) non-negative ints -> (N, n) digits, most significant first, zero-padded."""
    v = v.astype(object) if n > 18 else v.astype(np.int64)
    out = np.empty((len(v), n), dtype=np.int32)
    for i in range(n - 1, -1, -1):
        out[:, i] = (v % 10).astype(np.int32)
        v = v // 10
    return out


def encode_addition(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """`a+b=` then the sum reversed (ones digit first) on n+1 digits, then <EOS>: (N, 3n + 3) tokens."""
    a, b = np.asarray(a), np.asarray(b)
    total = a.astype(object) + b.astype(object) if n > 17 else a.astype(np.int64) + b.astype(np.int64)
    col = lambda t: np.full((len(a), 1), t, np.int32)  # noqa: E731
    return np.concatenate(
        [digits(a, n), col(PLUS), digits(b, n), col(EQUALS), digits(np.asarray(total), n + 1)[:, ::-1], col(EOS)],
        axis=1,
    )


def encode_board(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """AdderBoard's format (digits are the only tokens, 0 doubles as the separator, every number ones-first):
    `0 a 0 0 b 0` then the sum's n+1 digits: (N, 3n + 5) tokens (n = 10: 24 prompt tokens and 11 answer digits)."""
    a, b = np.asarray(a), np.asarray(b)
    total = a.astype(object) + b.astype(object) if n > 17 else a.astype(np.int64) + b.astype(np.int64)
    zero = np.zeros((len(a), 1), np.int32)
    return np.concatenate([zero, digits(a, n)[:, ::-1], zero, zero, digits(b, n)[:, ::-1], zero,
                           digits(np.asarray(total), n + 1)[:, ::-1]], axis=1).astype(np.int32)


# AdderBoard's verify.py: its 10 edge cases (n = 10) before its 10,000 random pairs (random.Random(2025))
BOARD_EDGE_CASES = ((0, 0), (0, 1), (9_999_999_999, 0), (9_999_999_999, 1), (9_999_999_999, 9_999_999_999),
                    (5_000_000_000, 5_000_000_000), (1_111_111_111, 8_888_888_889), (1_234_567_890, 9_876_543_210),
                    (9_999_999_999, 9_999_999_999), (1, 9_999_999_999))


def board_pairs(n_pairs: int, seed: int = 2025, n: int = 10) -> list[tuple[int, int]]:
    """verify.py's pairs: its edge cases (for another n the book's roles: addition_edge_cases), then `n_pairs`
    drawn as it draws them (Python's random)."""
    import random

    rng = random.Random(seed)
    top = 10**n - 1
    edges = BOARD_EDGE_CASES if n == 10 else addition_edge_cases(n)
    return list(edges) + [(rng.randint(0, top), rng.randint(0, top)) for _ in range(n_pairs)]


def board_probe(s: str) -> np.ndarray:
    a, b = s.split("+")
    if len(a) != len(b):
        raise ValueError
    return encode_board(np.array([int(a)]), np.array([int(b)]), len(a))[0]


def board_cases(n: int) -> tuple[list[str], np.ndarray]:
    cases = BOARD_EDGE_CASES if n == 10 else addition_edge_cases(n)
    a, b = (np.array([c[i] for c in cases], dtype=object) for i in (0, 1))
    return [f"{x} + {y}" for x, y in cases], encode_board(a, b, n)


def encode_reversal(d: np.ndarray) -> np.ndarray:
    """digits, `=`, the same digits reversed, <EOS>: (N, 2n + 2) tokens."""
    col = lambda t: np.full((len(d), 1), t, np.int32)  # noqa: E731
    return np.concatenate([d, col(EQUALS), d[:, ::-1], col(EOS)], axis=1).astype(np.int32)


def decode(tokens) -> str:
    return "".join(TOKEN_TEXT[int(t)] for t in tokens)


def draw_distinct(
    rng: np.random.Generator, n: int, n_digits: int, count: int, exclude: set, mixed: bool = False
) -> np.ndarray:
    """`count` distinct operand rows (n columns of ints < 10**n_digits) whose tuples are not in `exclude`: rows drawn
    in batches, each kept unless an earlier one (or `exclude`) holds it, until `count` are kept.

    mixed: half the operands are uniform n-digit numbers, the other half a random block of 0..n_digits
    digits at a random place with zeros around it (0 digits: the operand is 0). A curriculum in the
    data: a sum digit is (a_j + b_j + carry) mod 10, which tells nothing about a_j alone while b_j is
    uniform; where b's column j is 0 it depends on a_j alone, and attention gets a gradient toward that
    column. Blocks at the high end only (short numbers) left the ones and tens columns unlearned.
    """
    if n_digits > 18:  # beyond int64: Python ints, a set of tuples
        return draw_distinct_by_tuples(rng, n, n_digits, count, exclude, mixed)
    out, kept = [], 0
    seen = row_keys(np.array(sorted(exclude), np.int64).reshape(-1, n))
    while kept < count:
        rows = draw_rows(rng, (2 * (count - kept) + 16, n), n_digits, mixed)
        keys = row_keys(rows)  # a row is new where it is its batch's first and not seen before: in order, as drawn
        first = np.zeros(len(rows), bool)
        first[np.unique(keys, return_index=True)[1]] = True
        new = np.flatnonzero(first & ~np.isin(keys, seen))[:count - kept]
        out.append(rows[new])
        seen, kept = np.concatenate([seen, keys[new]]), kept + len(new)
    return np.concatenate(out) if out else np.array(out)


def draw_rows(rng: np.random.Generator, size: tuple[int, int], n_digits: int, mixed: bool) -> np.ndarray:
    """One batch of operand rows (draw_distinct's `mixed`): int64 up to 18 digits, Python ints digit by digit beyond."""
    width = (np.where(rng.random(size) < 0.5, n_digits, rng.integers(0, n_digits + 1, size=size)) if mixed
             else np.full(size, n_digits))  # each operand's digits (mixed: half of them a shorter block)
    if n_digits <= 18:
        if mixed:
            shift = rng.integers(0, n_digits - width + 1, dtype=np.int64)
            return rng.integers(0, 10**width, dtype=np.int64) * 10**shift
        return rng.integers(0, 10**n_digits, size=size, dtype=np.int64)
    shift = rng.integers(0, n_digits - width + 1) if mixed else np.zeros(size, int)
    return np.array([[int("".join(map(str, rng.integers(0, 10, w))) or 0) * 10 ** int(z) for w, z in
                      zip(r, zr, strict=True)] for r, zr in zip(width, shift, strict=True)], dtype=object)


def row_keys(rows: np.ndarray) -> np.ndarray:
    """(m, n) int64 -> (m,) one opaque scalar per row, equal where the rows are: rows compared whole, in numpy."""
    rows = np.ascontiguousarray(rows, np.int64)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


def draw_distinct_by_tuples(rng, n: int, n_digits: int, count: int, exclude: set, mixed: bool) -> np.ndarray:
    """draw_distinct row by row with a set of tuples: beyond int64, where rows are Python ints (the same rows as
    draw_distinct's numpy keeping at any size, which tests/test_tasks.py holds it to)."""
    out, seen = [], set(exclude)
    while len(out) < count:
        for r in draw_rows(rng, (2 * (count - len(out)) + 16, n), n_digits, mixed):
            k = tuple(int(v) for v in r)
            if k not in seen:
                seen.add(k)
                out.append(r)
                if len(out) == count:
                    break
    return np.array(out)


def addition_probe(s: str) -> np.ndarray:
    a, b = s.split("+")  # ValueError unless exactly one +
    if len(a) != len(b):
        raise ValueError
    return encode_addition(np.array([int(a)]), np.array([int(b)]), len(a))[0]


def reversal_probe(s: str) -> np.ndarray:
    if not (s.isascii() and s.isdigit()):
        raise ValueError
    return encode_reversal(digits(np.array([int(s)]), len(s)))[0]


BOOK_EDGE_CASES = ((123, 456), (999, 1), (0, 0), (999, 999), (500, 500), (111, 222))  # chapter 3.4


def addition_edge_cases(n: int) -> tuple[tuple[int, int], ...]:
    """The book's six cases for n = 3; for other n the same roles (cascading carry, maximum, no carry)."""
    if n == 3:
        return BOOK_EDGE_CASES
    top, ones = 10**n - 1, (10**n - 1) // 9
    return ((0, 0), (top, 1), (top, top), (5 * 10 ** (n - 1),) * 2, (ones, 2 * ones), (top, 0))


def addition_cases(n: int) -> tuple[list[str], np.ndarray]:
    cases = addition_edge_cases(n)
    a, b = (np.array([c[i] for c in cases], dtype=object) for i in (0, 1))
    return [f"{x} + {y}" for x, y in cases], encode_addition(a, b, n)


def reversal_cases(n: int) -> tuple[list[str], np.ndarray]:
    """The book's `1 2 3 4 5`, and all zeros / all nines."""
    d = np.array([[(i + 1) % 10 for i in range(n)], [0] * n, [9] * n], np.int32)
    return [" ".join(map(str, r)) for r in d], encode_reversal(d)
