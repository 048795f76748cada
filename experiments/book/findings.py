"""The book's findings about what its model learns, judged over seeds: the attention of each layer, the token
embeddings and the chapter-5 ablations, each trained as one vmapped sweep of the book's loop (presets `addition`
and `reversal`), then measured member by member into a small JSON-able dict (`member_measures`) that the bundle
keeps (results/book/findings.json); findings.md regenerates from that file alone (experiments/book/bundle.py).

    python -m experiments.book.findings [--seeds 3] [--runs runs/book-findings] [--out results/book]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from miiii.config import ConfigError, apply_overrides
from miiii.errors import one_line_errors
from miiii.presets import get_preset
from miiii.provenance import git_commit

QUIET = ("record.acts=", "record.params=", "ckpt.keep_log=0")  # the measures read the final parameters only
# name: (preset, --set overrides): the two trained models, then the ablations of chapter 5, each one switch on
# `addition` (no causal mask for 30 epochs: the mismatch it predicts is between two readings of one model)
CONFIGS = {
    "addition": ("addition", ()),
    "reversal": ("reversal", ()),
    "no_pos_embed": ("addition", ("model.pos_embed=false",)),
    "no_causal_mask": ("addition", ("model.causal=false", "train.steps=2940")),
    "one_layer": ("addition", ("model.n_layers=1",)),
}
TRAINED_BY = "trained_by.json"  # in each sweep directory: the commit and date that trained it


def config(name: str):
    preset, sets = CONFIGS[name]
    return apply_overrides(get_preset(preset), [*QUIET, *sets])


def train(name: str, seeds: int, runs: Path, progress: bool = True) -> Path:
    """The config's sweep of `seeds` seeds under runs/NAME, reused when a finished one (sweep.json) is there."""
    from miiii.sweep import run_sweep

    out = Path(runs) / name
    if not (out / "sweep.json").is_file():
        if out.exists():
            raise ConfigError(f"{out} holds an unfinished sweep (no sweep.json); remove it and run again")
        t = time.perf_counter()
        run_sweep(config(name), seeds, {}, out, progress=progress, tensorboard=False)
        (out / TRAINED_BY).write_text(json.dumps({"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M %Z")}))
        print(f"{name}: {seeds} seeds in {time.perf_counter() - t:.0f} s", flush=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.book.findings", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per config, one vmapped sweep each (default 3)")
    ap.add_argument("--runs", type=Path, default=Path("runs/book-findings"), help="where the sweeps go (reused)")
    ap.add_argument("--only", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), help="train these configs")
    ap.add_argument("--train-only", action="store_true", help="train the sweeps and stop")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error(f"--seeds must be at least 1, got {args.seeds}")

    def work(args):
        for name in args.only:
            train(name, args.seeds, args.runs)
        return 0

    return one_line_errors(work, args)


if __name__ == "__main__":
    sys.exit(main())
