"""Hard examples: the pairs a trained adder decodes wrong, for the next phase's `task.replay`.

Found by autoregressive decoding of uniform pairs drawn with a seed of the trainer's (never the verifier's 2025 or
the held-out set's), written as a .npy of operand rows; or, with --profile, where a board run's wrong sums go wrong.

    python -m experiments.adderboard.hard RUN_DIR --pairs 100000 --seed 1 --out hard.npy
    python -m miiii train --preset P --init-from RUN_DIR --set task.replay=hard.npy --set task.replay_copies=20
    python -m experiments.adderboard.hard RUN_A@1 RUN_B@2 --out hard.npy   # the union of two runs' (seeds 1, 2)
    python -m experiments.adderboard.hard RUN@1000 --pairs 20000 --profile --out profile.json   # where it goes wrong

Runtime: the run's model decodes in batches of 5,000 under jit; 100,000 10-digit pairs take about 40 s on a CPU
core for the AdderBoard presets. Expected: prints how many distinct pairs were wrong and writes them (int64 rows).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from miiii.errors import ConfigError, OneLineParser, lead, module_prog, one_line_errors
from miiii.files import write_json_atomic
from miiii.hard import hard_union, pairs_for, save_atomic


def column_values(ops: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, n + 1) each: a_k + b_k + the carry into column k (0..19; its value mod 10 is the sum's digit k), and that
    carry, ones first (column n: the carry out alone)."""
    if n > 17:
        raise ConfigError(f"{n}-digit operands: column values are computed in int64, up to 17 digits")
    a, b = (np.asarray(ops[:, i], np.int64) for i in (0, 1))
    place = 10 ** np.arange(n + 1, dtype=np.int64)
    carry = (a[:, None] % place + b[:, None] % place) >= place  # the lower columns' sum overflows into column k
    return a[:, None] // place % 10 + b[:, None] // place % 10 + carry, carry


def carry_chains(ops: np.ndarray, n: int) -> np.ndarray:
    """(N, n + 1): the length of the carry chain into each column, ones first: 0 without a carry in; L when column
    k - L generated it (a + b >= 10 there) and the L - 1 columns between passed it on (a + b = 9 each). A model that
    reads only the d columns below a digit gets every carry of a chain longer than d wrong."""
    a, b = (np.asarray(ops[:, i], np.int64) for i in (0, 1))
    place = 10 ** np.arange(n, dtype=np.int64)
    digits = a[:, None] // place % 10 + b[:, None] // place % 10  # (N, n) a_k + b_k
    chain = np.zeros((len(a), n + 1), np.int64)
    for k in range(1, n + 1):
        below = digits[:, k - 1]
        chain[:, k] = np.where(below >= 10, 1, np.where((below == 9) & (chain[:, k - 1] > 0), chain[:, k - 1] + 1, 0))
    return chain


def off_by_one(profile: dict) -> int:
    """How many of a profile's first wrong digits are one above or below the true digit."""
    return profile["first_offset"][1] + profile["first_offset"][9]


def carry_shaped(profile: dict) -> int:
    """How many of a profile's first wrong digits are one low after a carry in or one high without one: what a lost
    or an invented carry gives."""
    (no_carry_high, _), (_, carry_low) = profile["first_carry_by_sign"]  # [carry in 0, 1] x [one high, one low]
    return no_carry_high + carry_low


