"""A finished (or resumable) run as something to work with: `load_run(dir) -> Run`, its metrics, summary, final
parameters and recorded activations (memory-mapped; `recorded_cache` reads them by hook name with their axes), and
on demand its task, its model with hooks, a forward pass with a cache, and the parameters at any kept step.

Loading reads the files (rundir.py) with numpy alone: reading a finished run's metrics and activations imports no
jax. What computes (`cache`, `model`, `params_at`) imports jax, the model and the checkpoints when first used.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from miiii.actsindex import acts_file, check_inputs, check_rows, read_acts_index
from miiii.cache import Cache, recorded_cache
from miiii.cadence import rows_before
from miiii.config import ConfigError, RunConfig
from miiii.integrity import check_manifest
from miiii.rundir import (
    ACTS,
    ACTS_INDEX,
    ACTS_INPUTS,
    CKPT,
    PARAMS,
    SUMMARY,
    check_unedited,
    read_ckpt_meta,
    read_config,
    read_member,
    read_metrics,
    read_metrics_log,
    read_npy,
    read_params,
    read_summary,
)
from miiii.tasks import make_task, task_spec
from miiii.tokens import grid_inputs


@dataclass
class Run:
    path: Path
    config: RunConfig
    metrics: dict  # name -> np.ndarray, metrics.npz's layout (rundir.py)
    summary: dict
    params: dict  # nested dict of np.ndarray, final parameters (same tree as the model's params)
    acts: dict = field(default_factory=dict)  # name -> np.memmap, time first (acts/index.json says the axes)
    acts_index: dict = field(default_factory=dict)
    acts_steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # step of each activation row
    legacy: bool = False  # a finished run written before checksums.json: its files are checked as far as they can be

    def steps_of(self, name: str) -> np.ndarray:
        """Step of each row of `acts[name]` (parameters may be recorded at another rate than activations)."""
        meta = self.acts_index["arrays"][name]
        if meta.get("steps") is not None:  # a log-spaced schedule (record.log)
            return np.asarray(meta["steps"], np.int64)[: len(self.acts[name])]
        return np.arange(len(self.acts[name])) * meta.get("every", 1)

    # ------------------------------------------------------------ the run as something to work with

    @functools.cached_property
    def metrics_so_far(self) -> dict:
        """metrics.npz, or, for a solo run that has not finished (it writes metrics.npz at the end), what
        metrics.jsonl holds so far (the evaluated steps)."""
        return self.metrics if len(self.metrics.get("step", ())) else read_metrics_log(self.path)

    @functools.cached_property
    def member(self) -> dict:
        """A sweep member's place in its sweep (member.json: index, seed, grid values); {} for a run of its own."""
        return read_member(self.path)

    @functools.cached_property
    def task(self):
        """The run's task, rebuilt from its config (the same split and labels: they are functions of it)."""
        return make_task(self.config.task)

    @functools.cached_property
    def model(self):
        """The run's model as a `hooks.HookedModel`: `run.model.run_with_cache(params, tokens, names)` and
        `run.model.run_with_hooks(params, tokens, hooks)`, pure and jittable."""
        from miiii.hooks import HookedModel

        return HookedModel.of(self.config, self.task)

    def inputs(self, split: str = "valid") -> np.ndarray:
        """Tokens (N, n_ctx) of a split: train | valid | test, or grid (a grid task: all p^2 inputs [x0, x1, p], row
        n = x0 + x1 p, the order of `analysis.to_grid`, `interventions.remove_grid_frequencies` and of a recording's
        `record.inputs=grid`; for div this includes the p inputs x1 = 0, which are no samples)."""
        if split == "grid" and not self.config.task.is_sequence:
            return grid_inputs(self.config.task.p, self.config.task.digit_order)
        return self._split(split)[0]

    def labels(self, split: str = "valid") -> np.ndarray:
        """Targets (N, n_slots) of a split, the task's own (miiii-basis: the shuffled ones); grid: every input's, in
        `inputs("grid")`'s order, for a task whose samples are all p^2 inputs."""
        if split == "grid" and not self.config.task.is_sequence:
            if not task_spec(self.config.task.name).whole_grid:
                raise ConfigError(f"the {self.config.task.name} task labels only some of the p^2 inputs (its samples "
                                  "are the rest of the grid): labels('grid') and what needs them (frequency "
                                  "ablation, the figures over the grid) exist for tasks with all p^2 samples; use "
                                  "train, valid or test")
            t = self.task
            parts = [s for s in (t.train, t.valid, t.test) if s is not None]
            x, y = np.concatenate([s.x for s in parts]), np.concatenate([s.y for s in parts])
            i0, i1 = self.config.task.digit_positions
            return y[np.argsort(x[:, i0] + x[:, i1] * self.config.task.p)]
        return self._split(split)[1]

    def _split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        t = self.task
        parts = {"train": t.train, "valid": t.valid, "test": t.test}
        if split in parts and parts[split] is not None:
            return parts[split].x, parts[split].y
        have = [k for k, v in parts.items() if v is not None] + ([] if self.config.task.is_sequence else ["grid"])
        raise ConfigError(f"split '{split}': this run has {', '.join(have)}")

    @functools.cached_property
    def _jitted_cache(self):
        """`model.run_with_cache` jitted once per run, so each set of names traces once however often it is asked."""
        import jax  # computing, not reading: jax only now

        return jax.jit(self.model.run_with_cache, static_argnames="names")

    def cache(self, names: tuple[str, ...], split: str = "grid", params=None) -> Cache:
        """The named activations of `params` (default: the final ones) on a whole split, jitted, as numpy: the
        forward pass the figures and the report share (`run.model.run_with_cache`), full tensors."""
        _, out = self._jitted_cache(self.params if params is None else params, self.inputs(split), tuple(names))
        return replace(out, arrays={k: np.asarray(v) for k, v in out.items()})

    def recorded_cache(self, step: int | None = None) -> Cache:
        """The recorded activations as a Cache (cache.py): every recorded row, axes ("step", "batch", ...) with
        `coords(name)["step"]` the step of each row (memory-mapped), or the row of `step`: the activations of
        `params_at(step)` on `recorded_inputs`, at the positions and neurons the recording kept (`coords(name)`)."""
        if not self.acts_index:
            raise ConfigError(f"{self.path} has no recording (acts/index.json): compute activations with run.cache")
        acts = {n: self.acts[n] for n in (*self.config.record.acts, *self.acts) if n in self.acts}  # record.acts' order
        return recorded_cache(acts, self.acts_index, self.steps_of, self.config.model.readout, step)

    @functools.cached_property
    def recorded_inputs(self) -> np.ndarray:
        """The tokens (n, n_ctx) of a recording's batch axis, acts/inputs.npy (record.inputs; index.json's "inputs"
        says their order)."""
        return read_npy(self.path / ACTS / ACTS_INPUTS, self.path)

    @property
    def kept_steps(self) -> list[int]:
        """Steps whose train state is checkpointed (each verified against its checksum when restored)."""
        sums = read_ckpt_meta(self.path, strict=False).get("checksums", {})
        d = self.path / CKPT
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit() and p.name in sums) if d.is_dir() else []

    def params_at(self, step: int, after: bool = False) -> dict:
        """The parameters after `step` updates, restored from that step's checkpoint and verified. A step that was not
        kept gives the kept step before it, with a warning that names it; before the first kept step there is none:
        a ConfigError that lists the kept steps, unless `after` asks for the nearest kept step after it (a pre-grok
        request never silently gets a later model). `kept_steps` lists them; ckpt.keep_log keeps log-spaced steps."""
        import jax  # computing, not reading: jax, the trainer and orbax only now

        from miiii.checkpoint import Checkpoints
        from miiii.train import make_trainer

        kept = self.kept_steps
        if not kept:
            raise ConfigError(f"{self.path} has no checkpoints to take parameters from")
        before = [s for s in kept if s <= step]
        if not before and not after:
            raise ConfigError(f"params_at({step}): no step at or before {step} was kept (kept: {kept}); pass "
                              "after=True for the nearest kept step after it, or keep more with ckpt.keep_log")
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


