"""The small-decoder options of the model family (AdderBoard's Qwen3-style adders), each against an independent
computation: rotary positions as complex rotations (and their relative-position property), the unique parameter
count against a hand count, the board format's tokens against the integers, the options' config errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from miiii.config import ConfigError, ModelConfig, apply_overrides
from miiii.model import arc_embedding, build_model, count_params, rotary
from miiii.presets import get_preset
from miiii.tasks import TaskConfig, make_task
from miiii.tokens import BOARD_EDGE_CASES, board_pairs, encode_board
from miiii.validate import validate


def test_rotary_is_a_complex_rotation_of_the_halves():
    """Plane i of a head is (x[i], x[i + e/2]) as one complex number, turned by pos * theta^(-2i/e)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3, 6)).astype(np.float32)  # (b, t, heads, e)
    pos, theta = np.arange(5), 3.0
    z = x[..., :3] + 1j * x[..., 3:]
    turn = np.exp(1j * pos[:, None] * theta ** (-np.arange(3) * 2 / 6))[None, :, None]
    want = np.concatenate([(z * turn).real, (z * turn).imag], axis=-1)
    np.testing.assert_allclose(np.asarray(rotary(x, pos, theta)), want, rtol=1e-5, atol=1e-5)


def test_rotary_scores_depend_on_the_offset_alone():
    """<R(m) q, R(n) k> is a function of m - n: the same query and key shifted together score the same."""
    rng = np.random.default_rng(1)
    q, k = (rng.normal(size=(1, 1, 1, 4)).astype(np.float32) for _ in range(2))
    score = lambda m, n: float((rotary(q, np.array([m]), 3.0) * rotary(k, np.array([n]), 3.0)).sum())  # noqa: E731
    for m, n in ((5, 2), (9, 4), (30, 1)):
        assert score(m, n) == pytest.approx(score(m + 7, n + 7), abs=1e-4)
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)


def test_arc_embedding_is_a_circle_of_three_parameters():
    W = np.asarray(arc_embedding(np.array([2.0, 0.5, 0.3]), 10, 3))
    angle = 0.5 + 0.3 * np.arange(10)
    np.testing.assert_allclose(W, np.stack([2 * np.cos(angle), 2 * np.sin(angle), np.zeros(10)], 1), rtol=1e-6)


def _count(cfg):
    task = make_task(apply_overrides(cfg, ["n_train=8", "n_valid=8"]).task)
    model = build_model(cfg.model, task)
    return count_params(model.init({"params": jax.random.key(0)}, task.train.x[:1])["params"])


def test_adder_146_has_the_hand_counted_parameters():
    """Embedding 10 x 3; Q 3 x 8, K and V 3 x 4 (one key/value head), O 8 x 3; QK-norm 4 + 4; three RMSNorms of 3;
    SwiGLU gate, up and down 3 x 3: 30 + 24 + 12 + 12 + 24 + 8 + 9 + 27 = 146. The arc embedding: 3 for 30."""
    cfg = get_preset("adder-146")
    assert _count(cfg) == 146
    assert _count(apply_overrides(cfg, ["model.embed=arc"])) == 146 - 30 + 3


ADDER_62 = ["model.n_heads=1", "model.d_mlp=2", "model.embed=arc", "model.ties=attn.W_V=attn.W_K,attn.W_O=T(attn.W_Q)"]


def test_tied_62_parameter_adder_has_the_hand_count():
    """AdderBoard's 62-parameter entry: arc 3, Q and K 3 x 4 each (V = K, O = Q^T are no parameters), QK-norm 4 + 4,
    three RMSNorms of 3, SwiGLU 3 x 2 three times: 3 + 24 + 8 + 9 + 18 = 62; a scaled tie adds its one scalar."""
    cfg = apply_overrides(get_preset("adder-146"), ADDER_62)
    assert _count(cfg) == 62
    assert _count(apply_overrides(cfg, ["model.ties=attn.W_V=scale(attn.W_K),attn.W_O=T(attn.W_Q)"])) == 63


