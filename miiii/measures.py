"""What the paper's claims read from a run: grok steps per task, final accuracies, W_E's singular values and
Fourier spectrum, attention to each digit, and Table 3's active frequencies by each definition (the text's and the
original code's). Functions of a loaded `Run`; claims.py turns them into verdicts, report.py into results.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.run import Run

NEURONS = "blocks.0.mlp.hook_post"
FRACTIONS = (1 / 256, 1 / 64, 1 / 16, 1 / 4, 1.0)  # Table 3's epochs 256 ... 65,536 as fractions of the run

def task_q(name: str) -> int:
    return int(str(name).split("=")[1])


def grok_table(run: Run) -> dict[int, int | None]:
    """{q: first step with valid accuracy >= 0.99, or None} for a miiii run."""
    m = run.metrics
    return {task_q(n): s for n, s in zip(m["task_names"], A.grok_steps(m["step"], m["valid_acc"]), strict=True)}


def final_acc(run: Run, split: str = "valid") -> np.ndarray:
    """Per-task accuracy of the final parameters (after the last update) on a split."""
    return np.asarray(run.summary["final"][split]["task_acc"])


def by_q(run: Run, acc) -> dict[int, float]:
    return {task_q(n): float(a) for n, a in zip(run.metrics["task_names"], acc, strict=True)}


def svd_marks(run: Run) -> dict[str, int]:
    """W_E[:p]'s singular values at 50 % / 90 %: counts needed (sum sigma, sum sigma^2) and the original's ticks."""
    _, S, _ = A.embedding_svd(run.params["W_E"][: run.config.task.p])
    out = {}
    for f in (0.5, 0.9):
        pc = f"{round(100 * f)}"
        out |= {f"count_s_{pc}": A.variance_count(S, f, power=1), f"tick_s_{pc}": A.svd_tick(S, f),
                f"count_s2_{pc}": A.variance_count(S, f, power=2)}
    return out


def freq_count(run: Run, frac: float = 0.9) -> int:
    """How many non-constant frequencies of W_E[:p] hold `frac` of its Fourier energy."""
    norms = np.sort(A.freq_norms(run.params["W_E"][: run.config.task.p])[1:])[::-1]
    return A.variance_count(norms, frac, power=2)


def embed_gini(run: Run) -> float:
    return float(A.gini(A.freq_norms(run.params["W_E"][: run.config.task.p])[1:]))


def attention_to_digits(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(n_heads,) twice: mean attention from the output position to x0 and to x1 over the grid (final params)."""
    pat = run.cache(("blocks.0.attn.hook_pattern",))["blocks.0.attn.hook_pattern"][:, :, -1]  # (p^2, heads, keys)
    i0, i1 = run.config.task.digit_positions
    return pat[..., i0].mean(0), pat[..., i1].mean(0)


def recorded_neurons(run: Run):
    """(T, p*p, N) MLP neurons recorded over the whole grid, or None."""
    a = run.acts.get(NEURONS)
    if a is None or run.acts_index.get("inputs", {}).get("kind") != "grid" or a.shape[1] != run.config.task.p ** 2:
        return None
    return a


def _at_fractions(steps: np.ndarray, total: int) -> list[int]:
    """Index into `steps` nearest to each of FRACTIONS of the run (the last: its final step)."""
    return [int(np.abs(steps - f * (total - 1)).argmin()) for f in FRACTIONS]


_ACTIVE_COUNTS: dict[str, dict] = {}


def active_counts(run: Run) -> dict[str, tuple[list[int], list[int]]]:
    """`_active_counts`, computed once per run directory in a process (five claims and the Table 3 section read it:
    a minute each at p = 113)."""
    key = str(Path(run.path).resolve())
    if key not in _ACTIVE_COUNTS:
        _ACTIVE_COUNTS[key] = _active_counts(run)
    return _ACTIVE_COUNTS[key]


def _active_counts(run: Run) -> dict[str, tuple[list[int], list[int]]]:
    """Table 3 by each definition: name -> (steps read, counts at the five fractions of the run).

    project: frequency dominance of the recorded neurons (Nanda's variance fractions), active above mean + 2 std
    of the frequencies at that step. original n0 / mean, +1 / +2 std: the original code's pipeline
    (`analysis.original_active_counts`) on neuron 0 (what it read) or on the mean over the recorded neurons (the
    text's "averaged over neurons"), thresholded at mean + 1 std (the code) or + 2 std (the text).
    """
    neurons = recorded_neurons(run)
    p, total = run.config.task.p, run.config.train.steps
    steps = np.asarray(run.steps_of(NEURONS))
    out = {}
    idx = _at_fractions(steps, total)
    counts = [int(A.active_frequencies(A.frequency_dominance(A.to_grid(np.asarray(neurons[i], np.float64), p))).sum())
              for i in idx]
    out["project: dominance, mean + 2 std per step"] = ([int(steps[i]) for i in idx], counts)
    spec = np.concatenate([A.original_neuron_spectrum(neurons[i:i + 16], p) for i in range(0, len(neurons), 16)])
    for which, series in (("neuron 0", spec[:, 0]), ("mean over neurons", spec.mean(1))):
        for k in (1, 2):
            log_steps, c = A.original_active_counts(series, steps, n_std=k)
            j = _at_fractions(log_steps, total)
            out[f"original: {which}, mean + {k} std"] = ([int(log_steps[i]) for i in j], [int(c[i]) for i in j])
    return out
