"""Several runs side by side: `python -m miiii compare RUN_OR_SWEEP... --out DIR` overlays their loss and per-task
validation accuracy curves and their grok steps, each run labelled by the settings that differ between them
(`lr=0.003, seed 1`), so a sweep's members or a handful of runs read as one study. Reads the run directories only
(numpy and matplotlib; no jax).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from miiii.analysis import grok_steps
from miiii.config import ConfigError
from miiii.plotstyle import (
    OKABE_ITO,
    SPLIT_LINES,
    grok_lines,
    log_or_linear,
    markers,
    mean_curve,
    plt,
    save_figure,
    task_grok,
)
from miiii.run import Run, load_run
from miiii.tasks import loss_unit as loss_unit_of

MAX_TASK_PANELS = 12  # per-task accuracy panels (miiii has 29 tasks at p = 113): the first ones, then the mean


def expand(paths: list[Path]) -> list[Path]:
    """Run directories: a sweep directory (sweep.json, or an interrupted sweep's sweep-plan.json) stands for its
    members, in member order."""
    out = []
    for p in map(Path, paths):
        if (p / "sweep.json").is_file() or (p / "sweep-plan.json").is_file():
            members = sorted(d for d in p.glob("member_*") if d.is_dir())
            if not members:
                raise ConfigError(f"{p} is a sweep without member directories")
            out += members
        else:
            out.append(p)
    if len(out) < 2:
        raise ConfigError(f"compare needs two runs or more (a sweep counts as its members), got {len(out)}")
    return out


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = tuple(v) if isinstance(v, list) else v
    return out


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def labels(runs: list[Run]) -> list[str]:
    """Each run's label: the config keys whose values differ between the runs (`optim.lr=0.003, seed 1`), short
    key names where unambiguous; the directory name when nothing differs (or as well, when two would read the
    same)."""
    flats = [_flat(r.config.to_dict()) for r in runs]
    keys = sorted({k for f in flats for k in f if len({f.get(k) for f in flats}) > 1})
    short = {k: k.split(".")[-1] for k in keys}
    if len(set(short.values())) < len(short):
        short = {k: k for k in keys}
    out = []
    for run, f in zip(runs, flats, strict=True):
        parts = [f"seed {f[k]}" if k == "train.seed" else f"{short[k]}={_value(f.get(k))}" for k in keys]
        out.append(", ".join(parts) or run.path.name)
    if len(set(out)) < len(out):
        out = [f"{lab} ({r.path.name})" if keys else r.path.name for lab, r in zip(out, runs, strict=True)]
    return out


def _curve(ax, step, y, i, lab, **kw):
    ok = np.isfinite(y)
    ax.plot(step[ok], y[ok], color=OKABE_ITO[i % len(OKABE_ITO)], label=lab, lw=1.2, **markers(int(ok.sum())), **kw)


def loss_unit(runs: list[Run]) -> str:
    """The runs' loss unit (tasks.TaskSpec.unit), each distinct one named when runs of different tasks are overlaid."""
    return " | ".join(dict.fromkeys(loss_unit_of(r.config.task.name, r.config.train.loss) for r in runs))


def all_grokked(m: dict) -> int | None:
    """The step every task had grokked by (None: some task never did)."""
    g = list(task_grok(m).values())
    return None if None in g or not g else max(g)


def fig_grokking(runs: list[Run], labs: list[str], out: Path) -> list[Path]:
    """The grokking figure overlaid: each run's train (solid) and validation (dashed) loss and accuracy, means over
    tasks, on one shared log step axis, and a dotted line in its colour at the step every task had grokked by
    (per task: compare_accuracy)."""
    fig, (a_loss, a_acc) = plt.subplots(2, 1, figsize=(7.5, 5.6), sharex=True, layout="constrained")
    for i, (run, lab) in enumerate(zip(runs, labs, strict=True)):
        m, c = run.metrics_so_far, OKABE_ITO[i % len(OKABE_ITO)]
        for ax, kind in ((a_loss, "loss"), (a_acc, "acc")):
            for split in ("train", "valid"):
                x, y = mean_curve(m, f"{split}_{kind}")
                ax.plot(x, y, color=c, ls=SPLIT_LINES[split], lw=1.2, label=f"{lab} ({split})" if kind == "loss"
                        else None, **markers(len(x)))
            g = all_grokked(m)
            grok_lines(ax, {f"{lab}: every task grokked": g}, [c], legend=kind == "acc")
    a_loss.set_yscale("log")  # loss falls by decades at the transition; log-log as the grokking papers draw it
    a_loss.set(ylabel=f"loss (mean over tasks, log)\n{loss_unit(runs)}",
               title="Grokking: train (solid) and validation (dashed); dotted: the step every task grokked by")
    a_acc.set(xscale="log", ylim=(-0.02, 1.02), ylabel="accuracy (mean over tasks)", xlabel="step + 1 (log)")
    a_loss.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    if a_acc.get_legend_handles_labels()[0]:
        a_acc.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return save_figure(fig, out, "compare_grokking")


def fig_loss(runs: list[Run], labs: list[str], out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for i, (run, lab) in enumerate(zip(runs, labs, strict=True)):
        m = run.metrics_so_far
        step = m["step"] + 1  # step 0 on a log axis
        _curve(ax, step, np.nanmean(m["train_loss"], axis=-1), i, f"{lab} (train)")
        _curve(ax, step, np.nanmean(m["valid_loss"], axis=-1), i, f"{lab} (valid)", ls="--")
    positive = any((np.asarray(ln.get_ydata(), float) > 0).any() for ln in ax.get_lines())
    ax.set(xscale="log", yscale="log" if positive else "linear", xlabel="step + 1 (log)",
           ylabel=f"loss (mean over tasks{', log' if positive else ''})\n{loss_unit(runs)}",
           title="Loss: train (solid) and validation (dashed)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return save_figure(fig, out, "compare_loss")


def fig_accuracy(runs: list[Run], labs: list[str], out: Path) -> list[Path]:
    """Validation accuracy per task (one panel each, up to MAX_TASK_PANELS) and its mean over tasks; a dotted line in
    each run's colour at its grok step of that task (on the mean: the step every task grokked by)."""
    names = [str(n) for n in runs[0].metrics_so_far["task_names"]]
    shared = all([str(n) for n in r.metrics_so_far["task_names"]] == names for r in runs)
    panels = (names[:MAX_TASK_PANELS] if shared and len(names) > 1 else []) + ["mean over tasks"]
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows + 0.6), squeeze=False, sharex=True,
                             sharey=True, layout="constrained")
    for j, (ax, name) in enumerate(zip(axes.flat, panels, strict=False)):
        for i, (run, lab) in enumerate(zip(runs, labs, strict=True)):
            m = run.metrics_so_far
            acc = m["valid_acc"][:, j] if name != "mean over tasks" else np.nanmean(m["valid_acc"], axis=-1)
            _curve(ax, m["step"] + 1, acc, i, lab)
            g = task_grok(m).get(name) if name != "mean over tasks" else all_grokked(m)
            grok_lines(ax, {name: g}, [OKABE_ITO[i % len(OKABE_ITO)]], legend=False)  # its grok step, dotted
        ax.set_title(name, fontsize=8)
        ax.set_xscale("log")
        if j % cols == 0:
            ax.set_ylabel("valid accuracy")
        if j >= len(panels) - cols:  # the lowest panel of its column: the shared axis's ticks and label
            ax.set_xlabel("step + 1 (log)")
            ax.tick_params(labelbottom=True)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, texts = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, texts, fontsize=7, loc="outside lower center", ncols=min(len(runs), 3), frameon=False)
    return save_figure(fig, out, "compare_accuracy")


