# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Grokking in one notebook
#
# Train `nanda-cpu` (`(x0 + x1) mod 59`, Nanda et al.'s one-layer transformer with grokfast: it fits the training
# set within a hundred steps, then generalises near step 750), draw the grokking figure, restore a checkpoint
# before and one after the grok step, ask which frequencies each of them needs, and compare a two-seed sweep.
#
# This file is `examples/grokking.py` in jupytext's percent format; `examples/grokking.ipynb` is generated from it
# (`jupytext --sync examples/grokking.py` after an edit; `tests/test_notebook.py` fails when the two differ).
# Install the `notebook` extra (`.venv/bin/pip install -e '.[notebook]'`: jupytext, nbclient, ipykernel, pandas)
# and open the `.ipynb` with the `.venv` kernel; `make test-notebook` runs it end to end (6 min 16 s on 2 CPU cores
# that another training shared, most of it the two trainings); a second run of the notebook reuses what the first
# trained.
#
# The notebook only imports from `miiii/`; each step's command-line equivalent is named beside it.

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Image, display

import miiii
from miiii.analysis import neuron_freq_fractions, neuron_key_freqs, to_grid
from miiii.compare import compare
from miiii.compile_cache import setup_compile_cache
from miiii.interventions import frequency_ablation
from miiii.plots import fig_grokking
from miiii.runner import train_run
from miiii.sweep import run_sweep

setup_compile_cache()  # the programs `make train` compiled are loaded, not compiled again

PRESET = "nanda-cpu"  # make train's default: 3,000 full-batch steps, about a minute on 2 CPU cores
SWEEP_SEEDS, SWEEP_STEPS = 2, 1500  # the sweep: two init seeds, long enough for both to grok (near step 750)
OUT = Path(os.environ.get("MIIII_NOTEBOOK_OUT", "runs/notebook"))  # relative to where the kernel started
RUN, SWEEP, FIGURES = OUT / PRESET, OUT / "sweep", OUT / "figures"
NEURONS = "blocks.0.mlp.hook_post"

# %% [markdown]
# ## Train
#
# `python -m miiii train --preset nanda-cpu --run-dir runs/notebook/nanda-cpu` does the same. A finished run
# (its `summary.json` written) is reused; an interrupted one continues with `python -m miiii train --resume RUN`.

# %%
cfg = miiii.get_preset(PRESET)
if not (RUN / "summary.json").exists():
    start = time.perf_counter()
    train_run(cfg, RUN, tensorboard=False)
    print(f"trained {cfg.train.steps} steps in {time.perf_counter() - start:.0f} s")
run = miiii.load_run(RUN)
(grok,) = run.summary["grok_step"].values()  # nanda has one task: its first step at >= 0.99 validation accuracy
print(f"grok step: {grok}")

# %% [markdown]
# The live metrics file, one JSON line per evaluated step, read with pandas: the grok step is the first row at
# 0.99 validation accuracy or more (`docs/watching.md`).

# %%
log = pd.read_json(RUN / "metrics.jsonl", lines=True)
(valid_acc,) = [c for c in log if c.startswith("valid_acc/")]
print(f"{len(log)} evaluated steps; first at >= 0.99 validation accuracy in metrics.jsonl: "
      f"{int(log.loc[log[valid_acc] >= 0.99, 'step'].iloc[0])}")
log.iloc[[0, 100, grok - 1, grok, len(log) - 1]]

# %% [markdown]
# ## The grokking figure
#
# Train and validation loss (log-log) and accuracy on one step axis, the grok step marked; the test split's final
# numbers as diamonds. `python -m miiii figures RUN` draws it beside the other figures as `fig_grokking_RUN.png`.

# %%
png, _pdf = fig_grokking(run, FIGURES)
display(Image(filename=str(png)))

# %% [markdown]
# ## Before and after: two kept checkpoints
#
# Every preset keeps about 20 checkpoints at log-spaced steps (`ckpt.keep_log`); `run.params_at(step)` restores
# one and verifies it against its checksum. Take the last kept step before the grok step and the first at or
# after it, and measure each on the validation split (the model's own forward pass, beside what training logged).

