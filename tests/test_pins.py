"""model.pins: entries held at constants are no parameters, and the pinned model is the full model with them set;
the AdderBoard gauge (experiments/adderboard/gauge.py) moves the 41 along six directions that keep its function."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.adderboard.gauge import AT_41, MODEL_PINS, PINS, free_entries, gauge_fixed, model_pins
from miiii.config import ConfigError, apply_overrides
from miiii.model import build_model, count_params
from miiii.presets import get_preset
from miiii.rundir import flatten_params, unflatten
from miiii.tasks import make_task
from miiii.validate import validate

# the 41 (experiments/adderboard/recipes.py MODEL_41A1) on 3-digit operands
THE_41 = ["task.name=board", "n_digits=3", "n_train=8", "n_valid=64", "model.n_heads=1", "model.d_mlp=2",
          "model.embed=arc", "model.init=qwen", "model.arc_init=2.5,-1.2,0.29", "model.tie_angle=1.0",
          "model.ties=attn.W_K=rot(attn.W_Q),attn.W_V=attn.W_Q,attn.W_O=T(attn.W_Q)",
          "model.norm_groups=ln1+ln2+ln_final,q_norm+k_norm"]


def _model(overrides):
    cfg = validate(apply_overrides(get_preset("adder-146"), overrides))
    task = make_task(cfg.task)
    return cfg, task, build_model(cfg.model, task)


def _logits(cfg, flat: dict, x) -> np.ndarray:
    """gauge.logits jitted: one compile, not one per operation (~5 s each); gauge.py's own, op by op, runs in every
    gauge() of test_gauge_writes_the_committed_41_as_a_35_and_a_32_that_decode_as_it."""
    model = build_model(cfg.model, make_task(cfg.task))
    return np.asarray(jax.jit(lambda p: model.apply({"params": unflatten(p)}, jnp.asarray(x))[0])(flat))


def test_a_pinned_model_is_the_full_model_with_the_entries_set():
    """Same key: the free entries are the full model's draw at their places, the count falls by the pinned entries,
    and the logits are the full model's with those entries set to the constants."""
    pins = "model.pins=W_E_arc[0]=3,mlp.W_in[2]=-0.5,attn.W_Q[0,:,1]=0,shared_norm_1.scale[3]=2"
    cfg, task, full = _model(THE_41)
    _, _, pinned = _model([*THE_41, pins])
    x = task.valid.x[:8]
    # jitted here and below: one compile each, not one small compile per operation (~10 s of them)
    p_full = jax.jit(full.init)({"params": jax.random.key(3)}, x)["params"]
    p_pin = jax.jit(pinned.init)({"params": jax.random.key(3)}, x)["params"]
    assert count_params(p_full) == 41 and count_params(p_pin) == 41 - 1 - 2 - 3 - 1
    np.testing.assert_array_equal(p_pin["blocks_0"]["mlp"]["W_in_free"],
                                  np.asarray(p_full["blocks_0"]["mlp"]["W_in"])[:2].ravel())
    np.testing.assert_array_equal(p_pin["W_E_arc_free"], np.asarray(p_full["W_E_arc"])[1:])
    q = np.asarray(p_full["blocks_0"]["attn"]["W_Q"]).copy()
    np.testing.assert_array_equal(p_pin["blocks_0"]["attn"]["W_Q_free"], np.delete(q[0], 1, axis=1).ravel())
    # the full model with the entries set: its logits are the pinned model's
    q[0, :, 1] = 0
    win = np.asarray(p_full["blocks_0"]["mlp"]["W_in"]).copy()
    win[2] = -0.5
    arc, g = np.asarray(p_full["W_E_arc"]).copy(), np.asarray(p_full["shared_norm_1"]["scale"]).copy()
    arc[0], g[3] = 3, 2
    p_set = {**p_full, "W_E_arc": arc, "shared_norm_1": {"scale": g},
             "blocks_0": {**p_full["blocks_0"], "attn": {**p_full["blocks_0"]["attn"], "W_Q": q},
                          "mlp": {**p_full["blocks_0"]["mlp"], "W_in": win}}}
    np.testing.assert_allclose(np.asarray(jax.jit(pinned.apply)({"params": p_pin}, x)[0]),
                               np.asarray(jax.jit(full.apply)({"params": p_set}, x)[0]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pins, says", [
    ("W_E_arc=1", "WEIGHT\\[INDEX\\]=VALUE"), ("W_E_arc[0]=nan", "finite"), ("mlp.W_in[9]=1", "not an entry"),
    ("mlp.W_in[0,0,0]=1", "not an entry"), ("W_E_arc[:]=1", "every entry"),
    ("mlp.W_in[2]=1,mlp.W_in[2,0]=3", "pinned twice"),
    ("attn.W_V[0]=0", "learns no attn.W_V"),  # a follower of the 41's ties: computed, not learned
    ("shared_norm_2.scale[0]=1", "learns no shared_norm_2.scale"),
])
def test_bad_pins_are_refused(pins, says):
    with pytest.raises(ConfigError, match=says):
        validate(apply_overrides(get_preset("adder-146"), [*THE_41, f"model.pins={pins}"]))
    with pytest.raises(ConfigError, match="learns no W_E_arc"):  # adder-146's embedding is a table
        validate(apply_overrides(get_preset("adder-146"), ["model.pins=W_E_arc[0]=1"]))


