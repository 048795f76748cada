"""A TransformerLens-shaped cache: `cache[name]` with its axes said, from `run_with_cache` and from a run's recording.

    logits, cache = run.model.run_with_cache(params, tokens)   # every position, every neuron
    cache.axes("blocks.0.mlp.hook_post")                       # ("batch", "pos", "d_mlp")
    rec = run.recorded_cache(step=500)                         # what the run recorded at step 500
    rec.axes("blocks.0.mlp.hook_post")                         # ("batch", "d_mlp")
    rec.coords("blocks.0.mlp.hook_post")                       # {"pos": 2, "d_mlp": (0, 1, ..., 15)}
    rec.to_tl()                                                # a transformer_lens.ActivationCache (needs torch)

Why: a recording keeps part of each activation (`record.positions = last` drops the position axis, `record.neurons`
keeps some MLP neurons) under the same hook name as `run_with_cache`'s full tensor; `axes` names every axis and
`coords` says which part was kept, so column 3 of a recording is never taken for neuron 3 without a check. Axis names
are TransformerLens's (`HOOKS`, the table in docs/extending.md). Numpy only: reading a recording imports no jax;
hooks.py registers the class as a pytree, so `run_with_cache` returns it under `jit` and `vmap`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from miiii.config import ConfigError

_RESID = ("batch", "pos", "d_model")
_HEADS = ("batch", "pos", "head_index", "d_head")
_ATTN = ("batch", "head_index", "query_pos", "key_pos")
_SCALE = ("batch", "pos", "1")
_LN = "LayerNorm models only"
_NORM = "LayerNorm models only; before LN's weight and bias, as in TransformerLens 3 (2.x hooked after them)"

# Every hook point (a block's with {i}) -> its axes, which are TransformerLens's for the same name and values, and
# what a reader should know. The one hook point whose shape differs from TransformerLens's is `logits` (LOGITS).
HOOKS: dict[str, tuple[tuple[str, ...], str]] = {
    "hook_embed": (_RESID, ""),
    "hook_pos_embed": (_RESID, "models with a positional embedding; recorded as the training pass holds it, once "
                               "for every input (no batch axis)"),
    "blocks.{i}.hook_resid_pre": (_RESID, ""),
    "blocks.{i}.ln1.hook_scale": (_SCALE, _LN),
    "blocks.{i}.ln1.hook_normalized": (_RESID, _NORM),
    "blocks.{i}.attn.hook_q": (_HEADS, ""),
    "blocks.{i}.attn.hook_k": (_HEADS, ""),
    "blocks.{i}.attn.hook_v": (_HEADS, ""),
    "blocks.{i}.attn.hook_attn_scores": (_ATTN, "masked scores are -inf; TransformerLens 4.3's boot_native model "
                                                "holds the pattern here"),
    "blocks.{i}.attn.hook_pattern": (_ATTN, ""),
    "blocks.{i}.attn.hook_z": (_HEADS, ""),
    "blocks.{i}.hook_attn_out": (_RESID, ""),
    "blocks.{i}.hook_resid_mid": (_RESID, ""),
    "blocks.{i}.ln2.hook_scale": (_SCALE, _LN),
    "blocks.{i}.ln2.hook_normalized": (_RESID, _NORM),
    "blocks.{i}.mlp.hook_pre": (("batch", "pos", "d_mlp"), "record.neurons keeps some of d_mlp"),
    "blocks.{i}.mlp.hook_post": (("batch", "pos", "d_mlp"), "record.neurons keeps some of d_mlp"),
    "blocks.{i}.hook_mlp_out": (_RESID, ""),
    "blocks.{i}.hook_resid_post": (_RESID, ""),
    "ln_final.hook_scale": (_SCALE, _LN),
    "ln_final.hook_normalized": (_RESID, _NORM),
}
# logits by readout: "last" (the paper's tasks) reads one row per task at the last position, classes past a task's own
# count 0; "all" (the book) predicts at every position. TransformerLens returns them, (batch, pos, d_vocab_out), and
# caches none; an export-tl model's task s is logits[:, -1, slice(*miiii["slices"][name])].
LOGITS = {"last": ("batch", "slot", "class"), "all": ("batch", "pos", "d_vocab_out")}
TL_LOGITS = ("batch", "pos", "d_vocab_out")
UNBATCHED = ("hook_pos_embed",)  # recorded from the training pass, which holds them once for the whole batch
POSITION_AXES = ("pos", "query_pos")  # the axis record.positions = last takes the last position of
_FROM_RECORD = {"input": "batch", "neuron": "d_mlp", "head": "head_index", "one": "1", "pos": "pos"}  # index.json's


def pattern(name: str) -> str:
    """blocks.3.mlp.hook_post -> blocks.{i}.mlp.hook_post: a hook point's row in HOOKS."""
    return re.sub(r"^blocks\.\d+\.", "blocks.{i}.", name)