def test_the_58_parameter_phases_count_58_and_decay_to_a_tenth():
    """adder-58-phases: arc 3, Q 12, K = a Q (1), V 12, O = Q^T, QK-norm 8, three RMSNorms 9, SwiGLU in and out
    3 x 2 twice, gate = a up (1): 58; each phase's cosine ends at a tenth of its lr."""
    from miiii.optim import make_schedule
    from miiii.presets import phase_configs

    phases = phase_configs("adder-58-phases")
    assert [_count(validate(c)) for c in phases] == [58, 58]
    for c in phases:
        sched = make_schedule(c.optim, c.train.steps)
        t = np.array([0, c.train.steps // 2, c.train.steps])
        want = c.optim.lr * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * t / c.train.steps)))
        np.testing.assert_allclose([float(sched(i)) for i in t], want, rtol=1e-5)
    assert phases[1].optim.grokfast == "ema" and phases[0].optim.grokfast == "none"
    assert [c.train.steps for c in phases] == [290_000, 80_000]


def test_the_62_parameter_phases_are_the_entrys_four_stages():
    """adder-62-phases: 62 parameters in every phase, the entry's architecture, and its stages' schedules: cosine
    1e-2 -> 1e-3 (200k), constant 1e-3 (50k) and 3e-4 (30k), cosine 1e-3 -> 0 without weight decay (50k)."""
    from miiii.optim import make_schedule
    from miiii.presets import phase_configs

    phases = phase_configs("adder-62-phases")
    assert [_count(validate(c)) for c in phases] == [62] * 4
    assert all(apply_overrides(c, ADDER_62).model == c.model for c in phases)
    assert [c.train.steps for c in phases] == [200_000, 50_000, 30_000, 50_000]
    assert [c.train.batch_size for c in phases] == [128, 256, 256, 256]
    assert [c.optim.weight_decay for c in phases] == [0.01, 0.01, 0.01, 0.0]
    assert [c.optim.schedule for c in phases] == ["cosine", "constant", "constant", "cosine"]
    assert {(c.train.seed, c.task.n_train) for c in phases} == {(1, 2_000_000)}
    scheds = [(make_schedule(c.optim, c.train.steps), c.train.steps) for c in phases]
    ends = [(float(f(0)), float(f(n))) for f, n in scheds]
    np.testing.assert_allclose(ends, [(1e-2, 1e-3), (1e-3, 1e-3), (3e-4, 3e-4), (1e-3, 0.0)], rtol=1e-5, atol=1e-12)


def test_the_52_parameter_phases_are_the_62s_with_its_norms_shared():
    """adder-52-phases: the 62's stages and model with ln1 = ln2 = ln_final and q_norm = k_norm, at seed 4; by hand
    62 - (3 RMSNorm scales of 3 -> one: 6) - (2 QK-norm scales of 4 -> one: 4) = 52 in every phase."""
    from miiii.presets import phase_configs

    p62, p52 = phase_configs("adder-62-phases"), phase_configs("adder-52-phases")
    assert [_count(validate(c)) for c in p52] == [62 - 6 - 4] * 4
    assert [apply_overrides(a, [GROUPS, "train.seed=4"]) for a in p62] == p52


def test_the_41_parameter_phases_are_the_studys_small_batch_screen_and_stage():
    """adder-41-phases: the sub-50 entries' 41 (V = Q, K = Q turned, O = Q^T, norms shared: 62 - 12 (K) + 1 (the
    angle) - 10 (the norms' sharing) = 41) at batch 16, each phase the study's setting it was found as, at seed 4
    (41-start-angle1-b16-cos's member 4, then 41a1-b16c-m4-long); both cosines end at 0."""
    from experiments.adderboard.settings import SEARCH
    from miiii.optim import make_schedule
    from miiii.presets import phase_configs

    phases = phase_configs("adder-41-phases")
    assert [_count(validate(c)) for c in phases] == [62 - 12 + 1 - 10] * 2
    by = {s.name: s for s in SEARCH}
    found = [apply_overrides(get_preset("adder-146"), [*by[name].sets, f"train.steps={by[name].steps}",
                                                      "train.seed=4"])
             for name in ("41-start-angle1-b16-cos", "41a1-b16c-m4-long")]
    assert phases == found
    assert [c.train.batch_size for c in phases] == [16, 16] and [c.optim.weight_decay for c in phases] == [0.01, 0]
    assert [float(make_schedule(c.optim, c.train.steps)(c.train.steps)) for c in phases] == [0.0, 0.0]


