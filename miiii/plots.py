"""The paper's figures (docs/definitions.md §4) drawn from run directories; `draw_all` draws every one the runs support.

Each `fig_*` function takes loaded runs (`miiii.run.Run`) or plain arrays, draws one figure and
saves it as PNG and PDF under `out`. Colours are colour-blind safe: the Okabe-Ito palette for
categories, viridis (sequential, by task) and RdBu (diverging, signed values) for maps.
Numbers shown in titles come from `miiii.analysis`.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from miiii import analysis as A  # noqa: E402
from miiii.config import ConfigError  # noqa: E402
from miiii.interventions import frequency_ablation  # noqa: E402
from miiii.run import Run, load_run  # noqa: E402
from miiii.tasks import make_task, task_spec  # noqa: E402
from miiii.tokens import is_prime  # noqa: E402

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
NEURONS = "blocks.0.mlp.hook_post"
CROP = 37  # the paper shows at most the top-left 37 x 37 of a grid

plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "font.size": 9, "axes.spines.top": False,
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


# ---------------------------------------------------------------- model-independent (figures 1-3)


def fig_polar(out: Path, n_max: int = 113**2) -> list[Path]:
    """Fig. 1: natural numbers < 12,769 at polar coordinates (n, n mod 2 pi): multiples of 17 and 23, of 11, primes."""
    n = np.arange(n_max)
    sieve = np.ones(n_max, bool)
    sieve[:2] = False
    for i in range(2, math.isqrt(n_max) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    sets = [("multiples of 17 and 23", n[(n % 17 == 0) | (n % 23 == 0)]), ("multiples of 11", n[n % 11 == 0]),
            ("primes", n[sieve])]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.6), subplot_kw={"projection": "polar"})
    for ax, (title, v), c in zip(axes, sets, OKABE_ITO, strict=False):
        ax.scatter(v % (2 * np.pi), v, s=0.4, color=c, linewidths=0)
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"n < {n_max:,} at polar coordinates (n, n mod 2π)")
    return save_figure(fig, out, "fig01_polar")


def _grid_ax(ax, values, p, title, cmap="viridis", annotate=False):
    im = ax.imshow(values.T, origin="upper", cmap=cmap)  # rows x1, columns x0
    ax.set_xlabel("x0")
    ax.set_ylabel("x1")
    ax.set_title(title)
    if annotate:
        for i in range(p):
            for j in range(p):
                ax.text(i, j, str(int(values[i, j])), ha="center", va="center", fontsize=5.5, color="w")
    return im


def fig_inputs(out: Path, p: int = 11) -> list[Path]:
    """Fig. 2: the input grid for p = 11, each cell the number n = x0 + x1 p."""
    x0, x1 = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    fig, ax = plt.subplots(figsize=(4.2, 4))
    _grid_ax(ax, x0 + x1 * p, p, f"inputs (x0, x1) as n = x0 + {p}·x1", annotate=True)
    return save_figure(fig, out, "fig02_inputs_p11")


def fig_targets(out: Path, p: int = 11) -> list[Path]:
    """Fig. 3: the miiii targets n mod q for every prime q < p, and nanda's (x0 + x1) mod p beside them."""
    x0, x1 = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    n = x0 + x1 * p
    qs = [q for q in range(2, p) if is_prime(q)]
    panels = [(f"n mod {q}", n % q) for q in qs] + [(f"nanda: (x0 + x1) mod {p}", (x0 + x1) % p)]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.4 * len(panels), 2.7))
    for ax, (title, v) in zip(axes, panels, strict=True):
        _grid_ax(ax, v, p, title)
    fig.suptitle(f"targets over the p = {p} grid (miiii: one task per prime q < p)")
    return save_figure(fig, out, "fig03_targets_p11")


# ---------------------------------------------------------------- curves (figures 5, 6)


def _task_colours(names):
    return plt.cm.viridis(np.linspace(0, 0.9, len(names)))


