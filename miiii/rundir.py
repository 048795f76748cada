"""The run directory: its format, written and read by this module alone.

    run_dir/config.json    the RunConfig (everything needed to rerun)
    run_dir/metrics.npz    step (T,), loss (T,), train_loss/train_acc/valid_loss/valid_acc (T, K), grad_norm (T, P),
                           task_names (K,), grad_names (P,); row t describes the parameters before update t
    run_dir/summary.json   final metrics, first step each task reached >= 0.99 validation accuracy, timing
    run_dir/params.npz     final parameters, flattened with '/'-joined names
    run_dir/acts/          recorded activations and parameters, one .npy per name, inputs.npy, index.json
                           (record.py plans and streams the rows; row j of an array is step j * every; the
                           crc32 of each commit's rows, checked by load_run and --resume)
    run_dir/ckpt/, ckpt.json  orbax checkpoints of the train state; their checksums and a copy of the config
                           that tells an edited config.json apart (checkpoint.py)
    run_dir/.lock          flock held by the one process writing the directory (taken by `Claim` before a new
                           run's start-up; a start-up that fails or is interrupted removes the directory again)
    run_dir/book.json      a sequence run's evaluation the book's way (`python -m miiii book`, bookeval.py)

The runner writes a directory chunk by chunk, a sweep one per member at its end (config, metrics, summary,
params); `load_run` reads either back. A damaged or edited file is a ConfigError that names it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from miiii.config import ConfigError, RunConfig
from miiii.files import RunError, io_fault, save_npz_atomic, then, write_json_atomic

CONFIG, METRICS, SUMMARY, PARAMS, BOOK = "config.json", "metrics.npz", "summary.json", "params.npz", "book.json"
CKPT, CKPT_META, ACTS, ACTS_INDEX, ACTS_INPUTS, LOCK = "ckpt", "ckpt.json", "acts", "index.json", "inputs.npy", ".lock"
RUN_FILES = (CONFIG, METRICS, SUMMARY, PARAMS, BOOK, CKPT, CKPT_META, ACTS, LOCK)  # a run's own names, at its top
METRIC_KEYS = ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc", "grad_norm")  # per step, in metrics.npz


def rows_before(step, every: int):
    """Rows of a quantity recorded every `every` steps (steps 0, every, 2 every, ...) that hold a step < `step`:
    ceil(step / every). Also the row of the first recorded step >= `step`; `step` may be a traced integer."""
    return -(-step // every)


# ---------------------------------------------------------------- writing


def run_owning(path: Path) -> Path | None:
    """The run directory of which `path` is one of the files (config.json, metrics.npz, anything under acts/ or
    ckpt/, ...; the run directory itself too), followed through symlinks; None if it is no run's."""
    for p in {Path(path).absolute(), Path(path).resolve()}:
        for d in (p, *p.parents):
            if (d / CONFIG).is_file() and (d == p or p.relative_to(d).parts[0] in RUN_FILES):
                return d
    return None


def check_new(run_dir: Path) -> None:
    """Refuse to write into a directory that already holds anything (no earlier run is overwritten). A quick
    check before the config is built; `Claim` checks again under the lock."""
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


def unstarted(run_dir: Path) -> bool:
    """A directory that a `train` left before its first checkpoint was recorded (killed during start-up):
    config.json and at most what start-up writes before ckpt.json (acts/, checkpoint 0 or a temp folder, a
    metrics.npz of no step), and nothing that says a step was trained. `--resume` starts it over."""
    run_dir = Path(run_dir)
    names = {p.name for p in run_dir.iterdir()} if run_dir.is_dir() else set()
    if CONFIG not in names or not names <= {CONFIG, LOCK, ACTS, CKPT, METRICS}:
        return False
    ckpt = run_dir / CKPT
    if ckpt.is_dir() and any(p.name != "0" and ".orbax-checkpoint-tmp" not in p.name for p in ckpt.iterdir()):
        return False
    if METRICS in names:
        try:
            with np.load(run_dir / METRICS) as z:
                return len(z["step"]) == 0
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            return True  # a metrics.npz cut short by the kill: step 0's, the only one written before ckpt.json
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class Claim:
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


def _written(path: Path, write, *args, **kwargs) -> None:
    """`write(path, ...)`; a failed write is the RunError that names the file and the free space (files.io_fault)."""
    try:
        write(path, *args, **kwargs)
    except OSError as e:
        raise io_fault(path, e) from None


def write_config(run_dir: Path, cfg: RunConfig) -> None:
    _written(Path(run_dir) / CONFIG, write_json_atomic, cfg.to_dict())