def test_the_41_parameter_rounds_are_the_phases_and_the_studys_two_rounds():
    """adder-41-rounds: adder-41-phases' two phases, then the study's 41a1-b16c-m4-r1 and -r2 as phases: the same
    run config but for the seed (the recipe's, not the study's 7) and the hard pairs, which the phase finds itself
    (100k pairs of the round's number as seed, 90 % of the rows) where the study names a file."""
    from dataclasses import replace

    from experiments.adderboard.settings import SEARCH
    from miiii.hard import replay_copies
    from miiii.presets import phase_configs

    phases = phase_configs("adder-41-rounds")
    assert phases[:2] == phase_configs("adder-41-phases") and len(phases) == 4
    by = {s.name: s for s in SEARCH}
    for k, phase in enumerate(phases[2:], 1):
        s = by[f"41a1-b16c-m4-r{k}"]
        assert s.hard_share == phase.task.replay_share == 0.9 and phase.task.replay_hard == f"100000@{k}"
        study = apply_overrides(get_preset("adder-146"), [*s.sets, f"train.steps={s.steps}", "train.seed=4"])
        assert replace(phase, task=replace(phase.task, replay_hard="", replay_share=0.5)) == study
    assert replay_copies(500_000, 0.9, 1_000) == 4_500  # 4.5M replayed rows beside the 500k: 90 %


def test_the_screened_41_is_the_studys_screen_its_member_s_stage_and_first_round():
    """adder-41-screened: its screen is 41-start-angle1-b16-cos (seeds 0 to 7, the plan a plain sweep's), its second
    phase 41a1-b16c-m4-long (its seed 4 set by the screen's pick when it trains), its round 41a1-b16c-m4-r1 (seed 7)
    but for the hard pairs, which the phase finds itself."""
    from dataclasses import replace

    from experiments.adderboard.settings import SEARCH
    from miiii.presets import phase_configs

    screen, stage, round_ = phase_configs("adder-41-screened")
    by = {s.name: s for s in SEARCH}

    def study(name, seed):
        s = by[name]
        return apply_overrides(get_preset("adder-146"), [*s.sets, f"train.steps={s.steps}", f"train.seed={seed}"])

    assert screen.train.screen == by["41-start-angle1-b16-cos"].seeds == 8
    assert replace(screen, train=replace(screen.train, screen=0)) == study("41-start-angle1-b16-cos", 0)
    assert replace(stage, train=replace(stage.train, seed=4)) == study("41a1-b16c-m4-long", 4)
    assert round_.task.replay_hard == "100000@1" and round_.task.replay_share == by["41a1-b16c-m4-r1"].hard_share
    assert replace(round_, task=replace(round_.task, replay_hard="", replay_share=0.5)) == study("41a1-b16c-m4-r1", 7)


GROUPS = "model.norm_groups=ln1+ln2+ln_final,q_norm+k_norm"


