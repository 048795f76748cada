"""One writer per run directory: the lock a process holds while it writes a run, and the claim a new run takes
on its directory before its slow start-up (so of two `train`s into one directory the second is refused, and a
start-up that fails leaves nothing behind). The files themselves: rundir.py.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from miiii.config import ConfigError
from miiii.files import RunError, then
from miiii.rundir import CONFIG, LOCK, unstarted


def check_new(run_dir: Path) -> None:
    """Refuse to write into a directory that already holds anything (no earlier run is overwritten). A quick
    check before the config is built; `RunClaim` checks again under the lock."""
    if run_dir.is_symlink() and not run_dir.exists():
        raise ConfigError(f"run directory {run_dir} is a symlink to nothing ({os.readlink(run_dir)}); "
                          "choose another --run-dir")
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise ConfigError(f"run directory {run_dir} already exists and is not empty; choose another --run-dir")


class RunLock:
    """One writer per run directory: an exclusive `flock` on run_dir/.lock, released by the OS when the
    holder exits or crashes, so a killed run never leaves the directory locked."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK

    def __enter__(self):
        self.f = open(self.path, "a+")  # noqa: SIM115 - held for the run's lifetime
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.f.seek(0)
            pid = self.f.read().strip() or "?"
            self.f.close()
            raise ConfigError(f"{self.path.parent} is being written by another live process (pid {pid}); "
                              "wait for it to finish or stop it (Ctrl-C), then --resume") from None
        try:  # a start-up that failed removes its .lock: a lock taken on that unlinked file guards nothing
            same = os.stat(self.path).st_ino == os.fstat(self.f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            self.f.close()
            raise ConfigError(f"{self.path.parent} was removed by another process while this one opened it; "
                              "try again")
        self.f.seek(0)
        self.f.truncate()
        self.f.write(str(os.getpid()))
        self.f.flush()
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class RunClaim:
    """A new run's hold on its directory, taken before the slow start-up: created (or found empty), locked, and
    found empty again under the lock, so of two `train`s into one directory the second is refused even when
    both passed `check_new` before either wrote. `restart`: a directory left `unstarted`, emptied but for its
    config.json (`--resume` starts it over).

    Until `keep()` (called once the step-0 checkpoint is written) any exception removes what the claim made (the
    directory and the parents it created; for a restart, everything but config.json), and a RunError or an
    interrupt says so."""

    def __init__(self, run_dir: Path, restart: bool = False):
        self.run_dir, self.restart, self.kept, self.made = Path(run_dir), restart, False, []

    def __enter__(self):
        d = self.run_dir
        missing, p = [], d.absolute()
        while not p.exists() and not p.is_symlink():
            missing.append(p)
            p = p.parent
        try:
            for p in reversed(missing):
                try:
                    os.mkdir(p)
                    self.made.append(p)
                except FileExistsError:
                    pass
            if not d.is_dir():
                raise ConfigError(f"run directory {d} is not a directory; choose another --run-dir")
            lock_existed = (d / LOCK).exists()
            self.lock = RunLock(d).__enter__()
        except OSError as e:
            self._remove_made()
            raise ConfigError(f"cannot create the run directory {d}: {e.strerror or e}") from None
        if self.restart and not unstarted(d):
            self.lock.__exit__()
            raise ConfigError(f"{d} changed while --resume started it over; look at it, then try again")
        others = [p for p in d.iterdir() if p.name not in ({LOCK, CONFIG} if self.restart else {LOCK})]
        if self.restart:
            for p in others:
                _remove(p)
        elif others:
            if not lock_existed:
                (d / LOCK).unlink(missing_ok=True)
            self.lock.__exit__()
            raise ConfigError(f"run directory {d} already exists and is not empty (another process wrote into it "
                              "just now); choose another --run-dir")
        return self

    def keep(self) -> None:
        """The directory holds a resumable run now: an exception no longer removes it."""
        self.kept = True

    def _remove_made(self) -> None:
        for p in reversed(self.made):
            try:
                p.rmdir()
            except OSError:
                break  # someone else wrote there since

    def __exit__(self, typ, exc, tb):
        if exc is None or self.kept:
            self.lock.__exit__()
            return None
        d = self.run_dir
        keep = {LOCK, CONFIG} if self.restart else {LOCK}
        for p in list(d.iterdir()):
            if p.name not in keep:
                _remove(p)
        if not self.restart:
            (d / LOCK).unlink(missing_ok=True)  # before the lock is released: see RunLock
        self.lock.__exit__()
        if not self.restart:
            self._remove_made()
        left = (f"{d} holds only its config.json again; start it over with --resume" if self.restart else
                f"{d} was removed" if not d.exists() else f"{d} is empty again")
        if isinstance(exc, KeyboardInterrupt):
            raise type(exc)(f"interrupted before the first checkpoint: nothing was kept ({left})") from None
        if isinstance(exc, RunError):
            raise then(exc, f"the run stopped before its first checkpoint: nothing was kept ({left})") from None
        return None
