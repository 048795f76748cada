"""The paper's figures of the MLP neurons and the attention (figures 4, 14, 15, 18), of their change over training
(figure 16's frequency dominance, Nanda et al.'s progress measures) and of the frequency ablation (not in the paper).
`plots.draw_all` draws them with the others.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.colors
import matplotlib.ticker

from miiii.plotstyle import file_backend  # noqa: E402

file_backend()
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from miiii import analysis as A  # noqa: E402
from miiii.plotstyle import (  # noqa: E402
    CROP,
    NEURONS,
    OKABE_ITO,
    colorbar,
    grid_ax,
    grok_lines,
    is_grid,
    label,
    markers,
    run_title,
    sample_steps,
    save_figure,
    task_grok,
)
from miiii.run import Run  # noqa: E402
from miiii.tasks import make_task, task_spec  # noqa: E402

# ---------------------------------------------------------------- neurons and attention (figures 4, 14, 15, 18)


def grid_acts(run: Run) -> dict[str, np.ndarray]:
    """The final model on all p^2 inputs (grid order): the MLP neurons, attention patterns and logits at every
    position, by TransformerLens names (`Run.cache`)."""
    return run.cache((NEURONS, "blocks.0.attn.hook_pattern", "logits"))


def top_neurons(neurons: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n neurons with the largest variance over inputs: neurons (p*p, N) -> (n,)."""
    return np.argsort(neurons.var(0))[::-1][:n]


def crop_text(p: int, crop: int) -> str:
    """The titles' note of a crop: said only when one is drawn (p > crop)."""
    return f", top-left {crop} × {crop} crop" if 0 < crop < p else ""


def fig_neurons(run: Run, acts: dict, out: Path, n: int = 3, number: str = "14", crop: int = CROP) -> list[Path]:
    """Fig. 4 (n = 1) and Figs. 14-15 (n = 3): MLP neurons (post-ReLU, last position) over the grid (its top-left
    `crop` x `crop` when p is larger; 0: the whole grid) and the |2-D FFT| over the whole grid (zero frequency at the
    centre) on a log colour scale of three decades: a few key frequencies hold most of the power, and a linear scale
    shows them alone. One neuron: the two side by side; several: one column each."""
    p = run.config.task.p
    neurons = acts[NEURONS][:, -1]  # (p*p, d_mlp)
    idx = top_neurons(neurons, n)
    shape, size = ((1, 2), (7.4, 3.6)) if n == 1 else ((2, n), (3.5 * n, 6.2))
    fig, axes = plt.subplots(*shape, figsize=size, squeeze=False, layout="constrained")
    pairs = [(axes[0, 0], axes[0, 1])] if n == 1 else list(zip(axes[0], axes[1], strict=True))
    c = min(crop, p) if crop > 0 else p
    for (top, bottom), i in zip(pairs, idx, strict=True):
        g = A.to_grid(neurons[:, i], p)  # (p, p) [x0, x1]
        grid_ax(top, g[:c, :c], c, f"neuron {i}", cbar="activation (post-ReLU)")
        spec = A.fft2_grid(g - g.mean())  # centred: the constant would outshine every frequency
        ext = [-(p // 2) - 0.5, p // 2 + 0.5, -(p // 2) - 0.5, p // 2 + 0.5]
        top_power = max(float(spec.max()), 1e-12)
        im = bottom.imshow(spec.T, cmap="viridis", extent=ext, origin="lower",
                           norm=matplotlib.colors.LogNorm(top_power * 1e-3, top_power, clip=True))
        bottom.set_xlabel("ω0 (x0)")
        bottom.set_ylabel("ω1 (x1)")
        bottom.set_title(f"neuron {i}: |2-D FFT| (centred)")
        colorbar(im, bottom, "|FFT coefficient| (log)")
    fig.suptitle(f"{run_title(run)}\nMLP neurons over (x0, x1){crop_text(p, crop)}, and their spectra")
    name = "fig04_neuron" if n == 1 else f"fig{number}_neurons"
    return save_figure(fig, out, f"{name}_{label(run)}")


def fig_attention(runs_acts: list[tuple[Run, dict]], out: Path, crop: int = CROP) -> list[Path]:
    """Fig. 18: attention from the output position to x0, per head (columns), over the grid (its top-left `crop` x
    `crop` when p is larger; 0: the whole grid), one row of heads per run (miiii's heads each attend to one digit;
    nanda's split evenly); one colour scale, 0 to 1, for all."""
    n_heads = max(a["blocks.0.attn.hook_pattern"].shape[1] for _, a in runs_acts)
    fig = plt.figure(figsize=(2.6 * n_heads + 1.2, 2.9 * len(runs_acts) + 0.5), layout="constrained")
    rows = np.atleast_1d(fig.subfigures(len(runs_acts), 1))
    norm = matplotlib.colors.Normalize(0, 1)
    for sub, (run, acts) in zip(rows, runs_acts, strict=True):
        p = run.config.task.p
        pat = acts["blocks.0.attn.hook_pattern"][:, :, -1, run.config.task.digit_positions[0]]  # (p*p, H): -> x0
        axes = sub.subplots(1, n_heads, squeeze=False)[0]
        c = min(crop, p) if crop > 0 else p
        for h, ax in enumerate(axes):
            if h >= pat.shape[1]:
                ax.set_visible(False)
                continue
            im = ax.imshow(A.to_grid(pat[:, h], p)[:c, :c].T, norm=norm, cmap="viridis")
            ax.set_title(f"head {h}: mean {pat[:, h].mean():.2f}", fontsize=8)
            ax.set_xlabel("x0")
            ax.set_ylabel("x1")
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(matplotlib.ticker.MaxNLocator(4, integer=True))
        sub.suptitle(f"{run_title(run)} ({run.config.task.name}{crop_text(p, crop)})", fontsize=9)
        colorbar(im, list(axes[:pat.shape[1]]), "attention to x0", fraction=0.03)
    fig.suptitle("attention from the output position to x0 (0: all on x1 or '=', 1: all on x0)")
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


def fig_dominance(steps: np.ndarray, dom: np.ndarray, out: Path, name: str, heading: str = "") -> list[Path]:
    """Fig. 16: frequency dominance of the MLP neurons over training (top) and the number of active frequencies
    (above mean + 2 std, bottom); the paper's Table 3 has 0, 0, 10, 18, 10 at 256 ... 65,536 epochs.

    Steps on a symlog axis: linear from 0 to the first recorded step after 0, logarithmic above, so step 0 is one
    narrow column at the left instead of the half of a log axis that step + 1 = 1 would take."""
    steps = np.asarray(steps)
    n_active = A.active_frequencies(dom).sum(-1)
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(7.5, 5), sharex=True, gridspec_kw={"height_ratios": [2, 1]},
                                 layout="constrained")
    first = int(steps[steps > 0].min()) if (steps > 0).any() else 1
    a0.set_xscale("symlog", linthresh=first, linscale=0.5)
    edges = _cell_edges(a0.xaxis.get_transform(), steps)
    mesh = a0.pcolormesh(edges, np.arange(dom.shape[1] + 1) - 0.5, (dom / dom.max(1, keepdims=True)).T,
                         shading="flat", cmap="viridis")
    a0.set_xlim(edges[0], edges[-1])
    a0.set_ylabel("frequency ω")
    a0.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    a0.set_title(f"{heading or name}\nMLP frequency dominance over training")
    colorbar(mesh, a0, "dominance / its step's maximum")
    a1.plot(steps, n_active, color=OKABE_ITO[3], **markers(len(steps)))
    a1.set_ylabel("|ω| active")
    a1.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(4, integer=True))
    a1.set_xlabel(f"step (symlog axis: linear from 0 to {first:,}, logarithmic above)")
    return save_figure(fig, out, f"fig16_frequency_dominance_{name}")