def write_metrics(run_dir: Path, hist: dict, n: int, task_names, grad_names) -> None:
    """The first `n` steps of `hist` (METRIC_KEYS -> arrays with time first)."""
    _written(Path(run_dir) / METRICS, save_npz_atomic, step=np.arange(n), task_names=np.array(task_names),
             grad_names=np.array(grad_names), **{k: hist[k][:n] for k in METRIC_KEYS})


def write_params(run_dir: Path, params) -> None:
    _written(Path(run_dir) / PARAMS, save_npz_atomic, **flatten_params(params))


def write_summary(run_dir: Path, summary: dict) -> None:
    _written(Path(run_dir) / SUMMARY, write_json_atomic, summary)


def remove_summary(run_dir: Path) -> None:
    """A resumed run is unfinished again until it writes a new summary."""
    (Path(run_dir) / SUMMARY).unlink(missing_ok=True)


def write_ckpt_meta(run_dir: Path, checksums: dict[str, str], cfg: RunConfig | None) -> None:
    """ckpt.json: the checksum of each kept checkpoint and a copy of the config (the stored copy stays when cfg is
    None), which tells an edited config.json apart (`check_unedited`)."""
    meta = read_ckpt_meta(run_dir, strict=False)
    if cfg is not None:
        meta["config"] = json.loads(cfg.to_json())
    _written(Path(run_dir) / CKPT_META, write_json_atomic, meta | {"checksums": checksums})


def write_book_report(run_dir: Path, report: dict) -> None:
    """book.json (indent 2, in the report's order): the JSON-ready report of bookeval.Evaluator."""
    _written(Path(run_dir) / BOOK, Path.write_text, json.dumps(report, indent=2))


def write_acts_index(run_dir: Path, index: dict) -> None:
    _written(Path(run_dir) / ACTS / ACTS_INDEX, write_json_atomic, index)


def flatten_params(params) -> dict[str, np.ndarray]:
    """Nested dict of arrays (or any pytree) -> {'/'-joined key path: array}, the layout of params.npz."""
    import jax  # only writers flatten device arrays; readers stay free of jax

    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v) for path, v in flat}


def unflatten(flat: dict[str, np.ndarray]) -> dict:
    tree: dict = {}
    for key, v in flat.items():
        node = tree
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return tree


# ---------------------------------------------------------------- reading


def _read(path: Path, fn):
    try:
        return fn(path)
    except (OSError, ValueError, TypeError, EOFError, KeyError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e)[:200]})") from None


