"""The host side of a run: chunks of jitted steps, a progress bar, and the run directory (its files: rundir.py;
its lock and claim: claim.py; its live log: metricslog.py).

After every chunk its evaluated steps go to metrics.jsonl (and tb/), which a notebook or `tail -f` reads while
the run goes on; metrics.npz is complete at checkpoints. `profile=DIR` traces one chunk with jax.profiler
(`profiled_chunk` says which).

Order at a checkpoint (so SIGKILL at any moment leaves a resumable directory): activations and metrics up
to step s reach the disk, then acts/index.json says so, then the orbax save of step s commits, then its
checksum is written; `--resume` trusts only steps with a matching checksum.
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
from miiii.checkpoint import Checkpoints, describe_checkpoints
from miiii.claim import RunClaim, RunLock, check_new
from miiii.config import ConfigError, RunConfig, shown
from miiii.errors import interrupt_pending
from miiii.files import RunError, then
from miiii.metricslog import MetricsLog
from miiii.model import abstract_params, build_model, count_params
from miiii.record import GiB, check_budget, describe_recording, plan
from miiii.recorder import Recorder
from miiii.rundir import (
    CONFIG,
    PARAMS,
    REBUILT,
    check_layout,
    check_manifest,
    check_metrics_rows,
    check_unedited,
    flatten_params,
    has_checkpoints,
    metrics_rows_sha256,
    read_acts_index,
    read_ckpt_meta,
    read_config,
    read_metrics,
    read_params,
    read_summary,
    remove_summary,
    unstarted,
    write_config,
    write_metrics,
    write_params,
    write_summary,
)
from miiii.tasks import Task, make_task
from miiii.train import (
    evaluate_split,
    greedy_decode,
    make_trainer,
    numerics,
    steps_per_epoch,
    task_data,
)
from miiii.validate import validate


def prepare(cfg: RunConfig) -> Task:
    """Validate the config and build its task; any ConfigError is raised before a file is written."""
    validate(cfg)
    task = make_task(cfg.task)
    if cfg.train.batch_size > len(task.train.x):
        raise ConfigError(
            f"train.batch_size = {cfg.train.batch_size} exceeds the {len(task.train.x)} training samples; "
            "lower it or set 0 for full batch"
        )
    return task


__all__ = ["Interrupted", "RunError", "resume_run", "train_run"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) ended the run at a chunk boundary, after a checkpoint; the message says how to resume."""


class _StopFlag:
    """First SIGINT/SIGTERM: finish what is under way (a chunk, a start-up stage), checkpoint, stop. A second
    SIGINT stops at once. The flag is read where stopping is safe, never inside a compile or a write; a Ctrl-C that
    landed where it could not be raised (errors.remember_interrupt) counts as requested too."""

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
        self.requested = False
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


_STARTING = "stopping once the start-up step under way returns (nothing is kept); press Ctrl-C again to stop at once"


def config_diff(a: RunConfig, b: RunConfig) -> list[str]:
    da, db = a.to_dict(), b.to_dict()
    return [f"{sec}.{k}: {da[sec].get(k)!r} -> {db[sec].get(k)!r}" for sec in da for k in da[sec]
            if da[sec].get(k) != db[sec].get(k)]


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def train_run(cfg: RunConfig, run_dir: str | Path, progress: bool = True, record_budget: int = 2 * GiB,
              on_chunk=None, tensorboard: bool = True, profile: str | Path | None = None) -> dict:
    """Train `cfg` and write its run directory; returns the summary. `on_chunk(step)` runs after each chunk (its
    metrics.jsonl lines are on disk by then). `tensorboard`: TensorBoard scalars in run_dir/tb/ when tensorboardX
    imports. `profile`: a jax.profiler trace of one chunk (`profiled_chunk`) into that directory.

    The directory is claimed (claim.RunClaim: created, locked, found empty under the lock, config.json written)
    before the slow start-up, so a second `train` into it is refused. Until the step-0 checkpoint, an error or
    Ctrl-C removes what was written; a start-up killed outright leaves config.json, which --resume starts over.
    """
    run_dir = Path(run_dir)
    check_new(run_dir)
    validate(cfg)
    check_profile(profile)
    with _StopFlag(_STARTING) as stop, RunClaim(run_dir) as claim:
        write_config(run_dir, cfg)
        return _start(cfg, run_dir, claim, stop, progress, record_budget, on_chunk, tensorboard, profile)


