"""The figures' common look and helpers: the Okabe-Ito palette, matplotlib's settings, saving a figure as PNG and PDF,
a run's label, a grid drawn as an image. Colours are colour-blind safe: Okabe-Ito for categories, viridis
(sequential, by task) and RdBu (diverging, signed values) for maps.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import matplotlib.ticker


def file_backend() -> None:
    """Agg (files, no display) for the command line and scripts; a notebook keeps its inline backend, so a figure
    the library draws there shows."""
    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")


file_backend()
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from miiii import analysis as A  # noqa: E402
from miiii.run import Run  # noqa: E402

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
NEURONS = "blocks.0.mlp.hook_post"
CROP = 37  # the paper shows at most the top-left 37 x 37 of a grid

plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 110, "font.size": 9, "axes.spines.top": False,
                     "axes.spines.right": False, "image.cmap": "viridis"})


def save_figure(fig, out: Path, name: str) -> list[Path]:
    """PNG (a 256-colour palette: a third of the bytes of full colour, so the committed bundles stay small) and
    PDF (vector, full colour)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    write_png(fig, paths[0])
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


def write_png(fig, path: Path) -> None:
    """The figure as a palette PNG (median-cut to 256 colours, no dithering: plots have few colours)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    image = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                                     dither=Image.Dither.NONE)
    image.save(path, format="PNG", optimize=True)


def label(run: Run) -> str:
    """A run's name in figure file names: its directory name."""
    return run.path.name


def run_title(run: Run) -> str:
    """A run's name in titles and legends: a sweep member by its grid values and seed (`lr=0.003, seed 1`, from its
    member.json), any other run by its directory name."""
    m = run.member
    if not m:
        return run.path.name
    values = ", ".join(f"{k.split('.')[-1]}={v:g}" for k, v in m.get("values", {}).items())
    return f"{values}, seed {m.get('seed')}" if values else f"seed {m.get('seed')}"


def is_grid(run: Run) -> bool:
    """A run of a grid task (nanda, miiii): `TaskConfig.is_sequence` is the one answer."""
    return not run.config.task.is_sequence


def grid_ax(ax, values, p, title, cmap="viridis", annotate=False, cbar="value"):
    """`values[x0, x1]` as an image (rows x1, columns x0) with axis labels and a colour bar labelled `cbar`."""
    im = ax.imshow(values.T, origin="upper", cmap=cmap)  # rows x1, columns x0
    ax.set_xlabel("x0")
    ax.set_ylabel("x1")
    ax.set_title(title)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(matplotlib.ticker.MaxNLocator(5, integer=True))
    if annotate:
        for i in range(p):
            for j in range(p):
                ax.text(i, j, str(int(values[i, j])), ha="center", va="center", fontsize=5.5, color="w")
    colorbar(im, ax, cbar)
    return im


def colorbar(mappable, ax, text: str, **kw):
    """A heat map's colour bar, labelled `text`, beside `ax` (one Axes or several)."""
    axes = ax if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
    fig = np.ravel(axes)[0].get_figure(root=False)
    return fig.colorbar(mappable, ax=ax, label=text, **({"fraction": 0.05, "pad": 0.02} | kw))


SPARSE = 60  # a curve with fewer evaluated points than this shows each one


def markers(n: int) -> dict:
    """Line keywords for a curve of n points: a dot on each point when they are sparse (< SPARSE)."""
    return {"marker": "o", "ms": 2.5} if n < SPARSE else {}


def sample_steps(n: int, k: int, log: bool) -> np.ndarray:
    """At most k sorted distinct indices into n recorded steps, log- or linearly spaced, first and last kept.

    A recording has one row per step; reading every row of a long run into float64 would not fit in memory.
    """
    if n <= k:
        return np.arange(n)
    pos = np.geomspace(1, n, k) - 1 if log else np.linspace(0, n - 1, k)
    return np.unique(np.round(pos).astype(int))


