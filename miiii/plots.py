"""The paper's figures (docs/definitions.md §4) drawn from run directories; `draw_all` draws every one the runs support.

Here: the inputs and targets (figures 1-3), the curves (5, 6, gradient norms) and the embeddings (7-13); the neurons,
the attention and their change over training: plots_neurons.py; the common look: plotstyle.py. Each `fig_*` function
takes loaded runs (`miiii.run.Run`) or plain arrays, draws one figure and saves it as PNG and PDF under `out`; a new
figure is a `fig_*` in one of the two and one `FIGURES` entry. Numbers shown in titles come from `miiii.analysis`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import matplotlib
import matplotlib.colors
import matplotlib.ticker

from miiii.plotstyle import file_backend  # noqa: E402

file_backend()
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from miiii import analysis as A  # noqa: E402
from miiii.config import ConfigError  # noqa: E402
from miiii.interventions import frequency_ablation  # noqa: E402
from miiii.plots_neurons import fig_attention, fig_frequency_ablation, fig_neurons, grid_acts, over_training  # noqa: E402,E501
from miiii.plots_sequence import fig_sequence  # noqa: E402
from miiii.plotstyle import (  # noqa: E402
    CROP,
    OKABE_ITO,
    SPLIT_LINES,
    colorbar,
    grid_ax,
    grok_heading,
    grok_lines,
    is_grid,
    label,
    markers,
    mean_curve,
    run_title,
    sample_steps,
    save_figure,
    task_grok,
)
from miiii.run import Run, load_run  # noqa: E402
from miiii.rundir import read_llc_report  # noqa: E402
from miiii.tasks import loss_unit, task_spec  # noqa: E402
from miiii.tokens import is_prime  # noqa: E402

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
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.6), subplot_kw={"projection": "polar"}, layout="constrained")
    for ax, (title, v), c in zip(axes, sets, OKABE_ITO, strict=False):
        ax.scatter(v % (2 * np.pi), v, s=0.4, color=c, linewidths=0)
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"n < {n_max:,} at polar coordinates (n, n mod 2π)")
    return save_figure(fig, out, "fig01_polar")


def fig_inputs(out: Path, p: int = 11) -> list[Path]:
    """Fig. 2: the input grid for p = 11, each cell the number n = x0 + x1 p."""
    x0, x1 = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    fig, ax = plt.subplots(figsize=(4.6, 4), layout="constrained")
    grid_ax(ax, x0 + x1 * p, p, f"inputs (x0, x1) as n = x0 + {p}·x1", annotate=True, cbar="n")
    return save_figure(fig, out, "fig02_inputs_p11")


def fig_targets(out: Path, p: int = 11) -> list[Path]:
    """Fig. 3: the miiii targets n mod q for every prime q < p, and nanda's (x0 + x1) mod p beside them."""
    x0, x1 = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    n = x0 + x1 * p
    qs = [q for q in range(2, p) if is_prime(q)]
    panels = [(f"n mod {q}", f"n mod {q}", n % q) for q in qs]
    panels += [(f"nanda: (x0 + x1) mod {p}", f"(x0 + x1) mod {p}", (x0 + x1) % p)]
    fig, axes = plt.subplots(1, len(panels), figsize=(2.9 * len(panels), 2.9), layout="constrained")
    for ax, (title, what, v) in zip(axes, panels, strict=True):
        grid_ax(ax, v, p, title, cbar=what)
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
    unit = loss_unit(run.config.task.name, run.config.train.loss)  # of every loss the run reports
    fig, axes = plt.subplots(2, 1, figsize=(7, 5.2), sharex=True, layout="constrained")
    for ax, split in zip(axes, ("train", "valid"), strict=True):
        y = np.asarray(m[f"{split}_{kind}"])
        rows = np.flatnonzero(~np.isnan(y).all(1))  # evaluated steps (validation may run every k steps)
        rows = rows[sample_steps(len(rows), max_points, log=True)]
        step = m["step"][rows] + 1  # log axis: step t is drawn at t + 1
        for k, (nm, c) in enumerate(zip(names, _task_colours(names), strict=True)):
            ok = ~np.isnan(y[rows, k])
            ax.plot(step[ok], y[rows, k][ok], color=c, lw=1, label=nm, **markers(int(ok.sum())))
        ax.set_xscale("log")
        ax.set_ylabel(f"{split} accuracy" if kind == "acc" else f"{split} loss\n{unit}")
        if kind == "acc":
            ax.set_ylim(-0.02, 1.02)
    axes[1].set_xlabel("step + 1 (log scale)")
    if len(names) <= 30:
        axes[0].legend(ncol=max(1, math.ceil(len(names) / 10)), fontsize=6, frameon=False, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0))
    what = "accuracy" if kind == "acc" else f"loss ({unit})"
    axes[0].set_title(f"{run_title(run)}\n{what} per task")
    number, stem = ("05", "accuracy") if kind == "acc" else ("06", "loss")
    return save_figure(fig, out, f"fig{number}_{stem}_{label(run)}")


