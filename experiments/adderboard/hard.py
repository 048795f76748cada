"""Hard examples: the pairs a trained adder gets wrong, found by autoregressive decoding of random pairs drawn with
the trainer's own seed (never the verifier's 2025), written as a .npy for the next phase's `task.replay`.

    python -m experiments.adderboard.hard RUN_DIR --pairs 100000 --seed 1 --out hard.npy
    python -m miiii train --preset P --init-from RUN_DIR --set task.replay=hard.npy --set task.replay_copies=20
    python -m experiments.adderboard.hard RUN_A@1 RUN_B@2 --out hard.npy   # the union of two runs' (seeds 1, 2)
    python -m experiments.adderboard.hard RUN@11 --pairs 20000 --profile --out profile.json   # where it goes wrong

Runtime: the run's model decodes in batches of 5,000 under jit; 100,000 10-digit pairs take about a minute on a CPU
for the AdderBoard presets. Expected: prints how many pairs were wrong and writes them (operand rows, int64).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from miiii.errors import ConfigError, OneLineParser, module_prog, one_line_errors
from miiii.files import write_json_atomic


def hard_pairs(run_dir: Path, n_pairs: int, seed: int) -> tuple[np.ndarray, int]:
    """(the wrong operand rows, how many were tried): uniform n-digit pairs of numpy's default_rng(seed)."""
    from miiii.bookeval import Evaluator
    from miiii.tasks import task_spec
    from miiii.tokens import draw_distinct

    ev = Evaluator(run_dir)
    spec = task_spec(ev.cfg.task.name)
    if seed in (2025, ev.cfg.task.valid_seed):
        raise ConfigError(f"--seed {seed} is the verifier's or the held-out set's; hard examples come from other seeds")
    ops = draw_distinct(np.random.default_rng(seed), spec.operands, ev.n, n_pairs, set())
    seq = spec.encode(ops, ev.n)
    ok = ev.autoregressive(seq[:, :-1], seq[:, 1:])
    return ops[~ok].astype(np.int64), len(ops)


def column_values(ops: np.ndarray, n: int) -> np.ndarray:
    """(N, n + 1): a_k + b_k + the carry into column k, ones first (column n: the carry out alone), 0..19; its value
    mod 10 is the sum's digit k."""
    a, b = (np.asarray(ops[:, i], np.int64) for i in (0, 1))
    place = 10 ** np.arange(n + 1, dtype=np.int64)
    carry = (a[:, None] % place + b[:, None] % place) >= place  # the lower columns' sum overflows into column k
    return a[:, None] // place % 10 + b[:, None] // place % 10 + carry


def error_profile(run_dir: Path, n_pairs: int, seed: int) -> dict:
    """Where a board run's wrong answers go wrong, on uniform pairs of `seed`: per answer digit how often it is
    wrong, and at each wrong answer's first wrong digit the predicted minus the true digit (mod 10) and the column
    value (a_k + b_k + carry in) there. Off by one at a few column values is a readout near a digit boundary;
    errors after a carry alone are a carry not passed on."""
    from miiii.bookeval import Evaluator
    from miiii.tasks import task_spec
    from miiii.tokens import draw_distinct

    ev = Evaluator(run_dir)
    if ev.cfg.task.name != "board":
        raise ConfigError(f"{run_dir}: a {ev.cfg.task.name} run; the profile reads the board task's answer digits")
    if seed in (2025, ev.cfg.task.valid_seed):
        raise ConfigError(f"--seed {seed} is the verifier's or the held-out set's; profiles use other seeds")
    ops = draw_distinct(np.random.default_rng(seed), 2, ev.n, n_pairs, set())
    seq = task_spec("board").encode(ops, ev.n)
    true = seq[:, ev.task.answer_start + 1:]  # (N, n + 1) the sum's digits, ones first
    pred = ev.decode(seq[:, :-1], true.shape[1])
    wrong = pred != true
    rows = np.flatnonzero(wrong.any(1))
    first = wrong[rows].argmax(1)
    at = (rows, first)
    return dict(run=str(run_dir), seed=seed, pairs=n_pairs, exact=1 - len(rows) / n_pairs,
                wrong_per_digit=wrong.mean(0).round(5).tolist(),
                first_wrong_digit=np.bincount(first, minlength=ev.n + 1).tolist(),
                first_offset=np.bincount((pred[at] - true[at]) % 10, minlength=10).tolist(),
                first_column_value=np.bincount(column_values(ops, ev.n)[at], minlength=20).tolist(),
                column_value_base=np.bincount(column_values(ops, ev.n).ravel(), minlength=20).tolist())


def source(arg: str, seed: int) -> tuple[Path, int]:
    """`RUN[@SEED]` -> (run folder, seed): the seed after the last @, else `seed`."""
    run, at, k = arg.rpartition("@")
    if not at:
        return Path(arg), seed
    try:
        return Path(run), int(k)
    except ValueError:
        raise ConfigError(f"{arg}: the seed after @ must be an integer") from None


def hard_union(sources, n_pairs: int, keep: bool = False) -> tuple[np.ndarray, int]:
    """The wrong rows of every (run, seed) source, each row once (sorted), and how many pairs were tried in all:
    the accumulated error pairs of iterated targeted fine-tuning, each round's found on a fresh seed. `keep`: each
    source's rows are kept beside its run (RUN.hard-SEED-PAIRS.npy) and read from there the next time."""
    found = []
    for run, seed in sources:
        kept = run.with_name(f"{run.name}.hard-{seed}-{n_pairs}.npy")
        if keep and kept.is_file():
            found.append(np.load(kept))
            continue
        wrong, _ = hard_pairs(run, n_pairs, seed)
        if keep:
            save_atomic(kept, wrong)
        found.append(wrong)
    return np.unique(np.concatenate(found), axis=0), n_pairs * len(found)


def save_atomic(path: Path, rows: np.ndarray) -> None:
    """`rows` as the .npy `path`, written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, rows)
    tmp.replace(path)


def main(argv=None) -> int:
    return one_line_errors(_main, argv)


def _main(argv) -> int:
    ap = OneLineParser(prog=module_prog(), description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RUN[@SEED]",
                    help="finished addition or board runs, each with its own seed after @ (else --seed): their "
                         "wrong pairs, united")
    ap.add_argument("--pairs", type=int, default=100_000, help="random pairs to decode (default 100,000)")
    ap.add_argument("--seed", type=int, default=1,
                    help="the seed of a run given without @: the trainer's own, not 2025 (default 1)")
    ap.add_argument("--out", type=Path, required=True, help="the .npy to write (refused if it exists)")
    ap.add_argument("--profile", action="store_true",
                    help="write each board run's error profile (where its wrong answers go wrong: error_profile) to "
                         "--out as JSON, in place of the hard pairs")
    args = ap.parse_args(argv)
    if args.out.exists():
        raise ConfigError(f"{args.out} exists; choose another --out")
    if args.profile:
        profiles = [error_profile(run, args.pairs, seed) for run, seed in (source(r, args.seed) for r in args.runs)]
        write_json_atomic(args.out, profiles)
        print("\n".join(f"{p['run']}: exact {p['exact']:.4f}; first wrong digits off by {{±1: "
                         f"{p['first_offset'][1] + p['first_offset'][9]:,} of {sum(p['first_offset']):,}}}"
                         for p in profiles) + f"; written to {args.out}")
        return 0
    wrong, tried = hard_union([source(r, args.seed) for r in args.runs], args.pairs)
    save_atomic(args.out, wrong)
    print(f"{len(wrong):,} distinct wrong pairs of {tried:,} tried; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
