"""The Fourier picture of a nanda run's MLP neurons and their key frequencies at every kept checkpoint.

    python examples/fourier_neurons.py [RUN_DIR] [--min-frac 0.85] [--out neurons.png]

At each kept step (`run.kept_steps`; `--set ckpt.keep_log=K` keeps log-spaced ones) the parameters are restored,
the MLP neurons run over the whole (x0, x1) grid, and each neuron's variance is split by 2-D frequency (Nanda et
al. 2023, App. C: `analysis.neuron_freq_fractions`). A neuron belongs to the frequency that explains at least
--min-frac of it; the key frequencies are the ones neurons take. Prints a line per kept step: how many neurons
have a frequency, the key frequencies, and the share of the MLP's variance they carry. `--out` draws that share
for every frequency over the kept steps. A nanda-cpu run (`make train`): seconds; after grokking a few key
frequencies hold most of the variance.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import miiii
from miiii.analysis import frequency_dominance, neuron_freq_fractions, neuron_key_freqs, to_grid
from miiii.errors import ConfigError, one_line_errors

NEURONS = "blocks.0.mlp.hook_post"


def neuron_picture(run, params, min_frac: float) -> dict:
    """The neurons of `params` over the grid, read at the answer position: each one's frequency (-1: none above
    min_frac), the key frequencies, and the share of the MLP's variance at each frequency 0 .. p // 2."""
    grid = to_grid(run.cache((NEURONS,), "grid", params)[NEURONS][:, -1], run.config.task.p)  # (p, p, d_mlp)
    freq, keys = neuron_key_freqs(neuron_freq_fractions(grid), min_frac)
    return {"freq": freq, "keys": keys, "share": frequency_dominance(grid)}


def draw(steps, shares, out: Path) -> None:
    """The variance share of each frequency (rows) at each kept step (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, 0.5 * len(steps) + 2), 4))
    im = ax.imshow(np.array(shares).T[1:], aspect="auto", origin="lower", cmap="viridis",
                   extent=(-0.5, len(steps) - 0.5, 0.5, len(shares[0]) - 0.5))
    ax.set(xticks=range(len(steps)), xlabel="kept step", ylabel="frequency k", title="MLP variance by frequency")
    ax.set_xticklabels([str(s) for s in steps], rotation=90)
    fig.colorbar(im, ax=ax, label="share")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def report(args) -> int:
    run = miiii.load_run(args.run_dir)
    if run.config.task.is_sequence:
        raise ConfigError(f"{args.run_dir} is a {run.config.task.name} run: its neurons have no (x0, x1) grid")
    steps, shares = run.kept_steps, []
    if not steps:
        raise ConfigError(f"{args.run_dir} kept no checkpoints; train it with --set ckpt.keep_log=20")
    print(f"{args.run_dir}: p = {run.config.task.p}, {run.config.model.mlp_dim} neurons, kept steps {steps}")
    print(f"{'step':>8}  {'neurons with a frequency':>24}  {'their variance share':>20}  key frequencies")
    for step in steps:
        pic = neuron_picture(run, run.params_at(step), args.min_frac)
        shares.append(pic["share"])
        print(f"{step:>8}  {int((pic['freq'] > 0).sum()):>24}  {pic['share'][pic['keys']].sum():>20.2f}  "
              f"{pic['keys'].tolist()}")
    if args.out:
        draw(steps, shares, args.out)
        print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Reads the run only (load_run, params_at, run.cache); writes only --out.")
    ap.add_argument("run_dir", nargs="?", type=Path, default=Path("runs/latest"), metavar="RUN_DIR",
                    help="a nanda (or other one-task grid) run with kept checkpoints (default: runs/latest)")
    ap.add_argument("--min-frac", type=float, default=0.85, help="variance a neuron's frequency must explain "
                    "(Nanda et al.: 0.85)")
    ap.add_argument("--out", type=Path, help="also draw the variance share per frequency and kept step (PNG)")
    return one_line_errors(report, ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
