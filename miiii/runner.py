"""The host side of a run: chunks of jitted steps, a progress bar, and the run directory.

    run_dir/config.json    the RunConfig (everything needed to rerun)
    run_dir/metrics.npz    step (T,), loss (T,), train_loss/train_acc/valid_loss/valid_acc (T, K), task_names (K,)
    run_dir/summary.json   final metrics, first step each task reached >= 0.99 validation accuracy, timing
    run_dir/params.npz     final parameters, flattened with '/'-joined names
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from miiii.config import ConfigError, RunConfig, validate
from miiii.model import count_params
from miiii.tasks import Task, make_task
from miiii.train import METRIC_KEYS, evaluate_split, greedy_decode, make_trainer, task_data

GROK_THRESHOLD = 0.99


def check_run_dir(run_dir: Path) -> None:
    """Refuse to write into a directory that already holds anything (no earlier run is overwritten)."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise ConfigError(f"run directory {run_dir} already exists and is not empty; choose another --run-dir")


def prepare(cfg: RunConfig) -> Task:
    """Validate the config and build its task; any ConfigError is raised before a file is written."""
    validate(cfg)
    task = make_task(cfg.task)
    if cfg.train.batch_size > len(task.train.x):
        raise ConfigError(
            f"train.batch_size = {cfg.train.batch_size} exceeds the {len(task.train.x)} training samples; "
            "lower it or set 0 for full batch"
        )
    return task


def grok_steps(step: np.ndarray, valid_acc: np.ndarray, threshold: float = GROK_THRESHOLD) -> list[int | None]:
    """First step at which each task's validation accuracy reached `threshold` (None if never)."""
    out = []
    for k in range(valid_acc.shape[1]):
        hit = np.nonzero(np.nan_to_num(valid_acc[:, k], nan=-1.0) >= threshold)[0]
        out.append(int(step[hit[0]]) if len(hit) else None)
    return out


def save_npz_atomic(path: Path, **arrays) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True))
    os.replace(tmp, path)


def flatten_params(params) -> dict[str, np.ndarray]:
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v) for path, v in flat}


def train_run(cfg: RunConfig, run_dir: str | Path, progress: bool = True) -> dict:
    """Train `cfg` and write its run directory; returns the summary."""
    run_dir = Path(run_dir)
    check_run_dir(run_dir)
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    data = task_data(task)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / "config.json", cfg.to_dict())

    steps, k = cfg.train.steps, len(task.task_names)
    hist = {key: np.full((steps,) if key == "loss" else (steps, k), np.nan, np.float32) for key in METRIC_KEYS}
    state = trainer.init(cfg.train.seed)
    n_params = count_params(state.params)
    t_start = time.perf_counter()
    compile_s = None
    bar = tqdm(total=steps, disable=not progress, unit="step", dynamic_ncols=True, desc=f"{task.name}")
    last_valid = np.full(k, np.nan)
    b = cfg.train.batch_size  # an epoch is len(train) // batch minibatches (trainer), one step at full batch
    steps_per_epoch = max(len(task.train.x) // b, 1) if 0 < b < len(task.train.x) else 1
    done = 0
    while done < steps:
        n = min(cfg.train.chunk, steps - done)
        t0 = time.perf_counter()
        state, metrics = trainer.chunk(state, data, n)
        metrics = jax.device_get(metrics)
        if compile_s is None:
            compile_s = time.perf_counter() - t0
        for key in METRIC_KEYS:
            hist[key][done:done + n] = metrics[key]
        if not np.isfinite(metrics["loss"]).all():
            bad = done + int(np.nonzero(~np.isfinite(metrics["loss"]))[0][0])
            bar.close()
            raise FloatingPointError(f"loss became {metrics['loss'][bad - done]} at step {bad}; lower optim.lr")
        evaluated = ~np.isnan(metrics["valid_acc"][:, 0])
        if evaluated.any():
            last_valid = metrics["valid_acc"][np.nonzero(evaluated)[0][-1]]
        done += n
        bar.update(n)
        post = {"epoch": done // steps_per_epoch, "loss": f"{metrics['loss'][-1]:.4f}",
                "val_acc": f"{np.nanmean(last_valid):.3f}"}
        if k > 1:
            post["grokked"] = f"{int((last_valid >= GROK_THRESHOLD).sum())}/{k}"
        bar.set_postfix(post)
    bar.close()
    wall = time.perf_counter() - t_start

    step_axis = np.arange(steps)
    save_npz_atomic(run_dir / "metrics.npz", step=step_axis, task_names=np.array(task.task_names), **hist)
    save_npz_atomic(run_dir / "params.npz", **flatten_params(state.params))
    summary = summarize(cfg, task, trainer, state.params, step_axis, hist)
    summary.update(
        n_params=n_params, wall_s=round(wall, 3), compile_s=round(compile_s or 0.0, 3),
        steps_per_s=round(steps / max(wall - (compile_s or 0.0), 1e-9), 2) if steps > cfg.train.chunk else None,
        device=str(jax.devices()[0].device_kind), backend=jax.default_backend(),
    )
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


def summarize(cfg, task: Task, trainer, params, step_axis, hist) -> dict:
    spec = {key: jnp.asarray(v) for key, v in task.arrays().items()}
    final = {"train": evaluate_split(trainer, params, task.train, spec),
             "valid": evaluate_split(trainer, params, task.valid, spec)}
    if task.test is not None:
        final["test"] = evaluate_split(trainer, params, task.test, spec)
    out = {
        "task": task.name, "task_names": list(task.task_names), "steps": int(cfg.train.steps), "final": final,
        "grok_step": dict(zip(task.task_names, grok_steps(step_axis, hist["valid_acc"]), strict=True)),
    }
    if task.generative:
        prompt = task.valid.x[:, : task.answer_start + 1]
        pred = greedy_decode(trainer, params, prompt, task.n_slots - task.answer_start)
        out["valid_autoregressive_acc"] = float((pred == task.valid.y[:, task.answer_start:]).all(1).mean())
    return out
