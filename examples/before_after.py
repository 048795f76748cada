"""A nanda run before and after grokking, compared by Nanda et al.'s progress measures at two kept checkpoints.

    python examples/before_after.py [RUN_DIR] [--before STEP] [--after STEP]

The two steps default to the last kept step before the grok step (`summary.json`: every task at 0.99 validation
accuracy) and the first kept one at or after it; a run that did not grok compares its first and last kept steps.
At each, from the parameters restored there (`run.params_at`): accuracy and loss on the training inputs
and on the rest of the grid, the restricted loss (only the key frequencies' directions of the logits kept) and the
excluded loss (those directions removed, on the training inputs), the Gini coefficient of W_E's Fourier norms
(`analysis.progress_measures`), the neurons' key frequencies (`analysis.neuron_key_freqs`) and the weight norm.
The key frequencies of the later model define both restricted losses. Across grokking the restricted loss falls,
the excluded loss rises and the Gini coefficient grows (Nanda et al. 2023, Fig. 7). Every loss is cross-entropy
/ ln p, the unit of summary.json, metrics.npz and the figures (summary.json's `loss_unit`). Seconds for nanda-cpu.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import miiii
from miiii.analysis import neuron_freq_fractions, neuron_key_freqs, progress_measures, to_grid
from miiii.errors import ConfigError, one_line_errors

NEURONS = "blocks.0.mlp.hook_post"
PROGRESS = {"train_loss": "train loss", "test_loss": "test loss (rest of the grid)", "restricted_loss":
            "restricted loss (grid)", "excluded_loss": "excluded loss (train)", "gini": "Gini of W_E's Fourier norms"}


def grok_step(run) -> int | None:
    """The step every task had grokked by (None: some task never did)."""
    steps = list(run.summary.get("grok_step", {}).values())
    return max(steps) if steps and None not in steps else None


def pick_steps(run, before: int | None, after: int | None) -> tuple[int, int, str]:
    """(before, after, why): kept steps either side of the grok step unless given; each must be kept."""
    kept, g = run.kept_steps, grok_step(run)
    if len(kept) < 2:
        raise ConfigError(f"{run.path} kept {len(kept)} checkpoint(s); train it with --set ckpt.keep_log=20")
    if g is None:
        why = "it did not grok: its first and last kept steps"
        default = kept[0], kept[-1]
    else:
        why = f"it grokked at step {g}: the kept steps either side"
        default = ([s for s in kept if s < g] or kept[:1])[-1], ([s for s in kept if s >= g] or kept[-1:])[0]
    b, a = default[0] if before is None else before, default[1] if after is None else after
    if (b, a) != default:
        why = f"as asked; {'it did not grok' if g is None else f'it grokked at step {g}'}"
    for s in (b, a):
        if s not in kept:
            raise ConfigError(f"step {s} was not kept (kept: {', '.join(map(str, kept))})")
    return b, a, why


def measures(run, params, freqs) -> dict:
    """The measures of one parameter set; `freqs` the key frequencies the restricted losses use."""
    p = run.config.task.p
    out = run.cache((NEURONS, "logits"), "grid", params)
    logits = out["logits"][:, 0, :p]  # (p^2, p): nanda's one task
    i0, i1 = run.config.task.digit_positions
    x = run.inputs("train")
    train = np.sort(x[:, i0] + x[:, i1] * p)
    labels = (np.arange(p * p) % p + np.arange(p * p) // p) % p
    test = np.setdiff1d(np.arange(p * p), train)
    pm = progress_measures(logits[None], params["W_E"][None], p, freqs, train)
    per = {k: np.log(p) if k.endswith("_loss") else 1.0 for k in PROGRESS}  # the run's unit: cross-entropy / ln p
    pm = {name: float(pm[k][0] / per[k]) for k, name in PROGRESS.items()}
    right = logits.argmax(-1) == labels
    keys = neuron_key_freqs(neuron_freq_fractions(to_grid(out[NEURONS][:, -1], p)))[1]
    norm = float(np.sqrt(sum(float((np.asarray(w, np.float64) ** 2).sum()) for w in _leaves(params))))
    return {"train accuracy": float(right[train].mean()), "test accuracy (rest of the grid)": float(right[test].mean()),
            **pm, "key frequencies (neurons)": keys.tolist(), "weight norm": norm}


def _leaves(tree):
    for v in tree.values():
        yield from (_leaves(v) if isinstance(v, dict) else (v,))


def compare(args) -> int:
    run = miiii.load_run(args.run_dir)
    if run.config.task.name != "nanda":
        raise ConfigError(f"{args.run_dir} is a {run.config.task.name} run; these progress measures are Nanda et "
                          "al.'s for (x0 + x1) mod p")
    b, a, why = pick_steps(run, args.before, args.after)
    late = run.params_at(a)
    keys = neuron_key_freqs(neuron_freq_fractions(to_grid(run.cache((NEURONS,), "grid", late)[NEURONS][:, -1],
                                                          run.config.task.p)))[1]
    before, after = measures(run, run.params_at(b), keys), measures(run, late, keys)
    print(f"{args.run_dir}: comparing steps {b} and {a} ({why}); restricted losses use frequencies {keys.tolist()}; "
          f"losses in {run.summary.get('loss_unit', 'cross-entropy / ln p')}")
    width = max(map(len, before))
    print(f"{'':<{width}}  {'step ' + str(b):>18}  {'step ' + str(a):>18}")
    for k in before:
        fmt = (lambda v: str(v)) if isinstance(before[k], list) else (lambda v: f"{v:.4g}")
        print(f"{k:<{width}}  {fmt(before[k]):>18}  {fmt(after[k]):>18}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Reads the run only (load_run, params_at, run.cache).")
    ap.add_argument("run_dir", nargs="?", type=Path, default=Path("runs/latest"), metavar="RUN_DIR",
                    help="a nanda run with kept checkpoints (default: runs/latest)")
    ap.add_argument("--before", type=int, metavar="STEP", help="the earlier kept step (default: before the grok step)")
    ap.add_argument("--after", type=int, metavar="STEP", help="the later kept step (default: at or after it)")
    return one_line_errors(compare, ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
