"""The run directory's format: every file's name, its writer and its reader, with numpy alone (no jax: a reader
of a finished run needs none). The loaded run built from these files: run.py; the lock and claim on a directory:
claim.py; the live log that writes metrics.jsonl and tb/: metricslog.py.

    run_dir/config.json    the RunConfig (everything needed to rerun)
    run_dir/metrics.npz    step (T,), one array per metric of metrics.py's table: loss (T,), train_loss/train_acc/
                           valid_loss/valid_acc (T, K), grad_norm (T, P), ...; task_names (K,), grad_names (P,): the
                           parameter arrays of every per-parameter metric; row t describes the parameters before
                           update t
    run_dir/metrics.jsonl  the logged metrics as the run goes: one JSON line per evaluated step (step %
                           train.eval_every == 0) with "step", then "loss" and "train_loss/TASK", "train_acc/TASK",
                           "valid_loss/TASK", "valid_acc/TASK" per task (and `NAME/PARAM` for a logged per-parameter
                           metric), float32 values written with 9 digits, so they read back exactly; null for NaN or
                           inf; appended and flushed after every chunk; `tail -f` it, or read it mid-run with
                           `read_metrics_log` or `pandas.read_json(path, lines=True)`. A resumed run rewrites it from
                           metrics.npz up to the resumed step first (no step twice, none missing)
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
    run_dir/.lock          flock held by the one process writing the directory (taken by `RunClaim` before a new
                           run's start-up; a start-up that fails or is interrupted removes the directory again)
    run_dir/book.json      a sequence run's evaluation the book's way (`python -m miiii book`, bookeval.py)

The runner writes a directory chunk by chunk, a sweep one per member (config.json at its start, metrics.jsonl and
tb/ chunk by chunk, metrics.npz, summary.json and params.npz at its end); `run.load_run` reads either back. A
damaged or edited file is a ConfigError that names it.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from miiii.config import ConfigError, RunConfig
from miiii.files import io_fault, save_npz_atomic, write_json_atomic

CONFIG, METRICS, SUMMARY, PARAMS, BOOK = "config.json", "metrics.npz", "summary.json", "params.npz", "book.json"
METRICS_LOG, TB = "metrics.jsonl", "tb"
CKPT, CKPT_META, ACTS, ACTS_INDEX, ACTS_INPUTS, LOCK = "ckpt", "ckpt.json", "acts", "index.json", "inputs.npy", ".lock"
RUN_FILES = (CONFIG, METRICS, SUMMARY, PARAMS, BOOK, CKPT, CKPT_META, ACTS, LOCK)  # a run's own names, at its top
NAMES = ("step", "task_names", "grad_names")  # the arrays of metrics.npz that are not metrics


# ---------------------------------------------------------------- writing


def run_owning(path: Path) -> Path | None:
    """The run directory of which `path` is one of the files (config.json, metrics.npz, anything under acts/ or
    ckpt/, ...; the run directory itself too), followed through symlinks; None if it is no run's."""
    for p in {Path(path).absolute(), Path(path).resolve()}:
        for d in (p, *p.parents):
            if (d / CONFIG).is_file() and (d == p or p.relative_to(d).parts[0] in RUN_FILES):
                return d
    return None


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


def _written(path: Path, write, *args, **kwargs) -> None:
    """`write(path, ...)`; a failed write is the RunError that names the file and the free space (files.io_fault)."""
    try:
        write(path, *args, **kwargs)
    except OSError as e:
        raise io_fault(path, e) from None


def write_config(run_dir: Path, cfg: RunConfig) -> None:
    _written(Path(run_dir) / CONFIG, write_json_atomic, cfg.to_dict())


def write_metrics(run_dir: Path, hist: dict, n: int, task_names, grad_names) -> None:
    """The first `n` steps of `hist` (metric name -> array with time first)."""
    _written(Path(run_dir) / METRICS, save_npz_atomic, step=np.arange(n), task_names=np.array(task_names),
             grad_names=np.array(grad_names), **{k: v[:n] for k, v in hist.items()})


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


def flatten_params(params, prefix: str = "") -> dict[str, np.ndarray]:
    """Nested dict of arrays (numpy or jax) -> {'/'-joined key path: numpy array}, the layout of params.npz, in
    sorted key order at every level (the order of `jax.tree.leaves` on a dict)."""
    out = {}
    for k in sorted(params):
        v, key = params[k], f"{prefix}{k}"
        out |= flatten_params(v, key + "/") if isinstance(v, Mapping) else {key: np.asarray(v)}
    return out


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


def read_npy(path: Path) -> np.ndarray:
    """An activation file, memory-mapped read-only; a ConfigError that names it when it is missing or damaged."""
    return _read(path, lambda f: np.load(f, mmap_mode="r"))


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


def read_metrics(run_dir: Path, complete: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict:
    """metrics.npz ({} when there is none); `complete`: the metric names that must be present, each with one row
    per step; `optional`: the same for those that are present (a metric added to the table after the run began is
    not)."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return {}
    out = _read(path, _npz)
    if complete or optional:
        complete = (*complete, *(k for k in optional if k in out))
        missing = [k for k in ("step", *complete) if k not in out]
        if missing or any(len(out[k]) != len(out["step"]) for k in complete):
            raise ConfigError(f"{path} is damaged (missing or ragged arrays: {missing or 'lengths differ'})")
    return out


def read_metrics_log(run_dir: Path) -> dict:
    """metrics.jsonl in metrics.npz's layout, as far as the run has written it: step (N,), then each logged metric:
    loss (N,), train_loss/train_acc/valid_loss/valid_acc (N, K), ...; task_names (K,) (the columns of
    valid_acc); {} before its first complete line. A column `NAME/SUB` belongs to metric NAME (the first '/').

    Safe while the run writes it: a last line still being written is left out.
    """
    path = Path(run_dir) / METRICS_LOG
    if not path.is_file():
        return {}
    rows = _read(path, lambda f: [json.loads(line) for line in f.read_text().split("\n")[:-1]])
    if not rows:
        return {}
    cols = [c for c in rows[0] if c != "step"]
    try:
        values = np.array([[np.nan if r[c] is None else r[c] for c in cols] for r in rows], np.float32)
        out = {"step": np.array([r["step"] for r in rows], np.int64)}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {e})") from None
    groups: dict[str, list[int]] = {}
    subs: dict[str, list[str]] = {}
    for i, c in enumerate(cols):
        name, slash, sub = c.partition("/")
        groups.setdefault(name, []).append(i)
        if slash:
            subs.setdefault(name, []).append(sub)
    for name, idx in groups.items():
        out[name] = values[:, idx] if name in subs else values[:, idx[0]]
    return out | {"task_names": np.array(subs.get("valid_acc", []))}


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