def fig_grok(runs: list[Run], labs: list[str], out: Path) -> list[Path]:
    """Each task's grok step (first step at valid accuracy >= 0.99) per run, at that task's own name: runs of
    different tasks share only the names they have (nanda's task is not miiii's q=2); a task that never groks sits
    at the run's last step, hollow."""
    names = list(dict.fromkeys(str(n) for r in runs for n in r.metrics_so_far["task_names"]))
    where = {n: k for k, n in enumerate(names)}
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(names) + 3), 3.6), layout="constrained")
    width = 0.8 / len(runs)
    for i, (run, lab) in enumerate(zip(runs, labs, strict=True)):
        m = run.metrics_so_far
        g = grok_steps(m["step"], np.asarray(m["valid_acc"]))
        x = np.array([where[str(n)] for n in m["task_names"]], float) - 0.4 + width * (i + 0.5)
        done = np.array([s is not None for s in g])
        y = np.array([s if s is not None else m["step"][-1] for s in g], dtype=float) + 1
        c = OKABE_ITO[i % len(OKABE_ITO)]
        ax.scatter(x[done], y[done], color=c, s=16, label=lab)
        ax.scatter(x[~done], y[~done], facecolors="none", edgecolors=c, s=16)
    ax.set_xticks(range(len(names)), names, fontsize=7, rotation=90 if len(names) > 8 else 0)
    log_or_linear(ax, [y for c in ax.collections for y in c.get_offsets()[:, 1]])
    log = ax.get_yscale() == "log"
    ax.set(xlabel="task", ylabel=f"grok step + 1{' (log' if log else ' ('}; hollow: not grokked)",
           title="Grok step per task")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return save_figure(fig, out, "compare_grok")


def compare(paths: list[Path], out: Path) -> list[Path]:
    """The four comparison figures (PNG and PDF) of the runs (or sweeps' members) in `paths`."""
    dirs = expand(paths)
    runs = [load_run(d) for d in dirs]
    empty = [r.path for r in runs if not len(r.metrics_so_far.get("step", ()))]
    if empty:
        raise ConfigError(f"{empty[0]} has no metrics yet (it stopped before its first evaluated step); leave it out")
    labs = labels(runs)
    return (fig_grokking(runs, labs, out) + fig_loss(runs, labs, out) + fig_accuracy(runs, labs, out)
            + fig_grok(runs, labs, out))
