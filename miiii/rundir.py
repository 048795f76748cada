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
                           (record.py plans the rows, recorder.py streams them; row j of an array is step j * every; the
                           crc32 of each commit's rows, checked by load_run and --resume)
    run_dir/ckpt/, ckpt.json  orbax checkpoints of the train state; their checksums and a copy of the config
                           that tells an edited config.json apart (checkpoint.py)
    run_dir/.lock          flock held by the one process writing the directory (taken by `RunClaim` before a new
                           run's start-up; a start-up that fails or is interrupted removes the directory again)
    run_dir/book.json      a sequence run's evaluation the book's way (`python -m miiii book`, bookeval.py)
    run_dir/checksums.json the manifest of a finished run, written last (after summary.json) and atomically: the
                           sha256 of every file the run wrote but its activations and checkpoints (config.json,
                           metrics.npz, metrics.jsonl, params.npz, summary.json, ckpt.json, acts/index.json,
                           acts/inputs.npy, tb/*), and a sha256 of its own content. acts/*.npy are covered by
                           index.json's crc32 (index.json carries a sha256 of its own content too, and the crc32 of
                           inputs.npy), the checkpoints by ckpt.json. Every reader checks it: a file that differs
                           from its entry, an entry whose file is gone and a run file with no entry are errors; a
                           finished run with no manifest at all was written before it (a legacy run: it loads, with a
                           warning). book.json, written later by `python -m miiii book`, and .lock are not run data

The runner writes a directory chunk by chunk, a sweep one per member (config.json at its start, metrics.jsonl and
tb/ chunk by chunk, metrics.npz, params.npz, summary.json and checksums.json at its end); `run.load_run` reads
either back. A damaged or edited file is a ConfigError that names it; so is a file that is not a regular file (a
FIFO would block the reader), a symlink that leads out of the run directory, JSON nested too deep to parse, and an
index.json whose values do not have the form the writer gives them.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from miiii.config import ConfigError, RunConfig
from miiii.errors import shown
from miiii.files import io_fault, save_npz_atomic, write_json_atomic
from miiii.validate import validate

CONFIG, METRICS, SUMMARY, PARAMS, BOOK = "config.json", "metrics.npz", "summary.json", "params.npz", "book.json"
LLC = "llc.json"  # the local learning coefficient at the kept steps (`python -m miiii llc`, llc.py): not run data
METRICS_LOG, TB, MANIFEST = "metrics.jsonl", "tb", "checksums.json"
MEMBER = "member.json"  # a sweep member's place in its sweep: index, seed, grid values (sweepmembers.py)
CKPT, CKPT_META, ACTS, ACTS_INDEX, ACTS_INPUTS, LOCK = "ckpt", "ckpt.json", "acts", "index.json", "inputs.npy", ".lock"
RUN_FILES = (CONFIG, METRICS, SUMMARY, PARAMS, BOOK, LLC, CKPT, CKPT_META, ACTS, LOCK, METRICS_LOG, TB,
             MANIFEST, MEMBER)  # a run's own names, at its top
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


def inside_run(path: Path) -> Path | None:
    """The run directory that `path` is, or lies anywhere inside (not only its own files: any folder below it), by
    its absolute path and through symlinks; None if it is in no run. A run directory is one with config.json and
    another of a run's files beside it."""
    for p in {Path(path).absolute(), Path(path).resolve()}:
        for d in (p, *p.parents):
            if (d / CONFIG).is_file() and any((d / n).exists() for n in RUN_FILES if n != CONFIG):
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


def write_checked(path: Path, write, *args, **kwargs) -> None:
    """`write(path, ...)`; a failed write is the RunError that names the file and the free space (files.io_fault)."""
    try:
        write(path, *args, **kwargs)
    except OSError as e:
        raise io_fault(path, e) from None


def write_config(run_dir: Path, cfg: RunConfig) -> None:
    write_checked(Path(run_dir) / CONFIG, write_json_atomic, cfg.to_dict())


def write_metrics(run_dir: Path, hist: dict, n: int, task_names, grad_names) -> None:
    """The first `n` steps of `hist` (metric name -> array with time first)."""
    write_checked(Path(run_dir) / METRICS, save_npz_atomic, step=np.arange(n), task_names=np.array(task_names),
             grad_names=np.array(grad_names), **{k: v[:n] for k, v in hist.items()})


def write_params(run_dir: Path, params) -> None:
    write_checked(Path(run_dir) / PARAMS, save_npz_atomic, **flatten_params(params))


def write_summary(run_dir: Path, summary: dict) -> None:
    """summary.json, the last file of a finished run but its manifest (integrity.finish_files writes both)."""
    write_checked(Path(run_dir) / SUMMARY, write_json_atomic, summary)


def remove_summary(run_dir: Path) -> None:
    """A resumed run is unfinished again until it writes a new summary (and manifest): the manifest goes first, so a
    process killed in between leaves a finished run without one (a legacy run), never a manifest without its run."""
    (Path(run_dir) / MANIFEST).unlink(missing_ok=True)
    (Path(run_dir) / SUMMARY).unlink(missing_ok=True)


def canonical_sum(obj: dict) -> str:
    """sha256 of a JSON object without its "checksum" key, keys sorted: the checksum a file carries of itself."""
    body = {k: v for k, v in obj.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def write_ckpt_meta(run_dir: Path, checksums: dict[str, str], cfg: RunConfig | None,
                    metrics: dict[str, dict] | None = None) -> None:
    """ckpt.json: the checksum of each kept checkpoint and a copy of the config (the stored copy stays when cfg is
    None), which tells an edited config.json apart (`check_unedited`); `metrics`: per kept step, the checksum of
    metrics.npz's rows before it (`metrics_rows_sha256`), which a resume checks the rows it keeps against (metrics.npz
    of an unfinished run has no entry in checksums.json: it is rewritten at every checkpoint)."""
    meta = read_ckpt_meta(run_dir, strict=False)
    if cfg is not None:
        meta["config"] = json.loads(cfg.to_json())
    extra = {"metrics": metrics} if metrics is not None else {}
    # "manifest": this run writes checksums.json when it finishes; a finished run without one is then damaged
    write_checked(Path(run_dir) / CKPT_META, write_json_atomic,
                  meta | {"checksums": checksums, "manifest": MANIFEST} | extra)


def write_book_report(run_dir: Path, report: dict) -> None:
    """book.json (indent 2, in the report's order): the JSON-ready report of bookeval.Evaluator."""
    write_checked(Path(run_dir) / BOOK, Path.write_text, json.dumps(report, indent=2))


def write_llc_report(run_dir: Path, report: dict) -> None:
    """llc.json: the LLC series of `python -m miiii llc` (llc.llc_over_run)."""
    write_checked(Path(run_dir) / LLC, Path.write_text, json.dumps(report, indent=1))


def read_llc_report(run_dir: Path) -> dict | None:
    """llc.json as `write_llc_report` wrote it, or None when the run has none (`python -m miiii llc` not run)."""
    path = Path(run_dir) / LLC
    return json.loads(path.read_text()) if path.is_file() else None


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

_FAULTS = (OSError, ValueError, TypeError, EOFError, KeyError, RecursionError, zipfile.BadZipFile)


def regular_file(path: Path, root: Path | None = None) -> Path:
    """`path` when it is a regular file (after symlinks), else a ConfigError that names it: checked before anything
    opens it, since opening a FIFO blocks until a writer comes. `root`: the run directory, which a symlink must not
    lead out of (a run's files are its own)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing") from None
    except OSError as e:
        raise ConfigError(f"{path} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path} is damaged: it is not a regular file (a directory, FIFO, socket or device)")
    if root is not None:
        real, top = Path(os.path.realpath(path)), Path(os.path.realpath(root))
        if not real.is_relative_to(top):
            raise ConfigError(f"{path} is damaged or was edited: it is a symlink that leads out of the run directory "
                              f"(to {shown(real, 200)})")
    return path


def read_checked(path: Path, fn, root: Path | None = None):
    """fn(path) on a regular file; any error reading it is a ConfigError that names it."""
    regular_file(path, path.parent if root is None else root)
    try:
        return fn(path)
    except RecursionError:
        raise ConfigError(f"{path} is damaged (JSON nested too deep to read)") from None
    except _FAULTS as e:
        raise ConfigError(f"{path} is damaged ({type(e).__name__}: {str(e)[:200]})") from None


def read_json(path: Path, root: Path | None = None, kind: type = dict):
    """A JSON file whose top level is `kind` (an object), or a ConfigError that names it."""
    out = read_checked(path, lambda f: json.loads(f.read_text()), root)
    if not isinstance(out, kind):
        raise ConfigError(f"{path} is damaged: its top level is not a JSON {kind.__name__}")
    return out


def read_npy(path: Path, root: Path | None = None) -> np.ndarray:
    """An activation file, memory-mapped read-only; a ConfigError that names it when it is missing or damaged (or not
    a regular file inside `root`, default its folder's parent: the run directory of acts/NAME.npy)."""
    return read_checked(path, lambda f: np.load(f, mmap_mode="r"), Path(path).parent.parent if root is None else root)


def _npz(path: Path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def read_config(run_dir: Path) -> RunConfig:
    """config.json of a run directory, validated as a new run's would be (but for this machine's memory, which a run
    written elsewhere may not fit), or a ConfigError that says what is wrong with it."""
    path = Path(run_dir) / CONFIG
    if not (path.exists() or path.is_symlink()):
        raise ConfigError(f"{run_dir} is not a run directory (no config.json)")
    try:
        return validate(RunConfig.from_dict(read_json(path)), host=False)
    except ConfigError as e:
        if str(e).startswith(str(path)):
            raise
        raise ConfigError(f"{path} is damaged or was edited into something invalid ({e})") from None
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise ConfigError(f"{path} is damaged or was edited into something invalid ({e})") from None


def read_ckpt_meta(run_dir: Path, strict: bool = True) -> dict:
    """ckpt.json ({} when there is none). Damaged: a ConfigError, or {} when not `strict`."""
    path = Path(run_dir) / CKPT_META
    if not (path.exists() or path.is_symlink()):
        return {}
    try:
        meta = read_json(path, Path(run_dir))
        if not isinstance(meta.get("checksums", {}), dict) or not isinstance(meta.get("config", {}), dict):
            raise ConfigError(f"{path} is damaged: its checksums or config is not a JSON object")
        return meta
    except ConfigError:
        if strict:
            raise
        return {}


def check_unedited(run_dir: Path, cfg: RunConfig, ckpt_meta: dict) -> None:
    """Refuse a config.json that differs from the copy saved with the checkpoints (ckpt.json) since the run began."""
    stored = ckpt_meta.get("config")
    if stored is None and ckpt_meta.get("checksums"):  # every save writes both: a copy removed hides an edit
        raise ConfigError(f"{Path(run_dir) / CKPT_META} is damaged or was edited: it has no copy of the config, so an "
                          f"edited {Path(run_dir) / CONFIG} cannot be told apart; restore it or start a new run")
    # compared as configs, so a run written before a field existed reads back with that field's default
    try:
        same = stored is None or RunConfig.from_dict(stored) == cfg
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ConfigError(f"{Path(run_dir) / CKPT_META} is damaged: its copy of the config does not read ({e})"
                          ) from None
    if not same:
        raise ConfigError(f"{Path(run_dir) / CONFIG} was edited after the run started (it differs from the copy in "
                          f"{Path(run_dir) / CKPT_META}); restore it or start a new run")


def check_layout(run_dir: Path) -> None:
    """The run's folders are folders: acts/, ckpt/ and tb/ where they exist (a file in their place stops a resume
    half-way: refused before anything is changed)."""
    for name in (ACTS, CKPT, TB):
        p = Path(run_dir) / name
        if (p.exists() or p.is_symlink()) and not p.is_dir():
            raise ConfigError(f"{p} is damaged: it should be a directory of the run, and is not; move it away "
                              f"{'(TensorBoard writes it again) ' if name == TB else ''}and try again")


def read_metrics(run_dir: Path, complete: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict:
    """metrics.npz ({} when there is none); `complete`: the metric names that must be present, each with one row
    per step; `optional`: the same for those that are present (a metric added to the table after the run began is
    not)."""
    path = Path(run_dir) / METRICS
    if not (path.exists() or path.is_symlink()):
        return {}
    out = read_checked(path, _npz)
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
    if not (path.exists() or path.is_symlink()):
        return {}
    rows = read_checked(path, lambda f: [json.loads(line) for line in f.read_text().split("\n")[:-1]])
    if not rows:
        return {}
    try:
        cols = [c for c in rows[0] if c != "step"]
        values = np.array([[np.nan if r[c] is None else r[c] for c in cols] for r in rows], np.float32)
        out = {"step": np.array([r["step"] for r in rows], np.int64)}
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
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
    return read_json(path) if path.exists() or path.is_symlink() else {}


def read_params(run_dir: Path) -> dict:
    """The final parameters as a nested dict of arrays ({} while the run has not finished)."""
    path = Path(run_dir) / PARAMS
    return read_checked(path, lambda f: unflatten(_npz(f))) if path.exists() or path.is_symlink() else {}


def read_member(run_dir: Path) -> dict:
    """member.json of a sweep member ({"index", "seed", "values": {grid key: value}}); {} for a run of its own. What
    it says is held to the member's config.json (checked against its own checksums): an edited member.json would
    title every figure of the member with a seed or value it did not train with."""
    path = Path(run_dir) / MEMBER
    if not (path.exists() or path.is_symlink()):
        return {}
    info = read_json(path)
    cfg = read_config(run_dir).to_dict()
    said = {"train.seed": info.get("seed")} | dict(info.get("values", {}))
    for key, value in said.items():
        sec, _, name = str(key).partition(".")
        real = cfg.get(sec, {}).get(name, "missing")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or real != value:
            raise ConfigError(f"{path} is damaged: it says {key} = {value!r}, the member's config.json "
                              f"{key} = {real!r}")
    return info


def has_checkpoints(run_dir: Path) -> bool:
    return (Path(run_dir) / CKPT_META).is_file() and (Path(run_dir) / CKPT).is_dir()