def test_shared_norms_count_once_and_equal_the_unshared_model_with_equal_scales():
    """Norms shared by name: the 62-parameter decoder with its three RMSNorms one scale and its QK-norms another is
    62 - 6 - 4 = 52 parameters, and its logits are the unshared model's whose norms all hold the shared scales."""
    cfg = apply_overrides(get_preset("adder-146"), ADDER_62 + [GROUPS, "n_train=8", "n_valid=8"])
    assert _count(cfg) == 52
    task = make_task(cfg.task)
    x = task.train.x[:3]
    p = build_model(cfg.model, task).init({"params": jax.random.key(0)}, x)["params"]
    assert set(p) >= {"shared_norm_0", "shared_norm_1"} and "ln1" not in p["blocks_0"]
    blocks = np.array([0.5, 2.0, -1.0], np.float32), np.array([1.5, 0.2, 0.7, -0.3], np.float32)
    p = {**p, "shared_norm_0": {"scale": blocks[0]}, "shared_norm_1": {"scale": blocks[1]}}
    plain = build_model(apply_overrides(cfg, ["model.norm_groups="]).model, task)
    q = plain.init({"params": jax.random.key(0)}, x)["params"]
    b0 = dict(q["blocks_0"], ln1={"scale": blocks[0]}, ln2={"scale": blocks[0]},
              attn=dict(q["blocks_0"]["attn"], q_norm={"scale": blocks[1]}, k_norm={"scale": blocks[1]}))
    q = {**q, "blocks_0": b0, "ln_final": {"scale": blocks[0]}}
    q = {k: (p[k] if k in p and k not in ("blocks_0", "ln_final") else v) for k, v in q.items()}
    q["blocks_0"] = dict(b0, attn=dict(b0["attn"], **{k: v for k, v in p["blocks_0"]["attn"].items()}),
                         mlp=p["blocks_0"]["mlp"])
    np.testing.assert_allclose(np.asarray(build_model(cfg.model, task).apply({"params": p}, x)[0]),
                               np.asarray(plain.apply({"params": q}, x)[0]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("groups, says", [
    ("ln1", "two or more"), ("ln1+ln9", "two or more"), ("ln1+ln2,ln2+ln_final", "each name in one group"),
    ("ln1+q_norm", "one size and kind"),  # d 3 against head size 4
])
def test_bad_norm_groups_are_refused(groups, says):
    with pytest.raises(ConfigError, match=says):
        validate(apply_overrides(get_preset("adder-146"), [f"model.norm_groups={groups}"]))
    with pytest.raises(ConfigError, match="in this model"):  # nanda has no norms to share
        validate(apply_overrides(get_preset("nanda-tiny"), ["model.norm_groups=ln1+ln2"]))


def test_a_tied_model_is_the_untied_model_with_the_followers_set():
    """Tied logits = the untied model's with W_V := scale * W_K, W_O := W_Q^T, W_gate := W_in turned by the angle and
    W_out := W_in turned by another, then transposed (Trot)."""
    ties = "model.ties=attn.W_V=scale(attn.W_K),attn.W_O=T(attn.W_Q),mlp.W_gate=rot(mlp.W_in),mlp.W_out=Trot(mlp.W_in)"
    cfg = apply_overrides(get_preset("adder-146"), ADDER_62[:3] + [ties, "n_train=8", "n_valid=8"])
    task = make_task(cfg.task)
    x = task.train.x[:3]
    tied = build_model(cfg.model, task)
    p = tied.init({"params": jax.random.key(0)}, x)["params"]
    a, m = p["blocks_0"]["attn"], p["blocks_0"]["mlp"]
    a["W_V_scale"], m["W_gate_angle"], m["W_out_angle"] = np.float32(-1.3), np.float32(0.4), np.float32(-0.7)
    W_in, c, s_ = np.asarray(m["W_in"]), np.cos(0.4), np.sin(0.4)
    c2, s2 = np.cos(-0.7), np.sin(-0.7)
    untied_p = {**p, "blocks_0": {**p["blocks_0"],
                                  "attn": {k: v for k, v in a.items() if k != "W_V_scale"}
                                  | {"W_V": -1.3 * np.asarray(a["W_K"]),
                                     "W_O": np.swapaxes(np.asarray(a["W_Q"]), 1, 2)},
                                  "mlp": {k: v for k, v in m.items() if k not in ("W_gate_angle", "W_out_angle")}
                                  | {"W_gate": np.stack([W_in[:, 0] * c - W_in[:, 1] * s_,
                                                         W_in[:, 1] * c + W_in[:, 0] * s_], 1),
                                     "W_out": np.stack([W_in[:, 0] * c2 - W_in[:, 1] * s2,
                                                        W_in[:, 1] * c2 + W_in[:, 0] * s2], 0)}}}
    untied = build_model(apply_overrides(cfg, ["model.ties="]).model, task)
    np.testing.assert_allclose(np.asarray(tied.apply({"params": p}, x)[0]),
                               np.asarray(untied.apply({"params": untied_p}, x)[0]), rtol=1e-5, atol=1e-5)


def _reference_62(w, ids):
    """tbukic/M10S-Transformer's CircularArcQwen3 (tie_kv, tie_qo), its forward transcribed to numpy in its own
    (torch) layouts: RoPE on interleaved pairs (x[::2], x[1::2]), v = k_proj(x) before k_norm, out = z @ q_proj.
    With w["theta"] and no k_proj, its 41-parameter entry (experiments/sub50_sweep_obsolete.py, apply_k_rot_q):
    k = v = q_proj(x), q = the same with its dims 0 and 1 turned by theta."""
    rms = lambda x, g: x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * g  # noqa: E731
    ang = w["arc"][1] + w["arc"][2] * np.arange(10)
    E = np.stack([w["arc"][0] * np.cos(ang), w["arc"][0] * np.sin(ang), np.zeros(10)], 1)
    T = len(ids)
    turn = np.arange(T)[:, None] * 3.0 ** (-np.arange(0, 4, 2) / 4)[None]

    def rope(x):
        x1, x2 = x[:, ::2], x[:, 1::2]
        c, s = np.cos(turn), np.sin(turn)
        return np.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).reshape(T, 4)

    x = E[ids]
    h = rms(x, w["ln1"])
    k = v = h @ w.get("k_proj", w["q_proj"]).T
    q = h @ w["q_proj"].T
    if "theta" in w:
        c, s = np.cos(w["theta"]), np.sin(w["theta"])
        q = np.concatenate([q[:, :1] * c - q[:, 1:2] * s, q[:, :1] * s + q[:, 1:2] * c, q[:, 2:]], 1)
    q, k = rope(rms(q, w["q_norm"])), rope(rms(k, w["k_norm"]))
    a = q @ k.T / 2.0 + np.triu(np.full((T, T), -np.inf), 1)
    a = np.exp(a - a.max(-1, keepdims=True))
    x = x + (a / a.sum(-1, keepdims=True)) @ v @ w["q_proj"]
    h = rms(x, w["ln2"])
    gate = h @ w["gate_proj"].T
    x = x + (gate / (1 + np.exp(-gate)) * (h @ w["up_proj"].T)) @ w["down_proj"].T
    return rms(x, w["final"]) @ E.T


def test_the_62_parameter_entry_is_this_family_with_its_weights_renamed():
    """AdderBoard's 62-parameter entry (tbukic) is ADDER_62 exactly: its logits from a numpy transcription of its
    forward equal the family's, its weights moved into the family's layout (x @ W, RoPE on halves: head dims 0 2 1 3).
    The weights are drawn at its init scale and far beyond it."""
    cfg = apply_overrides(get_preset("adder-146"), ADDER_62 + ["n_train=8", "n_valid=8"])
    task = make_task(cfg.task)
    model, x = build_model(cfg.model, task), np.asarray(task.train.x[:3])
    rng, perm = np.random.default_rng(0), [0, 2, 1, 3]
    for std in (0.02, 1.0):
        w = {"arc": rng.normal(size=3) * 2, **{k: rng.normal(0, std, shape) for k, shape in (
            ("q_proj", (4, 3)), ("k_proj", (4, 3)), ("gate_proj", (2, 3)), ("up_proj", (2, 3)), ("down_proj", (3, 2)))},
             **{k: 1 + 0.5 * rng.normal(size=n) for k, n in (("q_norm", 4), ("k_norm", 4), ("ln1", 3), ("ln2", 3),
                                                            ("final", 3))}}
        ours = {"W_E_arc": w["arc"], "ln_final": {"scale": w["final"]}, "blocks_0": {
            "attn": {"W_Q": w["q_proj"].T[None][..., perm], "W_K": w["k_proj"].T[None][..., perm],
                     "q_norm": {"scale": w["q_norm"][perm]}, "k_norm": {"scale": w["k_norm"][perm]}},
            "ln1": {"scale": w["ln1"]}, "ln2": {"scale": w["ln2"]},
            "mlp": {"W_gate": w["gate_proj"].T, "W_in": w["up_proj"].T, "W_out": w["down_proj"].T}}}
        ours = jax.tree.map(lambda a: np.asarray(a, np.float32), ours)
        want = np.stack([_reference_62(w, row) for row in x])
        np.testing.assert_allclose(np.asarray(model.apply({"params": ours}, x)[0]), want, rtol=1e-4, atol=1e-4)


def test_the_41_parameter_entry_is_q_turned_in_its_first_plane():
    """AdderBoard's 41-parameter entry (tbukic, K = V = its q_proj, Q that turned in its first plane, the norms
    shared) is this family with Q = rot1(K), V = K, O = K^T and SHARED_NORMS: 41 parameters, and its logits from the
    numpy transcription at its start's scale and angle and far from them. (Its later 36 turns every plane of K.)"""
    from miiii.presets import SHARED_NORMS

    ties = "model.ties=attn.W_Q=rot1(attn.W_K),attn.W_V=attn.W_K,attn.W_O=T(attn.W_K)"
    cfg = apply_overrides(get_preset("adder-146"), ADDER_62[:3] + [ties, SHARED_NORMS, "model.tie_angle=-0.5",
                                                                   "n_train=8", "n_valid=8"])
    task = make_task(validate(cfg).task)
    model, x = build_model(cfg.model, task), np.asarray(task.train.x[:3])
    start = model.init({"params": jax.random.key(0)}, x[:1])["params"]
    assert count_params(start) == 41 and float(start["blocks_0"]["attn"]["W_Q_angle"]) == -0.5
    # by hand: arc 3, K 12, Q's angle 1, the two shared norms 3 + 4, SwiGLU 3 x 2 three times; down = up^T: 6 fewer
    assert _count(apply_overrides(cfg, [ties + ",mlp.W_out=T(mlp.W_in)"])) == 3 + 12 + 1 + 3 + 4 + 18 - 6 == 35
    rng, perm = np.random.default_rng(1), [0, 2, 1, 3]
    for std, theta in ((0.02, -0.5), (1.0, 1.3)):
        w = {"arc": rng.normal(size=3) * 2, "theta": theta, **{k: rng.normal(0, std, shape) for k, shape in (
            ("q_proj", (4, 3)), ("gate_proj", (2, 3)), ("up_proj", (2, 3)), ("down_proj", (3, 2)))}}
        g, gq = 1 + 0.5 * rng.normal(size=3), 1 + 0.5 * rng.normal(size=4)
        w |= {"ln1": g, "ln2": g, "final": g, "q_norm": gq, "k_norm": gq}
        ours = {"W_E_arc": w["arc"], "shared_norm_0": {"scale": g}, "shared_norm_1": {"scale": gq[perm]},
                "blocks_0": {"attn": {"W_K": w["q_proj"].T[None][..., perm], "W_Q_angle": np.array(theta)},
                             "mlp": {"W_gate": w["gate_proj"].T, "W_in": w["up_proj"].T, "W_out": w["down_proj"].T}}}
        ours = jax.tree.map(lambda a: np.asarray(a, np.float32), ours)
        want = np.stack([_reference_62(w, row) for row in x])
        np.testing.assert_allclose(np.asarray(model.apply({"params": ours}, x)[0]), want, rtol=1e-4, atol=1e-4)


def test_qwen_init_and_arc_init_start_where_the_entries_start():
    """model.init=qwen: every matrix N(0, 0.02), the norms at 1; model.arc_init: the arc's first (A, start, stride)."""
    cfg = apply_overrides(get_preset("adder-146"), ["model.d_model=64", "model.d_mlp=256", "model.head_dim=64",
                                                   "model.embed=arc", "model.init=qwen", "model.arc_init=2.5,-1.2,0.29",
                                                   "n_train=8", "n_valid=8"])
    task = make_task(validate(cfg).task)
    p = build_model(cfg.model, task).init({"params": jax.random.key(0)}, task.train.x[:1])["params"]
    np.testing.assert_allclose(np.asarray(p["W_E_arc"]), [2.5, -1.2, 0.29], rtol=1e-6)
    W = np.concatenate([np.ravel(a) for a in jax.tree.leaves(p["blocks_0"]["attn"]) + jax.tree.leaves(
        p["blocks_0"]["mlp"]) if np.ndim(a) > 1])
    assert W.size > 40_000 and abs(W.mean()) < 1e-3 and 0.0195 < W.std() < 0.0205
    assert all((np.asarray(a) == 1).all() for a in jax.tree.leaves(p["ln_final"]))


def test_board_tokens_are_the_numbers_ones_first():
    a, b = np.array([1_234_567_890, 9_999_999_999]), np.array([9_876_543_210, 1])
    seq = encode_board(a, b, 10)
    assert seq.shape == (2, 35)
    for row, x, y in zip(seq, a, b, strict=True):
        assert row[0] == row[11] == row[12] == row[23] == 0
        read = lambda ds: int("".join(map(str, ds[::-1])))  # noqa: E731
        assert (read(row[1:11]), read(row[13:23]), read(row[24:])) == (x, y, x + y)
    task = make_task(TaskConfig(name="board", n_digits=3, n_train=50, n_valid=10))
    assert task.answer_start == 3 * 2 + 3 and task.d_vocab == 10
    assert task.loss_weight[: task.answer_start].sum() == 0 and task.loss_weight.sum() == pytest.approx(1)


def test_board_pairs_are_the_verifiers():
    """verify.py: the 10 edge cases, then random.Random(2025).randint(0, 9,999,999,999) twice a pair."""
    import random

    rng = random.Random(2025)
    pairs = board_pairs(3)
    assert pairs[:10] == list(BOARD_EDGE_CASES)
    assert pairs[10:] == [(rng.randint(0, 9_999_999_999), rng.randint(0, 9_999_999_999)) for _ in range(3)]


@pytest.mark.parametrize("overrides, message", [
    (["model.n_heads=3", "model.n_kv_heads=2"], "n_kv_heads"),
    (["model.head_dim=3", "model.rope_theta=3"], "even head size"),
    (["model.norm=batch"], "model.norm"),
    (["model.mlp_act=gelu"], "model.mlp_act"),
    (["model.embed=arc", "model.d_model=1", "model.n_heads=1"], "d_model >= 2"),
    (["model.ties=attn.W_V=mlp.W_in"], "both weights of one module"),
    (["model.ties=attn.W_V=attn.W_K,attn.W_K=attn.W_Q"], "itself a follower"),
    (["model.ties=attn.W_V=attn.W_V"], "model.ties"),
    (["model.embed=arc", "model.arc_init=1,2"], "arc_init"),
    (["model.arc_init=1,0,0.3"], "arc_init"),
])
def test_small_decoder_options_refuse_bad_values(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(apply_overrides(get_preset("adder-146"), overrides))


def test_new_options_default_off():
    m = ModelConfig()
    assert (m.head_dim, m.n_kv_heads, m.rope_theta, m.norm, m.qk_norm, m.mlp_act, m.embed) == (
        0, 0, 0.0, "layer", False, "relu", "table")


def test_hook_points_refuse_the_small_decoder_options():
    from miiii.hooks import HookedModel

    cfg = apply_overrides(get_preset("adder-146"), ["n_train=8", "n_valid=8"])
    with pytest.raises(ConfigError, match="model.head_dim.*model.rope_theta"):
        HookedModel.of(cfg, make_task(cfg.task))


def test_train_digits_draws_short_operands_and_keeps_the_held_out_whole():
    """task.train_digits (a length curriculum's phase): training operands below 10**k, zero-padded to n digits."""
    task = make_task(TaskConfig(name="board", n_digits=6, train_digits=2, n_train=500, n_valid=50))
    x = task.train.x
    assert (x[:, 3:7] == 0).all() and (x[:, 11:15] == 0).all()  # a's and b's digits 2..5 (ones first) are 0
    assert (task.valid.x[:, 3:7] != 0).any()
    with pytest.raises(ConfigError, match="split impossible"):
        validate(apply_overrides(get_preset("adder-146"), ["train_digits=1", "n_train=200"]))


@pytest.mark.parametrize("ties, turned", [
    ("attn.W_K=rot(attn.W_Q),mlp.W_out=Trot(mlp.W_in)", [("attn", "W_K"), ("mlp", "W_out")]),
    ("attn.W_Q=rot1(attn.W_K)", [("attn", "W_Q")]),
    ("mlp.W_gate=rotT(mlp.W_out)", [("mlp", "W_gate")]),
])
def test_tie_angle_starts_every_turned_tie_and_needs_one(ties, turned):
    """model.tie_angle is each rot / rot1 / rotT / Trot tie's initial angle (0 keeps every earlier preset's start);
    without such a tie it is refused."""
    cfg = apply_overrides(get_preset("adder-146"), ADDER_62[:3] + [f"model.ties={ties}", "model.tie_angle=0.1",
                                                                    "n_train=8", "n_valid=8"])
    task = make_task(cfg.task)
    p = build_model(validate(cfg).model, task).init({"params": jax.random.key(0)}, task.train.x[:1])["params"]
    got = [float(p["blocks_0"][mod][f"{name}_angle"]) for mod, name in turned]
    assert got == [float(np.float32(0.1))] * len(turned)
    with pytest.raises(ConfigError, match="tie_angle"):
        validate(apply_overrides(get_preset("adder-146"), ADDER_62 + ["model.tie_angle=0.1"]))