def fig_grokking(run: Run, out: Path, max_points: int = 2000) -> list[Path]:
    """The grokking figure: train and validation loss (top, log-log) and accuracy (bottom, log x), each the mean over
    tasks, on one shared step axis, the test split's final numbers where the run has a test split, and every task's
    grok step a vertical line named with its step (Power et al. 2022, Fig. 1; Nanda et al. 2023, Fig. 2)."""
    m, final = run.metrics, run.summary.get("final", {})
    grok = task_grok(m)
    n = len(grok)
    unit = loss_unit(run.config.task.name, run.config.train.loss)
    over = f" (mean over {n} tasks)" if n > 1 else ""
    fig, (a_loss, a_acc) = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True, layout="constrained")
    for ax, kind in ((a_loss, "loss"), (a_acc, "acc")):
        for split, c in zip(("train", "valid"), OKABE_ITO, strict=False):
            x, y = mean_curve(m, f"{split}_{kind}", max_points)
            ax.plot(x, y, color=c, ls=SPLIT_LINES[split], lw=1.3, label="validation" if split == "valid" else split,
                    **markers(len(x)))
        if "test" in final:  # one evaluation, after the last update
            y = final["test"]["loss"] if kind == "loss" else float(np.mean(final["test"]["task_acc"]))
            ax.plot([m["step"][-1] + 1], [y], color=OKABE_ITO[2], marker="D", ls="none", label="test (final)")
        grok_lines(ax, grok, _task_colours(grok) if n > 1 else ["k"], legend=kind == "acc")
    a_loss.set_yscale("log")  # loss falls by decades at the transition; log-log as the grokking papers draw it
    a_loss.set_ylabel(f"loss{over}, log\n{unit}")
    a_acc.set(xscale="log", ylim=(-0.02, 1.02), ylabel=f"accuracy{over}", xlabel="step + 1 (log scale)")
    a_loss.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if any(g is not None for g in grok.values()):
        a_acc.legend(fontsize=6, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                     ncol=max(1, math.ceil(sum(g is not None for g in grok.values()) / 12)))
    a_loss.set_title(f"{run_title(run)}\ngrokking: {grok_heading(grok)}")
    return save_figure(fig, out, f"fig_grokking_{label(run)}")


