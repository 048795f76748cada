"""The book replication: n-digit tasks, presets at the book's recipe, book-style decoding and evaluation."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from miiii.bookeval import Evaluator
from miiii.config import ConfigError, apply_overrides
from miiii.model import build_model, count_params
from miiii.presets import get_preset
from miiii.rundir import flatten_params
from miiii.tasks import loss_floor, make_task
from miiii.tokens import EOS, EQUALS, PLUS, addition_edge_cases, decode, encode_addition
from miiii.train import greedy_decode, make_trainer, steps_per_epoch
from miiii.validate import validate


def answer_of(seq: np.ndarray, n: int) -> int:
    """Read the reversed sum back from a token sequence `a+b=s..s<EOS>`."""
    ans = seq[2 * n + 2:]
    assert ans[-1] == EOS
    return int("".join(str(d) for d in ans[:-1][::-1]))


@pytest.mark.parametrize("n", [1, 3, 5, 10, 18, 19, 25])
def test_addition_encoding_any_n(n):
    """`a+b=` then the sum ones-first on n+1 digits, exact beyond int64 (n > 18)."""
    rng = np.random.default_rng(n)
    a = [int("".join(map(str, rng.integers(0, 10, n)))) for _ in range(20)] + [10**n - 1, 0]
    b = [int("".join(map(str, rng.integers(0, 10, n)))) for _ in range(20)] + [10**n - 1, 0]
    seq = encode_addition(np.array(a, dtype=object), np.array(b, dtype=object), n)
    assert seq.shape == (22, 3 * n + 4)
    for s, x, y in zip(seq, a, b, strict=True):
        assert s[n] == PLUS and s[2 * n + 1] == EQUALS
        assert int(decode(s[:n])) == x and int(decode(s[n + 1:2 * n + 1])) == y
        assert answer_of(s, n) == x + y


def test_book_example_sequence():
    assert decode(encode_addition(np.array([654]), np.array([114]), 3)[0]) == "654+114=8670<EOS>"


@pytest.mark.parametrize("n", [5, 10, 20])
def test_n_digit_task_split(n):
    """Held-out pairs (and their commuted twins) never appear in training; every target is a+b."""
    cfg = apply_overrides(get_preset("addition"), [f"n_digits={n}", "model.n_ctx=0", "n_train=300", "n_valid=100"])
    task = make_task(validate(cfg).task)
    assert task.train.x.shape == (300, 3 * n + 3) and task.valid.y.shape == (100, 3 * n + 3)
    pairs = lambda s: {(decode(x[:n]), decode(x[n + 1:2 * n + 1])) for x in s.x}  # noqa: E731
    train, valid = pairs(task.train), pairs(task.valid)
    assert not train & valid and not train & {(b, a) for a, b in valid}
    full = np.concatenate([task.train.x, task.train.y[:, -1:]], axis=1)
    assert all(answer_of(s, n) == int(decode(s[:n])) + int(decode(s[n + 1:2 * n + 1])) for s in full)
    assert task.answer_start == 2 * n + 1


def test_mixed_lengths_only_in_training():
    cfg = apply_overrides(get_preset("addition"), ["n_digits=10", "model.n_ctx=0", "n_train=2000", "n_valid=500",
                                                   "mixed_lengths=true"])
    task = make_task(cfg.task)
    zeros = lambda x: (x[:, :10] == 0).mean(0)  # noqa: E731  share of 0 digits per column of a
    assert zeros(task.train.x).min() > 0.2  # every column, the ones included, often 0 in training
    assert zeros(task.valid.x).max() < 0.16  # held-out operands are uniform 10-digit numbers (0.1)
    base = make_task(apply_overrides(cfg, ["mixed_lengths=false"]).task)
    np.testing.assert_array_equal(task.valid.x, base.valid.x)  # the switch leaves the held-out set alone


def test_loss_floors():
    assert loss_floor("addition", 3) == pytest.approx(0.9594, abs=5e-5)
    assert loss_floor("reversal", 5) == pytest.approx(0.8373, abs=5e-5)
    assert loss_floor("addition", 10) == pytest.approx(19 * math.log(10) / 33)


def test_book_model_has_17760_parameters():
    """Chapter 3: token 448, position 416, per block attention 4,096 + FFN 4,192 + norms 128, final norm 64."""
    cfg = get_preset("addition")
    task = make_task(apply_overrides(cfg, ["n_train=10", "n_valid=10"]).task)
    model = build_model(cfg.model, task)
    params = jax.eval_shape(model.init, jax.random.key(0), jnp.asarray(task.train.x[:1]))["params"]  # no compile
    assert count_params(params) == 17_760
    assert params["W_E"].size == 448 and params["W_pos"].size == 416 and "W_U" not in params  # head tied
    blk = params["blocks_0"]
    assert count_params(blk["attn"]) == 4096 and count_params(blk["mlp"]) == 4192
    assert count_params(blk["ln1"]) + count_params(blk["ln2"]) == 128 and count_params(params["ln_final"]) == 64


def test_book_recipe_presets():
    """The book's recipe (docs/definitions.md §2): AdamW lr 0.01, warm-up, cosine, clip 1, batch 512, 150/80 epochs."""
    for name, epochs, n, batches, first in (("addition", 150, 3, 98, 1), ("reversal", 80, 5, 98, 1),
                                            ("addition-97", 150, 3, 97, 0), ("reversal-97", 80, 5, 97, 0)):
        cfg = validate(get_preset(name))
        o, t = cfg.optim, cfg.train
        assert (o.lr, o.b1, o.b2, o.weight_decay, o.warmup_steps, o.schedule, o.clip_norm) == (
            0.01, 0.9, 0.999, 0.01, 200, "cosine", 1.0)
        assert o.warmup_first == first  # the book's loop as written: LambdaLR's first step at lr / 200
        assert t.batch_size == 512 and steps_per_epoch(cfg.train, cfg.task.n_train) == batches
        assert t.steps == epochs * batches and t.eval_every == batches
        assert (cfg.task.n_digits, cfg.task.n_train, cfg.task.n_valid, cfg.task.train_seed, cfg.task.valid_seed) == (
            n, 50_000, 10_000, 42, 123)
        m = cfg.model
        assert (m.d_model, m.d_mlp, m.n_layers, m.n_heads, m.causal, m.layer_norm, m.tie_head) == (
            32, 64, 2, 1, True, True, True)
    full = validate(apply_overrides(get_preset("addition"), ["train.batch_size=0"]))
    assert steps_per_epoch(full.train, full.task.n_train) == 1  # full batch when asked


