"""Every file of a run against its checksum: checksums.json (the manifest of a finished run's files, written last,
checked on loading and resuming; what a resume may write again from the final checkpoint), and the checksum of the
metrics rows each checkpoint vouches for (an unfinished run's metrics.npz is rewritten at every checkpoint). The
files themselves: rundir.py; acts/index.json and its rows: actsindex.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from miiii.config import ConfigError
from miiii.errors import shown
from miiii.files import io_fault, write_json_atomic
from miiii.rundir import (
    ACTS,
    ACTS_INDEX,
    ACTS_INPUTS,
    CKPT_META,
    CONFIG,
    MANIFEST,
    METRICS,
    METRICS_LOG,
    PARAMS,
    SUMMARY,
    TB,
    canonical_sum,
    read_ckpt_meta,
    read_json,
    regular_file,
    write_checked,
    write_summary,
)

# the files checksums.json lists (those present), besides every file under tb/; acts/*.npy: index.json's crc32
LISTED = (CONFIG, METRICS, METRICS_LOG, PARAMS, SUMMARY, CKPT_META, f"{ACTS}/{ACTS_INDEX}", f"{ACTS}/{ACTS_INPUTS}")
# what a resume of a finished run writes again (from its final checkpoint, metrics.npz and config)
REBUILT = (SUMMARY, PARAMS, METRICS_LOG, f"{ACTS}/{ACTS_INPUTS}")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(16 << 20):
            h.update(block)
    return h.hexdigest()


def listed_files(run_dir: Path) -> list[str]:
    """The run's files that a manifest lists, those present (relative paths with '/'): LISTED, and everything under
    tb/ (or tb itself when it is not a directory)."""
    run_dir = Path(run_dir)
    names = [n for n in LISTED if (run_dir / n).exists() or (run_dir / n).is_symlink()]
    tb = run_dir / TB
    if tb.is_dir() and not tb.is_symlink():
        names += sorted(p.relative_to(run_dir).as_posix() for p in tb.rglob("*") if not p.is_dir() or p.is_symlink())
    elif tb.exists() or tb.is_symlink():
        names.append(TB)
    return names


def write_manifest(run_dir: Path) -> None:
    """checksums.json: the sha256 of every file `listed_files` finds, and of its own content; written atomically."""
    run_dir = Path(run_dir)
    try:
        files = {n: file_sha256(run_dir / n) for n in listed_files(run_dir)}
    except OSError as e:
        raise io_fault(Path(e.filename or run_dir), e) from None
    body = {"format": 1, "algorithm": "sha256", "files": files,
            "note": "sha256 of each file of the finished run; acts/*.npy: crc32 in acts/index.json; ckpt/: sha256 "
                    "in ckpt.json; checksum: sha256 of this object without it (json.dumps, sort_keys)"}
    write_checked(run_dir / MANIFEST, write_json_atomic, body | {"checksum": canonical_sum(body)})


def metrics_rows_sha256(metrics: dict, names, n: int) -> str:
    """sha256 of the first `n` rows of each named metric (float32 as saved), in the order of `names`."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + np.ascontiguousarray(np.asarray(metrics[name][:n], np.float32)).tobytes())
    return h.hexdigest()


def check_metrics_rows(run_dir: Path, metrics: dict, step: int, ckpt_meta: dict) -> None:
    """metrics.npz's rows before `step` against the checksum ckpt.json holds for that checkpoint (none: a run written
    before it did, nothing to check); a ConfigError naming metrics.npz when they differ."""
    entry = ckpt_meta.get("metrics", {}).get(str(step))
    if not isinstance(entry, dict):
        return
    names = entry.get("names", [])
    if any(n not in metrics for n in names) or metrics_rows_sha256(metrics, names, step) != entry.get("sha256"):
        raise ConfigError(f"{Path(run_dir) / METRICS} is damaged: its rows before step {step} do not match their "
                          f"checksum in {Path(run_dir) / CKPT_META}; the run cannot resume from it")


# ---------------------------------------------------------------- the manifest (checksums.json)


def read_manifest(run_dir: Path) -> dict[str, str] | None:
    """checksums.json's files ({relative path: sha256}), checked against its own checksum; None when the run has none
    (unfinished, or written before manifests). Damaged: a ConfigError that names it."""
    path = Path(run_dir) / MANIFEST
    if not (path.exists() or path.is_symlink()):
        return None
    m = read_json(path, Path(run_dir))
    files = m.get("files")
    if m.get("checksum") != canonical_sum(m) or not isinstance(files, dict):
        raise ConfigError(f"{path} is damaged: its content does not match its own checksum")
    for name, digest in files.items():
        parts = name.split("/")
        if (name not in LISTED and parts[0] != TB) or ".." in parts or "" in parts or not isinstance(digest, str):
            raise ConfigError(f"{path} is damaged or was edited: it lists {shown(name)!r}, not a file of a run")
    return files


def manifest_faults(run_dir: Path) -> dict[str, str] | None:
    """Each file of a run with a manifest that is not as the manifest says, with the message saying why: changed,
    missing, not a regular file, or present with no entry (a missing checksum is itself a fault). {}: every file is
    as written; None: the run has no manifest."""
    run_dir = Path(run_dir)
    files = read_manifest(run_dir)
    if files is None:
        return None
    where, faults = run_dir / MANIFEST, {}
    for name, want in files.items():
        path = run_dir / name
        try:
            regular_file(path, run_dir)
            if file_sha256(path) != want:
                faults[name] = f"{path} is damaged: it does not match its checksum in {where}"
        except ConfigError as e:
            faults[name] = f"{e} ({where} lists it)"
        except OSError as e:
            faults[name] = f"{path} cannot be read ({e.strerror or e})"
    for name in listed_files(run_dir):
        if name not in files:
            faults[name] = f"{run_dir / name} has no checksum in {where}: it was added or replaced after the run ended"
    return faults


def check_manifest(run_dir: Path, rebuilt: tuple[str, ...] = ()) -> list[str] | None:
    """Raise the first fault `manifest_faults` finds (a ConfigError naming the file), but for those in `rebuilt`
    (what the caller writes again), which are returned with their messages; None: the run has no manifest and was
    written before manifests. A finished run whose ckpt.json names its manifest (every run since manifests) and has
    none is damaged: someone deleted it."""
    faults = manifest_faults(run_dir)
    if faults is None:
        finished = (Path(run_dir) / SUMMARY).exists() or (Path(run_dir) / PARAMS).exists()
        if finished and read_ckpt_meta(run_dir, strict=False).get("manifest") == MANIFEST:
            raise ConfigError(f"{Path(run_dir) / MANIFEST} is missing: the run is finished and its ckpt.json says it "
                              "was written with one, so the run is damaged (its files cannot be checked)")
        return None
    fatal = [msg for name, msg in faults.items() if name not in rebuilt]
    if fatal:
        raise ConfigError(fatal[0])
    return [msg for name, msg in faults.items() if name in rebuilt]


def finish_files(run_dir: Path, summary: dict) -> None:
    """summary.json, the last file of a finished run, then its manifest (checksums.json) over every file."""
    write_summary(run_dir, summary)
    write_manifest(run_dir)