def error_profile(run_dir: Path, n_pairs: int, seed: int) -> dict:
    """Where a board run's wrong sums go wrong: per answer digit how often it is wrong, and at each wrong sum's first
    wrong digit the predicted minus the true digit (mod 10), the column value there (a_k + b_k + the carry in) and
    that carry against the offset's sign. A digit one low after a carry in (or one high without one) is what a lost
    (or invented) carry gives; one high after a carry in, or one low without one, is not a carry's doing."""
    ev, ops, seq = pairs_for(run_dir, n_pairs, seed)
    if ev.cfg.task.name != "board":
        raise ConfigError(f"{run_dir}: a {ev.cfg.task.name} run; the profile reads the board task's answer digits")
    true = seq[:, ev.task.answer_start + 1:]  # (N, n + 1) the sum's digits, ones first
    pred = ev.decode(seq[:, :-1], true.shape[1])
    wrong = pred != true
    rows = np.flatnonzero(wrong.any(1))
    at = (rows, wrong[rows].argmax(1))  # each wrong sum's first wrong digit
    value, carry = column_values(ops, ev.n)
    chains = carry_chains(ops, ev.n)
    offset = (pred[at] - true[at]) % 10
    return dict(run=str(run_dir), seed=seed, pairs=n_pairs, exact=1 - len(rows) / n_pairs,
                wrong_per_digit=wrong.mean(0).round(5).tolist(),
                first_wrong_digit=np.bincount(at[1], minlength=ev.n + 1).tolist(),
                first_offset=np.bincount(offset, minlength=10).tolist(),
                first_column_value=np.bincount(value[at], minlength=20).tolist(),
                column_value_base=np.bincount(value[:, :ev.n].ravel(), minlength=20).tolist(),
                # the carry chain into the first wrong digit (carry_chains), and into every answer digit of every pair
                first_chain=np.bincount(chains[at], minlength=ev.n + 1).tolist(),
                chain_base=np.bincount(chains.ravel(), minlength=ev.n + 1).tolist(),
                # [carry in 0, 1] x [one high, one low] at the first wrong digit
                first_carry_by_sign=[[int(((carry[at] == c) & (offset == d)).sum()) for d in (1, 9)] for c in (0, 1)])


def source(arg: str, seed: int) -> tuple[Path, int]:
    """`RUN[@SEED]` -> (run folder, seed): the seed after the last @, else `seed`."""
    run, at, k = arg.rpartition("@")
    if not at:
        return Path(arg), seed
    try:
        return Path(run), int(k)
    except ValueError:
        raise ConfigError(f"{arg}: the seed after @ must be an integer") from None


def main(argv=None) -> int:
    return one_line_errors(_main, argv)


def _main(argv) -> int:
    ap = OneLineParser(prog=module_prog(), description=lead(__doc__))
    ap.add_argument("runs", nargs="+", metavar="RUN[@SEED]",
                    help="finished addition or board runs, each with its own seed after @ (else --seed); the hard "
                         "pairs are their wrong pairs, united")
    ap.add_argument("--pairs", type=int, default=100_000,
                    help="uniform pairs each run decodes (default 100,000)")
    ap.add_argument("--seed", type=int, default=1,
                    help="the seed that draws the pairs of a run given without @ (default 1); the verifier's 2025 and "
                         "the held-out set's (task.valid_seed, 123) are refused")
    ap.add_argument("--out", type=Path, required=True,
                    help="the file to write, refused if it exists: a .npy of (a, b) rows, or with --profile a .json")
    ap.add_argument("--profile", action="store_true",
                    help="write each board run's error profile in place of the hard pairs: per answer digit how often "
                         "it is wrong, and at each wrong sum's first wrong digit its offset, its column value (a_k + "
                         "b_k + carry in) and that carry")
    args = ap.parse_args(argv)
    if args.out.exists():
        raise ConfigError(f"{args.out} exists; choose another --out")
    if args.profile:
        profiles = [error_profile(run, args.pairs, seed) for run, seed in (source(r, args.seed) for r in args.runs)]
        write_json_atomic(args.out, profiles)
        print("\n".join(f"{p['run']}: exact {p['exact']:.4f}; first wrong digits off by one: {off_by_one(p):,} of "
                         f"{sum(p['first_offset']):,}" for p in profiles) + f"; written to {args.out}")
        return 0
    wrong, tried = hard_union([source(r, args.seed) for r in args.runs], args.pairs)
    save_atomic(args.out, wrong)
    print(f"{len(wrong):,} distinct wrong pairs of {tried:,} tried; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