def _cell_edges(transform, x: np.ndarray) -> np.ndarray:
    """Edges of cells centred on the sorted x (n,) -> (n + 1,), halfway between neighbours on the axis as drawn
    (`transform`: the axis scale's), the outer ones as far out as the inner half-gaps."""
    t = transform.transform(np.asarray(x, np.float64).reshape(-1, 1))[:, 0]
    gap = np.diff(t) if len(t) > 1 else np.ones(1)
    mid = np.concatenate([[t[0] - gap[0] / 2], (t[1:] + t[:-1]) / 2, [t[-1] + gap[-1] / 2]])
    return transform.inverted().transform(mid.reshape(-1, 1))[:, 0]


def fig_progress(steps: np.ndarray, measures: dict, key_freqs, out: Path, name: str, heading: str = "",
                 p: int | None = None, grok: int | None = None) -> list[Path]:
    """Nanda et al. 2023's progress measures over training: train/test/restricted/excluded loss and Gini. With `p`
    the losses are divided by ln p, the unit of every other loss the run reports (tasks.TaskSpec.unit); `grok`, the
    grok step, is a dotted vertical line on both panels."""
    fig, (a0, a1) = plt.subplots(2, 1, figsize=(7, 5), sharex=True, layout="constrained")
    dots = markers(len(steps))
    scale = 1 / np.log(p) if p else 1.0
    for (k, lbl), c in zip([("train_loss", "train"), ("test_loss", "test"), ("restricted_loss", "restricted"),
                            ("excluded_loss", "excluded")], OKABE_ITO, strict=False):
        a0.plot(steps, np.asarray(measures[k]) * scale, color=c, label=lbl, **dots)
    for ax in (a0, a1):
        grok_lines(ax, {"every task": grok}, ["k"], legend=ax is a0)
    a0.set_yscale("log")
    a0.set_ylabel("loss (log)\n" + ("cross-entropy / ln p" if p else "cross-entropy (nats)"))
    a0.legend(frameon=False, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    a0.set_title(f"{heading or name}\nprogress measures (key frequencies {list(map(int, key_freqs))})")
    a1.plot(steps, measures["gini"], color=OKABE_ITO[2], **dots)
    a1.set_ylabel("Gini of |W_E| Fourier norms")
    a1.ticklabel_format(axis="y", useOffset=False)
    a1.set_xlabel("step")
    return save_figure(fig, out, f"fig_progress_{name}")


def over_training(run: Run, acts: dict, out: Path, max_steps: int = 160) -> list[Path]:
    """Figures from per-step recordings (acts/index.json), when the run has them."""
    paths, p = [], run.config.task.p
    neurons = recorded_grid(run, NEURONS)
    if neurons is not None:
        i = sample_steps(len(neurons), max_steps, log=True)
        sel = np.asarray(neurons[i])
        sel = sel[:, :, -1] if sel.ndim == 4 else sel  # (t, p*p, N)
        paths += fig_dominance(steps_of(run, NEURONS)[i], dominance_over_time(sel, p), out, label(run),
                              run_title(run))
    logits = recorded_grid(run, "logits")
    if task_spec(run.config.task.name).nanda_progress and logits is not None and "W_E" in run.acts:
        # logits and W_E may be recorded at different rates: use the steps both have
        common, il, iw = np.intersect1d(steps_of(run, "logits"), steps_of(run, "W_E"), return_indices=True)
        j = sample_steps(len(common), max_steps, log=False)
        sel = np.asarray(logits[il[j]], dtype=np.float64).reshape(len(j), p * p, -1)[..., :p]  # (t, p*p, p)
        _, key = A.neuron_key_freqs(A.neuron_freq_fractions(A.to_grid(acts[NEURONS][:, -1], p)))
        measures = A.progress_measures(sel, np.asarray(run.acts["W_E"][iw[j]]), p, key, train_idx(run))
        grok = [g for g in task_grok(run.metrics).values()]
        paths += fig_progress(common[j], measures, key, out, label(run), run_title(run), p=p,
                              grok=None if None in grok or not grok else max(grok))
    return paths


def train_idx(run: Run) -> np.ndarray:
    """Grid indices n = x0 + x1*p of the run's training samples (from its task config alone)."""
    x = make_task(run.config.task).train.x
    i0, i1 = run.config.task.digit_positions
    return (x[:, i0] + x[:, i1] * run.config.task.p).astype(np.int64)


# ---------------------------------------------------------------- interventions (new: not in the paper)


def fig_frequency_ablation(run: Run, ablation: dict, out: Path) -> list[Path]:
    """Each task's loss increase, in the run's loss unit, when frequency k of either digit is removed from the MLP
    neurons over the grid (interventions.frequency_ablation): which frequencies each task depends on. One task: a bar
    per frequency; several: a heat map, a row per task."""
    d = np.maximum(ablation["loss"] - ablation["base"][None], 0).T  # (tasks, k), nats
    d = d / np.log(np.asarray(run.task.n_classes, np.float64))[:, None]  # the run's loss unit (TaskSpec.unit)
    n_tasks, k = d.shape[0], np.asarray(ablation["k"])
    what = f"Δ loss ({task_spec(run.config.task.name).unit})"
    title = f"{run_title(run)}\nloss increase over the grid when frequency k leaves the MLP neurons"
    if n_tasks == 1:  # one task: bars, not a one-row heat map
        fig, ax = plt.subplots(figsize=(max(6.5, 0.12 * len(k) + 2.5), 3.0), layout="constrained")
        ax.bar(k, d[0], color=OKABE_ITO[0], width=0.8)
        ax.set_ylabel(what)
        ax.set_xlabel("frequency k removed (every component with ±k in x0 or x1)")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_title(f"{title} ({ablation['tasks'][0]})", fontsize=8)
        return save_figure(fig, out, f"fig_freq_ablation_{label(run)}")
    fig, ax = plt.subplots(figsize=(max(6.5, 0.16 * d.shape[1] + 2.5), max(2.4, 0.22 * n_tasks + 1.4)),
                           layout="constrained")
    im = ax.imshow(d, aspect="auto", interpolation="nearest", cmap="magma",
                   extent=(k[0] - 0.5, k[-1] + 0.5, n_tasks - 0.5, -0.5))
    ax.set_yticks(range(n_tasks), ablation["tasks"], fontsize=6 if n_tasks > 12 else 8)
    ax.set_xlabel("frequency k removed (every component with ±k in x0 or x1)")
    ax.set_ylabel("task")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_title(title, fontsize=8)
    colorbar(im, ax, what)
    return save_figure(fig, out, f"fig_freq_ablation_{label(run)}")
