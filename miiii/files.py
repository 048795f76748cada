"""Run-directory file I/O shared by the runner, the recorder, checkpoints and sweeps: atomic and durable
(fsynced) writes, free space, and the one error a run stops on when the disk fails it."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np

from miiii.errors import RunError  # noqa: F401 - the error of this module's writes, imported from here too


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds `path` (or its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def io_fault(path: Path, e: OSError | str) -> RunError:
    """The RunError for a failed write: names the file, the reason and the free space. What is left of the run
    (a checkpoint to resume from, or nothing) is added by the caller that knows it (`then`)."""
    reason = e if isinstance(e, str) else e.strerror or str(e)
    return RunError(f"writing {path} failed: {reason} ({free_bytes(Path(path).parent):,} bytes free on that disk)")


def then(e: RunError, what_is_left: str) -> RunError:
    """`e` with what is left of the run appended (one line)."""
    return RunError(f"{e}; {what_is_left}")


def fsync_dir(path: Path) -> None:
    """Make the directory entries of `path` (a rename into it) durable; filesystems that cannot fsync a
    directory (EINVAL) have nothing more to do."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def write_atomic(path: Path, tmp: Path, write) -> None:
    """`write(f)` into `tmp`, fsync it, rename it over `path`, fsync the directory: after a power loss `path` is
    the old file or the whole new one, and once this returns the new one. A failed write removes `tmp`."""
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj) -> None:
    text = json.dumps(obj, indent=1, sort_keys=True).encode()
    write_atomic(path, path.with_name(path.name + ".tmp"), lambda f: f.write(text))


def write_text_atomic(path: Path, text: str) -> None:
    data = text.encode()
    write_atomic(path, path.with_name(path.name + ".tmp"), lambda f: f.write(data))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    write_atomic(path, path.with_name(path.name + ".tmp"), lambda f: f.write(data))


def save_npz_atomic(path: Path, **arrays) -> None:
    write_atomic(path, path.with_suffix(".tmp.npz"), lambda f: np.savez(f, **arrays))


def fsync_tree(path: Path) -> None:
    """fsync every file and directory under `path` and `path`'s own directory entry (a checkpoint written by
    orbax, which does not sync its metadata files or renames)."""
    path = Path(path)
    for p in sorted(path.rglob("*"), key=lambda p: -len(p.parts)):  # files before the directories that hold them
        if p.is_dir():
            fsync_dir(p)
        elif p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    fsync_dir(path)
    fsync_dir(path.parent)


def check_output(path: Path, want: str, runs=(), flag: str = "--out", room: int = 50 * 2**20) -> Path:
    """An output path checked before anything is drawn (a ConfigError that names the fault; nothing is made): `want`
    "file" or "dir" and not the other where it exists; not inside any of `runs` (a run's own folder or its tb/: a
    finished run's files are checksummed, and a stray file there makes it fail to load); its nearest existing folder
    writable; `room` bytes free there."""
    from miiii.errors import ConfigError, shown

    p = Path(path)
    if p.exists() and want == "file" and p.is_dir():
        raise ConfigError(f"{flag} {shown(p, 200)} is a directory; give a file name")
    if p.exists() and want == "dir" and not p.is_dir():
        raise ConfigError(f"{flag} {shown(p, 200)} exists and is not a directory")
    here = p.absolute()
    for run in runs:
        run = Path(run).absolute()
        if here == run or run in here.parents:
            raise ConfigError(f"{flag} {shown(p, 200)} is inside the run {shown(run, 200)}: write outside it (a run's "
                              "folder holds only what training wrote, and checksums.json covers it)")
    parent = next(q for q in (here if want == "dir" else here.parent, *here.parents) if q.exists())
    if not parent.is_dir():
        raise ConfigError(f"{flag} {shown(p, 200)}: {shown(parent, 200)} exists and is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {shown(p, 200)}: {shown(parent, 200)} is not writable")
    if shutil.disk_usage(parent).free < room:
        raise ConfigError(f"{flag} {shown(p, 200)}: less than {room // 2**20} MiB free on the disk that holds it")
    return p