@pytest.mark.parametrize("first", [0, 1])
def test_book_schedule_is_warmup_then_cosine_with_either_first_step(first):
    """The book's schedule at 98 batches x 150 epochs against the formula written out: lr (t + first) / 200 during
    the warm-up (first = 1: PyTorch's LambdaLR as the book's loop is written), then 0.5 lr (1 + cos(pi (t - 200) /
    (T - 200))); a first of 2 is refused."""
    from miiii.optim import make_schedule

    o = apply_overrides(get_preset("addition-98"), [f"optim.warmup_first={first}"]).optim
    total = 150 * 98
    sched = make_schedule(o, total)
    t = np.array([0, 1, 2, 100, 198, 199, 200, 201, 5000, total - 1])
    want = np.where(t < 200, (t + first) / 200, 0.5 * (1 + np.cos(np.pi * (t - 200) / (total - 200)))) * 0.01
    got = np.array([float(sched(jnp.asarray(i))) for i in t])
    assert np.allclose(got, want, rtol=1e-5, atol=1e-9) and (got[0] == 0) == (first == 0)
    with pytest.raises(ConfigError, match="warmup_first"):
        validate(apply_overrides(get_preset("addition"), ["optim.warmup_first=2"]))


def test_addition_10_preset():
    cfg = validate(get_preset("addition-10"))
    assert cfg.task.name == "addition" and cfg.task.n_digits == 10 and cfg.model.n_ctx in (0, 32, 33)


def test_n_ctx_shorter_than_input_is_refused():
    with pytest.raises(ConfigError, match="n_ctx"):
        validate(apply_overrides(get_preset("addition"), ["n_digits=5"]))  # 18 inputs, the book's 13 positions
    with pytest.raises(ConfigError, match="split impossible"):  # a+b and b+a both held out: 60 + 2*30 > 100
        validate(apply_overrides(get_preset("addition"), ["n_digits=1", "model.n_ctx=0", "n_train=60",
                                                          "n_valid=30"]))


def test_edge_cases():
    assert addition_edge_cases(3) == ((123, 456), (999, 1), (0, 0), (999, 999), (500, 500), (111, 222))
    assert (9_999_999_999, 1) in addition_edge_cases(10) and (9_999_999_999, 9_999_999_999) in addition_edge_cases(10)


def _init_run(tmp_path, overrides):
    """A run directory holding an untrained model (config + params), enough for Evaluator and export."""
    cfg = apply_overrides(get_preset("addition"), ["n_train=64", "n_valid=32", "steps=1"] + overrides)
    task = make_task(validate(cfg).task)
    trainer = make_trainer(cfg, task)
    params = trainer.init(0).params
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(cfg.to_json())
    np.savez(tmp_path / "params.npz", **flatten_params(params))
    return cfg, task, trainer, params


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """One untrained book model in a run directory, shared by the tests below (compiles once)."""
    path = tmp_path_factory.mktemp("untrained")
    return path, *_init_run(path, [])


