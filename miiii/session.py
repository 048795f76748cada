"""The host loop of one run: chunks of jitted steps, a progress bar, checkpoints, metrics and the recorder they drive
(`Session`), the end-of-run summary, a Ctrl-C that stops at a chunk boundary, and a profiled chunk. Starting and
resuming a run (the claim, the checks, the restore): runner.py.

After every chunk its evaluated steps go to metrics.jsonl (and tb/), which a notebook or `tail -f` reads while
the run goes on; metrics.npz is complete at checkpoints. `profile=DIR` traces one chunk with jax.profiler
(`profiled_chunk` says which).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from miiii.analysis import GROK_THRESHOLD, grok_steps, last_evaluated
from miiii.cadence import checkpoint_due, snap_steps
from miiii.checkpoint import Checkpoints
from miiii.config import ConfigError, shown
from miiii.errors import interrupt_pending, remember_interrupt, stops_carry, take_interrupt
from miiii.files import RunError, then
from miiii.integrity import finish_files, metrics_rows_sha256
from miiii.metricslog import MetricsLog
from miiii.model import count_params
from miiii.recorder import Recorder
from miiii.rundir import write_metrics, write_params
from miiii.tasks import Task, loss_unit
from miiii.train import (
    evaluate_split,
    greedy_decode,
    numerics,
    steps_per_epoch,
    task_data,
)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) ended the run at a chunk boundary, after a checkpoint; the message says how to resume."""