def hook_axes(name: str, readout: str = "last", ndim: int | None = None) -> tuple[str, ...] | None:
    """The axes of hook point `name` as run_with_cache returns it; a point HOOKS does not list: batch then dim1, dim2,
    ... (given its `ndim`), or None."""
    if name == "logits":
        return LOGITS[readout]
    if pattern(name) in HOOKS:
        return HOOKS[pattern(name)][0]
    return None if ndim is None else ("batch", *(f"dim{i}" for i in range(1, ndim)))


def hook_table() -> str:
    """docs/extending.md's table of every hook point: its axes here, recorded, and TransformerLens's (generated:
    tests/test_cache.py checks the docs hold exactly this)."""
    def shape(axes):
        return "(" + ", ".join(axes) + ")"

    def recorded(axes, name=""):
        drop = (*POSITION_AXES, *(("batch",) if name in UNBATCHED else ()))
        return shape(("step", *(a for a in axes if a not in drop)))

    rows = ["| hook point | `run_with_cache` | recorded (`record.positions=last`) | TransformerLens | note |",
            "| --- | --- | --- | --- | --- |"]
    rows += [f"| `{p}` | {shape(axes)} | {recorded(axes, p)} | `{p}` {shape(axes)} | {note} |"
             for p, (axes, note) in HOOKS.items()]
    rows += [f"| `logits` | readout last: {shape(LOGITS['last'])}; all: {shape(LOGITS['all'])} | "
             f"{recorded(LOGITS['last'])}; {recorded(LOGITS['all'])} | returned, not cached: {shape(TL_LOGITS)} | "
             "readout last: one row per task, read at the last position; export-tl puts task s at "
             "`logits[:, -1, slice(*miiii['slices'][task])]` |"]
    return "\n".join(rows)