def fig_grad_norms(run: Run, out: Path, max_cols: int = 400, pct: float = 99.0, decades: int = 3) -> list[Path]:
    """Fig. 17: L2 norm of the raw gradient of each weight matrix over training (log-spaced steps, at most `max_cols`
    of them), each row divided by its own `pct`-th percentile on a log colour scale of `decades` decades: one spike
    saturates its own cell (clipped at 1) instead of darkening the rest of its row. Runs from before grad_norm was
    recorded: none."""
    m = run.metrics
    if "grad_norm" not in m or "grad_names" not in m:
        return []
    norms, names = np.asarray(m["grad_norm"], np.float64), [str(s) for s in m["grad_names"]]
    idx = sample_steps(len(norms), max_cols, log=True)
    rows = norms[idx].T  # (matrices, steps)
    scale = np.nanpercentile(np.where(rows > 0, rows, np.nan), pct, axis=1, keepdims=True)
    rows = np.clip(rows / np.where(np.isfinite(scale) & (scale > 0), scale, 1.0), 10.0 ** -decades, 1.0)
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(names) + 1.4), layout="constrained")
    mesh = ax.pcolormesh(m["step"][idx] + 1, np.arange(len(names)), rows, shading="nearest", cmap="viridis",
                         norm=matplotlib.colors.LogNorm(10.0 ** -decades, 1.0))
    ax.set_yticks(np.arange(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("step + 1 (log scale)")
    ax.set_ylabel("weight matrix")
    ax.set_title(f"{run_title(run)}\ngradient L2 norm per weight matrix")
    colorbar(mesh, ax, f"‖∇W‖ / its row's {pct:g}th percentile\n(log scale, clipped to [1e-{decades}, 1])")
    return save_figure(fig, out, f"fig17_grad_norms_{label(run)}")


def fig_llc(run: Run, out: Path) -> list[Path]:
    fig = draw_llc(run)
    return [] if fig is None else save_figure(fig, out, f"fig_llc_{label(run)}")


def draw_llc(run: Run):
    """The local learning coefficient over training (RUN/llc.json of `python -m miiii llc`): λ̂ at each kept step,
    mean ± std over chains (each task's thin, for a multi-task run), the steps where tasks grokked dashed; below, the
    chains' mean loss trace at each step, the diagnostic for the SGLD settings (it should level off). None when the
    run has no llc.json."""
    r = read_llc_report(run.path)
    if r is None:
        return None
    steps, llc, sd = np.asarray(r["steps"]) + 1, np.asarray(r["llc"]), np.asarray(r["llc_std"])
    fig, (ax, tr) = plt.subplots(2, 1, figsize=(7, 6), layout="constrained")
    tasks = np.asarray(r["llc_tasks"])
    if tasks.shape[1] > 1:
        for k, name in enumerate(r["task_names"]):
            ax.plot(steps, tasks[:, k], lw=0.6, alpha=0.5, label=name if k < 8 else None)
    ax.errorbar(steps, llc, yerr=sd, color="k", lw=1.5, capsize=2, label="λ̂ (model)")
    for s in sorted({v for v in (run.summary.get("grok_step") or {}).values() if v is not None}):
        ax.axvline(s + 1, color="0.5", ls="--", lw=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("step + 1 (log scale; dashed: a task grokked)")
    ax.set_ylabel("local learning coefficient λ̂")
    ax.set_title(f"{run_title(run)}\nLLC by SGLD (ε {r['config']['lr']:g}, γ {r['config']['gamma']:g}, "
                 f"nβ {r['nbeta']:.1f}, {r['config']['chains']} chains x {r['config']['draws']} draws)")
    ax.legend(fontsize=6, ncol=2)
    traces = np.asarray(r["loss_trace"])
    colors = plt.cm.viridis(np.linspace(0, 1, len(traces)))
    for k, (t, c) in enumerate(zip(traces, colors, strict=True)):
        tr.plot(np.arange(len(t)), t - r["init_loss"][k], color=c, lw=0.8)
    tr.set_xlabel("SGLD draw")
    tr.set_ylabel(f"chains' mean loss - L(w0)\n({r.get('loss_unit') or 'loss'}; early steps dark)")
    return fig


# ---------------------------------------------------------------- embeddings (figures 7-13)


def fig_positional(runs: list[Run], out: Path) -> list[Path]:
    """Fig. 7: the two positional embeddings (rows 0 and 1 of W_pos) of each run, with their Pearson r."""
    runs = [r for r in runs if "W_pos" in r.params and is_grid(r)]
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 1.4 * len(runs) + 0.8), squeeze=False, sharex=True,
                             layout="constrained")
    for ax, run in zip(axes[:, 0], runs, strict=True):
        W = run.params["W_pos"][list(run.config.task.digit_positions)]  # (2, d_model): rows x0, x1
        v = np.abs(W).max()
        im = ax.imshow(W, aspect="auto", cmap="RdBu_r", vmin=-v, vmax=v, interpolation="nearest")
        ax.set_yticks([0, 1], ["x0", "x1"])
        ax.set_ylabel("position")
        colorbar(im, ax, "weight")
        ax.set_title(f"{run_title(run)} ({run.config.task.name}): Pearson r(x0, x1) = {A.pearson(W[0], W[1]):.2f}",
                     fontsize=9)
    axes[-1, 0].set_xlabel("d_model dimension")
    fig.suptitle("positional embeddings (paper: nanda r = 0.95, miiii r = -0.64)")
    return save_figure(fig, out, "fig07_positional")


def fig_singular_values(runs: list[Run], out: Path) -> list[Path]:
    """Fig. 8: singular values of the token embedding (tokens 0..p-1), marks where 50 % and 90 % of the variance
    (sum sigma^2) is reached; the legend also gives the counts under the original's sum-sigma normalisation."""
    runs = [r for r in runs if is_grid(r)]
    fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
    for run, c in zip(runs, OKABE_ITO, strict=False):
        p = run.config.task.p
        _, S, _ = A.embedding_svd(run.params["W_E"][:p])
        k50, k90 = A.variance_count(S, 0.5), A.variance_count(S, 0.9)
        s50, s90 = A.variance_count(S, 0.5, power=1), A.variance_count(S, 0.9, power=1)
        ax.plot(np.arange(1, len(S) + 1), S / S[0], color=c, marker=".", ms=3, lw=1,
                label=f"{run_title(run)}: 50 %/90 % at {k50}/{k90} (Σσ: {s50}/{s90})")
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
    fig, axes = plt.subplots(k, 1, figsize=(7, 0.8 * k + 0.9), sharex=True, squeeze=False, layout="constrained")
    for i, ax in enumerate(axes[:, 0]):
        ax.plot(np.arange(p), U[:, i], color=OKABE_ITO[i % len(OKABE_ITO)], lw=1, marker=".", ms=2)
        ax.set_ylabel(f"u{i + 1}", rotation=0, labelpad=12, va="center")
        v = float(np.abs(U[:, i]).max())
        ax.set_yticks([-v, 0, v], [f"{-v:.2f}", "0", f"{v:.2f}"], fontsize=6)
    axes[-1, 0].set_xlabel("token")
    axes[0, 0].set_title(f"{run_title(run)}\ntop singular vectors of W_E (U columns)")
    return save_figure(fig, out, f"fig09_singular_vectors_{label(run)}")


def fig_embed_fft(run: Run, out: Path) -> list[Path]:
    """Figs. 11-13: the token embedding in the Fourier basis (|coefficients|, basis rows x d_model) and the norm
    of each frequency, active ones (above mean + 2 std) marked."""
    p = run.config.task.p
    W = run.params["W_E"][:p]
    coef = np.abs(A.embed_fourier(W))  # (p, d)
    norms = A.freq_norms(W)  # (p//2 + 1,)
    active = A.active_frequencies(norms)
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(7.5, 5.4), gridspec_kw={"height_ratios": [2, 1]}, layout="constrained")
    im = a0.imshow(coef, aspect="auto", interpolation="nearest", cmap="viridis")
    colorbar(im, a0, "|coefficient|")
    _, names = A.fourier_basis(p)
    ticks = list(range(0, p, max(1, p // 12)))
    a0.set_yticks(ticks, [names[i] for i in ticks], fontsize=6)
    a0.set_xlabel("d_model dimension")
    a0.set_ylabel("Fourier basis vector")
    a0.set_title(f"{run_title(run)}\n|W_E| in the Fourier basis\n{int(active.sum())} active frequencies "
                 f"{np.flatnonzero(active).tolist()}")
    k = np.arange(len(norms))
    a1.bar(k[1:], norms[1:], color=np.where(active[1:], OKABE_ITO[3], OKABE_ITO[0]))
    thr = norms[1:].mean() + A.ACTIVE_STD * norms[1:].std()
    a1.axhline(thr, color="k", ls=":", lw=0.8, label="mean + 2 std")
    a1.set_xlabel("frequency k")
    a1.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a1.set_ylabel("norm")
    a1.legend(fontsize=7, frameon=False)
    return save_figure(fig, out, f"fig11_embed_fft_{label(run)}")


# ---------------------------------------------------------------- everything


def load_runs(run_dirs) -> list[Run]:
    runs = []
    for d in run_dirs:
        run = load_run(d)
        if not run.metrics or not run.params:
            raise ConfigError(f"{d} is not a finished run (no metrics.npz or params.npz)")
        runs.append(run)
    return runs


class Figure(NamedTuple):
    """One entry of `figures`: its name, what it is drawn over (`scope`) and `draw`, which returns the paths it
    wrote. Scopes and draw's arguments: once (out, crop: once when any run is a grid run), run (run, out, crop:
    every run), sequence (a sequence task's run with parameters), grid (a grid task's run), acts (a grid run over the
    whole grid, with its activations: run, acts, out, crop), grid_runs (every grid run together: runs, out, crop),
    acts_runs (every whole-grid run with its activations: [(run, acts)], out, crop)."""

    name: str
    scope: str
    draw: Callable


# `python -m miiii figures` draws these, in this order; a figure is one entry (its fig_* beside it in this module)
FIGURES: list[Figure] = [
    Figure("illustrations", "once", lambda out, crop: fig_polar(out) + fig_inputs(out) + fig_targets(out)),
    Figure("grokking", "run", lambda run, out, crop: fig_grokking(run, out)),
    Figure("accuracy", "run", lambda run, out, crop: fig_curves(run, out, "acc")),
    Figure("loss", "run", lambda run, out, crop: fig_curves(run, out, "loss")),
    Figure("grad_norms", "run", lambda run, out, crop: fig_grad_norms(run, out)),
    Figure("llc", "run", lambda run, out, crop: fig_llc(run, out)),
    Figure("sequence", "sequence", lambda run, out, crop: fig_sequence(run, out)),
    Figure("singular_vectors", "grid", lambda run, out, crop: fig_singular_vectors(run, out)),
    Figure("embed_fft", "grid", lambda run, out, crop: fig_embed_fft(run, out)),
    Figure("neuron", "acts", lambda run, acts, out, crop: fig_neurons(run, acts, out, n=1, crop=crop)),
    Figure("neurons", "acts", lambda run, acts, out, crop: fig_neurons(run, acts, out, n=3, crop=crop)),
    Figure("over_training", "acts", lambda run, acts, out, crop: over_training(run, acts, out)),
    Figure("freq_ablation", "acts",
           lambda run, acts, out, crop: fig_frequency_ablation(run, frequency_ablation(run), out)),
    Figure("positional", "grid_runs", lambda runs, out, crop: fig_positional(runs, out)),
    Figure("singular_values", "grid_runs", lambda runs, out, crop: fig_singular_values(runs, out)),
    Figure("attention", "acts_runs", lambda with_acts, out, crop: fig_attention(with_acts, out, crop=crop)),
]
SCOPES = ("once", "run", "sequence", "grid", "acts", "grid_runs", "acts_runs")


def draw_all(run_dirs, out: str | Path = "figures", crop: int = CROP) -> list[Path]:
    """Draw every figure of FIGURES the given runs support; returns the written paths (PNG and PDF of each). The
    grid illustrations (figures 1-3) and every figure over the input grid are drawn only when a run has a grid task;
    a sequence task (the book's addition, reversal) gets its curves, gradient norms and the book's figures of its
    attention, embeddings and positions (plots_sequence.py). `crop`: the grids of figures 4, 14 and 18 show their
    top-left crop x crop when p is larger (0: the whole grid)."""
    out = Path(out)
    blocker = next((p for p in (out, *out.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError(f"--out {out}: {blocker} exists and is not a directory; choose another --out")
    runs = load_runs(run_dirs)
    names = [label(r) for r in runs]
    if len(set(names)) != len(names):  # refused before --out is made: a refusal leaves nothing behind
        raise ConfigError(f"run directories must have distinct names, got {names}")
    unknown = sorted({f.scope for f in FIGURES} - set(SCOPES))
    if unknown:
        raise ValueError(f"FIGURES: unknown scope {unknown}; the scopes are {SCOPES}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot create it ({e.strerror or e})") from None
    by = {scope: [f for f in FIGURES if f.scope == scope] for scope in SCOPES}
    grid_runs = [r for r in runs if is_grid(r)]  # the task's family (tasks.TaskSpec.family) says what applies
    paths = [p for f in by["once"] for p in f.draw(out, crop)] if grid_runs else []
    with_acts = []
    for run in runs:
        paths += [p for f in by["run"] for p in f.draw(run, out, crop)]
        if not is_grid(run):
            paths += [p for f in by["sequence"] for p in f.draw(run, out, crop)] if run.params else []
            continue
        paths += [p for f in by["grid"] for p in f.draw(run, out, crop)]
        if not task_spec(run.config.task.name).whole_grid:  # some inputs are no samples: Run.inputs("grid") is the
            continue  # samples alone, and the figures below need all p^2 inputs
        acts = grid_acts(run)
        with_acts.append((run, acts))
        paths += [p for f in by["acts"] for p in f.draw(run, acts, out, crop)]
    if grid_runs:
        paths += [p for f in by["grid_runs"] for p in f.draw(grid_runs, out, crop)]
    if with_acts:
        paths += [p for f in by["acts_runs"] for p in f.draw(with_acts, out, crop)]
    return paths