def fig_curves(run: Run, out: Path, kind: str = "acc", max_points: int = 2000) -> list[Path]:
    """Fig. 5 (kind "acc") / Fig. 6 ("loss"): train (top) and validation (bottom) per task over time, log x.

    At most `max_points` log-spaced evaluated steps are drawn: on a log axis they show every feature of the curve,
    and 29 tasks x 65,536 steps of vector lines take a quarter of a minute per figure (mostly the PDF)."""
    m = run.metrics
    names = [str(s) for s in m["task_names"]]
    fig, axes = plt.subplots(2, 1, figsize=(7, 5.2), sharex=True)
    for ax, split in zip(axes, ("train", "valid"), strict=True):
        y = np.asarray(m[f"{split}_{kind}"])
        rows = np.flatnonzero(~np.isnan(y).all(1))  # evaluated steps (validation may run every k steps)
        rows = rows[sample_steps(len(rows), max_points, log=True)]
        step = m["step"][rows] + 1  # log axis: step t is drawn at t + 1
        for k, (nm, c) in enumerate(zip(names, _task_colours(names), strict=True)):
            ok = ~np.isnan(y[rows, k])
            ax.plot(step[ok], y[rows, k][ok], color=c, lw=1, label=nm)
        ax.set_xscale("log")
        unit = "accuracy" if kind == "acc" else task_spec(run.config.task.name).loss_unit
        ax.set_ylabel(f"{split} {unit}")
        if kind == "acc":
            ax.set_ylim(-0.02, 1.02)
    axes[1].set_xlabel("step + 1 (log scale)")
    if len(names) <= 30:
        axes[0].legend(ncol=max(1, math.ceil(len(names) / 10)), fontsize=6, frameon=False, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    what = "accuracy" if kind == "acc" else "cross-entropy"
    axes[0].set_title(f"{label(run)}: {what} per task")
    number, stem = ("05", "accuracy") if kind == "acc" else ("06", "loss")
    return save_figure(fig, out, f"fig{number}_{stem}_{label(run)}")


def fig_grad_norms(run: Run, out: Path, max_cols: int = 400) -> list[Path]:
    """Fig. 17: L2 norm of the raw gradient of each weight matrix over training, each row normalised to its
    maximum (log-spaced steps, at most `max_cols` of them). Runs from before grad_norm was recorded: none."""
    m = run.metrics
    if "grad_norm" not in m or "grad_names" not in m:
        return []
    norms, names = np.asarray(m["grad_norm"], np.float64), [str(s) for s in m["grad_names"]]
    idx = sample_steps(len(norms), max_cols, log=True)
    rows = norms[idx].T / np.maximum(norms.max(0), 1e-30)[:, None]  # (matrices, steps), each row's max -> 1
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(names) + 1.2))
    mesh = ax.pcolormesh(m["step"][idx] + 1, np.arange(len(names)), rows, shading="nearest", cmap="viridis",
                         vmin=0, vmax=1)
    ax.set_yticks(np.arange(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("step + 1 (log scale)")
    ax.set_title(f"{label(run)}: gradient L2 norm per weight matrix (each row / its maximum)")
    fig.colorbar(mesh, ax=ax, label="‖∇W‖ / max", fraction=0.04, pad=0.02)
    return save_figure(fig, out, f"fig17_grad_norms_{label(run)}")


# ---------------------------------------------------------------- embeddings (figures 7-13)


def fig_positional(runs: list[Run], out: Path) -> list[Path]:
    """Fig. 7: the two positional embeddings (rows 0 and 1 of W_pos) of each run, with their Pearson r."""
    runs = [r for r in runs if "W_pos" in r.params and is_grid(r)]
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.3 * len(runs) + 0.6), squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        W = run.params["W_pos"][list(run.config.task.digit_positions)]  # (2, d_model): rows x0, x1
        v = np.abs(W).max()
        ax.imshow(W, aspect="auto", cmap="RdBu_r", vmin=-v, vmax=v, interpolation="nearest")
        ax.set_yticks([0, 1], ["x0", "x1"])
        ax.set_title(f"{label(run)} ({run.config.task.name}): Pearson r(x0, x1) = {A.pearson(W[0], W[1]):.2f}",
                     fontsize=9)
    axes[-1, 0].set_xlabel("d_model dimension")
    fig.suptitle("positional embeddings (paper: nanda r = 0.95, miiii r = -0.64)", y=1.0)
    fig.tight_layout()
    return save_figure(fig, out, "fig07_positional")


def fig_singular_values(runs: list[Run], out: Path) -> list[Path]:
    """Fig. 8: singular values of the token embedding (tokens 0..p-1), marks where 50 % and 90 % of the variance
    (sum sigma^2) is reached; the legend also gives the counts under the original's sum-sigma normalisation."""
    runs = [r for r in runs if is_grid(r)]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for run, c in zip(runs, OKABE_ITO, strict=False):
        p = run.config.task.p
        _, S, _ = A.embedding_svd(run.params["W_E"][:p])
        k50, k90 = A.variance_count(S, 0.5), A.variance_count(S, 0.9)
        s50, s90 = A.variance_count(S, 0.5, power=1), A.variance_count(S, 0.9, power=1)
        ax.plot(np.arange(1, len(S) + 1), S / S[0], color=c, marker=".", ms=3, lw=1,
                label=f"{label(run)}: 50 %/90 % at {k50}/{k90} (Σσ: {s50}/{s90})")
        for k, ls in ((k50, "--"), (k90, ":")):
            ax.axvline(k, color=c, ls=ls, lw=0.8)
    ax.set_xlabel("index (dashed: 50 %, dotted: 90 % of Σσ²)")
    ax.set_ylabel("σ / σ₁")
    ax.set_title("singular values of the token embedding W_E[:p]")
    ax.legend(fontsize=7, frameon=False)
    return save_figure(fig, out, "fig08_singular_values")


def fig_singular_vectors(run: Run, out: Path, max_vectors: int = 8) -> list[Path]:
    """Figs. 9-10: the leading left singular vectors of W_E[:p] over tokens (those reaching 50 % of Σσ², at most 8)."""
    p = run.config.task.p
    U, S, _ = A.embedding_svd(run.params["W_E"][:p])
    k = min(max(A.variance_count(S, 0.5), 2), max_vectors)
    fig, axes = plt.subplots(k, 1, figsize=(7, 0.75 * k + 0.6), sharex=True, squeeze=False)
    for i, ax in enumerate(axes[:, 0]):
        ax.plot(np.arange(p), U[:, i], color=OKABE_ITO[i % len(OKABE_ITO)], lw=1, marker=".", ms=2)
        ax.set_ylabel(f"u{i + 1}", rotation=0, labelpad=12)
        ax.set_yticks([])
    axes[-1, 0].set_xlabel("token")
    axes[0, 0].set_title(f"{label(run)}: top singular vectors of W_E (U columns)")
    return save_figure(fig, out, f"fig09_singular_vectors_{label(run)}")


def fig_embed_fft(run: Run, out: Path) -> list[Path]:
    """Figs. 11-13: the token embedding in the Fourier basis (|coefficients|, basis rows x d_model) and the norm
    of each frequency, active ones (above mean + 2 std) marked."""
    p = run.config.task.p
    W = run.params["W_E"][:p]
    coef = np.abs(A.embed_fourier(W))  # (p, d)
    norms = A.freq_norms(W)  # (p//2 + 1,)
    active = A.active_frequencies(norms)
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(7, 5), gridspec_kw={"height_ratios": [2, 1]})
    a0.imshow(coef, aspect="auto", interpolation="nearest", cmap="viridis")
    _, names = A.fourier_basis(p)
    ticks = list(range(0, p, max(1, p // 12)))
    a0.set_yticks(ticks, [names[i] for i in ticks], fontsize=6)
    a0.set_xlabel("d_model dimension")
    a0.set_title(f"{label(run)}: |W_E| in the Fourier basis; {int(active.sum())} active frequencies "
                 f"{np.flatnonzero(active).tolist()}")
    k = np.arange(len(norms))
    a1.bar(k[1:], norms[1:], color=np.where(active[1:], OKABE_ITO[3], OKABE_ITO[0]))
    thr = norms[1:].mean() + A.ACTIVE_STD * norms[1:].std()
    a1.axhline(thr, color="k", ls=":", lw=0.8, label="mean + 2 std")
    a1.set_xlabel("frequency k")
    a1.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a1.set_ylabel("norm")
    a1.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return save_figure(fig, out, f"fig11_embed_fft_{label(run)}")


# ---------------------------------------------------------------- neurons and attention (figures 4, 14, 15, 18)


def grid_acts(run: Run) -> dict[str, np.ndarray]:
    """The final model on all p^2 inputs (grid order): the MLP neurons, attention patterns and logits at every
    position, by TransformerLens names (`Run.cache`)."""
    return run.cache((NEURONS, "blocks.0.attn.hook_pattern", "logits"))


def top_neurons(neurons: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n neurons with the largest variance over inputs: neurons (p*p, N) -> (n,)."""
    return np.argsort(neurons.var(0))[::-1][:n]


def fig_neurons(run: Run, acts: dict, out: Path, n: int = 3, number: str = "14") -> list[Path]:
    """Fig. 4 (n = 1) and Figs. 14-15 (n = 3): MLP neurons (post-ReLU, last position) over the grid (top-left
    37 x 37 crop) and the |2-D FFT| over the whole grid (zero frequency at the centre)."""
    p = run.config.task.p
    neurons = acts[NEURONS][:, -1]  # (p*p, d_mlp)
    idx = top_neurons(neurons, n)
    fig, axes = plt.subplots(2, n, figsize=(3.1 * n, 5.8), squeeze=False)
    c = min(CROP, p)
    for j, i in enumerate(idx):
        g = A.to_grid(neurons[:, i], p)  # (p, p) [x0, x1]
        _grid_ax(axes[0, j], g[:c, :c], c, f"neuron {i}")
        spec = A.fft2_grid(g - g.mean())  # centred: the constant would outshine every frequency
        ext = [-(p // 2) - 0.5, p // 2 + 0.5, -(p // 2) - 0.5, p // 2 + 0.5]
        axes[1, j].imshow(spec.T, cmap="viridis", extent=ext, origin="lower")
        axes[1, j].set_xlabel("ω0 (x0)")
        axes[1, j].set_ylabel("ω1 (x1)")
        axes[1, j].set_title("|2-D FFT| (centred)")
    fig.suptitle(f"{label(run)}: MLP neurons over (x0, x1) ({c} x {c} crop) and their spectra")
    fig.tight_layout()
    name = "fig04_neuron" if n == 1 else f"fig{number}_neurons"
    return save_figure(fig, out, f"{name}_{label(run)}")


def fig_attention(runs_acts: list[tuple[Run, dict]], out: Path) -> list[Path]:
    """Fig. 18: attention from the output position to x0, per head, over the grid (miiii's heads each attend to
    one digit; nanda's split evenly)."""
    n_heads = max(a["blocks.0.attn.hook_pattern"].shape[1] for _, a in runs_acts)
    fig, axes = plt.subplots(len(runs_acts), n_heads, figsize=(2.5 * n_heads, 2.6 * len(runs_acts)),
                             squeeze=False)
    for row, (run, acts) in zip(axes, runs_acts, strict=True):
        p = run.config.task.p
        pat = acts["blocks.0.attn.hook_pattern"][:, :, -1, run.config.task.digit_positions[0]]  # (p*p, H): -> x0
        for h, ax in enumerate(row):
            if h >= pat.shape[1]:
                ax.axis("off")
                continue
            c = min(CROP, p)
            ax.imshow(A.to_grid(pat[:, h], p)[:c, :c].T, vmin=0, vmax=1, cmap="viridis")
            ax.set_title(f"{label(run)} head {h}: mean {pat[:, h].mean():.2f}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.suptitle("attention from the output position to x0 (0: all on x1 or '=', 1: all on x0)")
    fig.tight_layout()
    return save_figure(fig, out, "fig18_attention")


# ---------------------------------------------------------------- over training (figure 16, progress measures)


def recorded_grid(run: Run, name: str) -> np.ndarray | None:
    """A recorded activation (T, p*p, ...) when the recording covers the whole grid, else None."""
    if name not in run.acts or not is_grid(run):
        return None
    a = run.acts[name]
    return a if a.ndim >= 2 and a.shape[1] == run.config.task.p ** 2 else None


def steps_of(run: Run, name: str) -> np.ndarray:
    """Training step of each row of the recorded array `name`: `Run.steps_of` (parameters may be recorded at another
    rate than activations)."""
    return np.asarray(run.steps_of(name))


def dominance_over_time(neurons: np.ndarray, p: int) -> np.ndarray:
    """neurons (T, p*p, N) -> (T, p//2 + 1) frequency dominance of the MLP at each recorded step."""
    return np.stack([A.frequency_dominance(A.to_grid(np.asarray(a, dtype=np.float64), p)) for a in neurons])


def fig_dominance(steps: np.ndarray, dom: np.ndarray, out: Path, name: str) -> list[Path]:
    """Fig. 16: frequency dominance of the MLP neurons over training (top) and the number of active frequencies
    (above mean + 2 std, bottom); the paper's Table 3 has 0, 0, 10, 18, 10 at 256 ... 65,536 epochs."""
    n_active = A.active_frequencies(dom).sum(-1)
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(7, 4.8), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    x = steps + 1
    a0.pcolormesh(x, np.arange(dom.shape[1]), (dom / dom.max(1, keepdims=True)).T, shading="nearest",
                  cmap="viridis")
    a0.set_ylabel("frequency ω")
    a0.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a0.set_title(f"{name}: MLP frequency dominance over training (each step normalised)")
    a1.plot(x, n_active, color=OKABE_ITO[3])
    a1.set_ylabel("|ω| active")
    a1.set_xscale("log")
    a1.set_xlabel("step + 1 (log scale)")
    return save_figure(fig, out, f"fig16_frequency_dominance_{name}")


def fig_progress(steps: np.ndarray, measures: dict, key_freqs, out: Path, name: str) -> list[Path]:
    """Nanda et al. 2023's progress measures over training: train/test/restricted/excluded loss and Gini."""
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for (k, lbl), c in zip([("train_loss", "train"), ("test_loss", "test"), ("restricted_loss", "restricted"),
                            ("excluded_loss", "excluded")], OKABE_ITO, strict=False):
        a0.plot(steps, measures[k], color=c, label=lbl)
    a0.set_yscale("log")
    a0.set_ylabel("cross-entropy")
    a0.legend(frameon=False, fontsize=7)
    a0.set_title(f"{name}: progress measures (key frequencies {list(map(int, key_freqs))})")
    a1.plot(steps, measures["gini"], color=OKABE_ITO[2])
    a1.set_ylabel("Gini of |W_E| Fourier norms")
    a1.ticklabel_format(axis="y", useOffset=False)
    a1.set_xlabel("step")
    return save_figure(fig, out, f"fig_progress_{name}")


def sample_steps(n: int, k: int, log: bool) -> np.ndarray:
    """At most k sorted distinct indices into n recorded steps, log- or linearly spaced, first and last kept.

    A recording has one row per step; reading every row of a long run into float64 would not fit in memory.
    """
    if n <= k:
        return np.arange(n)
    pos = np.geomspace(1, n, k) - 1 if log else np.linspace(0, n - 1, k)
    return np.unique(np.round(pos).astype(int))


def over_training(run: Run, acts: dict, out: Path, max_steps: int = 160) -> list[Path]:
    """Figures from per-step recordings (acts/index.json), when the run has them."""
    paths, p = [], run.config.task.p
    neurons = recorded_grid(run, NEURONS)
    if neurons is not None:
        i = sample_steps(len(neurons), max_steps, log=True)
        sel = np.asarray(neurons[i])
        sel = sel[:, :, -1] if sel.ndim == 4 else sel  # (t, p*p, N)
        paths += fig_dominance(steps_of(run, NEURONS)[i], dominance_over_time(sel, p), out, label(run))
    logits = recorded_grid(run, "logits")
    if task_spec(run.config.task.name).nanda_progress and logits is not None and "W_E" in run.acts:
        # logits and W_E may be recorded at different rates: use the steps both have
        common, il, iw = np.intersect1d(steps_of(run, "logits"), steps_of(run, "W_E"), return_indices=True)
        j = sample_steps(len(common), max_steps, log=False)
        sel = np.asarray(logits[il[j]], dtype=np.float64).reshape(len(j), p * p, -1)[..., :p]  # (t, p*p, p)
        _, key = A.neuron_key_freqs(A.neuron_freq_fractions(A.to_grid(acts[NEURONS][:, -1], p)))
        measures = A.progress_measures(sel, np.asarray(run.acts["W_E"][iw[j]]), p, key, train_idx(run))
        paths += fig_progress(common[j], measures, key, out, label(run))
    return paths


def train_idx(run: Run) -> np.ndarray:
    """Grid indices n = x0 + x1*p of the run's training samples (from its task config alone)."""
    x = make_task(run.config.task).train.x
    i0, i1 = run.config.task.digit_positions
    return (x[:, i0] + x[:, i1] * run.config.task.p).astype(np.int64)


# ---------------------------------------------------------------- interventions (new: not in the paper)


def fig_frequency_ablation(run: Run, ablation: dict, out: Path) -> list[Path]:
    """Each task's loss increase when frequency k of either digit is removed from the MLP neurons over the grid
    (interventions.frequency_ablation): which frequencies each task depends on."""
    d = np.maximum(ablation["loss"] - ablation["base"][None], 0).T  # (tasks, k)
    n_tasks = d.shape[0]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.16 * d.shape[1] + 2), max(2.2, 0.22 * n_tasks + 1.2)))
    im = ax.imshow(d, aspect="auto", interpolation="nearest", cmap="magma",
                   extent=(ablation["k"][0] - 0.5, ablation["k"][-1] + 0.5, n_tasks - 0.5, -0.5))
    ax.set_yticks(range(n_tasks), ablation["tasks"], fontsize=6 if n_tasks > 12 else 8)
    ax.set_xlabel("frequency k removed (every component with ±k in x0 or x1)")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_title(f"{label(run)}: loss increase over the grid when frequency k leaves the MLP neurons", fontsize=8)
    fig.colorbar(im, ax=ax, label="Δ loss (nats)", fraction=0.04, pad=0.02)
    fig.tight_layout()
    return save_figure(fig, out, f"fig_freq_ablation_{label(run)}")


# ---------------------------------------------------------------- everything


def load_runs(run_dirs) -> list[Run]:
    runs = []
    for d in run_dirs:
        run = load_run(d)
        if not run.metrics or not run.params:
            raise ConfigError(f"{d} is not a finished run (no metrics.npz or params.npz)")
        runs.append(run)
    return runs


def draw_all(run_dirs, out: str | Path = "figures") -> list[Path]:
    """Draw every figure the given runs support; returns the written paths (PNG and PDF of each)."""
    out = Path(out)
    blocker = next((p for p in (out, *out.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError(f"--out {out}: {blocker} exists and is not a directory; choose another --out")
    runs = load_runs(run_dirs)
    names = [label(r) for r in runs]
    if len(set(names)) != len(names):  # refused before --out is made: a refusal leaves nothing behind
        raise ConfigError(f"run directories must have distinct names, got {names}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    paths = fig_polar(out) + fig_inputs(out) + fig_targets(out)
    grid_runs = [r for r in runs if is_grid(r)]
    with_acts = []
    for run in runs:
        paths += fig_curves(run, out, "acc") + fig_curves(run, out, "loss") + fig_grad_norms(run, out)
        if not is_grid(run):
            continue
        paths += fig_singular_vectors(run, out) + fig_embed_fft(run, out)
        if not task_spec(run.config.task.name).whole_grid:  # some inputs are no samples: Run.inputs("grid") is the
            continue  # samples alone, and the figures below need all p^2 inputs
        acts = grid_acts(run)
        with_acts.append((run, acts))
        paths += fig_neurons(run, acts, out, n=1) + fig_neurons(run, acts, out, n=3)
        paths += over_training(run, acts, out)
        paths += fig_frequency_ablation(run, frequency_ablation(run), out)
    if grid_runs:
        paths += fig_positional(grid_runs, out) + fig_singular_values(grid_runs, out)
    if with_acts:
        paths += fig_attention(with_acts, out)
    return paths
