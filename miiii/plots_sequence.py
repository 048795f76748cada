"""The book's figures of one sequence run (addition, reversal): attention per layer on example sequences, the token
embeddings (PCA and the digits' cosine similarity) and the positional embeddings' cosine similarity. `draw_all`
draws them for every sequence run; the book study (experiments/book/figures.py) draws the same panels for its
addition and reversal runs side by side.
"""

from __future__ import annotations

from pathlib import Path

from miiii.plotstyle import file_backend  # noqa: E402

file_backend()
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from miiii.bookeval import Evaluator  # noqa: E402
from miiii.plotstyle import OKABE_ITO, colorbar, label, save_figure  # noqa: E402
from miiii.tasks import task_spec  # noqa: E402
from miiii.tokens import TOKEN_TEXT  # noqa: E402

# ---------------------------------------------------------------- probes


def attention(ev: Evaluator, seq: np.ndarray) -> list[np.ndarray]:
    """Attention pattern (q, k), heads averaged, per layer for one sequence fed as the model input (EOS dropped)."""
    _, acts = ev.apply(ev.params, seq[None, :-1])
    return [np.asarray(acts[f"blocks.{i}.attn.hook_pattern"])[0].mean(0) for i in range(ev.cfg.model.n_layers)]


def pca(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2-D projection and explained-variance ratio of the rows of w (centred SVD)."""
    c = w - w.mean(0)
    u, s, _ = np.linalg.svd(c, full_matrices=False)
    return u[:, :2] * s[:2], s**2 / (s**2).sum()


def cosine(w: np.ndarray) -> np.ndarray:
    w = w / np.linalg.norm(w, axis=1, keepdims=True)
    return w @ w.T


def examples(ev: Evaluator, k: int = 2) -> list[tuple[np.ndarray, str]]:
    """The first `k` of the book's checks for the run's task at its number of digits (the task registry's
    `edge_cases`): 123+456 and 999+001 (a carry through every column) for addition, 1 2 3 4 5 and all zeros for
    reversal."""
    names, seqs = task_spec(ev.task.name).edge_cases(ev.n)
    return [(np.asarray(seq), name) for seq, name in zip(seqs[:k], names[:k], strict=True)]


# ---------------------------------------------------------------- panels


def draw_attention_row(axes, ev: Evaluator, seq: np.ndarray, title: str) -> None:
    """One example's attention per layer, on `axes` (one per layer); the answer starts after the dashed lines."""
    labels = [TOKEN_TEXT[t] for t in seq[:-1]]
    for i, (ax, pat) in enumerate(zip(axes, attention(ev, seq), strict=True)):
        im = ax.imshow(pat, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        b = ev.prompt_len - 0.5
        ax.axhline(b, color=OKABE_ITO[3], ls="--", lw=1)
        ax.axvline(b, color=OKABE_ITO[3], ls="--", lw=1)
        ax.set(title=f"{title}: layer {i + 1}", xlabel="key", ylabel="query")
        colorbar(im, ax, "attention (heads averaged)")


def draw_embedding_row(row, w: np.ndarray, name: str) -> list[float]:
    """Token embeddings `w` (vocab, d) in their first two principal components, and the digits' cosine similarity;
    returns the two components' explained-variance ratios."""
    xy, ratio = pca(w)
    for i, (px, py) in enumerate(xy):
        text = TOKEN_TEXT[i]
        color = OKABE_ITO[0] if i < 10 else {"+": OKABE_ITO[3], "=": OKABE_ITO[2]}.get(text, "0.5")
        row[0].scatter(px, py, color=color, s=60)
        row[0].annotate(text, (px, py), xytext=(0, 5), textcoords="offset points", ha="center", fontsize=8)
    row[0].set(title=f"{name}: token embeddings (PCA)", xlabel=f"PC1 ({ratio[0]:.1%})", ylabel=f"PC2 ({ratio[1]:.1%})")
    row[0].grid(True, alpha=0.3)
    im = row[1].imshow(cosine(w[:10]), cmap="RdBu_r", vmin=-1, vmax=1)
    row[1].set_xticks(range(10))
    row[1].set_yticks(range(10))
    row[1].set(title=f"{name}: digit embeddings", xlabel="digit", ylabel="digit")
    colorbar(im, row[1], "cosine similarity")
    return ratio[:2].tolist()


def draw_positions(ax, ev: Evaluator, name: str) -> None:
    """The positional embeddings' cosine similarity over the positions the model is fed (the prompt ends at the
    dashed lines); rows name the token a training sequence holds there (d: a digit)."""
    t = ev.task.n_ctx  # the book's extra row is never used
    im = ax.imshow(cosine(np.asarray(ev.params["W_pos"])[:t]), cmap="RdBu_r", vmin=-1, vmax=1)
    seq = ev.task.train.x[0]
    ax.set_xticks(range(t), [str(i) for i in range(t)], fontsize=7)
    ax.set_yticks(range(t), [f"{i}:{'d' if s < 10 else TOKEN_TEXT[s]}" for i, s in enumerate(seq)], fontsize=7)
    b = ev.prompt_len - 0.5
    ax.axhline(b, color=OKABE_ITO[3], ls="--", lw=1)
    ax.axvline(b, color=OKABE_ITO[3], ls="--", lw=1)
    ax.set(title=f"{name}: positional embeddings", xlabel="position", ylabel="position:token")
    colorbar(im, ax, "cosine similarity")


# ---------------------------------------------------------------- one run's figures


def fig_sequence(run, out: Path) -> list[Path]:
    """The book's attention, embedding and position figures of one finished sequence run."""
    ev = Evaluator(run)
    name, layers = label(run), ev.cfg.model.n_layers
    rows = examples(ev)
    fig, axes = plt.subplots(len(rows), layers, figsize=(4.6 * layers, 4.2 * len(rows)), squeeze=False,
                             layout="constrained")
    for ax_row, (seq, title) in zip(axes, rows, strict=True):
        draw_attention_row(ax_row, ev, seq, title)
    fig.suptitle(f"{name}: attention per layer")
    paths = save_figure(fig, out, f"book_attention_{name}")
    fig, row = plt.subplots(1, 2, figsize=(10, 4.4), layout="constrained")
    draw_embedding_row(row, np.asarray(ev.params["W_E"]), name)
    paths += save_figure(fig, out, f"book_embeddings_{name}")
    if "W_pos" in ev.params:
        fig, ax = plt.subplots(figsize=(6.2, 5), layout="constrained")
        draw_positions(ax, ev, name)
        paths += save_figure(fig, out, f"book_positions_{name}")
    return paths
