"""Hard examples: the pairs a trained sequence run (addition, board) decodes wrong, for a later phase's replay.

Found by autoregressive decoding of uniform pairs drawn with a seed of the trainer's, never the verifier's 2025 or
the held-out set's (task.valid_seed): a targeted round of fine-tuning replays them (task.replay), as the board's
sub-50 entries' iterated fine-tuning on their own wrong answers. A recipe in phases finds them itself between two
phases (task.replay_hard, presets.PHASED); `python -m experiments.adderboard.hard` finds them for one run.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from miiii.config import RunConfig, apply_overrides
from miiii.errors import ConfigError
from miiii.files import write_atomic
from miiii.rundir import PARAMS
from miiii.validate import RESERVED_SEEDS, parse_hard


def pairs_for(run_dir: Path, n_pairs: int, seed: int) -> tuple:
    """(the run's Evaluator, n_pairs distinct uniform pairs of numpy's default_rng(seed), their token rows). The
    Evaluator's task is built without the run's training set (a replay file of millions of rows, by a relative path)."""
    from dataclasses import replace

    from miiii.bookeval import Evaluator
    from miiii.run import load_run
    from miiii.tasks import task_spec
    from miiii.tokens import draw_distinct

    run = load_run(run_dir)
    task = run.config.task
    if seed in (*RESERVED_SEEDS, task.valid_seed):
        raise ConfigError(f"seed {seed} is the verifier's or the held-out set's; hard examples and profiles come from "
                          "other seeds")
    ev = Evaluator(run, replace(task, replay="", n_train=8, n_valid=8))
    spec = task_spec(task.name)
    ops = draw_distinct(np.random.default_rng(seed), spec.operands, ev.n, n_pairs, set())
    return ev, ops, spec.encode(ops, ev.n)


def hard_pairs(run_dir: Path, n_pairs: int, seed: int) -> tuple[np.ndarray, int]:
    """(the wrong operand rows, how many were tried)."""
    ev, ops, seq = pairs_for(run_dir, n_pairs, seed)
    ok = ev.autoregressive(seq[:, :-1], seq[:, 1:])
    return ops[~ok].astype(np.int64), len(ops)


def hard_union(sources, n_pairs: int, keep: bool = False) -> tuple[np.ndarray, int]:
    """The wrong rows of every (run, seed) source, each row once (sorted), and how many pairs were tried in all:
    the accumulated error pairs of iterated targeted fine-tuning, each round's found on a fresh seed. `keep`: each
    source's rows are kept beside its run (RUN.hard-SEED-PAIRS.npy) and read from there while newer than its run."""
    found = []
    for run, seed in sources:
        kept = run.with_name(f"{run.name}.hard-{seed}-{n_pairs}.npy")
        if keep and kept.is_file() and kept.stat().st_mtime > (run / PARAMS).stat().st_mtime:
            found.append(np.load(kept))
            continue
        wrong, _ = hard_pairs(run, n_pairs, seed)
        if keep:
            save_atomic(kept, wrong)
        found.append(wrong)
    return np.unique(np.concatenate(found), axis=0), n_pairs * len(found)


def save_atomic(path: Path, rows: np.ndarray) -> None:
    """`rows` as the .npy `path`, written whole or not at all (a temporary name of this process's own)."""
    write_atomic(path, path.with_name(f"{path.name}.{os.getpid()}.tmp"), lambda f: np.save(f, rows))


def replay_copies(n_train: int, share: float, n_hard: int) -> int:
    """How often the hard pairs are repeated so that they make about `share` of the rows beside n_train others."""
    if not n_hard:
        raise ConfigError("no hard pairs to replay: the model decoded every pair right")
    return max(1, round(n_train * share / (1 - share) / n_hard))


def round_file(run_dir: Path, k: int) -> Path:
    """Where a recipe's phase k, a round, keeps its hard pairs: beside RUN_DIR/phase-K, which must not exist before."""
    return Path(run_dir) / f"phase-{k}.hard.npy"


def with_hard_pairs(cfg: RunConfig, path: Path, before: Path | None, replayed: Path | None) -> RunConfig:
    """A phase's task.replay_hard resolved: the pairs the phase `before` decodes wrong, united with those it replayed
    itself (`replayed`: a chain of rounds accumulates them), written once to `path` (beside the phase, which must not
    exist before it trains) and named by task.replay, repeated to about task.replay_share of the rows."""
    if before is None:
        raise ConfigError(f"task.replay_hard = '{cfg.task.replay_hard}' in a recipe's first phase: there is no phase "
                          "before it whose wrong pairs it could replay")
    if not path.is_file():
        pairs, seed = parse_hard(cfg.task.replay_hard)
        wrong, tried = hard_union([(before, seed)], pairs)
        print(f"{before}: {len(wrong):,} of {tried:,} pairs (seed {seed}) decoded wrong", end="")
        if replayed is not None:
            wrong = np.unique(np.concatenate([wrong, np.load(replayed)]), axis=0)
            print(f"; {len(wrong):,} with the ones it replayed", end="")
        save_atomic(path, wrong)
        print(f"; written to {path}")
    copies = replay_copies(cfg.task.n_train, cfg.task.replay_share, len(np.load(path)))
    return apply_overrides(cfg, [f"task.replay={path}", f"task.replay_copies={copies}"])
