"""The run directory: its format, written and read by this module alone.

    run_dir/config.json    the RunConfig (everything needed to rerun)
    run_dir/metrics.npz    step (T,), loss (T,), train_loss/train_acc/valid_loss/valid_acc (T, K), grad_norm (T, P),
                           task_names (K,), grad_names (P,); row t describes the parameters before update t
    run_dir/metrics.jsonl  the same as the run goes: one JSON line per evaluated step (step % train.eval_every == 0)
                           with "step", "loss" and "train_loss/TASK", "train_acc/TASK", "valid_loss/TASK",
                           "valid_acc/TASK" per task (float32 values written with 9 digits, so they read back
                           exactly; null for NaN or inf), appended and flushed after every chunk; `tail -f` it, or
                           read it mid-run with `read_metrics_log` or `pandas.read_json(path, lines=True)`. A resumed
                           run rewrites it from metrics.npz up to the resumed step first (no step twice, none missing)
    run_dir/tb/            TensorBoard scalars under the same names (about TB_POINTS steps per tag: the evaluated
                           steps at a stride, and the last), written when tensorboardX imports (the optional extra
                           `tensorboard`) unless switched off (`--no-tensorboard`); resuming purges events from the
                           resumed step on
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

The runner writes a directory chunk by chunk, a sweep one per member (config.json at its start, metrics.jsonl and
tb/ chunk by chunk, metrics.npz, summary.json and params.npz at its end); `load_run` reads either back. A damaged
or edited file is a ConfigError that names it.
"""

from __future__ import annotations

import fcntl
import functools
import json
import math
import os
import shutil
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from miiii.config import ConfigError, RunConfig
from miiii.files import RunError, io_fault, save_npz_atomic, then, write_json_atomic

CONFIG, METRICS, SUMMARY, PARAMS, BOOK = "config.json", "metrics.npz", "summary.json", "params.npz", "book.json"
METRICS_LOG, TB = "metrics.jsonl", "tb"
CKPT, CKPT_META, ACTS, ACTS_INDEX, ACTS_INPUTS, LOCK = "ckpt", "ckpt.json", "acts", "index.json", "inputs.npy", ".lock"
RUN_FILES = (CONFIG, METRICS, SUMMARY, PARAMS, BOOK, CKPT, CKPT_META, ACTS, LOCK)  # a run's own names, at its top
METRIC_KEYS = ("loss", "train_loss", "train_acc", "valid_loss", "valid_acc", "grad_norm")  # per step, in metrics.npz
LOG_KEYS = METRIC_KEYS[:5]  # in metrics.jsonl and tb/: each but the loss per task, as "valid_acc/q=2"
TB_POINTS = 1000  # TensorBoard shows 1,000 points per scalar tag by default; tb/ gets about that many steps


