"""The book, replicated: one 17,760-parameter transformer on addition and on reversal, inspected.

    python -m experiments.book [--smoke] [--out results/book]     (make book / make book-smoke)
    python -m experiments.book --seeds 5 --only-seeds [--torch]   (seeds.md: the jump over seeds, beside PyTorch)
    python -m experiments.book --unstated wd=0,0.01,0.1,1.0 --seeds 3   (unstated.md: the weight decay and
                                                                       clipping the book does not state)
    python -m experiments.book --gap [--seeds 8]   (gap.md: where this project's loop and the book's part; with
                                                    --seeds, first trains addition-98, the DataLoader's batches)

Trains (or reuses, when OUT/runs/NAME/summary.json exists) five runs of the book's model with its
recipe (AdamW lr 0.01, 200-step warm-up then cosine, clip 1.0, batch 512): addition (150 epochs),
reversal (80 epochs), and the chapter-5 ablations on addition, each a config switch:
`model.pos_embed=false`, `model.causal=false`, `model.n_layers=1`. Then writes to OUT/:

    curves.png      training loss and held-out exact match per epoch, addition vs reversal
    attention.png   attention per layer for 123+456, 999+001 and reversal 1 2 3 4 5 (boundary dashed)
    embeddings.png  token-embedding PCA (explained variance on the axes), digit cosine similarity
    positions.png   positional-embedding cosine similarity
    book.json       every measured number; book_results.md: each number the book states beside ours

Runtime on 2 CPU cores (measured): --smoke 6 minutes when shared (10k pairs, a few hundred steps:
nothing groks). Full: one 150-epoch addition run takes 4-10 min on free cores (60-30 steps/s), 22 min
when the cores are shared; reversal half that (~1 hour for all five on a shared machine;
`--ablation-epochs N` shortens the three ablations). The reported results/book ran every ablation at
150 epochs but no_causal_mask (10 epochs: it fits at once). GPU: minutes.
Expected (full): addition sits at ~1-10 % exact match for tens of epochs, then jumps to ~100 %
with the final loss at the 0.9594 floor; reversal is at 100 % within ~10 epochs; attention aligns
columns (addition) and forms an anti-diagonal (reversal); no causal mask gives ~100 % teacher-forced
but ~0 % autoregressive accuracy; no positions stays low; one layer groks later (seed 0: epoch 128).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from experiments.book import modes  # noqa: E402 - configs, the runs and the modes (the tests patch its train_run)
from experiments.book.figures import (  # noqa: E402
    alignment_scores,
    fig_book_attention,
    fig_book_curves,
    fig_embeddings,
    fig_positions,
)
from experiments.book.tables import pct, results_md  # noqa: E402
from miiii.bookeval import Evaluator  # noqa: E402
from miiii.compile_cache import setup_compile_cache  # noqa: E402
from miiii.config import ConfigError  # noqa: E402
from miiii.errors import OneLineParser, lead, one_line_errors, out_folder  # noqa: E402
from miiii.provenance import to_jsonable  # noqa: E402
from miiii.sweep import make_members, parse_grid  # noqa: E402

# what --torch needs, said before anything trains (torch_loop.py says the same when run without it)
NEEDS_TORCH = ("PyTorch, the optional extra: pip install -e '.[bench]', or the CPU build `make bench` installs: "
               "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu")


def main(argv=None) -> int:
    """The study; bad input is one `error:` line and exit status 2 before anything is trained or written (not even
    --out's folder), a write error (disk full) one line and exit status 1."""
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--smoke", action="store_true", help="tiny runs, CPU minutes")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default results/book[-smoke])")
    ap.add_argument("--ablation-epochs", type=int, default=None, help="train the ablations this many epochs")
    ap.add_argument("--seeds", type=int, default=None,
                    help="also train addition and reversal over seeds 0 .. N-1 and write seeds.md (the jump-epoch "
                         "distribution, beside the book's loop in PyTorch when OUT/torch_book_*.json exist or "
                         "--torch runs it; default 1); with --unstated or --gap: the sweep's seeds")
    ap.add_argument("--only-seeds", action="store_true", help="the seed study alone (no ablations, no figures)")
    ap.add_argument("--unstated", nargs="+", action="append", metavar="KEY=V1,V2", default=None,
                    help="the settings the book does not state: train addition over --seeds x this grid of weight "
                         "decay and clipping norm (wd=0,0.01,0.1,1.0; clip_norm=1,1e9 where 1e9 is no clipping) as "
                         "one vmapped sweep into OUT/runs/unstated-GRID (reused when done), then write unstated.md "
                         "over every sweep in OUT/runs/unstated-*; repeat the option for separate sweeps; nothing "
                         "else runs")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="with --unstated or --gap: train seeds FIRST .. FIRST + N - 1 (more seeds for a sweep done)")
    ap.add_argument("--gap", action="store_true",
                    help="write gap.md, gap.json and gap_addition.png from OUT's seeds.json, unstated.json, "
                         "batches98.json and torch_book_addition*.json: where this project's loop and the book's (in "
                         "PyTorch, as written and in variants) part, with exact tests; with --seeds N (and "
                         "--first-seed) it first trains preset addition-98 (the DataLoader's 98 batches an epoch) "
                         "over those seeds as one vmapped sweep into OUT/runs/gap-addition-98 (reused when done)")
    ap.add_argument("--torch", action="store_true",
                    help="run the book's loop in PyTorch (python -m experiments.book.torch_loop, addition and reversal)"
                         " for the same seeds if its results are missing (needs torch)")
    args = ap.parse_args(argv)
    trained = args.seeds  # --gap trains only when --seeds is given
    args.seeds = 1 if args.seeds is None else args.seeds
    if args.seeds < 1:
        ap.error(f"--seeds must be at least 1, got {args.seeds}")
    if args.gap and (args.unstated or args.only_seeds or args.torch):
        ap.error("--gap runs alone: not with --unstated, --only-seeds or --torch")
    if args.unstated and (args.only_seeds or args.torch):
        ap.error("--unstated runs alone: not with --only-seeds or --torch")
    if args.first_seed and not (args.unstated or (args.gap and trained)):
        ap.error("--first-seed needs --unstated, or --gap with --seeds")
    if args.first_seed < 0:
        ap.error(f"--first-seed must not be negative, got {args.first_seed}")
    if args.ablation_epochs is not None and args.ablation_epochs < 1:
        ap.error(f"--ablation-epochs must be at least 1, got {args.ablation_epochs}")
    return one_line_errors(study, args, trained)