def _npz(path: Path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def read_config(run_dir: Path) -> RunConfig:
    """config.json of a run directory, or a ConfigError that says what is wrong with it."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.json)")
    try:
        return RunConfig.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{path} is damaged or was edited into something invalid ({e})") from None


def read_ckpt_meta(run_dir: Path, strict: bool = True) -> dict:
    """ckpt.json ({} when there is none). Damaged: a ConfigError, or {} when not `strict`."""
    path = Path(run_dir) / CKPT_META
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        if strict:
            raise ConfigError(f"{path} is damaged ({e})") from None
        return {}


def check_unedited(run_dir: Path, cfg: RunConfig, ckpt_meta: dict) -> None:
    """Refuse a config.json that differs from the copy saved with the checkpoints (ckpt.json) since the run began."""
    stored = ckpt_meta.get("config")
    if stored is None and ckpt_meta.get("checksums"):  # every save writes both: a copy removed hides an edit
        raise ConfigError(f"{Path(run_dir) / CKPT_META} is damaged or was edited: it has no copy of the config, so an "
                          f"edited {Path(run_dir) / CONFIG} cannot be told apart; restore it or start a new run")
    # compared as configs, so a run written before a field existed reads back with that field's default
    if stored is not None and RunConfig.from_dict(stored) != cfg:
        raise ConfigError(f"{Path(run_dir) / CONFIG} was edited after the run started (it differs from the copy in "
                          f"{Path(run_dir) / CKPT_META}); restore it or start a new run")


def read_metrics(run_dir: Path, complete: bool = False) -> dict:
    """metrics.npz ({} when there is none); `complete`: every METRIC_KEYS array present, one row per step."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return {}
    out = _read(path, _npz)
    if complete:
        missing = [k for k in ("step", *METRIC_KEYS) if k not in out]
        if missing or any(len(out[k]) != len(out["step"]) for k in METRIC_KEYS):
            raise ConfigError(f"{path} is damaged (missing or ragged arrays: {missing or 'lengths differ'})")
    return out


def read_summary(run_dir: Path) -> dict:
    """summary.json ({} while the run has not finished)."""
    path = Path(run_dir) / SUMMARY
    return _read(path, lambda f: json.loads(f.read_text())) if path.is_file() else {}


def read_params(run_dir: Path) -> dict:
    """The final parameters as a nested dict of arrays ({} while the run has not finished)."""
    path = Path(run_dir) / PARAMS
    return _read(path, lambda f: unflatten(_npz(f))) if path.is_file() else {}


def has_checkpoints(run_dir: Path) -> bool:
    return (Path(run_dir) / CKPT_META).is_file() and (Path(run_dir) / CKPT).is_dir()


def read_acts_index(run_dir: Path) -> dict:
    """acts/index.json, or a ConfigError when it is missing or damaged."""
    path = Path(run_dir) / ACTS / ACTS_INDEX
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is damaged or missing ({e})") from None


@dataclass
class Run:
    path: Path
    config: RunConfig
    metrics: dict  # name -> np.ndarray (the layout above)
    summary: dict
    params: dict  # nested dict of np.ndarray, final parameters (same tree as the model's params)
    acts: dict = field(default_factory=dict)  # name -> np.memmap, time first (acts/index.json says the axes)
    acts_index: dict = field(default_factory=dict)
    acts_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # step of each activation row

    def steps_of(self, name: str) -> np.ndarray:
        """Step of each row of `acts[name]` (parameters may be recorded at another rate than activations)."""
        meta = self.acts_index["arrays"][name]
        return np.arange(len(self.acts[name])) * meta.get("every", 1)


def acts_file(run_dir: Path, name) -> str:
    """An array's file as index.json names it: a plain name inside acts/ (never a path to another run's files)."""
    if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..") or not name.endswith(".npy"):
        raise ConfigError(f"{Path(run_dir) / ACTS / ACTS_INDEX} is damaged or was edited: it names the file "
                          f"{str(name)[:80]!r}, not a .npy file inside acts/")
    return name


def check_rows(path: Path, a: np.ndarray, sums: list) -> None:
    """The rows of `a` (time first) against index.json's crc32 of each commit's rows; the commits past len(a) are
    not checked (an interrupted run's rows after its last commit). A mismatch is a ConfigError naming the file."""
    start = 0
    for stop, crc in sums:
        if stop > len(a):
            break
        got, step = 0, max(1, (64 << 20) // max(a[0].nbytes, 1))
        for i in range(start, stop, step):
            got = zlib.crc32(np.ascontiguousarray(a[i:min(i + step, stop)]), got)
        if got != crc:
            raise ConfigError(f"{path} is damaged: rows {start}..{stop - 1} do not match their checksum in "
                              f"{path.parent / ACTS_INDEX}")
        start = stop


def load_run(run_dir: str | Path, verify: bool = True) -> Run:
    """Load a finished (or resumable) run; activations are opened with mmap_mode='r'.

    An interrupted run's activations are cut (lazily) to the rows already written. Damaged files (a
    truncated metrics.npz or .npy, an edited config.json) raise a ConfigError that names the file. `verify`:
    read every activation row once to check it against index.json's crc32 (about 2 GB/s).
    """
    path = Path(run_dir)
    config = read_config(path)
    metrics, summary, params = read_metrics(path), read_summary(path), read_params(path)
    acts, index, steps = {}, {}, np.zeros(0, np.int64)
    if (path / ACTS / ACTS_INDEX).is_file():
        index = read_acts_index(path)
        done, finished = index.get("complete_step"), index.get("finished", True)
        for name, meta in index.get("arrays", {}).items():
            f = path / ACTS / acts_file(path, meta.get("file"))
            a = _read(f, lambda f: np.load(f, mmap_mode="r"))
            if list(a.shape) != list(meta["shape"]) or str(a.dtype) != meta["dtype"]:
                raise ConfigError(f"{f} is damaged: shape {a.shape} {a.dtype}, index.json says {meta['shape']} "
                                  f"{meta['dtype']}")
            if done is not None and not finished:  # rows for steps < complete_step are on disk
                a = a[: rows_before(done, meta.get("every", 1))]
            if verify:
                check_rows(f, a, meta.get("crc32", []))
            acts[name] = a
        steps = np.asarray(index.get("steps", []), np.int64)
        if done is not None and not finished:
            steps = steps[steps < done]
    check_unedited(path, config, read_ckpt_meta(path, strict=False))
    return Run(path, config, metrics, summary, params, acts, index, steps)
