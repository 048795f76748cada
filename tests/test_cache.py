"""The cache (miiii/cache.py): run_with_cache's names every axis of every hook point with the size it has; a
recording's cache is run_with_cache's full tensor at the step's parameters, cut to the positions and neurons its
coords say; it reads like the dict it replaces; docs/extending.md's hook table is generated and covers every hook point
of every preset; to_tl says what it needs, and with TransformerLens installed gives its ActivationCache."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import jax
import numpy as np
import pytest
from _runhelp import ROOT, SLOW, finished_run

from miiii.cache import HOOKS, Cache, hook_table, pattern
from miiii.config import ConfigError
from miiii.hooks import HookedModel
from miiii.presets import PRESETS, get_preset
from miiii.tasks import make_task
from miiii.train import make_trainer

POST = "blocks.0.mlp.hook_post"


def sizes(model: HookedModel, b: int, t: int) -> dict[str, int]:
    """What each axis name means for `model`, in numbers."""
    c = model.cfg
    return {"batch": b, "pos": t, "query_pos": t, "key_pos": t, "d_model": c.d_model, "d_mlp": c.mlp_dim,
            "head_index": c.n_heads, "d_head": c.d_head, "1": 1, "slot": model.n_out, "class": model.d_out,
            "d_vocab_out": model.d_out}


@pytest.mark.parametrize("preset", ["nanda-tiny", "miiii-tiny", "addition-tiny"])
def test_axes_name_every_dimension_of_every_hook_point(preset):
    """For every hook point (read from hook_names): one axis name per dimension, each the size its name says; under
    jit the cache comes back with the same axes and values; dict-style reading is what it was."""
    cfg = get_preset(preset)
    task = make_task(cfg.task)
    params = make_trainer(cfg, task).init(0).params
    model = HookedModel.of(cfg, task)
    x = task.valid.x[:3]
    logits, cache = model.run_with_cache(params, x)
    size = sizes(model, *x.shape)
    for name in model.hook_names():
        axes, shape = cache.axes(name), cache[name].shape
        assert len(axes) == len(shape) and axes[0] == "batch", (name, axes, shape)
        assert all(n == size[a] for a, n in zip(axes, shape, strict=True) if not a.startswith("dim")), (name, axes)
        assert cache.coords(name) == {}  # the full tensor
    # read as a dict: names in the pass's order, items, membership, |, ** and a KeyError that lists the names
    assert list(cache) == list(model.hook_names()) and len(cache) == len(model.hook_names())
    assert isinstance(cache, Cache) and POST in cache and "nope" not in cache
    assert dict(cache).keys() == cache.keys() and {**cache}[POST] is cache[POST]
    assert list({"x": 1} | cache) == ["x", *cache] and list(cache | {"x": 1}) == [*cache, "x"]
    np.testing.assert_array_equal(cache["logits"], logits)
    with pytest.raises(KeyError, match="'nope' is not in this cache; it holds hook_embed"):
        cache["nope"]
    names = (POST, "logits")
    _, jitted = jax.jit(model.run_with_cache, static_argnames="names")(params, x, names=names)
    assert isinstance(jitted, Cache) and list(jitted) == list(names)
    for n in names:
        assert jitted.axes(n) == cache.axes(n)
        np.testing.assert_allclose(jitted[n], cache[n], rtol=1e-5, atol=1e-6)
    two = jax.tree.map(lambda a: np.stack([a, a]), params)  # vmap over two seeds: the mapped axis leads
    mapped = jax.vmap(lambda p: model.run_with_cache(p, x, names)[1])(two)
    assert mapped.axes(POST) == ("mapped", *cache.axes(POST)) and mapped[POST].shape == (2, *cache[POST].shape)


def test_every_hook_point_has_its_row():
    """Every hook point of every preset's model has its row in the table (HOOKS, or logits), and every row is some
    preset's: a hook point's row is part of its entry."""
    used = set()
    for name, (cfg, _) in PRESETS.items():
        for hook in HookedModel(cfg.model, 0, 0, 0, 0).hook_names():  # the names depend on the shapes alone
            assert hook == "logits" or pattern(hook) in HOOKS, f"{name}: {hook} has no row in miiii/cache.py HOOKS"
            used.add(pattern(hook))
    assert set(HOOKS) <= used, f"rows no preset has: {sorted(set(HOOKS) - used)}"
    assert all(f"| `{p}` |" in hook_table() for p in [*HOOKS, "logits"])


def test_the_docs_hold_the_hook_table():
    table = hook_table()
    docs = (ROOT / "docs" / "extending.md").read_text()
    assert f"-->\n{table}\n<!-- end of the hook table -->" in docs, \
        "docs/extending.md's hook table is not miiii.cache.hook_table(): paste its output between the markers"


def cut(full: Cache, name: str, rec: Cache) -> np.ndarray:
    """The full activation cut as `rec` says it holds it: each coord taken along its axis (an int drops the axis),
    and the batch axis dropped where the recording holds the value once for every input."""
    a, axes = np.asarray(full[name], np.float64), list(full.axes(name))
    for axis, kept in rec.coords(name).items():
        i = axes.index(axis)
        a = np.take(a, kept, axis=i)
        if isinstance(kept, int):
            axes.pop(i)
    if "batch" in axes and "batch" not in rec.axes(name):
        assert (a == a[:1]).all(), name  # the same for every input
        a, _ = a[0], axes.pop(0)
    assert tuple(axes) == rec.axes(name), (name, axes, rec.axes(name))
    return a


def assert_recorded(rec: Cache, full: Cache, tol: float) -> None:
    for name in rec:
        want = cut(full, name, rec)
        scale = max(float(np.abs(want).max()), 1.0)
        np.testing.assert_allclose(np.asarray(rec[name], np.float64), want, rtol=tol, atol=tol * scale, err_msg=name)


@SLOW
def test_a_recording_is_the_full_tensor_at_its_positions_and_neurons():
    """nanda-tiny's own recording (the last position, neurons 0..15, float16): at a kept step, each array equals
    run_with_cache on params_at(step) and the recorded inputs, cut to the coords it names; the all-steps cache holds
    the same row under that step; a step that was not recorded names the nearest ones."""
    run = finished_run("nanda-tiny")
    every = run.recorded_cache()
    steps = every.coords(POST)["step"]
    assert steps == tuple(run.steps_of(POST)) and every[POST].shape[0] == len(steps)
    assert every.axes(POST) == ("step", "batch", "d_mlp") and every.axes("logits") == ("step", "batch", "slot", "class")
    both = [s for s in run.kept_steps if s in steps and 0 < s < steps[-1]]  # a checkpoint and a recorded row
    step = both[len(both) // 2]
    rec = run.recorded_cache(step)
    assert rec.step == step and set(rec) == set(run.config.record.acts)
    assert run.config.record.neurons == tuple(range(16)) and rec.coords(POST) == {"pos": 2, "d_mlp": tuple(range(16))}
    assert rec.axes("blocks.0.attn.hook_pattern") == ("batch", "head_index", "key_pos")
    assert rec.coords("blocks.0.attn.hook_pattern") == {"query_pos": 2} and rec.coords("logits") == {}
    for name in rec:
        assert len(rec.axes(name)) == rec[name].ndim and rec[name].shape[0] == len(run.recorded_inputs)
        np.testing.assert_array_equal(rec[name], every[name][steps.index(step)], err_msg=name)
    _, full = run.model.run_with_cache(run.params_at(step), run.recorded_inputs)
    assert_recorded(rec, full, 2e-3)  # float16 on disk
    assert "d_mlp=16 [0..15]" in repr(rec) and "at pos=2" in repr(rec)
    with pytest.raises(ConfigError, match=f"step {step + 1} was not recorded.*nearest recorded: {step}, {step + 10}"):
        run.recorded_cache(step + 1)


@pytest.mark.study  # trains a run recording every hook point (make test-studies; make test's 10-minute budget)
def test_every_hook_point_recorded_at_every_position():
    """Every hook point recorded with record.positions=all and two neurons (float32): at the last step (the final
    parameters) each is the full tensor at its coords: the positions the training pass computes, the neurons kept,
    hook_pos_embed once for every input."""
    cfg = get_preset("nanda-tiny")
    names = HookedModel.of(cfg, make_task(cfg.task)).hook_names()
    run = finished_run("nanda-tiny", "steps=20", "chunk=10", "record.every=10", "record.params=",
                       "record.inputs=grid:5", "record.positions=all", "record.dtype=float32", "record.neurons=1,3",
                       f"record.acts={','.join(names)}")
    rec = run.recorded_cache(20)
    assert list(rec) == list(names)
    assert rec.coords(POST) == {"pos": (2,), "d_mlp": (1, 3)}  # the training pass's last block: the last position
    assert rec.coords("blocks.0.mlp.hook_pre") == {"d_mlp": (1, 3)} and rec.axes("hook_pos_embed") == ("pos",
                                                                                                       "d_model")
    _, full = run.model.run_with_cache(run.params, run.recorded_inputs)
    assert_recorded(rec, full, 1e-5)


def test_to_tl_says_what_it_needs_and_converts(monkeypatch):
    """Without torch: one line that names it. With stand-ins for torch and TransformerLens: float32 arrays, no logits,
    has_batch_dim. A step axis is refused."""
    cache = Cache({POST: np.ones((2, 3, 4), np.float16), "logits": np.zeros((2, 1, 5))},
                  {POST: ("batch", "pos", "d_mlp"), "logits": ("batch", "slot", "class")})
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"^Cache.to_tl needs torch and transformer_lens \(torch is not importable"):
        cache.to_tl()
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(from_numpy=lambda a: ("tensor", a)))
    monkeypatch.setitem(sys.modules, "transformer_lens",
                        SimpleNamespace(ActivationCache=lambda d, model, has_batch_dim: (d, model, has_batch_dim)))
    tensors, model, batch = cache.to_tl("the model")
    assert list(tensors) == [POST] and model == "the model" and batch is True
    kind, a = tensors[POST]
    assert kind == "tensor" and a.dtype == np.float32 and a.shape == (2, 3, 4)
    stepped = Cache({POST: np.ones((5, 2, 4))}, {POST: ("step", "batch", "d_mlp")})
    with pytest.raises(ValueError, match="has a step axis.*run.recorded_cache"):
        stepped.to_tl()


def test_to_tl_gives_transformerlens_cache():
    """With TransformerLens installed (`make test-tl`): its ActivationCache holds every hook point's values."""
    pytest.importorskip("transformer_lens")
    pytest.importorskip("torch")
    from transformer_lens import ActivationCache

    run = finished_run("nanda-tiny")
    _, cache = run.model.run_with_cache(run.params, run.inputs("valid")[:8])
    tl = cache.to_tl()
    assert isinstance(tl, ActivationCache) and set(tl.keys()) == set(cache) - {"logits"}
    for n in tl.keys():
        np.testing.assert_allclose(tl[n].numpy(), cache[n], rtol=1e-6, err_msg=n)