def test_greedy_decoding_matches_a_padded_window_when_causal(untrained):
    """With a causal mask, decoding on the grown sequence equals decoding in a zero-padded window."""
    _, cfg, task, trainer, params = untrained
    prompt = task.valid.x[:6, :9]  # `a+b=` and the first answer digit; 3 more tokens fill the 12 inputs
    window = np.zeros((6, 12), np.int32)
    window[:, :9] = prompt
    for i in range(3):
        logits, _ = trainer.apply(params, jnp.asarray(window))
        window[:, 9 + i] = np.asarray(jnp.argmax(logits[:, 8 + i], -1))
    last = np.asarray(jnp.argmax(trainer.apply(params, jnp.asarray(window))[0][:, 11], -1))
    grown = greedy_decode(trainer.apply, params, prompt, 4)
    np.testing.assert_array_equal(grown, np.concatenate([window[:, 9:], last[:, None]], 1))


def test_no_causal_mask_sees_the_future(tmp_path):
    """The ablation switch really removes the mask: an early logit changes when a later token does."""
    for causal in (True, False):
        cfg, task, trainer, params = _init_run(tmp_path / str(causal), [f"model.causal={causal}"])
        x = np.array(task.valid.x[:1])
        x2 = x.copy()
        x2[0, -1] = (x2[0, -1] + 1) % 10
        early = [np.asarray(trainer.apply(params, jnp.asarray(t))[0][0, 0]) for t in (x, x2)]
        assert np.allclose(*early) == causal


def test_no_pos_embed_has_no_positions(tmp_path):
    _, _, _, params = _init_run(tmp_path, ["model.pos_embed=false"])
    assert "W_pos" not in params and count_params(params) == 17_760 - 416


def test_evaluator_on_untrained_run(untrained):
    """Book evaluation runs on any run dir: the six cases with the book's expected ones-first strings."""
    tmp_path = untrained[0]
    np.savez(tmp_path / "metrics.npz", loss=np.linspace(3, 1, 10), valid_acc=np.zeros((10, 1)))
    (tmp_path / "summary.json").write_text(json.dumps({"final": {"valid": {"task_acc": [0.0]}}}))
    ev = Evaluator(tmp_path)
    rows = ev.edge_cases()
    assert [r["case"] for r in rows] == ["123 + 456", "999 + 1", "0 + 0", "999 + 999", "500 + 500", "111 + 222"]
    assert rows[0]["expected"] == "9750<EOS>" and rows[1]["expected"] == "0001<EOS>"
    assert all(r["correct"] == (r["output"] == r["expected"]) for r in rows)
    ar = ev.autoregressive(ev.task.valid.x[:6], ev.task.valid.y[:6])  # same shapes as the edge cases: no compile
    assert ar.shape == (6,) and ar.mean() < 0.5  # untrained
    c = ev.curves()
    assert len(c["epoch"]) == 10 and np.allclose(c["loss"], np.linspace(3, 1, 10))  # 1 step an epoch here


def test_book_subcommand_prints_and_writes_book_json(untrained, capsys):
    """`python -m miiii book RUN_DIR`: the report on stdout and in RUN_DIR/book.json; a non-run exits 2."""
    from miiii.cli import main

    tmp_path = untrained[0]
    np.savez(tmp_path / "metrics.npz", loss=np.linspace(3, 1, 10), valid_acc=np.zeros((10, 1)))
    (tmp_path / "summary.json").write_text(json.dumps({"final": {"valid": {"task_acc": [0.0]}}}))
    assert main(["book", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "book.json").read_text())
    assert "edge cases" in out and len(report["edge_cases"]) == 6 and report["task"] == "addition"
    assert main(["book", str(tmp_path / "nothing")]) == 2


def test_evaluator_refuses_other_tasks(tmp_path):
    cfg = get_preset("nanda-tiny")
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(cfg.to_json())
    with pytest.raises(ConfigError):
        Evaluator(tmp_path)


def test_trained_book_adder_passes_the_books_checks():
    """The committed 17,760-parameter adder (tests/data) through today's model code: 6/6 edge cases, ~100 %.

    (test_export.py decodes 300 random pairs with it autoregressively.)
    """
    from pathlib import Path

    ev = Evaluator(Path(__file__).parent / "data" / "book_adder")
    rows = ev.edge_cases()
    assert all(r["correct"] for r in rows), rows
    assert rows[1]["output"] == "0001<EOS>"  # 999 + 1, ones first
    loss, acc = ev.teacher_forced(ev.task.valid.x[:2000], ev.task.valid.y[:2000])
    assert acc >= 0.99 and abs(loss - loss_floor("addition", 3)) < 0.01  # at the floor: nothing left to learn
