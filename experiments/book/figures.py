"""The book study's figures (python -m experiments.book): training curves, attention maps, embeddings, positions, and
the jump epochs over seeds, unstated settings and loops. Each draws from measured records; nothing here trains.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from experiments.book.records import sample_label  # noqa: E402
from miiii.bookeval import Evaluator  # noqa: E402
from miiii.plots_sequence import draw_attention_row, draw_embedding_row, draw_positions, examples  # noqa: E402
from miiii.tasks import task_spec  # noqa: E402

# ---------------------------------------------------------------- probes


def alignment_scores(ev: Evaluator, n_samples: int = 512) -> list[float]:
    """Per layer: mean attention mass an answer query puts on the positions its algorithm reads (the task's
    `TaskSpec.reads`: addition, the query that writes sum digit j (10^j) reads column j of a and of b; reversal,
    the query that writes reversed digit j reads input position n-1-j, the anti-diagonal).
    """
    x = ev.task.valid.x[:n_samples]
    _, acts = ev.apply(ev.params, x)
    a0 = ev.task.answer_start
    pairs = [(a0 + j, keys) for j, keys in enumerate(task_spec(ev.task.name).reads(ev.n))]
    out = []
    for i in range(ev.cfg.model.n_layers):
        pat = np.asarray(acts[f"blocks.{i}.attn.hook_pattern"]).mean(1)  # (b, q, k), heads averaged
        out.append(float(np.mean([pat[:, q, keys].sum(-1).mean() for q, keys in pairs])))
    return out


# ---------------------------------------------------------------- figures


def fig_book_curves(reports: dict, curves: dict, out: Path) -> None:
    fig, ax = plt.subplots(1, 2, figsize=(12, 4))
    for name, style in (("addition", "o-"), ("reversal", "s-")):
        c, r = curves[name], reports[name]
        ax[0].plot(c["epoch"], c["loss"], lw=2, label=name.capitalize())
        ax[0].axhline(r["loss_floor"], ls="--", lw=1, color=ax[0].lines[-1].get_color(), label=f"{name} floor")
        ax[1].plot(c["epoch"], c["valid_acc"], style, ms=3, lw=1.5, label=name.capitalize())
    ax[0].set(xlabel="Epoch", ylabel="Loss (mean CE, all positions)", title="Training loss", yscale="log")
    ax[1].set(xlabel="Epoch", ylabel="Exact-match accuracy (teacher-forced)", title="Test accuracy", ylim=(-0.05, 1.05))
    for a in ax:
        a.legend()
        a.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=120)
    plt.close(fig)


def fig_book_attention(evs: dict, out: Path) -> None:
    add, rev = evs["addition"], evs["reversal"]
    rows = [(add, *ex) for ex in examples(add)] + [(rev, *ex) for ex in examples(rev, 1)]
    layers = max(add.cfg.model.n_layers, rev.cfg.model.n_layers)
    fig, axes = plt.subplots(len(rows), layers, figsize=(6.5 * layers, 5.5 * len(rows)), squeeze=False,
                             layout="constrained")
    for ax_row, (ev, seq, title) in zip(axes, rows, strict=True):
        draw_attention_row(ax_row[: ev.cfg.model.n_layers], ev, seq, title)
    fig.savefig(out / "attention.png", dpi=110)
    plt.close(fig)


def fig_embeddings(evs: dict, out: Path) -> dict:
    fig, axes = plt.subplots(2, 2, figsize=(12, 10), layout="constrained")
    var = {name: draw_embedding_row(row, np.asarray(evs[name].params["W_E"]), name)
           for row, name in zip(axes, ("addition", "reversal"), strict=True)}
    fig.savefig(out / "embeddings.png", dpi=110)
    plt.close(fig)
    return var


def fig_positions(evs: dict, out: Path) -> None:
    names = [k for k in ("addition", "reversal") if "W_pos" in evs[k].params]
    fig, axes = plt.subplots(1, len(names), figsize=(6.5 * len(names), 5.5), squeeze=False, layout="constrained")
    for ax, name in zip(axes[0], names, strict=True):
        draw_positions(ax, evs[name], name)
    fig.savefig(out / "positions.png", dpi=110)
    plt.close(fig)


def fig_seed_curves(jax_runs: dict, torch_runs: dict, out: Path) -> None:
    sides = [("miiii (JAX, addition-97)", jax_runs.get("addition", []))] + (
        [("PyTorch, the book's loop", torch_runs["addition"])] if torch_runs.get("addition") else [])
    fig, axes = plt.subplots(1, len(sides), figsize=(6.5 * len(sides), 4), squeeze=False)
    for ax, (title, runs) in zip(axes[0], sides, strict=True):
        for r in runs:
            acc = r["valid_acc"]
            ax.plot(range(1, len(acc) + 1), acc, lw=1.5, label=f"seed {r['seed']}")
        ax.set(title=f"addition, {title}: {len(runs)} seeds", xlabel="Epoch", ylim=(-0.05, 1.05),
               ylabel="held-out exact match (teacher-forced)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "seeds_addition.png", dpi=110)
    plt.close(fig)


def fig_unstated(groups: dict, out: Path) -> None:
    """Held-out exact match per epoch, one panel per setting, one line per seed."""
    fig, axes = plt.subplots(1, len(groups), figsize=(3.6 * len(groups), 3.4), squeeze=False, sharey=True)
    for ax, ((wd, clip), runs) in zip(axes[0], groups.items(), strict=True):
        for r in runs:
            ax.plot(range(1, len(r["valid_acc"]) + 1), r["valid_acc"], lw=1.3, label=f"seed {r['seed']}")
        ax.set(title=f"weight decay {wd:g}, clip {clip:g}", xlabel="Epoch", ylim=(-0.05, 1.05))
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("held-out exact match (teacher-forced)")
    most = max(range(len(groups)), key=lambda i: len(list(groups.values())[i]))  # the panel with every seed
    axes[0][most].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out / "unstated_addition.png", dpi=110)
    plt.close(fig)


def fig_gap(samples: list[dict], out: Path) -> None:
    """The jump epoch of every seed, one row per sample; a seed that never jumps is an x past the budget."""
    budget = max(s["budget"] for s in samples)
    most = max(sum(r["jump_epoch"]["0.99"] is None for r in s["runs"]) for s in samples)
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(samples) + 1.3))
    for row, smp in enumerate(samples):
        jumps = [r["jump_epoch"]["0.99"] for r in smp["runs"]]
        hit = [j for j in jumps if j is not None]
        ax.scatter(hit, [row] * len(hit), s=36, color="tab:blue", alpha=0.8, zorder=3)
        never = len(jumps) - len(hit)
        ax.scatter(budget * (1.02 + 0.017 * np.arange(never)), [row] * never, marker="x", s=36, color="tab:red",
                   zorder=3)
    ax.axvline(budget + 0.5, color="0.5", lw=1, ls="--")
    ax.set_yticks(range(len(samples)), [sample_label(s) for s in samples], fontsize=8)
    ax.set(xlabel=f"jump epoch (first ≥ 99 % held-out exact match); ×: never within {budget}",
           xlim=(0, budget * (1.05 + 0.017 * most)), title="addition: the jump epoch of every seed, by training loop")
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "gap_addition.png", dpi=110)
    plt.close(fig)