def _start(cfg: RunConfig, run_dir: Path, claim: RunClaim, stop: _StopFlag, progress: bool, record_budget: int | None,
           on_chunk, tensorboard: bool = True, profile: str | Path | None = None) -> dict:
    """A claimed directory with its config.json -> the step-0 checkpoint (then the claim is kept) -> the run.
    `record_budget` None: the recording was accepted when the run was first started (only the free disk counts)."""
    task = prepare(cfg)
    stop.check()
    trainer, rec = build(cfg, task)
    check_budget(rec, run_dir, rec.nbytes if record_budget is None else record_budget)
    _say(describe_recording(rec))
    _say(describe_checkpoints(cfg, jax.eval_shape(trainer.init, cfg.train.seed)))
    stop.check()
    session = Session(cfg, task, trainer, run_dir, Recorder(run_dir, rec, create=True), tensorboard=tensorboard,
                      profile=profile)
    try:
        stop.check()
        state = init_state(trainer, cfg.train.seed)
        stop.check()
        session.checkpoint(state, finished=False)  # step 0: a run killed in its first chunk can resume
    except BaseException:
        session.close()
        raise
    claim.keep()
    return session.run(state, progress, on_chunk, stop=stop)


def resume_run(run_dir: str | Path, cfg: RunConfig | None = None, progress: bool = True, on_chunk=None,
               tensorboard: bool = True, profile: str | Path | None = None) -> dict:
    """Continue a run from its newest good checkpoint; metrics (metrics.npz, metrics.jsonl) and activations are
    cut back to that step first. `on_chunk`, `tensorboard`, `profile`: as `train_run`.
    A run stopped before its first checkpoint (`rundir.unstarted`) starts over from its config.json.

    Every check (config, lock, checkpoints, metrics, activation files) runs before anything is changed.
    """
    run_dir = Path(run_dir)
    check_profile(profile)
    saved = read_config(run_dir)
    if cfg is not None and cfg.to_dict() != saved.to_dict():
        diff = config_diff(saved, cfg)
        raise ConfigError(f"--resume: the config differs from {run_dir / CONFIG} ({'; '.join(diff[:6])}); "
                          "resume without --preset/--set/--steps/--seed, or start a new run")
    cfg = saved
    check_layout(run_dir)
    if not has_checkpoints(run_dir):
        if not unstarted(run_dir):
            raise ConfigError(f"{run_dir} has no checkpoints (ckpt/, ckpt.json): nothing to resume from")
        validate(cfg)
        with _StopFlag(_STARTING) as stop, RunClaim(run_dir, restart=True) as claim:
            _say(f"{run_dir} stopped before its first checkpoint; starting it over from its config.json")
            return _start(cfg, run_dir, claim, stop, progress, None, on_chunk, tensorboard, profile)
    check_unedited(run_dir, cfg, read_ckpt_meta(run_dir))
    rebuild = check_manifest(run_dir, REBUILT) or []  # a finished run's other files must be as written
    task = prepare(cfg)
    trainer, rec = build(cfg, task)
    with _StopFlag() as stop, RunLock(run_dir):
        metrics = read_metrics(run_dir, complete=("loss",), optional=tuple(m.name for m in trainer.metrics))
        added = [m.name for m in trainer.metrics if m.name not in metrics]  # metrics.METRICS grew since the run began
        ckpts = Checkpoints(run_dir, cfg.ckpt.keep, cfg)
        template = jax.eval_shape(trainer.init, cfg.train.seed)
        state, skipped = ckpts.restore_good(template, at_most=len(metrics.get("step", [])))
        for why in skipped:
            _say(f"warning: {why}; falling back to an older checkpoint")
        if state is None:
            ckpts.close()
            raise ConfigError(f"{run_dir}: no checkpoint can be resumed from ({'; '.join(skipped) or 'none saved'})")
        s = int(state.step)
        try:
            check_metrics_rows(run_dir, metrics, s, read_ckpt_meta(run_dir))
        except ConfigError:
            ckpts.close()
            raise
        index = {}
        if rec.arrays:
            index = read_acts_index(run_dir)
            if index.get("complete_step", -1) < s:
                ckpts.close()
                raise ConfigError(f"{run_dir / 'acts'} holds activations up to step {index.get('complete_step')} "
                                  f"only, older than checkpoint {s}: the activation files are damaged")
        recorder = Recorder(run_dir, rec, create=False)
        try:
            recorder.resume(index, s, index.get("finished", False) and s == cfg.train.steps)
            summary = final_summary(run_dir, state, rebuild, recorder.inputs_damaged) if s == cfg.train.steps else {}
        except BaseException:
            recorder.close()
            ckpts.close()
            raise
        if s == cfg.train.steps and summary and not skipped:
            recorder.close()
            ckpts.close()
            _say(f"{run_dir} already finished ({s} steps); nothing to do")
            return summary
        _say(f"resuming {run_dir} from step {s} of {cfg.train.steps}")
        session = Session(cfg, task, trainer, run_dir, recorder, ckpts, tensorboard=tensorboard, profile=profile)
        try:
            ckpts.delete_after(s)
            remove_summary(run_dir)
            for key, h in session.hist.items():
                if key in metrics:
                    h[:s] = metrics[key][:s]
            if added:
                _say(f"note: {', '.join(added)} did not exist when this run began: NaN before step {s}")
            session.save_metrics(s)
            recorder.commit(s, index.get("finished", False) and s == cfg.train.steps)
        except RunError as e:
            session.close()
            raise then(e, f"the run stopped; resume it from checkpoint {s} with --resume once fixed") from None
        except BaseException:
            session.close()
            raise
        return session.run(state, progress, on_chunk, resumed_from=s, stop=stop)


