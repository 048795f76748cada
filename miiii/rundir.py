"""Reading a run directory back: config, metrics, summary, final parameters, and lazily the activations."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from miiii.config import ConfigError, RunConfig


@dataclass
class Run:
    path: Path
    config: RunConfig
    metrics: dict  # name -> np.ndarray (see runner.py for the layout)
    summary: dict
    params: dict  # nested dict of np.ndarray, final parameters (same tree as the model's params)
    acts: dict = field(default_factory=dict)  # name -> np.memmap, time first (acts/index.json says the axes)
    acts_index: dict = field(default_factory=dict)
    acts_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # step of each activation row

    def steps_of(self, name: str) -> np.ndarray:
        """Step of each row of `acts[name]` (parameters may be recorded at another rate than activations)."""
        meta = self.acts_index["arrays"][name]
        return np.arange(len(self.acts[name])) * meta.get("every", 1)


def unflatten(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for key, v in flat.items():
        node = tree
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return tree


def load_run(run_dir: str | Path) -> Run:
    """Load a finished (or resumable) run; activations are opened with mmap_mode='r', nothing is read yet.

    An interrupted run's activations are cut (lazily) to the rows already written. Damaged files (a
    truncated metrics.npz or .npy, an edited config.json) raise a ConfigError that names the file.
    """
    path = Path(run_dir)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a run directory (no config.json)")
    config = _read(path / "config.json", lambda f: RunConfig.from_dict(json.loads(f.read_text())))
    metrics = _read(path / "metrics.npz", lambda f: dict(np.load(f))) if (path / "metrics.npz").is_file() else {}
    summary, params = {}, {}
    if (path / "summary.json").is_file():
        summary = _read(path / "summary.json", lambda f: json.loads(f.read_text()))
    if (path / "params.npz").is_file():
        params = _read(path / "params.npz", lambda f: unflatten(dict(np.load(f))))
    acts, index, steps = {}, {}, np.zeros(0, np.int64)
    if (path / "acts" / "index.json").is_file():
        index = _read(path / "acts" / "index.json", lambda f: json.loads(f.read_text()))
        done, finished = index.get("complete_step"), index.get("finished", True)
        for name, meta in index.get("arrays", {}).items():
            f = path / "acts" / meta["file"]
            a = _read(f, lambda f: np.load(f, mmap_mode="r"))
            if list(a.shape) != list(meta["shape"]) or str(a.dtype) != meta["dtype"]:
                raise ConfigError(f"{f} is damaged: shape {a.shape} {a.dtype}, index.json says {meta['shape']} "
                                  f"{meta['dtype']}")
            if done is not None and not finished:  # rows for steps < complete_step are on disk
                a = a[: -(-done // meta.get("every", 1))]
            acts[name] = a
        steps = np.asarray(index.get("steps", []), np.int64)
        if done is not None and not finished:
            steps = steps[steps < done]
    stored = _stored_config(path)
    if stored is not None and json.loads(config.to_json()) != stored:
        raise ConfigError(f"{path / 'config.json'} was edited after the run started (it no longer matches the "
                          "copy saved with the checkpoints)")
    return Run(path, config, metrics, summary, params, acts, index, steps)


def _read(path: Path, fn):
    try:
        return fn(path)
    except (OSError, ValueError, TypeError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e)[:200]})") from None


def _stored_config(path: Path) -> dict | None:
    """The config saved beside the checkpoints (ckpt.json), or None when the run has none."""
    meta = path / "ckpt.json"
    if not meta.is_file():
        return None
    try:
        return json.loads(meta.read_text()).get("config")
    except ValueError:
        return None
