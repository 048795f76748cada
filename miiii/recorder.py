"""The host side of a recording: `Recorder` streams each chunk's recorded rows (the plan: record.py) into
preallocated `.npy` files under acts/ (`numpy.lib.format.open_memmap`) from a writer thread, so host memory holds
about one chunk and writing overlaps the next chunk's compute; at a checkpoint it syncs them and writes
acts/index.json with the crc32 of every commit's rows.
"""

from __future__ import annotations

import io
import math
import os
import queue
import sys
import threading
import zlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from miiii.actsindex import write_acts_index
from miiii.cadence import is_due, rows_before
from miiii.config import ConfigError
from miiii.files import RunError, fsync_dir, io_fault, write_bytes_atomic
from miiii.record import Recording
from miiii.rundir import ACTS, ACTS_INPUTS, regular_file


def npy_header(dtype, shape: tuple) -> bytes:
    """The bytes np.lib.format.open_memmap writes before the data of a C-ordered (shape, dtype) array."""
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, d)
    except ValueError:  # a header over 64 KiB: format 2.0, as numpy itself falls back
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, d)
    return buf.getvalue()


def _write_rows(f, offset: int, rows: np.ndarray) -> None:
    """The one place activation bytes go to disk (tests patch it to simulate a full disk).

    Plain positioned writes into the preallocated file, not a memmap: written pages live in the OS
    page cache, not in this process, so its memory stays flat however long the run.
    """
    if rows.size == 0:  # a chunk with no step due for this group
        return
    f.seek(offset)
    f.write(memoryview(np.ascontiguousarray(rows)).cast("B"))


def _file_crc(f, pos: int, n: int) -> int:
    """zlib.crc32 of `n` bytes of file `f` from `pos`, read 64 MiB at a time."""
    crc, end = 0, pos + n
    while pos < end:
        block = os.pread(f.fileno(), min(64 << 20, end - pos), pos)
        if not block:
            break  # a file cut short: its crc differs
        crc, pos = zlib.crc32(block, crc), pos + len(block)
    return crc


