"""Starting and resuming a run: the config checked, the directory claimed, the task, trainer and recording built, the
step-0 checkpoint, or the newest good checkpoint restored with every check before anything changes; then the host
loop (session.py) trains. The run directory's files: rundir.py; its lock and claim: claim.py.

Order at a checkpoint (so SIGKILL at any moment leaves a resumable directory): activations and metrics up
to step s reach the disk, then acts/index.json says so, then the orbax save of step s commits, then its
checksum is written; `--resume` trusts only steps with a matching checksum.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import jax

from miiii.actsindex import read_acts_index
from miiii.checkpoint import Checkpoints, describe_checkpoints
from miiii.claim import RunClaim, RunLock, check_new
from miiii.config import ConfigError, RunConfig
from miiii.files import RunError, then
from miiii.integrity import REBUILT, check_manifest, check_metrics_rows
from miiii.model import abstract_params, build_model
from miiii.record import GiB, check_budget, describe_recording, plan
from miiii.recorder import Recorder
from miiii.rundir import (
    CONFIG,
    PARAMS,
    check_layout,
    check_unedited,
    flatten_params,
    has_checkpoints,
    read_ckpt_meta,
    read_config,
    read_metrics,
    read_params,
    read_summary,
    remove_summary,
    unstarted,
    write_config,
)
from miiii.session import Interrupted, Session, StopFlag, check_profile, say
from miiii.soft_ties import check_soft_ties, tightened
from miiii.tasks import Task, make_task
from miiii.train import (
    check_loss_dtype,
    make_trainer,
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


_STARTING = "stopping once the start-up step under way returns (nothing is kept); press Ctrl-C again to stop at once"


def config_diff(a: RunConfig, b: RunConfig) -> list[str]:
    da, db = a.to_dict(), b.to_dict()
    return [f"{sec}.{k}: {da[sec].get(k)!r} -> {db[sec].get(k)!r}" for sec in da for k in da[sec]
            if da[sec].get(k) != db[sec].get(k)]


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
    check_loss_dtype(cfg)  # the backend's, before the directory is claimed
    check_profile(profile)
    with StopFlag(_STARTING) as stop, RunClaim(run_dir) as claim:
        write_config(run_dir, cfg)
        return _start(cfg, run_dir, claim, stop, progress, record_budget, on_chunk, tensorboard, profile)


def _start(cfg: RunConfig, run_dir: Path, claim: RunClaim, stop: StopFlag, progress: bool, record_budget: int | None,
           on_chunk, tensorboard: bool = True, profile: str | Path | None = None) -> dict:
    """A claimed directory with its config.json -> the step-0 checkpoint (then the claim is kept) -> the run.
    `record_budget` None: the recording was accepted when the run was first started (only the free disk counts)."""
    task = prepare(cfg)
    stop.check()
    trainer, rec = build(cfg, task)
    check_budget(rec, run_dir, rec.nbytes if record_budget is None else record_budget)
    say(describe_recording(rec))
    say(describe_checkpoints(cfg, jax.eval_shape(trainer.init, cfg.train.seed)))
    stop.check()
    session = Session(cfg, task, trainer, run_dir, Recorder(run_dir, rec, create=True), tensorboard=tensorboard,
                      profile=profile)
    try:
        stop.check()
        state = init_state(trainer, cfg.train.seed, init_from_params(cfg, trainer))
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
        with StopFlag(_STARTING) as stop, RunClaim(run_dir, restart=True) as claim:
            say(f"{run_dir} stopped before its first checkpoint; starting it over from its config.json")
            return _start(cfg, run_dir, claim, stop, progress, None, on_chunk, tensorboard, profile)
    check_unedited(run_dir, cfg, read_ckpt_meta(run_dir))
    rebuild = check_manifest(run_dir, REBUILT) or []  # a finished run's other files must be as written
    task = prepare(cfg)
    trainer, rec = build(cfg, task)
    with StopFlag() as stop, RunLock(run_dir), contextlib.ExitStack() as release:
        # `release` closes whatever is open when anything below raises, once; the session takes both over
        metrics = read_metrics(run_dir, complete=("loss",), optional=tuple(m.name for m in trainer.metrics))
        added = [m.name for m in trainer.metrics if m.name not in metrics]  # metrics.METRICS grew since the run began
        ckpts = release.enter_context(contextlib.closing(Checkpoints(run_dir, cfg.ckpt.keep, cfg)))
        template = jax.eval_shape(trainer.init, cfg.train.seed)
        state, skipped = ckpts.restore_good(template, at_most=len(metrics.get("step", [])))
        for why in skipped:
            say(f"warning: {why}; falling back to an older checkpoint")
        if state is None:
            raise ConfigError(f"{run_dir}: no checkpoint can be resumed from ({'; '.join(skipped) or 'none saved'})")
        s = int(state.step)
        finished = s == cfg.train.steps
        check_metrics_rows(run_dir, metrics, s, read_ckpt_meta(run_dir))
        index = {}
        if rec.arrays:
            index = read_acts_index(run_dir)
            if index.get("complete_step", -1) < s:
                raise ConfigError(f"{run_dir / 'acts'} holds activations up to step {index.get('complete_step')} "
                                  f"only, older than checkpoint {s}: the activation files are damaged")
        recorder = release.enter_context(contextlib.closing(Recorder(run_dir, rec, create=False)))
        recorder.resume(index, s, index.get("finished", False) and finished)
        summary = final_summary(run_dir, state, rebuild, recorder.inputs_damaged) if finished else {}
        if finished and summary and not skipped:
            say(f"{run_dir} already finished ({s} steps); nothing to do")
            return summary
        say(f"resuming {run_dir} from step {s} of {cfg.train.steps}")
        session = Session(cfg, task, trainer, run_dir, recorder, ckpts, tensorboard=tensorboard, profile=profile)
        release.pop_all()  # the session closes the recorder and the checkpoints now
        release.callback(session.close)
        try:
            ckpts.delete_after(s)
            remove_summary(run_dir)
            for key, h in session.hist.items():
                if key in metrics:
                    h[:s] = metrics[key][:s]
            if added:
                say(f"note: {', '.join(added)} did not exist when this run began: NaN before step {s}")
            session.save_metrics(s)
            recorder.commit(s, index.get("finished", False) and finished)
        except RunError as e:
            raise then(e, f"the run stopped; resume it from checkpoint {s} with --resume once fixed") from None
        release.pop_all()  # session.run closes the session itself, however it ends
        return session.run(state, progress, on_chunk, resumed_from=s, stop=stop)


def final_summary(run_dir: Path, state, rebuild: list[str], inputs_damaged: bool) -> dict:
    """A finished run's summary when its files are as written (a resume then has nothing to do); else {}, with a
    warning for each file the resume writes again: params.npz and summary.json from the final checkpoint,
    metrics.jsonl from metrics.npz, acts/inputs.npy from the config."""
    for msg in rebuild:
        say(f"warning: {msg}; writing it again")
    if not final_params_match(run_dir, state):
        return {}
    try:
        summary = read_summary(run_dir)
    except ConfigError as e:
        say(f"warning: {e}; writing it again from the final checkpoint")
        return {}
    return {} if rebuild or inputs_damaged else summary


def final_params_match(run_dir: Path, state) -> bool:
    """params.npz holds exactly the final checkpoint's parameters; if not (damaged, missing, altered) a warning, and
    the resume writes it (and summary.json) again from that checkpoint."""
    try:
        saved = flatten_params(read_params(run_dir))
    except ConfigError as e:
        say(f"warning: {e}; writing it again from the final checkpoint")
        return False
    if not saved:
        say(f"warning: {run_dir / PARAMS} is missing; writing it again from the final checkpoint")
        return False
    want = flatten_params(jax.device_get(state.params))
    if saved.keys() != want.keys() or any(saved[k].tobytes() != want[k].tobytes() for k in want):
        say(f"warning: {run_dir / PARAMS} differs from the final checkpoint; writing it again from the checkpoint")
        return False
    return True


def init_state(trainer, seed: int, params=None):
    """`trainer.init` compiled as one program (run eagerly it compiles dozens of small ops: seconds on a CPU)."""
    return jax.jit(trainer.init, static_argnums=0)(seed, params)


def init_from_params(cfg: RunConfig, trainer) -> dict | None:
    """train.init_from's parameters ("RUN_DIR" final, "RUN_DIR@STEP" a kept step, restored and verified), checked
    leaf by leaf against this model's names and shapes; None when the run starts fresh. ConfigError otherwise."""
    if not cfg.train.init_from:
        return None
    from miiii.run import load_run

    src, _, at = cfg.train.init_from.rpartition("@") if "@" in cfg.train.init_from else (cfg.train.init_from, "", "")
    if at and not at.isdigit():
        raise ConfigError(f"train.init_from = '{cfg.train.init_from}': write RUN_DIR or RUN_DIR@STEP")
    try:
        run = load_run(src)
    except (ConfigError, RunError, OSError) as e:
        raise ConfigError(f"train.init_from: {e}") from None
    if not at and not run.params:
        raise ConfigError(f"train.init_from: {src} has not finished (no params.npz); name a kept step, "
                          f"{src}@STEP (kept: {', '.join(map(str, run.kept_steps)) or 'none'})")
    if at and int(at) not in run.kept_steps:
        raise ConfigError(f"train.init_from: {src} kept no checkpoint at step {int(at)} (kept: "
                          f"{', '.join(map(str, run.kept_steps)) or 'none'})")
    params = run.params_at(int(at)) if at else run.params
    shapes = lambda tree: {jax.tree_util.keystr(k): tuple(v.shape)  # noqa: E731
                           for k, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
    fresh = jax.eval_shape(trainer.init, cfg.train.seed).params
    tight = tightened(params, fresh, cfg.model.ties)  # the weights this model ties, which the source had free
    params, dropped = tight if tight is not None else (params, [])
    want, have = shapes(fresh), shapes(params)
    wrong = sorted(set(want) ^ set(have)) or [k for k in want if want[k] != have[k]]
    if wrong:
        raise ConfigError(f"train.init_from: {src}'s parameters are not this model's (first differing: {wrong[0]}); "
                          "the model settings must match the source run's")
    if dropped:
        say(f"train.init_from: {src}'s {', '.join(dropped)} left out: this model computes them (model.ties)")
    if run.config.model.pins != cfg.model.pins:  # the same free entries, other constants: another function
        say(f"train.init_from: {src} pinned {', '.join(run.config.model.pins) or 'nothing'}; this model pins "
            f"{', '.join(cfg.model.pins) or 'nothing'} (model.pins): its constants are this model's")
    return jax.tree.map(lambda a: jax.numpy.asarray(a, jax.numpy.float32), params)


def build(cfg: RunConfig, task: Task):
    """The recording plan, checked against the model's names and shapes (`jax.eval_shape`: nothing is built or
    compiled for it), and the trainer that records it."""
    model = build_model(cfg.model, task)
    try:  # a tie between weights of different shapes, say, shows only when the model is built
        shapes = abstract_params(model, task.n_ctx)
    except ValueError as e:
        if not str(e).startswith("model."):  # a fault of the code, not of the config: its traceback
            raise
        raise ConfigError(str(e)) from None
    if cfg.train.soft_ties:
        check_soft_ties(cfg.train.soft_ties, shapes)
    rec = plan(cfg, task, lambda p, x: model.apply({"params": p}, x), shapes)
    return make_trainer(cfg, task, record_groups=rec.record_groups()), rec
