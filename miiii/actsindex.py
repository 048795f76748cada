"""acts/index.json, the recording's index: written with a checksum of itself, read back with its schema checked
(one ConfigError naming the file for any malformed value), and the rows and inputs it vouches for (the crc32 of
each commit's rows, inputs.npy's crc32). Its arrays are written by recorder.py and read by run.load_run.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from miiii.config import ConfigError
from miiii.errors import shown
from miiii.files import write_json_atomic
from miiii.rundir import ACTS, ACTS_INDEX, ACTS_INPUTS, canonical_sum, read_checked, read_json, write_checked


def write_acts_index(run_dir: Path, index: dict) -> None:
    """index.json with the sha256 of its own content ("checksum"), which `read_acts_index` checks."""
    write_checked(Path(run_dir) / ACTS / ACTS_INDEX, write_json_atomic, index | {"checksum": canonical_sum(index)})


# ---------------------------------------------------------------- acts/index.json


def _whole(v, least: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= least


def _steps_list(v) -> bool:
    return isinstance(v, list) and all(_whole(x) for x in v) and all(a < b for a, b in zip(v, v[1:], strict=False))


def check_acts_index(index, path: Path) -> dict:
    """index.json's schema: the form `record.Recording.index` writes (a ConfigError naming the file and the value
    otherwise), and its own checksum when it carries one (every index.json written since it does)."""
    def bad(what: str):
        raise ConfigError(f"{path} is damaged or was edited: {what}")

    if not isinstance(index, dict):
        bad("its top level is not a JSON object")
    arrays = index.get("arrays", {})
    if not isinstance(arrays, dict):
        bad('"arrays" is not an object of name: array')
    for name, meta in arrays.items():
        if not isinstance(meta, dict):
            bad(f'"arrays"/{shown(name)!r} is not an object')
        shape, every, steps, sums = meta.get("shape"), meta.get("every", 1), meta.get("steps"), meta.get("crc32", [])
        if not isinstance(shape, list) or not shape or not all(_whole(n) for n in shape):
            bad(f'{shown(name)!r} has no "shape" of non-negative integers')
        try:
            np.dtype(meta.get("dtype"))
        except TypeError:
            bad(f'{shown(name)!r} has no numpy "dtype"')
        if not isinstance(meta.get("dtype"), str):
            bad(f'{shown(name)!r} has no numpy "dtype"')
        if steps is not None and (not _steps_list(steps) or len(steps) < shape[0]):
            bad(f'{shown(name)!r}: "steps" is not a list of increasing steps, one per row')
        if steps is None and not _whole(every, 1):
            bad(f'{shown(name)!r}: "every" is {shown(every)}, not a positive integer')
        if (not isinstance(sums, list) or not all(isinstance(e, list) and len(e) == 2 and _whole(e[0], 1)
                                                  and _whole(e[1]) and e[1] < 2**32 for e in sums)
                or not _steps_list([e[0] for e in sums]) or (sums and sums[-1][0] > shape[0])):
            bad(f'{shown(name)!r}: "crc32" is not a list of [rows, crc32] with rows increasing up to the shape')
    done, finished = index.get("complete_step", 0), index.get("finished", True)
    if not _whole(done):
        bad(f'"complete_step" is {shown(done)}, not a step')
    if not isinstance(finished, bool):
        bad(f'"finished" is {shown(finished)}, not true or false')
    if not _steps_list(index.get("steps", [])):
        bad('"steps" is not a list of increasing steps')
    inputs = index.get("inputs", {})
    if not isinstance(inputs, dict) or not _whole(inputs.get("crc32", 0)) or inputs.get("crc32", 0) >= 2**32:
        bad('"inputs" is not an object with a crc32')
    if "checksum" in index and "crc32" not in inputs:
        bad('"inputs" has no crc32 of inputs.npy')
    for meta in arrays.values():  # the files it names: inside acts/ (the run directory is its parent's parent)
        acts_file(path.parent.parent, meta.get("file"))
    if "checksum" in index and index["checksum"] != canonical_sum(index):  # last: the checks above say more
        bad("its content does not match its own checksum")
    return index


def read_acts_index(run_dir: Path) -> dict:
    """acts/index.json, checked (`check_acts_index`), or a ConfigError when it is missing or damaged."""
    path = Path(run_dir) / ACTS / ACTS_INDEX
    if not (path.exists() or path.is_symlink()):
        raise ConfigError(f"{path} is damaged or missing (there is no such file)")
    return check_acts_index(read_json(path, Path(run_dir)), path)


def acts_file(run_dir: Path, name) -> str:
    """An array's file as index.json names it: a plain name inside acts/ (never a path to another run's files)."""
    if not isinstance(name, str) or Path(name).name != name or name in ("", ".", "..") or not name.endswith(".npy"):
        raise ConfigError(f"{Path(run_dir) / ACTS / ACTS_INDEX} is damaged or was edited: it names the file "
                          f"{shown(name)!r}, not a .npy file inside acts/")
    return name


def check_inputs(run_dir: Path, index: dict) -> None:
    """acts/inputs.npy against the crc32 index.json holds of it (indexes written before it have none)."""
    want = index.get("inputs", {}).get("crc32")
    path = Path(run_dir) / ACTS / ACTS_INPUTS
    if want is not None and read_checked(path, lambda f: zlib.crc32(f.read_bytes()), Path(run_dir)) != want:
        raise ConfigError(f"{path} is damaged: it does not match its crc32 in {path.parent / ACTS_INDEX}")


def check_rows(path: Path, a: np.ndarray, sums: list) -> None:
    """The rows of `a` (time first) against index.json's crc32 of each commit's rows, which must reach its last row
    (rows without a checksum are a fault); the commits past len(a) are not checked (an interrupted run's rows after
    its last commit). A mismatch is a ConfigError naming the file."""
    if len(a) and (not sums or sums[-1][0] < len(a)):
        covered = sums[-1][0] if sums else 0
        raise ConfigError(f"{path} is damaged or its index was edited: rows {covered}..{len(a) - 1} have no checksum "
                          f"in {path.parent / ACTS_INDEX}")
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