def _directions(p):
    """The six directions gauge.py names, each as a tangent at the 41's flat parameters p."""
    z = {k: np.zeros_like(v) for k, v in p.items()}
    q, gate, up, down = (p[k] for k in ("blocks_0/attn/W_Q", "blocks_0/mlp/W_gate", "blocks_0/mlp/W_in",
                                        "blocks_0/mlp/W_out"))
    glob = dict(z, W_E_arc=np.array([-p["W_E_arc"][0], 0, 0]), **{"shared_norm_0/scale": p["shared_norm_0/scale"],
                "blocks_0/attn/W_Q": -q, "blocks_0/mlp/W_gate": -gate, "blocks_0/mlp/W_in": -up,
                "blocks_0/mlp/W_out": -down})
    units = [dict(z, **{"blocks_0/mlp/W_in": up * (np.arange(2) == j),
                        "blocks_0/mlp/W_out": -down * (np.arange(2) == j)[:, None]}) for j in range(2)]
    dim2 = dict(z, **{"shared_norm_0/scale": p["shared_norm_0/scale"] * (np.arange(3) == 2),
                      "blocks_0/mlp/W_gate": -gate * (np.arange(3) == 2)[:, None],
                      "blocks_0/mlp/W_in": -up * (np.arange(3) == 2)[:, None]})
    outside = np.linalg.svd(q[0, :2])[2][2:]  # (2, 4): the complement of span(Q's rows 0, 1)
    rows = [dict(z, **{"blocks_0/attn/W_Q": np.pad(n[None, None], ((0, 0), (2, 0), (0, 0)))}) for n in outside]
    return [glob, *units, dim2, *rows]


def _scaling_directions(p):
    """gauge.py's last three: the MLP's two writes to residual dim 2 and the head's temperature."""
    z = {k: np.zeros_like(v) for k, v in p.items()}
    writes = [dict(z, **{"blocks_0/mlp/W_out": np.outer(np.arange(2) == j, np.arange(3) == 2).astype(float)})
              for j in range(2)]
    q, gate, up = p["blocks_0/attn/W_Q"], p["blocks_0/mlp/W_gate"], p["blocks_0/mlp/W_in"]
    rows01 = (np.arange(3) < 2)[:, None]
    temp = dict(z, **{"shared_norm_0/scale": p["shared_norm_0/scale"] * (np.arange(3) < 2),
                      "blocks_0/attn/W_Q": -q / 2, "blocks_0/mlp/W_gate": -gate * rows01,
                      "blocks_0/mlp/W_in": -up * rows01})
    return [*writes, temp]