def study(args, trained: int | None) -> int:
    """main's work once its flags agree: every check first (--out, the grids and their configs, torch), then the
    study."""
    out = out_folder(args.out or Path("results") / ("book-smoke" if args.smoke else "book"))
    if args.gap:
        if trained:
            make_members(modes.configs(args.smoke, None)["addition"], trained, {})
        setup_compile_cache()  # ~/.cache/miiii/jax, MIIII_COMPILE_CACHE=DIR or off (miiii/compile_cache.py)
        print(modes.gap_study(out, trained or 0, args.smoke, args.first_seed))
        return 0
    if args.unstated:
        grids = [parse_grid(items) for items in args.unstated]
        if any(set(g) - {"optim.weight_decay", "optim.clip_norm"} for g in grids):
            raise ConfigError("--unstated crosses the weight decay (wd) and the clipping norm (clip_norm) only")
        base = modes.configs(args.smoke, None)["addition"]
        for grid in grids:  # every member of every sweep valid before the first trains
            make_members(replace(base, train=replace(base.train, seed=args.first_seed)), args.seeds, grid)
        out.mkdir(parents=True, exist_ok=True)
        setup_compile_cache()
        print(modes.unstated_study(out, args.seeds, grids, args.smoke, args.first_seed))
        return 0
    torch_missing = [n for n in ("addition", "reversal") if not (out / f"torch_book_{n}.json").is_file()]
    if args.torch and torch_missing and importlib.util.find_spec("torch") is None:
        raise ConfigError(f"--torch runs python -m experiments.book.torch_loop for {' and '.join(torch_missing)}, "
                          f"which needs {NEEDS_TORCH}")
    out.mkdir(parents=True, exist_ok=True)
    setup_compile_cache()
    if args.seeds > 1 or args.only_seeds:
        print(modes.seed_study(out, args.seeds, args.smoke, args.torch))
        if args.only_seeds:
            return 0
    evs, reports, curves = {}, {}, {}
    for name, cfg in modes.configs(args.smoke, args.ablation_epochs).items():
        run_dir = modes.train_or_reuse(name, cfg, out / "runs" / name)
        evs[name] = Evaluator(run_dir)
        curves[name] = evs[name].curves()
        reports[name] = evs[name].report(curves[name])
        print(f"{name}: final loss {reports[name]['final_epoch_loss']:.4f}, autoregressive "
              f"{pct(reports[name]['valid_autoregressive_acc'])}, teacher-forced "
              f"{pct(reports[name]['valid_teacher_forced_acc'])}")
    align = {k: alignment_scores(evs[k]) for k in ("addition", "reversal")}
    fig_book_curves(reports, curves, out)
    fig_book_attention(evs, out)
    var = fig_embeddings(evs, out)
    fig_positions(evs, out)
    (out / "book.json").write_text(json.dumps(to_jsonable(dict(reports=reports, alignment=align,
                                                               pca_variance=var)), indent=2))
    (out / "book_results.md").write_text(results_md(reports, align, var, args.smoke, curves))
    print(f"wrote {out}/book_results.md and figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
