"""What the paper's claims read from a run: grok steps per task, final accuracies, W_E's singular values and
Fourier spectrum, attention to each digit, and Table 3's active frequencies by each definition (the text's and the
original code's). Functions of a loaded `Run`; claims.py turns them into verdicts, report.py into results.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.run import Run
from miiii.tasks import GRID, task_spec

NEURONS = "blocks.0.mlp.hook_post"
FRACTIONS = (1 / 256, 1 / 64, 1 / 16, 1 / 4, 1.0)  # Table 3's epochs 256 ... 65,536 as fractions of the run

def task_q(name: str) -> int:
    return int(str(name).split("=")[1])


def final_acc(run: Run, split: str = "valid") -> np.ndarray:
    """Per-task accuracy of the final parameters (after the last update) on a split."""
    return np.asarray(run.summary["final"][split]["task_acc"])


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
TABLE3_MIN_ROWS = 4  # recorded rows below which Table 3 is not read (the original code smooths over 3 steps)


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


# ---------------------------------------------------------------- the export a bundle keeps (summaries/*.json)

MEASURES_VERSION = 1


def _jsonable(x):
    """numpy scalars and arrays -> plain JSON values (floats rounded to 6 significant digits: the report prints
    at most 4, and the committed file stays small and stable)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, (np.integer, bool, np.bool_)):
        return x.item() if isinstance(x, np.generic) else x
    if isinstance(x, (float, np.floating)):
        return float(f"{float(x):.6g}")
    return x


def run_measures(run: Run) -> dict:
    """Every number the paper's claims and results.md read from one run, as plain JSON: what a bundle commits so that
    its results.md regenerates without the run directory (report.py). Task-agnostic parts (grok steps, accuracies)
    come from the summary; the rest from the final parameters, the grid and, when recorded, the MLP neurons over
    training (Table 3)."""
    c, s = run.config, run.summary
    if task_spec(c.task.name).family != GRID:
        raise ValueError(f"run_measures reads grid tasks (the paper's); {run.path} is a {c.task.name} run")
    p = c.task.p
    norms = A.freq_norms(run.params["W_E"][:p])
    out = {
        "version": MEASURES_VERSION,
        "run": {"seed": c.train.seed, "task": c.task.name, "variant": c.task.variant, "p": p,
                "d_model": c.model.d_model, "steps": c.train.steps, "dropout": c.model.dropout,
                "lamb": c.optim.lamb if c.optim.grokfast != "none" else 0.0, "init": c.model.init,
                "ema_init": c.optim.ema_init, "digit_order": c.task.digit_order,
                "precision": s.get("precision", c.train.precision), "wall_s": s.get("wall_s"),
                "resumed_from": s.get("resumed_from")},  # wall_s counts from here: the resumed segment alone
        "task_names": [str(n) for n in run.metrics["task_names"]],
        "grok_step": [g for g in A.grok_steps(run.metrics["step"], run.metrics["valid_acc"])],
        "final_acc": {"valid": final_acc(run).tolist(), "train": final_acc(run, "train").tolist()},
        "pos_r": A.pearson(*run.params["W_pos"][:2]),
        "svd": svd_marks(run),
        "fft": {"norms": norms[1:], "energy_90": freq_count(run, 0.9),
                "above_mean_2std": int(A.active_frequencies(norms).sum()), "gini": embed_gini(run)},
    }
    to_x0, to_x1 = attention_to_digits(run)
    out["attention"] = {"to_x0": to_x0, "to_x1": to_x1}
    if recorded_neurons(run) is not None and len(recorded_neurons(run)) >= TABLE3_MIN_ROWS:
        out["table3"] = {name: {"steps": st, "counts": n} for name, (st, n) in active_counts(run).items()}
    from miiii.interventions import frequency_ablation

    ab = frequency_ablation(run)
    out["freq_ablation"] = {"k": ab["k"], "base": ab["base"], "loss": ab["loss"], "tasks": ab["tasks"]}
    grid = A.to_grid(run.cache((NEURONS,))[NEURONS][:, -1], p)
    out["key_freqs"] = A.neuron_key_freqs(A.neuron_freq_fractions(grid))[1]
    return _jsonable(out)