def test_the_41s_six_directions_change_no_logit_and_the_gauge_keeps_its_function():
    """On a drawn 41 (scales and angle away from their starts): the logits' derivative along each of gauge.py's six
    directions is 0 (float64, against a random direction's), and the gauged 35 gives the 41's logits."""
    cfg, task, model = _model(THE_41)
    x = task.valid.x[:16]
    p = flatten_params(jax.jit(model.init)({"params": jax.random.key(5)}, x)["params"])  # jitted: one compile
    rng = np.random.default_rng(0)
    p = {k: np.asarray(v, np.float64) * (1 + 0.5 * rng.standard_normal(np.shape(v))) for k, v in p.items()}
    p["W_E_arc"][0] = 30.0
    with jax.enable_x64(True):
        @jax.jit  # the logits at p below: one compile, not one per operation
        def f(flat):
            return model.apply({"params": unflatten(flat)}, jnp.asarray(x))[0]

        derivative = jax.jit(lambda d: jax.jvp(f, (p,), (d,))[1])  # one compile for every direction

        def along(d):
            return np.abs(np.asarray(derivative(d))).max()

        noise = along({k: rng.standard_normal(np.shape(v)) * np.abs(v) for k, v in p.items()})  # each entry by its size
        for d in _directions(p):
            assert along(d) < 1e-6 * noise
        # the last three move every logit of a position by one factor: d logits = lambda * logits, per position
        at = np.asarray(f(p))
        for d in _scaling_directions(p):
            dl = np.asarray(derivative(d))
            lam = (dl * at).sum(-1, keepdims=True) / (at * at).sum(-1, keepdims=True)
            assert np.abs(dl - lam * at).max() < 1e-6 * noise
        assert np.abs(lam).max() > 0.1  # the temperature's: the logits themselves change
    a = _logits(cfg, {k: v.astype(np.float32) for k, v in p.items()}, x)
    # at the trained 41's values (PINS) and at a screen member's sizes (gauge.py --at): free_entries refuses a pinned
    # entry that does not hold its pin, so the pins' values are checked too
    for pins, at in ((MODEL_PINS, AT_41), (model_pins(at=(7.0, 17.0, 5.0, 6.5)), (7.0, 17.0, 5.0, 6.5))):
        pinned = apply_overrides(cfg, [pins])
        after = free_entries(gauge_fixed(p, at), pinned.model)
        assert sum(v.size for v in after.values()) == 35 and len(PINS) == 5
        b = _logits(pinned, after, x)
        assert np.abs(a - b).max() < 1e-3 * np.abs(a).max()
        assert (a.argmax(-1) == b.argmax(-1)).all()