def drawn_texts(fig) -> list:
    """The texts a draw of `fig` actually puts on the page (visible, non-empty, tick labels of ticks in view only):
    each `Text` the renderer is asked to draw."""
    renderer = fig.canvas.get_renderer()
    texts = []
    draw_text = renderer.draw_text

    def recording(gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if mtext is not None and s.strip() and mtext not in texts:
            texts.append(mtext)
        return draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = recording
    try:
        fig.draw(renderer)
    finally:
        del renderer.draw_text
    return texts


def layout_problems(fig, tolerance: float = 1.0) -> list[str]:
    """What a reader would see wrong with `fig`'s text as drawn: two texts (titles, axis and tick labels, colour bar
    labels, legend entries, annotations) whose boxes overlap by more than `tolerance` pixels, or a text reaching past
    the figure's edge (cut off). Empty when the layout is clean; the figures' test asks it of every figure."""
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(fig)]
    problems = []
    page = fig.bbox.padded(tolerance)
    for text, bb in boxes:
        if not (page.x0 <= bb.x0 and bb.x1 <= page.x1 and page.y0 <= bb.y0 and bb.y1 <= page.y1):
            problems.append(f"cut off: {text!r} at {_box(bb)}, the figure is {_box(fig.bbox)}")
    shrunk = [(text, bb.padded(-tolerance)) for text, bb in boxes]
    for i, (a, ba) in enumerate(shrunk):
        for b, bb in shrunk[i + 1:]:
            if ba.overlaps(bb):
                problems.append(f"overlap: {a!r} at {_box(ba)} and {b!r} at {_box(bb)}")
    return problems


def _box(bb) -> str:
    return f"({bb.x0:.0f}, {bb.y0:.0f})-({bb.x1:.0f}, {bb.y1:.0f})"


# ---------------------------------------------------------------- the grokking figure's pieces (plots, compare, page)

SPLIT_LINES = {"train": "-", "valid": "--", "test": ":"}  # one line style per split wherever splits share a colour


def task_grok(m: dict) -> dict[str, int | None]:
    """{task: grok step or None} from a run's metrics: the first evaluated step with validation accuracy >=
    analysis.GROK_THRESHOLD (what summary.json's grok_step holds, here also for a run still training)."""
    if not len(m.get("step", ())):
        return {}
    return dict(zip(map(str, m["task_names"]), A.grok_steps(m["step"], np.asarray(m["valid_acc"])), strict=True))


def mean_curve(m: dict, key: str, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """(step + 1, the mean over tasks of `key`) at the evaluated steps (validation may run every k steps), at most
    `max_points` of them log-spaced: a log axis shows every feature of the curve from those."""
    y = np.asarray(m[key], np.float64)
    rows = np.flatnonzero(np.isfinite(y).any(-1))
    rows = rows[sample_steps(len(rows), max_points, log=True)]
    return np.asarray(m["step"])[rows] + 1, np.nanmean(y[rows], -1)


def grok_lines(ax, grok: dict[str, int | None], colours, legend: bool = True, ls: str = ":") -> None:
    """A vertical line at each grokked task's grok step (drawn at step + 1, the axes' log x), named with its step in
    the legend when `legend`: the grokking transition, marked."""
    for (name, g), c in zip(grok.items(), colours, strict=True):
        if g is not None:
            ax.axvline(g + 1, color=c, ls=ls, lw=1, label=f"{name}: grok step {g:,}" if legend else None)


def grok_heading(grok: dict[str, int | None]) -> str:
    """'2/4 tasks grokked (validation accuracy ≥ 0.99)', or the one task's grok step."""
    done = [g for g in grok.values() if g is not None]
    rule = f"validation accuracy ≥ {A.GROK_THRESHOLD:g}"
    if len(grok) == 1:
        return f"grok step {done[0]:,} ({rule})" if done else f"not grokked ({rule})"
    return f"{len(done)}/{len(grok)} tasks grokked ({rule})"


def log_or_linear(ax, values, axis: str = "y") -> None:
    """A log scale on `axis` where the positive `values` span a decade or more, else linear: a log axis over
    1,000-1,500 shows one tick label and no reading."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x) and x > 0], np.float64)
    log = len(v) > 1 and v.max() >= 10 * v.min()
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log" if log else "linear")