class Recorder:
    """A run's recording as the runner drives it, one object from start to stop.

    Opened on the run directory (`create`: new files; else the files of a run being resumed), then for each chunk
    `counts` (the chunk's static argument) and `take` (its rows, written by a thread while the next chunk runs),
    at each checkpoint `commit` (the rows reach the disk, then index.json says so), and `close` (also as a
    context manager). The `.npy` files under acts/ are preallocated; one chunk is queued at most.
    """

    def __init__(self, run_dir: Path, rec: Recording, create: bool):
        self.run_dir, self.dir, self.rec = Path(run_dir), Path(run_dir) / ACTS, rec
        self.files: dict[str, tuple] = {}  # name -> (file object, data offset, bytes per row)
        self.sums: dict[str, list] = {}  # name -> [[rows, crc32], ...] of the commits so far (index.json)
        self.error: BaseException | None = None
        self._current = ""
        self.inputs_damaged = False  # found on resume; written again by the next commit
        if not rec.arrays:
            return
        buf = io.BytesIO()
        np.save(buf, rec.inputs.astype(np.int32))
        self.inputs_bytes = buf.getvalue()  # inputs.npy: a function of the config, its crc32 in index.json
        try:
            if create:
                self.dir.mkdir(parents=True, exist_ok=True)
                with open(self.dir / ACTS_INPUTS, "wb") as f:
                    f.write(self.inputs_bytes)
                    os.fsync(f.fileno())
            for name, a in rec.arrays.items():
                path = self.dir / a.file
                if create:
                    mm = np.lib.format.open_memmap(path, mode="w+", dtype=a.dtype, shape=a.full_shape)
                else:
                    mm = open_npy(path, self.run_dir)
                    if mm.shape != a.full_shape or mm.dtype != np.dtype(a.dtype):
                        raise ConfigError(f"{path} is damaged: shape {mm.shape} {mm.dtype}, the config needs "
                                          f"{a.full_shape} {a.dtype}; the run cannot be resumed")
                    with open(path, "rb") as f:  # the header, byte for byte: the rows' crc32s do not cover it
                        if f.read(mm.offset) != npy_header(a.dtype, a.full_shape):
                            raise ConfigError(f"{path} is damaged: its .npy header differs from the one this run "
                                              "writes (edited?); the run cannot be resumed")
                offset = mm.offset
                del mm
                row = math.prod(a.shape) * np.dtype(a.dtype).itemsize
                self.files[name] = (open(path, "r+b"), offset, row)  # noqa: SIM115 - closed in close()
            if create:
                fsync_dir(self.dir)
                fsync_dir(self.run_dir)
        except OSError as e:
            self.close()
            raise self._fault(Path(e.filename or self.dir), e) from None
        except ConfigError:
            self.close()
            raise
        if create:
            self._write_index(0, False)
        self.q: queue.Queue = queue.Queue(maxsize=1)
        self.thread = threading.Thread(target=self._loop, name="acts-writer", daemon=True)
        self.thread.start()

    def _fault(self, path: Path, e: OSError) -> RunError:
        return io_fault(path, e)

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            try:
                if item is None:
                    return
                if self.error is None:
                    self._write(*item)
            except OSError as e:
                self.error = self._fault(self.dir / self.rec.arrays[self._current].file, e)
            except BaseException as e:  # noqa: BLE001 - reported on the main thread
                self.error = e
            finally:
                self.q.task_done()

    def _write(self, step: int, records: list[dict]) -> None:
        """records[g][name]: (n_g, ...) rows of group g, the first for the first multiple of its every >= step."""
        for (every, names, _), rec in zip(self.rec.groups, records, strict=True):
            for name in names:
                self._current = name
                f, offset, row = self.files[name]
                rows = np.asarray(rec[name], dtype=self.rec.arrays[name].dtype)
                _write_rows(f, offset + rows_before(step, every) * row, rows)

    def _raise(self) -> None:
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def data(self) -> dict:
        """What the trainer's recording reads besides the parameters: the recorded inputs (a jit argument)."""
        return {"record_x": jnp.asarray(self.rec.inputs)} if self.rec.arrays else {}

    def counts(self, start: int, n: int) -> tuple[int, ...] | None:
        """The chunk [start, start + n)'s recorded steps per group: the trainer's static `counts` (None: nothing)."""
        return self.rec.counts(start, n) if self.rec.arrays else None

    def take(self, start: int, n: int, out) -> None:
        """Queue the rows the chunk [start, start + n) recorded (returns at once unless one chunk is already
        waiting); the chunk that ends the run also gives the record of the state after its last update."""
        if not self.files:
            return
        rows = self.rec.rows(start, n)  # a log-spaced schedule's buffers are longer than its rows
        self._submit(start, [{k: np.asarray(v)[:c] for k, v in rec.items()}
                             for c, rec in zip(rows, out.record, strict=True)])
        end = start + n
        if end == self.rec.steps:  # for the groups that record the last step
            self._submit(end, [{k: np.asarray(v)[None][: int(is_due(end, every))] for k, v in rec.items()}
                               for (every, _, _), rec in zip(self.rec.groups, out.record_end, strict=True)])

    def commit(self, step: int, finished: bool) -> None:
        """Every step < `step` on disk (queued rows written and synced), then index.json says so, with the crc32 of
        the rows this commit added (read back from the page cache: a flipped byte later is caught on reading)."""
        self._flush()
        if self.inputs_damaged:  # found by `resume`, written again only now that every check has passed
            try:
                write_bytes_atomic(self.dir / ACTS_INPUTS, self.inputs_bytes)
            except OSError as e:
                raise self._fault(self.dir / ACTS_INPUTS, e) from None
            self.inputs_damaged = False
        for name, (f, offset, row) in self.files.items():
            sums = self.sums.setdefault(name, [])
            start, stop = (sums[-1][0] if sums else 0), self.rec.committed(name, step, finished)
            if stop > start:
                try:
                    sums.append([stop, _file_crc(f, offset + start * row, (stop - start) * row)])
                except OSError as e:
                    raise self._fault(self.dir / self.rec.arrays[name].file, e) from None
        self._write_index(step, finished)

    def resume(self, index: dict, step: int, finished: bool) -> None:
        """Check the rows a resume at `step` keeps against the crc32s in `index` (a ConfigError naming the file when
        one differs, or when rows it keeps have no checksum) and keep those sums; rows after `step` are written
        again. inputs.npy, a function of the config, is checked against it and written again if it differs."""
        if self.files:
            path = self.dir / ACTS_INPUTS
            try:
                self.inputs_damaged = regular_file(path, self.run_dir).read_bytes() != self.inputs_bytes
            except (ConfigError, OSError):
                self.inputs_damaged = True
            if self.inputs_damaged:
                print(f"warning: {path} is damaged or missing (it differs from the inputs the config records); "
                      "writing it again from the config", file=sys.stderr, flush=True)
        for name, (f, offset, row) in self.files.items():
            kept, start = [], 0
            sums = index.get("arrays", {}).get(name, {}).get("crc32", [])
            need = self.rec.committed(name, step, finished)
            if need and (not sums or sums[-1][0] < need):
                raise ConfigError(f"{self.dir / self.rec.arrays[name].file}: rows {sums[-1][0] if sums else 0}.."
                                  f"{need - 1} have no checksum in index.json (damaged or edited); the run cannot be "
                                  "resumed")
            for stop, crc in sums:
                if stop > self.rec.committed(name, step, finished):
                    break
                try:
                    got = _file_crc(f, offset + start * row, (stop - start) * row)
                except OSError as e:
                    raise ConfigError(f"{self.dir / self.rec.arrays[name].file} cannot be read ({e.strerror or e})"
                                      ) from None
                if got != crc:
                    raise ConfigError(f"{self.dir / self.rec.arrays[name].file} is damaged: rows {start}..{stop - 1} "
                                      "do not match their checksum in index.json; the run cannot be resumed")
                kept.append([stop, crc])
                start = stop
            self.sums[name] = kept

    def _submit(self, step: int, records: list[dict]) -> None:
        self._raise()
        self.q.put((step, records))

    def _flush(self) -> None:
        """Wait for queued rows, raise a write error if there was one, and sync the bytes to the disk (index.json,
        written next, must never claim rows a power loss can take back)."""
        if not self.files:
            return
        self.q.join()
        self._raise()
        for name, (f, _, _) in self.files.items():
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                raise self._fault(self.dir / self.rec.arrays[name].file, e) from None

    def _write_index(self, complete_step: int, finished: bool) -> None:
        if self.rec.arrays:
            index = self.rec.index(complete_step, finished, self.sums)
            index["inputs"]["crc32"] = zlib.crc32(self.inputs_bytes)
            write_acts_index(self.run_dir, index)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Stop the thread and close the files (pending rows are written first; errors are dropped)."""
        if hasattr(self, "thread") and self.thread.is_alive():
            self.q.put(None)
            self.thread.join()
        for f, _, _ in self.files.values():
            try:
                f.close()
            except OSError:
                pass
        self.files = {}


def open_npy(path: Path, root: Path | None = None) -> np.memmap:
    """np.load(mmap_mode='r') that names the file when it is missing, truncated, not a .npy, not a regular file or a
    symlink out of `root` (ConfigError)."""
    try:
        regular_file(path, root)
    except ConfigError as e:
        raise ConfigError(f"{e}; the run cannot be resumed") from None
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        raise ConfigError(f"{path} is damaged or missing ({type(e).__name__}: {e})") from None