# %%
pre = max(s for s in run.kept_steps if s < grok)
post = min(s for s in run.kept_steps if s >= grok)
x, y = run.inputs("valid"), run.labels("valid")[:, 0]
n_classes = int(run.task.n_classes[0])
params = {"pre-grok": run.params_at(pre), "post-grok": run.params_at(post)}
steps = {"pre-grok": pre, "post-grok": post}
for name, step in steps.items():
    logits = run.cache(("logits",), "valid", params[name])["logits"][:, 0, :n_classes]  # (inputs, classes)
    acc = float((logits.argmax(-1) == y).mean())
    logged = float(run.metrics["valid_acc"][np.flatnonzero(run.metrics["step"] == step)[0], 0])
    print(f"{name} checkpoint: step {step}, validation accuracy {acc:.4f} (logged in training: {logged:.4f})")

# %% [markdown]
# ## Which frequencies each checkpoint needs
#
# `frequency_ablation` removes frequency k of either digit from the MLP neurons' activations over the whole
# (x0, x1) grid, for k = 1 .. p // 2, and measures the loss; `analysis.neuron_key_freqs` names the frequencies the
# neurons themselves take (Nanda et al. 2023). After grokking, a handful of key frequencies carry the algorithm:
# removing any one of them multiplies the loss tenfold or more, removing any other barely moves it. Losses in
# cross-entropy / ln p, the unit of `summary.json`.

# %%
p = run.config.task.p
ablation = {name: frequency_ablation(run, NEURONS, params=params[name]) for name in params}
fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
for (name, a), shift in zip(ablation.items(), (-0.2, 0.2), strict=True):
    ax.bar(a["k"] + shift, a["loss"][:, 0] / np.log(p), width=0.4, label=f"{name} (step {steps[name]})")
    ax.axhline(a["base"][0] / np.log(p), color=ax.patches[-1].get_facecolor(), ls=":", lw=1)
ax.set(xticks=np.arange(1, p // 2 + 1), yscale="log", xlabel="frequency k removed from the MLP neurons",
       ylabel="loss over the grid, log\ncross-entropy / ln p", title="Frequency ablation (dotted: nothing removed)")
ax.legend(frameon=False)
fig.savefig(FIGURES / "freq_ablation.png", dpi=110)  # miiii.plots draws with Agg: figures are shown as their files
plt.close(fig)
display(Image(filename=str(FIGURES / "freq_ablation.png")))

a = ablation["post-grok"]
needed = a["k"][a["loss"][:, 0] >= 10 * a["base"][0]]  # removing it multiplies the loss tenfold or more
top = a["k"][np.argmax(a["loss"][:, 0])]
worst = a["loss"][:, 0].max()
grid = to_grid(run.cache((NEURONS,), "grid", params["post-grok"])[NEURONS][:, -1], p)  # (p, p, d_mlp)
neuron_keys = neuron_key_freqs(neuron_freq_fractions(grid))[1]
print(f"key frequencies (ablation, post-grok): {needed.tolist()}")
print(f"key frequencies (neurons, post-grok): {neuron_keys.tolist()}")
print(f"post-grok loss {a['base'][0] / np.log(p):.3g}; without frequency {top}: {worst / np.log(p):.3g}")

# %% [markdown]
# ## A sweep, compared
#
# Two init seeds in one vmapped program (`python -m miiii sweep --preset nanda-cpu --seeds 2 --steps 1500 --out
# runs/notebook/sweep`); `members.csv` has a row per member, and `compare` overlays the members and the run above
# (`python -m miiii compare runs/notebook/nanda-cpu runs/notebook/sweep --out runs/notebook/figures`), each
# labelled by the settings that differ. `--split-seeds N` would cross N train/validation splits with the seeds
# (`docs/sweeps.md`).

# %%
if not (SWEEP / "sweep.json").exists():
    run_sweep(miiii.apply_overrides(cfg, [f"train.steps={SWEEP_STEPS}"]), SWEEP_SEEDS, {}, SWEEP, tensorboard=False)
members = pd.read_csv(SWEEP / "members.csv")
display(members)
written = compare([RUN, SWEEP], FIGURES)
print("comparison figures:", ", ".join(str(f) for f in written if f.suffix == ".png"))
display(Image(filename=str(FIGURES / "compare_grokking.png")))
