"""The figures' common look and helpers: the Okabe-Ito palette, matplotlib's settings, saving a figure as PNG and PDF,
a run's label, a grid drawn as an image. Colours are colour-blind safe: Okabe-Ito for categories, viridis
(sequential, by task) and RdBu (diverging, signed values) for maps.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from miiii.run import Run  # noqa: E402

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
NEURONS = "blocks.0.mlp.hook_post"
CROP = 37  # the paper shows at most the top-left 37 x 37 of a grid

plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "font.size": 9, "axes.spines.top": False,
                     "axes.spines.right": False, "image.cmap": "viridis"})


def save_figure(fig, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def label(run: Run) -> str:
    """A run's name in figures: its directory name."""
    return run.path.name


def is_grid(run: Run) -> bool:
    """A run of a grid task (nanda, miiii): `TaskConfig.is_sequence` is the one answer."""
    return not run.config.task.is_sequence


def grid_ax(ax, values, p, title, cmap="viridis", annotate=False):
    im = ax.imshow(values.T, origin="upper", cmap=cmap)  # rows x1, columns x0
    ax.set_xlabel("x0")
    ax.set_ylabel("x1")
    ax.set_title(title)
    if annotate:
        for i in range(p):
            for j in range(p):
                ax.text(i, j, str(int(values[i, j])), ha="center", va="center", fontsize=5.5, color="w")
    return im


def sample_steps(n: int, k: int, log: bool) -> np.ndarray:
    """At most k sorted distinct indices into n recorded steps, log- or linearly spaced, first and last kept.

    A recording has one row per step; reading every row of a long run into float64 would not fit in memory.
    """
    if n <= k:
        return np.arange(n)
    pos = np.geomspace(1, n, k) - 1 if log else np.linspace(0, n - 1, k)
    return np.unique(np.round(pos).astype(int))