class StopFlag:
    """First SIGINT/SIGTERM: finish what is under way (a chunk, a start-up stage), checkpoint, stop. A second
    SIGINT stops at once. The flag is read where stopping is safe, never inside a compile or a write; a Ctrl-C that
    landed where it could not be raised (errors.remember_interrupt) counts as requested too. A stop asked in the
    chunk that ends the run cannot stop it, so inside a command or study (errors.carrying_stops) it is remembered
    for what comes next, which takes it on entry: one stop stops one thing."""

    def __init__(self, message: str = "stopping after this chunk (writing a checkpoint); press Ctrl-C again to "
                                      "stop at once"):
        self.message = message

    @property
    def requested(self) -> bool:
        return self._requested or interrupt_pending()

    @requested.setter
    def requested(self, value: bool) -> None:
        self._requested = value

    def __enter__(self):
        self.requested = take_interrupt()  # a stop remembered from before (a run it ended in its last chunk)
        self.prev = {}
        if threading.current_thread() is threading.main_thread():
            self.prev = {sig: signal.signal(sig, self._handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _handler(self, signum, frame):
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt("stopped at once; resume from the last checkpoint with --resume")
        self.requested = True
        tqdm.write(self.message, file=sys.stderr)

    def check(self) -> None:
        """Stop here (an Interrupted) if a stop was requested."""
        if self.requested:
            raise Interrupted("interrupted during start-up")

    def __exit__(self, *exc):
        for sig, handler in self.prev.items():
            signal.signal(sig, handler)
        if exc[0] is not None:  # stopped (or failed): a stop remembered meanwhile is served, not left for the next run
            take_interrupt()
        elif self._requested and stops_carry():  # asked in the chunk that ended the run: what would come next (a
            remember_interrupt()  # phase, a study's next run or its report) does not start


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def profiled_chunk(keys: list) -> tuple[int, bool]:
    """Which of a loop's chunks to trace, given each chunk's static arguments (its length and recording counts):
    the first that repeats an earlier chunk's (its program is compiled, so the trace shows the steady state);
    when none does, the second (its own compile included, since its arguments are new) or the only one (with
    the run's compile). Returns (index, whether the traced chunk compiles)."""
    seen = set()
    for i, key in enumerate(keys):
        if key in seen:
            return i, False
        seen.add(key)
    return min(1, len(keys) - 1), True


def check_profile(profile: str | Path | None) -> None:
    """--profile's directory, before anything is written (ConfigError): not '' (jax would trace into the working
    directory), not a file or under one, and writable (a test file in it, or in the nearest directory that exists,
    opened unnamed and gone at once: nothing is created). None: no profile."""
    if profile is None:
        return
    if not str(profile).strip():
        raise ConfigError("--profile needs a directory to trace into, not an empty path")
    path = probe = Path(profile)
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is not a directory" if probe == path else f"cannot be made: {shown(probe)} is not a directory"
        raise ConfigError(f"--profile {shown(path)} {what}; give a directory to trace into")
    try:
        if not os.access(probe, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise ConfigError(f"--profile {shown(path)}: cannot write into {shown(probe)}: {e.strerror or e}") from None


@contextlib.contextmanager
def trace_chunk(profile: str | Path | None, index: int, start: int, n: int, compiles: bool):
    """`jax.profiler.trace` into `profile` around the `with` body (nothing when profile is None), then a line
    that says where the Perfetto trace went."""
    if profile is None:
        yield
        return
    note = " (including its compile: no later chunk repeats an earlier one's program)" if compiles else ""
    tqdm.write(f"profiling chunk {index + 1} (steps {start}-{start + n - 1}){note} into {profile}", file=sys.stderr)
    with jax.profiler.trace(str(profile), create_perfetto_trace=True):
        yield
    traces = sorted(Path(profile).glob("plugins/profile/*/perfetto_trace.json.gz"), key=lambda f: f.stat().st_mtime)
    tqdm.write(f"trace written: {traces[-1] if traces else profile} (open it at https://ui.perfetto.dev, or run "
               f"xprof --logdir {profile})", file=sys.stderr)


class Session:
    """The host loop of one process on one run directory: chunks, checkpoints, metrics, and the recorder it
    drives (started by the caller, stopped when the loop ends)."""

    def __init__(self, cfg, task, trainer, run_dir, recorder: Recorder, ckpts=None, tensorboard: bool = True,
                 profile: str | Path | None = None):
        self.cfg, self.task, self.trainer = cfg, task, trainer
        self.run_dir, self.recorder = run_dir, recorder
        self.tensorboard, self.profile = tensorboard, profile
        self.log = None
        self.ckpts = ckpts or Checkpoints(run_dir, cfg.ckpt.keep, cfg)
        self.hist = trainer.empty_history(cfg.train.steps, len(task.task_names))
        self.last_valid = np.full(len(task.task_names), np.nan)  # the newest validation accuracy (the progress bar)
        self.rec_s = 0.0  # seconds spent queueing recorded rows
        self.last_ckpt = None

    def metrics_sum(self, step: int) -> dict:
        """The checksum of the metrics rows before `step`, kept with that step's checkpoint (a resume checks them)."""
        names = list(self.hist)
        return {"names": names, "sha256": metrics_rows_sha256(self.hist, names, step)}

    def save_metrics(self, n: int) -> None:
        write_metrics(self.run_dir, self.hist, n, self.task.task_names, self.trainer.grad_names)

    def checkpoint(self, state, finished: bool) -> None:
        """Activations and metrics up to the state's step reach the disk before the checkpoint that covers them."""
        step = int(state.step)
        if not all(np.isfinite(x).all() for x in jax.device_get(jax.tree.leaves(state.params))):
            raise FloatingPointError(f"the parameters became non-finite by step {step}; the run stopped. The last "
                                     f"good checkpoint is step {self.last_ckpt} in {self.run_dir / 'ckpt'} (start a "
                                     "new run with a lower optim.lr)")
        self.save_metrics(step)
        self.recorder.commit(step, finished)
        self.ckpts.save(state, self.metrics_sum(step))
        self.last_ckpt = step

    def save_snaps(self, end_state, snaps, snap_at) -> int:
        """Checkpoint the states a chunk captured at steps kept for good (older than its end, whose checkpoint
        follows at once, so a resume starts from the chunk's end as an uninterrupted run would)."""
        if snaps is None:
            return 0
        params, opt_state, step = snaps
        for i in np.nonzero(snap_at >= 0)[0]:
            pick = lambda tree, i=i: jax.tree.map(lambda a: a[i], tree)  # noqa: E731
            self.ckpts.save(end_state._replace(params=pick(params), opt_state=pick(opt_state), step=step[i]),
                            self.metrics_sum(int(step[i])))
        return int((snap_at >= 0).sum())

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
        self.recorder.close()
        self.ckpts.close()

    def run(self, state, progress: bool, on_chunk=None, resumed_from: int | None = None,
            stop: StopFlag | None = None) -> dict:
        """The loop from `state` to the last step; `stop`: the caller's flag (one for the whole command). `hist`
        holds the steps before `state.step` (metrics.jsonl is rewritten from them)."""
        cfg = self.cfg
        try:
            self.log = MetricsLog(self.run_dir, self.hist, self.task.task_names, self.trainer.grad_names,
                                  int(state.step), cfg.train.eval_every, cfg.train.steps, self.tensorboard,
                                  self.trainer.metrics)
            with contextlib.nullcontext(stop) if stop else StopFlag() as flag:
                return self._run(state, progress, on_chunk, resumed_from, flag)
        except RunError as e:
            raise then(e, f"the run stopped; resume it from its last checkpoint (step {self.last_ckpt}) with "
                          "--resume once fixed") from None
        finally:
            self.close()

    def _run(self, state, progress, on_chunk, resumed_from, stop) -> dict:
        cfg, task, trainer, recorder = self.cfg, self.task, self.trainer, self.recorder
        steps = cfg.train.steps
        data = task_data(task) | recorder.data()
        done = int(state.step)
        self.last_ckpt = done if self.last_ckpt is None else self.last_ckpt
        n_params = count_params(state.params)
        t_start, compile_s = time.perf_counter(), None
        bar = tqdm(total=steps, initial=done, disable=not progress, unit="step", dynamic_ncols=True, desc=task.name)
        stop.message = "stopping after this chunk (writing a checkpoint); press Ctrl-C again to stop at once"
        starts = range(done, steps, cfg.train.chunk)
        lengths = [min(cfg.train.chunk, steps - s) for s in starts]
        traced, compiles = profiled_chunk([(n, recorder.counts(s, n)) for s, n in zip(starts, lengths, strict=True)])
        order = trainer.order(state)  # the running epoch's sample order, carried from chunk to chunk
        for i, n in enumerate(lengths):
            if stop.requested:  # at the top: a stop asked for during start-up, after the step-0 checkpoint
                bar.close()
                raise Interrupted(f"interrupted: checkpoint at step {done} of {steps} written to "
                                  f"{self.run_dir}; continue with: python -m miiii train --resume {self.run_dir}")
            t0 = time.perf_counter()
            snap_at = snap_steps(done, n, self.ckpts.kept_for_good)
            with trace_chunk(self.profile if i == traced else None, i, done, n, compiles):
                state, out = trainer.chunk(state, data, n, recorder.counts(done, n), snap_at, order)
                # only used slots leave the device; the order stays for the next chunk
                snapped, order, out = out.snaps, out.order, jax.device_get(out._replace(snaps=None, order=None))
            if compile_s is None:
                compile_s = time.perf_counter() - t0
            try:
                self.take_chunk(done, n, out)
            except FloatingPointError:
                bar.close()
                raise
            snaps = self.save_snaps(state, snapped, snap_at)
            done += n
            if (stop.requested or done == steps or checkpoint_due(done, n, cfg.ckpt.every)
                    or done in self.ckpts.kept_for_good or snaps):
                self.checkpoint(state, finished=done == steps)
            bar.update(n)
            bar.set_postfix(self.postfix(done, out.metrics))
            if on_chunk is not None:
                on_chunk(done)
        bar.close()
        return self.finish(state, time.perf_counter() - t_start, compile_s, n_params, resumed_from)

    def take_chunk(self, done: int, n: int, out) -> None:
        """A chunk's outputs (steps [done, done + n)) into the history, metrics.jsonl and the recorder; a loss that
        is not finite stops the run (FloatingPointError) with the diverging steps saved."""
        for key, h in self.hist.items():
            h[done:done + n] = out.metrics[key]
        self.log.append(done, done + n)
        loss = out.metrics["loss"]
        if not np.isfinite(loss).all():
            bad = done + int(np.nonzero(~np.isfinite(loss))[0][0])
            self.save_metrics(done + n)  # the diverging steps too, for diagnosis
            raise FloatingPointError(
                f"loss became {loss[bad - done]} at step {bad}; the run stopped. The last good "
                f"checkpoint is step {self.last_ckpt} in {self.run_dir / 'ckpt'} (resuming replays the "
                "same steps: start a new run with a lower optim.lr)")
        t1 = time.perf_counter()
        self.recorder.take(done, n, out)
        self.rec_s += time.perf_counter() - t1
        newest = last_evaluated(out.metrics["valid_acc"])
        self.last_valid = self.last_valid if np.isnan(newest).all() else newest

    def postfix(self, done: int, metrics: dict) -> dict:
        """The progress bar's text after a chunk: epoch (minibatches), loss, validation accuracy, the tasks at >= 0.99
        validation accuracy now (at_0.99; they may fall back: "grokked" is the first step a task reached it)."""
        per_epoch = steps_per_epoch(self.cfg.train, len(self.task.train.x))  # 1 at full batch
        post = {"loss": f"{metrics['loss'][-1]:.4f}", "val_acc": f"{np.nanmean(self.last_valid):.3f}"}
        if per_epoch > 1:
            post = {"epoch": done // per_epoch} | post
        k = len(self.last_valid)
        if k > 1:
            # "grokked" means the first step ever at >= 0.99 (summary.json); this is where the tasks are now
            post["at_0.99"] = f"{int((self.last_valid >= GROK_THRESHOLD).sum())}/{k}"
        return post

    def finish(self, state, wall: float, compile_s: float | None, n_params: int, resumed_from: int | None) -> dict:
        """params.npz and summary.json of the finished run; returns the summary."""
        cfg = self.cfg
        steps = cfg.train.steps
        if self.log is not None:  # metrics.jsonl and tb/ complete before checksums.json lists them
            self.log.close()
            self.log = None
        write_params(self.run_dir, state.params)
        summary = summarize(cfg, self.task, self.trainer, state.params, np.arange(steps), self.hist)
        ran = steps - (resumed_from or 0)
        summary.update(
            n_params=n_params, wall_s=round(wall, 3), compile_s=round(compile_s or 0.0, 3),
            steps_per_s=round(ran / max(wall - (compile_s or 0.0), 1e-9), 2) if ran > cfg.train.chunk else None,
            **numerics(cfg), record_bytes=self.recorder.rec.nbytes, record_submit_s=round(self.rec_s, 3),
            resumed_from=resumed_from,
        )
        finish_files(self.run_dir, summary)
        return summary


def summarize(cfg, task: Task, trainer, params, step_axis, hist) -> dict:
    spec = {key: jnp.asarray(v) for key, v in task.arrays().items()}
    final = {"train": evaluate_split(trainer, params, task.train, spec),
             "valid": evaluate_split(trainer, params, task.valid, spec)}
    if task.test is not None:
        final["test"] = evaluate_split(trainer, params, task.test, spec)
    out = {
        "task": task.name, "task_names": list(task.task_names), "steps": int(cfg.train.steps), "final": final,
        "loss_unit": loss_unit(task.name, cfg.train.loss),  # of every "loss" in final (and metrics.npz)
        "grok_step": dict(zip(task.task_names, grok_steps(step_axis, hist["valid_acc"]), strict=True)),
    }
    if task.generative:
        prompt = task.valid.x[:, : task.answer_start + 1]
        pred = greedy_decode(trainer.apply, params, prompt, task.n_slots - task.answer_start)
        out["valid_autoregressive_acc"] = float((pred == task.valid.y[:, task.answer_start:]).all(1).mean())
    return out