def final_summary(run_dir: Path, state, rebuild: list[str], inputs_damaged: bool) -> dict:
    """A finished run's summary when its files are as written (a resume then has nothing to do); else {}, with a
    warning for each file the resume writes again: params.npz and summary.json from the final checkpoint,
    metrics.jsonl from metrics.npz, acts/inputs.npy from the config."""
    for msg in rebuild:
        _say(f"warning: {msg}; writing it again")
    if not final_params_match(run_dir, state):
        return {}
    try:
        summary = read_summary(run_dir)
    except ConfigError as e:
        _say(f"warning: {e}; writing it again from the final checkpoint")
        return {}
    return {} if rebuild or inputs_damaged else summary


def final_params_match(run_dir: Path, state) -> bool:
    """params.npz holds exactly the final checkpoint's parameters; if not (damaged, missing, altered) a warning, and
    the resume writes it (and summary.json) again from that checkpoint."""
    try:
        saved = flatten_params(read_params(run_dir))
    except ConfigError as e:
        _say(f"warning: {e}; writing it again from the final checkpoint")
        return False
    if not saved:
        _say(f"warning: {run_dir / PARAMS} is missing; writing it again from the final checkpoint")
        return False
    want = flatten_params(jax.device_get(state.params))
    if saved.keys() != want.keys() or any(saved[k].tobytes() != want[k].tobytes() for k in want):
        _say(f"warning: {run_dir / PARAMS} differs from the final checkpoint; writing it again from the checkpoint")
        return False
    return True


def init_state(trainer, seed: int):
    """`trainer.init` compiled as one program (run eagerly it compiles dozens of small ops: seconds on a CPU)."""
    return jax.jit(trainer.init, static_argnums=0)(seed)


def build(cfg: RunConfig, task: Task):
    """The recording plan, checked against the model's names and shapes (`jax.eval_shape`: nothing is built or
    compiled for it), and the trainer that records it."""
    model = build_model(cfg.model, task)
    rec = plan(cfg, task, lambda p, x: model.apply({"params": p}, x), abstract_params(model, task.n_ctx))
    return make_trainer(cfg, task, record_groups=rec.record_groups()), rec


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
            stop: _StopFlag | None = None) -> dict:
        """The loop from `state` to the last step; `stop`: the caller's flag (one for the whole command). `hist`
        holds the steps before `state.step` (metrics.jsonl is rewritten from them)."""
        cfg = self.cfg
        try:
            self.log = MetricsLog(self.run_dir, self.hist, self.task.task_names, self.trainer.grad_names,
                                  int(state.step), cfg.train.eval_every, cfg.train.steps, self.tensorboard,
                                  self.trainer.metrics)
            with contextlib.nullcontext(stop) if stop else _StopFlag() as flag:
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
        for i, n in enumerate(lengths):
            if stop.requested:  # at the top: a stop asked for during start-up, after the step-0 checkpoint
                bar.close()
                raise Interrupted(f"interrupted: checkpoint at step {done} of {steps} written to "
                                  f"{self.run_dir}; continue with: python -m miiii train --resume {self.run_dir}")
            t0 = time.perf_counter()
            snap_at = snap_steps(done, n, self.ckpts.kept_for_good)
            with trace_chunk(self.profile if i == traced else None, i, done, n, compiles):
                state, out = trainer.chunk(state, data, n, recorder.counts(done, n), snap_at)
                out = jax.device_get(out)
            if compile_s is None:
                compile_s = time.perf_counter() - t0
            try:
                self.take_chunk(done, n, out)
            except FloatingPointError:
                bar.close()
                raise
            snaps = self.save_snaps(state, out.snaps, snap_at)
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
        if self.log is not None:  # metrics.jsonl and tb/ complete before checksums.json lists them (write_summary)
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
        write_summary(self.run_dir, summary)
        return summary


def summarize(cfg, task: Task, trainer, params, step_axis, hist) -> dict:
    spec = {key: jnp.asarray(v) for key, v in task.arrays().items()}
    final = {"train": evaluate_split(trainer, params, task.train, spec),
             "valid": evaluate_split(trainer, params, task.valid, spec)}
    if task.test is not None:
        final["test"] = evaluate_split(trainer, params, task.test, spec)
    out = {
        "task": task.name, "task_names": list(task.task_names), "steps": int(cfg.train.steps), "final": final,
        "grok_step": dict(zip(task.task_names, grok_steps(step_axis, hist["valid_acc"]), strict=True)),
    }
    if task.generative:
        prompt = task.valid.x[:, : task.answer_start + 1]
        pred = greedy_decode(trainer.apply, params, prompt, task.n_slots - task.answer_start)
        out["valid_autoregressive_acc"] = float((pred == task.valid.y[:, task.answer_start:]).all(1).mean())
    return out
