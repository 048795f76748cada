"""Run-directory file I/O shared by the runner, the recorder, checkpoints and sweeps: atomic writes,
free space, and the one error a run stops on when the disk fails it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np


class RunError(RuntimeError):
    """A run that stopped on a fault it cannot fix (disk full, write error); the directory stays resumable."""


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds `path` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def io_fault(path: Path, e: OSError) -> RunError:
    """The RunError for a failed write: names the file, the reason and the free space, says how to go on."""
    return RunError(f"writing {path} failed: {e.strerror or e} ({free_bytes(Path(path).parent):,} bytes free on that "
                    "disk); the run stopped and can be resumed from its last checkpoint with --resume once fixed")


def write_json_atomic(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    os.replace(tmp, path)


def save_npz_atomic(path: Path, **arrays) -> None:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
