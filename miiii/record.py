"""Recording activations and parameters every k steps (or at log-spaced steps), streamed to `run_dir/acts/*.npy`.

A `Recording` is planned from the config before any file is written: it checks every name (any hook point that
`run.model.hook_names()` lists; the few the training forward pass emits are read from it, the others from the
hooked forward pass, hooks.py, run on the same parameters), fixes the
inputs (the p x p grid, a crop of it, the book's probes, or validation samples) and the shape of every
array, and so knows the exact bytes on disk. Inside the scanned chunk, `record_groups()` computes the
selection in eval mode (no dropout) on the parameters *before* update t, for every recorded step t.
The host's `recorder.Recorder` streams each chunk into the files; `np.load(path, mmap_mode="r")` reads any step
lazily.

    acts/NAME.npy      (n_recorded, ...) one file per recorded name, axes in index.json
    acts/inputs.npy    (n_inputs, n_ctx) int32 tokens of the recorded inputs
    acts/index.json    arrays {NAME: file, shape, dtype, axes, kind, every, count, steps (record.log: the
                       recorded steps; else null), crc32}, steps, inputs (with the crc32 of inputs.npy's bytes),
                       complete_step (records for every step < complete_step are on disk), finished, checksum
                       (sha256 of the rest: rundir.write_acts_index);
                       crc32: [[rows, zlib.crc32 of the rows since the previous entry], ...], one per commit
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from miiii.cadence import due_steps, log_steps, rows_before
from miiii.config import ConfigError, RunConfig, shown
from miiii.files import free_bytes
from miiii.hooks import HookedModel
from miiii.model import param_names
from miiii.rundir import ACTS_INPUTS
from miiii.tasks import Task, read_probe
from miiii.tokens import EQUALS, PLUS, decode, grid_inputs

GiB = 1 << 30


# Axes of each activation after the input axis, by TransformerLens name suffix; "pos" is the axis that
# `record.positions = last` reduces. Names not listed keep all their axes (dim1, dim2, ...).
_ACT_AXES = {
    "hook_embed": ("pos", "d_model"),
    "hook_resid_pre": ("pos", "d_model"),
    "hook_resid_mid": ("pos", "d_model"),
    "hook_resid_post": ("pos", "d_model"),
    "hook_attn_out": ("pos", "d_model"),
    "hook_mlp_out": ("pos", "d_model"),
    "hook_normalized": ("pos", "d_model"),
    "hook_scale": ("pos", "one"),
    "mlp.hook_pre": ("pos", "neuron"),
    "mlp.hook_post": ("pos", "neuron"),
    "attn.hook_q": ("pos", "head", "d_head"),
    "attn.hook_k": ("pos", "head", "d_head"),
    "attn.hook_v": ("pos", "head", "d_head"),
    "attn.hook_z": ("pos", "head", "d_head"),
    "attn.hook_attn_scores": ("head", "pos", "key_pos"),
    "attn.hook_pattern": ("head", "pos", "key_pos"),  # pos = query position
}
_PARAM_AXES = {
    "W_E": ("d_vocab", "d_model"), "W_pos": ("n_ctx", "d_model"), "W_Q": ("head", "d_model", "d_head"),
    "W_K": ("head", "d_model", "d_head"), "W_V": ("head", "d_model", "d_head"), "W_O": ("head", "d_head", "d_model"),
    "W_in": ("d_model", "d_mlp"), "W_out": ("d_mlp", "d_model"), "b_in": ("d_mlp",), "b_out": ("d_model",),
}


def act_axes(name: str, ndim: int, readout: str) -> tuple[str, ...]:
    """Axis names of activation `name` with `ndim` dims (input axis first, except hook_pos_embed)."""
    if name == "hook_pos_embed":
        return ("pos", "d_model")
    if name == "logits":
        return ("input", "slot" if readout == "last" else "pos", "class")
    for suffix, axes in _ACT_AXES.items():
        if name.endswith(suffix) and len(axes) == ndim - 1:
            return ("input", *axes)
    return ("input", *(f"dim{i}" for i in range(1, ndim)))


def param_path(name: str) -> tuple[str, ...]:
    """TransformerLens name -> key path in the params tree: blocks.0.attn.W_Q -> (blocks_0, attn, W_Q)."""
    return tuple(re.sub(r"blocks\.(\d+)", r"blocks_\1", name).split("."))


def npy_nbytes(shape: tuple[int, ...], dtype) -> int:
    """Exact size of a `.npy` file as `open_memmap` writes it (format 1.0 header, 64-byte aligned)."""
    buf = io.BytesIO()
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(buf, d)
    return buf.tell() + math.prod(shape) * np.dtype(dtype).itemsize


# ---------------------------------------------------------------- inputs


def probe_tokens(task: Task, text: str) -> np.ndarray:
    """`123+456` (addition) or `12345` (reversal) -> the model input X (n_ctx tokens), answer included.

    The probe's form decides its encoding (`tasks.read_probe`); it must put its `+`/`=` where the task's sequences
    have them.
    """
    x = read_probe(task.name, text)[:-1]
    ref = task.train.x[0]
    marks = np.isin(ref, [PLUS, EQUALS])
    if len(x) != len(ref) or not np.array_equal(x[marks], ref[marks]) or np.isin(x[~marks], [PLUS, EQUALS]).any():
        raise ConfigError(f"record.probes: '{shown(text)}' does not fit the {task.name} task (its inputs look like "
                          f"'{decode(ref)}')")
    return x.astype(np.int32)


def record_inputs(cfg: RunConfig, task: Task) -> tuple[np.ndarray, dict]:
    """The recorded inputs (n, n_ctx) and their description for index.json."""
    r = cfg.record
    kind, _, arg = r.inputs.partition(":")
    if kind == "grid":
        if task.generative:
            raise ConfigError(f"record.inputs = '{shown(r.inputs)}': the {task.name} task has no input grid; "
                              "use probes or valid:N")
        p = cfg.task.p
        k = p if not arg else _int_arg(r.inputs, arg, 1, p)
        return grid_inputs(p, cfg.task.digit_order, k), {"kind": "grid", "p": p, "size": k,
                                                     "digit_order": cfg.task.digit_order,
                               "order": f"row i is (x0, x1) = (i % {k}, i // {k}); to_grid(a, {k}) -> [x0, x1]"}
    if kind == "probes" and not arg:
        if not r.probes:
            raise ConfigError("record.inputs = probes needs record.probes, e.g. --set record.probes=123+456,999+001")
        x = np.stack([probe_tokens(task, t) for t in r.probes])
        return x, {"kind": "probes", "text": list(r.probes), "tokens": [decode(row) for row in x]}
    if kind == "valid":
        n = _int_arg(r.inputs, arg, 1, len(task.valid.x))
        return task.valid.x[:n].astype(np.int32), {"kind": "valid", "count": n, "order": "first n validation samples"}
    raise ConfigError(f"record.inputs = '{shown(r.inputs)}': choose grid, grid:K, probes or valid:N")


def _int_arg(text: str, arg: str, lo: int, hi: int) -> int:
    try:
        v = int(arg)
    except ValueError:
        v = lo - 1
    if not lo <= v <= hi:
        raise ConfigError(f"record.inputs = '{shown(text)}': the number must lie in [{lo}, {hi}]")
    return v


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class RecordedArray:
    """One file under acts/: an activation or a parameter, recorded every `every` steps (or at the steps of a
    log-spaced schedule: `every` is then their tuple)."""

    name: str
    kind: str  # act | param
    every: int | tuple[int, ...]
    count: int  # recorded steps: 0, every, ..., up to and including the last step
    shape: tuple[int, ...]  # one record
    axes: tuple[str, ...]  # one record
    dtype: str
    # the token positions its "pos" axis holds, when it has one: all of them, or only the last ones where the
    # training pass computes no more (its final block at the last position only; the hooked pass has every one)
    pos: tuple[int, ...] = ()

    @property
    def file(self) -> str:
        return f"{self.name}.npy"

    @property
    def full_shape(self) -> tuple[int, ...]:
        return (self.count, *self.shape)

    @property
    def nbytes(self) -> int:
        return npy_nbytes(self.full_shape, self.dtype)


@dataclass(frozen=True)
class Recording:
    arrays: dict[str, RecordedArray]
    inputs: np.ndarray  # (n, n_ctx) int32
    inputs_meta: dict
    groups: tuple  # ((every or the tuple of recorded steps, names, kind), ...)
    steps: int  # train.steps
    select: dict = field(default_factory=dict)  # act name -> (pos_axis | None, neuron_axis | None)
    neurons: tuple[int, ...] = ()
    dtype: str = "float16"
    hooked: HookedModel | None = None  # the hooked forward pass, for the names the training pass does not emit
    via_hooks: tuple[str, ...] = ()  # those names

    @property
    def nbytes(self) -> int:
        """Exact bytes of every file under acts/ but index.json."""
        return sum(a.nbytes for a in self.arrays.values()) + npy_nbytes(self.inputs.shape, np.int32) * bool(self.arrays)

    def bytes_per_step(self) -> float:
        return sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize * a.count / (self.steps + 1)
                   for a in self.arrays.values())

    def rows(self, start: int, n: int) -> tuple[int, ...]:
        """Recorded steps of each group in the chunk [start, start + n)."""
        return tuple(int(rows_before(start + n, every) - rows_before(start, every)) for every, _, _ in self.groups)

    def counts(self, start: int, n: int) -> tuple[int, ...]:
        """The chunk's buffer rows per group (a static argument of the chunk): `rows`, rounded up to a power of two
        for a log-spaced schedule, whose rows per chunk change all the time (a few shapes compile, not one per
        chunk; the rows past `rows` stay unused)."""
        return tuple(c if isinstance(every, int) or c == 0 else 1 << (c - 1).bit_length()
                     for c, (every, _, _) in zip(self.rows(start, n), self.groups, strict=True))

    def record_groups(self) -> tuple:
        """`(every, fn)` pairs for `make_trainer`; fn(apply, params, data) reads the inputs from data["record_x"]."""
        out = []
        dt = jnp.dtype(self.dtype)
        neurons = np.asarray(self.neurons, np.int32)
        for every, names, kind in self.groups:
            if kind == "param":
                def fn(apply, params, data, names=names):
                    return {n: _get(params, param_path(n)).astype(dt) for n in names}
            else:
                def fn(apply, params, data, names=names):
                    acts = {}
                    if any(n not in self.via_hooks for n in names):
                        acts = apply(params, data["record_x"])[1]
                    if self.via_hooks:
                        acts = acts | self.hooked.run_with_cache(params, data["record_x"], self.via_hooks)[1]
                    out = {}
                    for n in names:
                        a = acts[n]
                        pos, neu = self.select[n]
                        if neu is not None and len(neurons):
                            a = jnp.take(a, neurons, axis=neu)
                        if pos is not None:
                            a = jnp.take(a, a.shape[pos] - 1, axis=pos)
                        out[n] = a.astype(dt)
                    return out
            out.append((every, fn))
        return tuple(out)

    def committed(self, name: str, step: int, finished: bool) -> int:
        """Rows of array `name` on disk once every step < `step` is (all of them once the run has finished)."""
        a = self.arrays[name]
        return a.count if finished else int(rows_before(step, a.every))

    def index(self, complete_step: int, finished: bool, sums: dict | None = None) -> dict:
        """index.json; `sums`: name -> [[rows, crc32 of the rows since the previous entry], ...], one per commit."""
        first = next((g for g in self.groups if g[2] == "act"), self.groups[0] if self.groups else None)
        steps = due_steps(self.steps, first[0]) if first else []
        log = lambda a: isinstance(a.every, tuple)  # noqa: E731
        sums = sums or {}
        return {
            "arrays": {n: {"file": a.file, "shape": list(a.full_shape), "dtype": a.dtype, "axes": ["step", *a.axes],
                           "kind": a.kind, "every": None if log(a) else a.every, "count": a.count,
                           **({"pos_index": list(a.pos)} if a.pos else {}),
                           "steps": list(a.every) if log(a) else None, "crc32": sums.get(n, [])}
                       for n, a in self.arrays.items()},
            "steps": steps,  # the step axis of every activation array (parameters: every/count of their own)
            "inputs": {**self.inputs_meta, "file": ACTS_INPUTS, "shape": list(self.inputs.shape)},
            "positions": "last" if any(s[0] is not None for s in self.select.values()) else "all",
            "neurons": list(self.neurons), "complete_step": int(complete_step), "finished": bool(finished),
            "note": "row j of an array is step j * every (or steps[j]); steps >= complete_step are not written yet "
                    "unless finished",
        }


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return tree


def plan(cfg: RunConfig, task: Task, apply, params) -> Recording:
    """Check the recording spec against the model (`apply`, `params` abstract or real) and fix every shape."""
    r = cfg.record
    if not r.acts and not r.params:
        return Recording({}, np.zeros((0, task.n_ctx), np.int32), {}, (), cfg.train.steps)
    known_params = param_names(params)
    bad = [n for n in r.params if n not in known_params]
    if bad:
        raise ConfigError(f"record.params: unknown parameter(s) {shown(bad)}; this model has: "
                          f"{', '.join(known_params)}")
    x, meta = record_inputs(cfg, task) if r.acts else (np.zeros((1, task.n_ctx), np.int32), {})
    tokens = jax.ShapeDtypeStruct(x.shape, jnp.int32)
    _, acts = jax.eval_shape(apply, params, tokens)
    hooked = HookedModel.of(cfg, task)
    via_hooks = tuple(n for n in dict.fromkeys(r.acts) if n not in acts)
    bad = [n for n in via_hooks if n not in hooked.hook_names()]
    if bad:
        raise ConfigError(f"record.acts: unknown activation(s) {shown(bad)}; this model's hook points are: "
                          f"{', '.join(hooked.hook_names())}")
    if via_hooks:  # read from the hooked forward pass (every position of every block, as TransformerLens)
        acts = acts | jax.eval_shape(lambda p, t: hooked.run_with_cache(p, t, via_hooks)[1], params, tokens)
    dup = {n for n in (*r.acts, *r.params) if (*r.acts, *r.params).count(n) > 1}
    if dup:
        raise ConfigError(f"record: {shown(sorted(dup))} named twice")
    arrays, select = {}, {}
    mlp = cfg.model.mlp_dim
    if r.neurons and max(r.neurons) >= mlp:
        raise ConfigError(f"record.neurons: index {max(r.neurons)} out of range; the MLP has {mlp} neurons "
                          f"(0..{mlp - 1})")
    act_every = log_steps(cfg.train.steps, r.log) if r.log else r.every
    for n in r.acts:
        shape = tuple(acts[n].shape)
        axes = list(act_axes(n, len(shape), cfg.model.readout))
        neu = axes.index("neuron") if "neuron" in axes and r.neurons else None
        if neu is not None:
            shape = shape[:neu] + (len(r.neurons),) + shape[neu + 1:]
        pos = axes.index("pos") if r.positions == "last" and "pos" in axes else None
        if pos is not None:
            shape, axes = shape[:pos] + shape[pos + 1:], axes[:pos] + axes[pos + 1:]
        select[n] = (pos, neu)
        held = shape[axes.index("pos")] if "pos" in axes else 0  # positions held (shape and axes start alike)
        arrays[n] = RecordedArray(n, "act", act_every, int(rows_before(cfg.train.steps + 1, act_every)), shape,
                                  tuple(axes), r.dtype, tuple(range(x.shape[1] - held, x.shape[1])))
    for n in r.params:
        leaf = _get(params, param_path(n))
        last = n.rsplit(".", 1)[-1]
        axes = _PARAM_AXES.get(last, ())
        if len(axes) != len(leaf.shape):
            axes = tuple(f"dim{i}" for i in range(len(leaf.shape)))
        arrays[n] = RecordedArray(n, "param", r.params_every, rows_before(cfg.train.steps + 1, r.params_every),
                                  tuple(leaf.shape), axes, r.dtype)
    groups = tuple((e, names, kind) for e, names, kind in
                   ((act_every, tuple(r.acts), "act"), (r.params_every, tuple(r.params), "param")) if names)
    return Recording(arrays, x if r.acts else np.zeros((0, task.n_ctx), np.int32), meta, groups, cfg.train.steps,
                     select, tuple(r.neurons), r.dtype, hooked if via_hooks else None, via_hooks)


def check_budget(rec: Recording, run_dir: Path, budget: int) -> None:
    """Refuse (ConfigError, nothing written) a recording over `budget` bytes or the free disk."""
    free = free_bytes(run_dir)
    if rec.nbytes <= budget and rec.nbytes < free:
        return
    limit = f"--record-budget {budget:,} bytes" if rec.nbytes > budget else f"the free disk ({free:,} bytes)"
    biggest = sorted(rec.arrays.values(), key=lambda a: -a.nbytes)[:3]
    raise ConfigError(
        f"the recording needs {rec.nbytes:,} bytes ({rec.nbytes / GiB:.2f} GiB), more than {limit}; largest: "
        + ", ".join(f"{a.name} {a.nbytes / GiB:.2f} GiB" for a in biggest)
        + ". Shrink it with --set record.every=K / record.params_every=K (record less often), record.neurons=0:16, "
        "record.inputs=grid:37 or valid:N, record.positions=last, record.acts=... / record.params=... (fewer names), "
        "record.dtype=float16, or --steps; or raise --record-budget"
    )


def describe_recording(rec: Recording) -> str:
    """The run's one line on its recording: the bytes acts/ will hold and each recorded array's count x shape."""
    if not rec.arrays:
        return "recording: nothing (record.acts and record.params are empty)"
    parts = [f"{a.name} {a.count}x{list(a.shape)}" for a in rec.arrays.values()]
    return f"recording: {rec.nbytes:,} bytes ({rec.nbytes / GiB:.3f} GiB) in acts/: " + ", ".join(parts)