def rows_before(step, every):
    """Rows of a quantity recorded every `every` steps (steps 0, every, 2 every, ...) that hold a step < `step`:
    ceil(step / every). Also the row of the first recorded step >= `step`; `step` may be a traced integer.
    `every` may also be the tuple of the recorded steps themselves (a log-spaced schedule, `log_steps`)."""
    if isinstance(every, (int, np.integer)):
        return -(-step // every)
    xp = np if isinstance(step, (int, np.integer)) else jnp
    return xp.searchsorted(xp.asarray(every), step)


def is_due(step, every):
    """Whether `step` (an int or traced) is recorded under `every` (an int, or the tuple of recorded steps)."""
    if isinstance(every, (int, np.integer)):
        return step % every == 0
    xp = np if isinstance(step, (int, np.integer)) else jnp
    s = xp.asarray(every)
    return s[xp.minimum(xp.searchsorted(s, step), len(every) - 1)] == step


def log_steps(steps: int, k: int) -> tuple[int, ...]:
    """Step 0 and about `k` steps in 1 .. steps spread log-uniformly (rounded, distinct: every step early on,
    sparser later); () when k = 0. The schedule of `record.log` and of `ckpt.keep_log`."""
    if k <= 0:
        return ()
    return (0, *sorted({int(s) for s in np.round(np.geomspace(1, steps, k))}))


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


def log_columns(task_names) -> list[str]:
    """metrics.jsonl's keys after "step", which are also the TensorBoard tags: loss, then `{metric}/{task}`."""
    return ["loss", *(f"{key}/{name}" for key in LOG_KEYS[1:] for name in task_names)]


class MetricsLog:
    """metrics.jsonl and tb/ of one run directory, written from the run's per-step arrays as chunks end.

    `hist`: METRIC_KEYS -> arrays with time first, filled by the caller; opening the log rewrites metrics.jsonl
    (atomically) from the evaluated steps below `upto`, the steps the run has already taken (0: an empty file),
    then `append(start, stop)` adds steps [start, stop) and flushes. `tensorboard`: also write tb/ when
    tensorboardX imports.
    """

    def __init__(self, run_dir: Path, hist: dict, task_names, upto: int, eval_every: int, steps: int,
                 tensorboard: bool = True):
        self.path = Path(run_dir) / METRICS_LOG
        self.hist, self.eval_every = hist, eval_every
        self.columns = log_columns(task_names)
        self._fmt = '{"step": %d, ' + ", ".join(f"{json.dumps(c)}: %.9g" for c in self.columns) + "}\n"
        # float32 has at most 9 significant digits: %.9g reads back (through float64) to the same float32
        self.tb_every = eval_every * -(-steps // (eval_every * TB_POINTS))
        self.tb_last = (steps - 1) // eval_every * eval_every  # the run's last evaluated step
        _written(self.path, _write_text_atomic, self._lines(0, upto)[0])
        try:
            self.f = open(self.path, "a")  # noqa: SIM115 - appended to for the run's lifetime
        except OSError as e:
            raise io_fault(self.path, e) from None
        self.tb = _tensorboard(Path(run_dir) / TB, upto) if tensorboard else None

    def _lines(self, start: int, stop: int) -> tuple[str, np.ndarray, np.ndarray]:
        """The lines of the evaluated steps in [start, stop), those steps and their values (float64, one column
        per `self.columns`)."""
        steps = np.arange(start + -start % self.eval_every, stop, self.eval_every)
        h = self.hist
        values = np.concatenate([h["loss"][steps, None], *(h[k][steps] for k in LOG_KEYS[1:])], axis=1)
        values = values.astype(np.float64)
        out = []
        for t, row, finite in zip(steps.tolist(), values.tolist(), np.isfinite(values).all(1).tolist(), strict=True):
            if finite:
                out.append(self._fmt % (t, *row))
            else:  # a diverged step: JSON has no NaN or inf, so null (read back as NaN)
                cells = {c: v if math.isfinite(v) else None for c, v in zip(self.columns, row, strict=True)}
                out.append(json.dumps({"step": t} | cells) + "\n")
        return "".join(out), steps, values

    def append(self, start: int, stop: int) -> None:
        """Steps [start, stop) of `hist`: to metrics.jsonl (flushed, whole lines) and, at a stride, to tb/."""
        text, steps, values = self._lines(start, stop)
        try:
            self.f.write(text)
            self.f.flush()
        except OSError as e:
            raise io_fault(self.path, e) from None
        if self.tb is not None:
            writer, Summary = self.tb
            for t, row in zip(steps.tolist(), values.tolist(), strict=True):
                if t % self.tb_every == 0 or t == self.tb_last:  # one event per step with every tag: add_scalar
                    writer.file_writer.add_summary(Summary(value=[  # per tag costs ~100x as much
                        Summary.Value(tag=c, simple_value=v) for c, v in zip(self.columns, row, strict=True)
                        if math.isfinite(v)]), t)
            writer.flush()

    def close(self) -> None:
        self.f.close()
        if self.tb is not None:
            self.tb[0].close()


def _tensorboard(path: Path, purge_step: int):
    """(tensorboardX SummaryWriter on `path`, its Summary proto), or None when tensorboardX is not installed.
    TensorBoard hides the events of earlier writers from `purge_step` on (a resumed run's replayed steps)."""
    try:
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary
    except ImportError:
        return None
    return SummaryWriter(str(path), purge_step=purge_step or None), Summary


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


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


def read_metrics_log(run_dir: Path) -> dict:
    """metrics.jsonl in metrics.npz's layout, as far as the run has written it: step (N,), loss (N,),
    train_loss/train_acc/valid_loss/valid_acc (N, K), task_names (K,); {} before its first complete line.

    Safe while the run writes it: a last line still being written is left out.
    """
    path = Path(run_dir) / METRICS_LOG
    if not path.is_file():
        return {}
    rows = _read(path, lambda f: [json.loads(line) for line in f.read_text().split("\n")[:-1]])
    if not rows:
        return {}
    names = [c.partition("/")[2] for c in rows[0] if c.startswith(LOG_KEYS[1] + "/")]
    cols = log_columns(names)
    try:
        values = np.array([[np.nan if r[c] is None else r[c] for c in cols] for r in rows], np.float32)
        out = {"step": np.array([r["step"] for r in rows], np.int64), "loss": values[:, 0]}
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {e})") from None
    k = len(names)
    for i, key in enumerate(LOG_KEYS[1:]):
        out[key] = values[:, 1 + i * k: 1 + (i + 1) * k]
    return out | {"task_names": np.array(names)}


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
        if meta.get("steps") is not None:  # a log-spaced schedule (record.log)
            return np.asarray(meta["steps"], np.int64)[: len(self.acts[name])]
        return np.arange(len(self.acts[name])) * meta.get("every", 1)

    # ------------------------------------------------------------ the run as something to work with

    @functools.cached_property
    def task(self):
        """The run's task, rebuilt from its config (the same split and labels: they are functions of it)."""
        from miiii.tasks import make_task

        return make_task(self.config.task)

    @functools.cached_property
    def model(self):
        """The run's model as a `hooks.HookedModel`: `run.model.run_with_cache(params, tokens, names)` and
        `run.model.run_with_hooks(params, tokens, hooks)`, pure and jittable."""
        from miiii.hooks import HookedModel

        return HookedModel.of(self.config, self.task)

    def inputs(self, split: str = "valid") -> np.ndarray:
        """Tokens (N, n_ctx) of a split: train | valid | test, or grid (nanda/miiii: all p^2 inputs, row n = x0 +
        x1 p, the order of `analysis.to_grid` and `interventions.remove_grid_frequencies`)."""
        return self._split(split)[0]

    def labels(self, split: str = "valid") -> np.ndarray:
        """Targets (N, n_slots) of a split, the task's own (miiii-basis: the shuffled ones)."""
        return self._split(split)[1]

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        t = self.task
        parts = {"train": t.train, "valid": t.valid, "test": t.test}
        if split in parts and parts[split] is not None:
            return parts[split].x, parts[split].y
        if split == "grid" and not self.config.task.is_sequence:
            x = np.concatenate([s.x for s in parts.values() if s is not None])
            y = np.concatenate([s.y for s in parts.values() if s is not None])
            i0, i1 = self.config.task.digit_positions
            order = np.argsort(x[:, i0] + x[:, i1] * self.config.task.p)
            return x[order], y[order]
        have = [k for k, v in parts.items() if v is not None] + ([] if self.config.task.is_sequence else ["grid"])
        raise ConfigError(f"split '{split}': this run has {', '.join(have)}")

    @functools.cached_property
    def _jitted_cache(self):
        """`model.run_with_cache` jitted once per run, so each set of names traces once however often it is asked."""
        return jax.jit(self.model.run_with_cache, static_argnames="names")

    def cache(self, names: tuple[str, ...], split: str = "grid", params=None) -> dict[str, np.ndarray]:
        """The named activations of `params` (default: the final ones) on a whole split, jitted, as numpy: the
        forward pass the figures and the report share (`run.model.run_with_cache`)."""
        _, out = self._jitted_cache(self.params if params is None else params, self.inputs(split), tuple(names))
        return {k: np.asarray(v) for k, v in out.items()}

    @property
    def kept_steps(self) -> list[int]:
        """Steps whose train state is checkpointed (each verified against its checksum when restored)."""
        sums = read_ckpt_meta(self.path, strict=False).get("checksums", {})
        d = self.path / CKPT
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit() and p.name in sums) if d.is_dir() else []

    def params_at(self, step: int) -> dict:
        """The parameters after `step` updates, restored from that step's checkpoint and verified. A step not kept
        gives the nearest kept step before it, with a warning that names it (ckpt.keep_log keeps log-spaced steps;
        `kept_steps` lists them)."""
        from miiii.checkpoint import Checkpoints
        from miiii.train import make_trainer

        kept = self.kept_steps
        if not kept:
            raise ConfigError(f"{self.path} has no checkpoints to take parameters from")
        before = [s for s in kept if s <= step]
        use = before[-1] if before else kept[0]
        if use != step:
            warnings.warn(f"params_at({step}): step {step} was not kept; returning step {use}, the nearest kept step "
                          f"{'before' if before else 'after'} it (kept: {kept})", stacklevel=2)
        template = jax.eval_shape(make_trainer(self.config, self.task).init, self.config.train.seed)
        ckpts = Checkpoints(self.path, self.config.ckpt.keep, read_only=True)
        try:
            return jax.device_get(ckpts.restore_verified(use, template).params)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        finally:
            ckpts.close()


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
                every = tuple(meta["steps"]) if meta.get("steps") is not None else meta.get("every", 1)
                a = a[: rows_before(done, every)]
            if verify:
                check_rows(f, a, meta.get("crc32", []))
            acts[name] = a
        steps = np.asarray(index.get("steps", []), np.int64)
        if done is not None and not finished:
            steps = steps[steps < done]
    check_unedited(path, config, read_ckpt_meta(path, strict=False))
    return Run(path, config, metrics, summary, params, acts, index, steps)