def load_run(run_dir: str | Path, verify: bool = True) -> Run:
    """Load a finished (or resumable) run; activations are opened with mmap_mode='r'.

    An interrupted run's activations are cut (lazily) to the rows already written. Damaged files (a
    truncated metrics.npz or .npy, an edited config.json, a file that differs from its checksum) raise a ConfigError
    that names the file. `verify`: check every file a finished run lists in checksums.json against its sha256 and
    read every activation row once to check it against index.json's crc32 (about 2 GB/s). A finished run with no
    checksums.json (written before it) loads with a warning, as `Run.legacy`.
    """
    path = Path(run_dir)
    config = read_config(path)
    check_unedited(path, config, read_ckpt_meta(path, strict=False))
    metrics, summary, params = read_metrics(path), read_summary(path), read_params(path)
    acts, index, steps = {}, {}, np.zeros(0, np.int64)
    if (path / ACTS / ACTS_INDEX).exists():
        index = read_acts_index(path)
        done, finished = index.get("complete_step"), index.get("finished", True)
        for name, meta in index.get("arrays", {}).items():
            f = path / ACTS / acts_file(path, meta.get("file"))
            a = read_npy(f)
            if list(a.shape) != list(meta["shape"]) or str(a.dtype) != meta["dtype"]:
                raise ConfigError(f"{f} is damaged: shape {a.shape} {a.dtype}, index.json says {meta['shape']} "
                                  f"{meta['dtype']}")
            if done is not None and not finished:  # rows for steps < complete_step are on disk
                every = tuple(meta["steps"]) if meta.get("steps") is not None else meta.get("every", 1)
                a = a[: rows_before(done, every)]
            acts[name] = a
        steps = np.asarray(index.get("steps", []), np.int64)
        if done is not None and not finished:
            steps = steps[steps < done]
    # each file read and its form checked (the messages that say what is wrong); then every byte against its checksum
    legacy = False
    if verify and check_manifest(path) is None and ((path / SUMMARY).exists() or (path / PARAMS).exists()):
        legacy = True
        warnings.warn(f"{path} has no checksums.json: a run written before its files were checksummed (a legacy "
                      "run); its activations and checkpoints are checked, its other files cannot be", stacklevel=2)
    if verify and index:
        for name, a in acts.items():
            check_rows(path / ACTS / index["arrays"][name]["file"], a, index["arrays"][name].get("crc32", []))
        check_inputs(path, index)
    return Run(path, config, metrics, summary, params, acts, index, steps, legacy)
