"""Reading a run directory back: config, metrics, summary, final parameters, and lazily the activations."""

from __future__ import annotations

import json
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
    """Load a finished (or resumable) run; activations are opened with mmap_mode='r', nothing is read yet."""
    path = Path(run_dir)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path} is not a run directory (no config.json)")
    config = RunConfig.from_dict(json.loads((path / "config.json").read_text()))
    metrics = dict(np.load(path / "metrics.npz")) if (path / "metrics.npz").is_file() else {}
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    params = unflatten(dict(np.load(path / "params.npz"))) if (path / "params.npz").is_file() else {}
    acts, index = {}, {}
    if (path / "acts" / "index.json").is_file():
        index = json.loads((path / "acts" / "index.json").read_text())
        for name, meta in index.get("arrays", {}).items():
            acts[name] = np.load(path / "acts" / meta["file"], mmap_mode="r")
    return Run(path, config, metrics, summary, params, acts, index)