@dataclass(frozen=True, eq=False)
class Cache(Mapping):
    """Hook name -> activation, read like a dict (`cache[name]`, `list(cache)`, `dict(cache)`, `cache | other`),
    with `axes(name)` and, for a part of the full tensor, `coords(name)`."""

    arrays: Mapping[str, object]  # name -> array (numpy, a memmap, or jax's under jit)
    axes_of: Mapping[str, tuple[str, ...]]  # name -> its axis names
    # name -> {axis: what it holds of the full tensor's axis}: a tuple of indices (neurons, positions, the steps of a
    # "step" axis) or an int (an axis of the full tensor dropped at that index: pos -> the last position)
    coords_of: Mapping[str, Mapping[str, int | tuple[int, ...]]] = field(default_factory=dict)
    step: int | None = None  # the step whose parameters computed it (a recording at one step); None: not said

    def __getitem__(self, name: str):
        try:
            return self.arrays[name]
        except KeyError:
            raise KeyError(f"{name!r} is not in this cache; it holds {', '.join(self.arrays) or 'nothing'}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def __or__(self, other: Mapping) -> dict:
        return {**self, **other}

    def __ror__(self, other: Mapping) -> dict:
        return {**other, **self}

    def axes(self, name: str) -> tuple[str, ...]:
        """The axis names of `cache[name]`, one per dimension; leading axes a `jax.vmap` added are "mapped"."""
        axes = self.axes_of[name]
        return ("mapped",) * (len(self[name].shape) - len(axes)) + tuple(axes)

    def coords(self, name: str) -> dict[str, int | tuple[int, ...]]:
        """What `cache[name]` holds of the full activation: {axis: the indices kept} for an axis that is a part
        (d_mlp: the recorded neurons; step: the step of each row), {axis: index} for one it dropped (pos: the
        last position); {} for a full tensor."""
        return dict(self.coords_of.get(name, {}))

    def describe(self, name: str) -> str:
        """One line: each axis with its size and, for a part, what it holds."""
        coords = self.coords(name)
        parts = []
        for axis, n in zip(self.axes(name), self[name].shape, strict=True):
            kept = coords.get(axis)
            parts.append(f"{axis}={n}" + (f" {_span(kept)}" if isinstance(kept, tuple) else ""))
        dropped = [f"{a}={i}" for a, i in coords.items() if not isinstance(i, tuple)]
        return f"{name} ({', '.join(parts)})" + (f" at {', '.join(dropped)}" if dropped else "")

    def __repr__(self) -> str:
        head = "Cache" + (f" at step {self.step}" if self.step is not None else "")
        return "\n  ".join([f"{head}: {len(self)} hook point(s)", *(self.describe(n) for n in self)])

    def to_tl(self, model=None):
        """A transformer_lens.ActivationCache of these activations as float32 torch tensors (logits, which
        TransformerLens returns rather than caches, stay out); `model` the TransformerLens model its methods need
        (an export-tl export loaded as docs/extending.md says). Needs torch and transformer_lens; one step only."""
        stepped = [n for n in self if "step" in self.axes(n)]
        if stepped:
            raise ValueError(f"{stepped[0]} has a step axis; TransformerLens's cache holds one forward pass: take one "
                             "step, run.recorded_cache(step=N)")
        try:
            import torch
            from transformer_lens import ActivationCache
        except ImportError as e:
            raise ImportError(f"Cache.to_tl needs torch and transformer_lens ({e.name or e} is not importable): "
                              "install a CPU torch, then `pip install -e '.[tl]'` (`make test-tl` does both)") from None
        tensors = {n: torch.from_numpy(np.array(a, np.float32 if np.issubdtype(np.asarray(a).dtype, np.floating)
                                                else None))
                   for n, a in self.items() if n != "logits"}
        batch = all(self.axes(n)[:1] == ("batch",) for n in tensors)
        return ActivationCache(tensors, model, has_batch_dim=batch)


def _span(kept: tuple[int, ...]) -> str:
    if len(kept) > 2 and list(kept) == list(range(kept[0], kept[0] + len(kept))):
        return f"[{kept[0]}..{kept[-1]}]"
    return f"{list(kept)}" if len(kept) <= 8 else f"[{kept[0]}, {kept[1]}, ..., {kept[-1]}]"


def full_cache(arrays: Mapping[str, object], readout: str) -> Cache:
    """run_with_cache's cache: every array is the full activation, axes by HOOKS."""
    return Cache(arrays, {n: hook_axes(n, readout, len(a.shape)) for n, a in arrays.items()})


def recorded_axes(name: str, axes: list[str], readout: str) -> tuple[str, ...]:
    """index.json's axes of a recorded activation ("step", "input", "neuron", ...) by TransformerLens's names."""
    attn = name.endswith(("attn.hook_pattern", "attn.hook_attn_scores"))
    out = tuple("query_pos" if a == "pos" and attn else _FROM_RECORD.get(a, a) for a in axes)
    return tuple("d_vocab_out" if a == "class" and readout == "all" else a for a in out) if name == "logits" else out


def recorded_cache(acts: Mapping[str, np.ndarray], index: dict, steps_of, readout: str,
                   step: int | None = None) -> Cache:
    """A run's recorded activations (`Run.acts`, its index.json) as a Cache: every row, with a "step" axis, or the
    row of `step`. `steps_of(name)` gives the step of each row (Run.steps_of)."""
    arrays = {n: a for n, a in acts.items() if index["arrays"][n].get("kind", "act") == "act"}
    if not arrays:
        raise ConfigError("this run recorded no activations (record.acts was empty): there is no recorded cache; "
                          "compute one with run.model.run_with_cache")
    n_ctx = index["inputs"]["shape"][1]
    axes, coords, out = {}, {}, {}
    for n, a in arrays.items():
        meta = index["arrays"][n]
        ax = recorded_axes(n, meta["axes"], readout)
        c: dict = {}
        if "d_mlp" in ax and index.get("neurons"):
            c["d_mlp"] = tuple(int(i) for i in index["neurons"])
        pos = next((p for p in POSITION_AXES if p in ax), None)
        if pos is not None and meta.get("pos_index") and meta["pos_index"] != list(range(n_ctx)):
            c[pos] = tuple(int(i) for i in meta["pos_index"])  # the training pass's last block: the last one only
        full = hook_axes(n, readout) or ()
        dropped = next((p for p in POSITION_AXES if p in full), None)
        if index.get("positions") == "last" and pos is None and dropped is not None:
            c[dropped] = n_ctx - 1  # record.positions = last: the position the answer is read at
        steps = tuple(int(s) for s in steps_of(n))
        if step is None:
            out[n], axes[n], coords[n] = a, ax, {"step": steps, **c}
            continue
        if step not in steps:
            before, after = [s for s in steps if s < step][-1:], [s for s in steps if s > step][:1]
            raise ConfigError(f"step {step} was not recorded (the nearest recorded: "
                              f"{', '.join(map(str, before + after)) or 'none'}; {len(steps)} recorded steps, "
                              f"run.steps_of(name) lists them)")
        out[n], axes[n], coords[n] = np.asarray(a[steps.index(step)]), ax[1:], c
    return Cache(out, axes, coords, step)