def test_gauge_writes_the_committed_41_as_a_35_and_a_32_that_decode_as_it(tmp_path, capsys):
    """restore.py rebuilds the 41 from its submission; gauge.py writes it as the 35 (logits kept) and the 32 (every
    argmax kept), their exports decode the verifier's first cases and the 41's recorded failures as the 41's file
    does, and bad calls write nothing (one line, status 2)."""
    import json
    from pathlib import Path

    from _runhelp import load_module

    from experiments.adderboard.gauge import main as gauge
    from experiments.adderboard.restore import main as restore
    from experiments.adderboard.score import board_pairs
    from miiii.export import export_adder

    submission = Path("results/adderboard/submissions/adder-41p-41a1-m7-b17.py")
    runs = tmp_path / "runs"
    assert restore([str(submission), "--runs", str(runs)]) == 0
    src = runs / "41a1-m7-b17"
    assert gauge([str(src), "--out", str(runs / "35"), "--rows", "64"]) == 0
    assert gauge([str(src), "--out", str(runs / "33"), "--rows", "64", "--head-free"]) == 0
    assert gauge([str(src), "--out", str(runs / "32"), "--rows", "64", "--head-free", "--temperature"]) == 0
    # the pins at other values (a run trained on from its own sizes): the same argmax, the pins holding them
    assert gauge([str(src), "--out", str(runs / "32a"), "--rows", "64", "--head-free", "--temperature", "--at",
                  "30,40,8,6"]) == 0
    assert json.loads((runs / "32a" / "gauged.json").read_text())["pins"] == [
        "W_E_arc[0]=30", "shared_norm_0.scale[2]=40", "mlp.W_in[2]=8", "attn.W_Q[0,2,0]=0", "attn.W_Q[0,2,3]=0",
        "mlp.W_out[:,2]=0", "shared_norm_0.scale[0]=6"]
    the_41 = load_module(submission)
    m41, _ = the_41.build_model()
    # the edge cases, the first 30 random pairs and 8 of the 41's recorded failures (~25 ms a case, 4 decoders)
    record = json.loads(Path("results/adderboard/summaries/search.json").read_text())
    wrong = next(s["failures"] for s in record["scores"] if s["file"] == f"submissions/{submission.name}")
    pairs = board_pairs(30) + [tuple(map(int, f.split("+"))) for f in wrong[:: -(-len(wrong) // 8)]]
    want = [the_41.add(m41, a, b) for a, b in pairs]
    assert sum(w != a + b for w, (a, b) in zip(want, pairs, strict=True)) >= 8  # wrong as recorded: the check bites
    for name, n in (("35", 35), ("33", 33), ("32", 32), ("32a", 32)):
        assert export_adder(runs / name, tmp_path / f"{name}.py")["params"] == n
        mod = load_module(tmp_path / f"{name}.py")
        model, _ = mod.build_model()
        assert [mod.add(model, a, b) for a, b in pairs] == want
    from experiments.adderboard import launch

    launch.derive("41a1-m7-b17-35p", runs)  # a setting's derived source, written before the setting trains
    launch.derive("41a1-m7-b17", runs)  # not a derived folder: nothing
    assert sorted(p.name for p in runs.iterdir()) == ["32", "32a", "33", "35", "41a1-m7-b17", "41a1-m7-b17-35p"]
    assert (runs / "41a1-m7-b17-35p" / "gauged.json").is_file()
    capsys.readouterr()
    assert gauge([str(src), "--out", str(runs / "35")]) == 2  # the folder exists
    assert gauge([str(runs / "35"), "--out", str(runs / "x")]) == 2  # already pinned: not the 41's structure
    err = capsys.readouterr().err
    assert "exists" in err and "the gauge is the 41's" in err and not (runs / "x").exists()
    with pytest.raises(SystemExit) as e:  # --at needs four positive values
        gauge([str(src), "--out", str(runs / "x"), "--at", "30,40,8"])
    assert e.value.code == 2 and "--at" in capsys.readouterr().err and not (runs / "x").exists()


@pytest.mark.parametrize("head_free,temperature", [(True, True), (False, False), (True, False)])
def test_start_pins_are_the_derived_models_entries_at_the_starts_values(head_free, temperature):
    """gauge.start_pins pins the same entries as the derived model (model_pins with the same switches: the 32, the 35,
    the 33), only at other values, so a from-seed setting counts the same parameters."""
    from experiments.adderboard.gauge import model_pins, start_pins

    def entries(pins: str) -> list[str]:  # the pinned entries, split at the commas outside brackets
        return [p.partition("=")[0] for p in re.split(r",(?![^\[]*\])", pins.removeprefix("model.pins="))]

    start, derived = start_pins(2.5, 0.02, head_free, temperature), model_pins(head_free, temperature)
    assert ("mlp.W_out[:,2]" in entries(start)) == head_free
    assert ("shared_norm_0.scale[0]" in entries(start)) == temperature
    assert entries(start) == entries(derived) and len(entries(start)) == 5 + head_free + temperature
    assert start != derived
    assert "W_E_arc[0]=2.5" in start and "mlp.W_in[2]=0.02" in start
