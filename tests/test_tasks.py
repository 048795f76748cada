"""Task definitions checked against independent computations (docs/definitions.md §1)."""

import math
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _runhelp import SLOW, shared

from miiii.config import ConfigError, apply_overrides
from miiii.presets import get_preset
from miiii.tasks import TaskConfig, loss_floor, make_task
from miiii.tokens import EOS, EQUALS, PLUS, decode, encode_addition, primes_below
from miiii.train import loss_and_metrics
from miiii.validate import validate


def brute_primes(p):
    return [q for q in range(2, p) if all(q % r for r in range(2, q))]


@pytest.mark.parametrize("p", [11, 13])
def test_nanda_labels_and_split(p):
    cfg = TaskConfig(name="nanda", p=p, train_frac=0.3, valid_size=20, split_seed=3)
    task = make_task(cfg)
    seen = []
    for split in (task.train, task.valid, task.test):
        for (x0, x1, eq), (y,) in zip(split.x, split.y, strict=True):
            assert eq == p and y == (x0 + x1) % p
            seen.append((int(x0), int(x1)))
    assert sorted(seen) == [(a, b) for a in range(p) for b in range(p)]  # every pair exactly once
    assert len(task.train.x) == math.floor(0.3 * p * p) and len(task.valid.x) == 20
    assert task.d_vocab == p + 1 and task.n_classes.tolist() == [p]
    again = make_task(cfg)
    np.testing.assert_array_equal(again.train.x, task.train.x)  # seeded
    other = make_task(replace(cfg, split_seed=4))
    assert not np.array_equal(other.train.x, task.train.x)


@pytest.mark.parametrize("p", [11, 13])
def test_miiii_labels_are_remainders_of_x0_plus_x1_p(p):
    task = make_task(TaskConfig(name="miiii", p=p, train_frac=0.5, valid_size=10))
    qs = brute_primes(p)
    assert task.n_classes.tolist() == qs and task.task_names == tuple(f"q={q}" for q in qs)
    for split in (task.train, task.valid, task.test):
        for (x0, x1, _), ys in zip(split.x, split.y, strict=True):
            n = int(x0) + int(x1) * p
            assert ys.tolist() == [n % q for q in qs]
    # not commutative: (x0, x1) and (x1, x0) are different numbers
    x = np.concatenate([task.train.x, task.valid.x, task.test.x])
    y = np.concatenate([task.train.y, task.valid.y, task.test.y])
    lookup = {(int(a), int(b)): t for (a, b, _), t in zip(x, y, strict=True)}
    assert any(not np.array_equal(lookup[(a, b)], lookup[(b, a)]) for a in range(p) for b in range(p))


def test_miiii_p113_has_29_tasks_and_eq12_weights():
    assert primes_below(113).tolist() == brute_primes(113)
    task = make_task(TaskConfig(name="miiii", p=113))
    assert len(task.task_names) == 29 and task.n_classes[0] == 2 and task.n_classes[-1] == 109
    assert len(task.train.x) == math.floor(0.3 * 113**2) and len(task.valid.x) == 1000
    np.testing.assert_allclose(task.loss_weight, 1 / np.log(task.n_classes) / 29, rtol=1e-6)


def test_miiii_loss_is_one_at_chance():
    """Paper Eq. 12: each task's CE / ln q, so uniform predictions score exactly 1."""
    task = make_task(TaskConfig(name="miiii", p=13, train_frac=0.5, valid_size=10))
    logits = jnp.zeros((len(task.train.y), task.n_slots, task.d_out))
    spec = {k: jnp.asarray(v) for k, v in task.arrays().items()}
    loss, task_loss, _ = jax.jit(loss_and_metrics)(logits, jnp.asarray(task.train.y), spec)  # jitted as in training
    assert abs(float(loss) - 1.0) < 1e-5
    np.testing.assert_allclose(task_loss, 1.0, rtol=1e-5)


def test_miiii_variants():
    base = make_task(TaskConfig(name="miiii", p=13, train_frac=0.5, valid_size=10))
    masked = make_task(TaskConfig(name="miiii", p=13, train_frac=0.5, valid_size=10, variant="masked"))
    off = np.isin(masked.n_classes, [2, 3, 5, 7])
    assert (masked.loss_weight[off] == 0).all() and (masked.loss_weight[~off] > 0).all()
    np.testing.assert_allclose(masked.loss_weight[~off], 1 / np.log(masked.n_classes[~off]) / (~off).sum())
    np.testing.assert_array_equal(masked.train.y, base.train.y)  # still measured, same labels
    basis = make_task(TaskConfig(name="miiii", p=13, train_frac=0.5, valid_size=10, variant="basis"))
    np.testing.assert_array_equal(basis.train.x, base.train.x)
    assert not np.array_equal(basis.train.y, base.train.y)
    all_y = lambda t: np.concatenate([t.train.y, t.valid.y, t.test.y])  # noqa: E731
    for k in range(base.n_slots):  # a shuffle: each task keeps its label counts
        assert sorted(all_y(basis)[:, k]) == sorted(all_y(base)[:, k])


def test_addition_encoding_matches_the_book():
    seq = encode_addition(np.array([654]), np.array([114]), 3)[0]
    assert decode(seq) == "654+114=8670<EOS>" and len(seq) == 13
    assert decode(encode_addition(np.array([999]), np.array([1]), 3)[0]) == "999+001=0001<EOS>"
    assert decode(encode_addition(np.array([0]), np.array([0]), 3)[0]) == "000+000=0000<EOS>"


@pytest.mark.parametrize("n", [1, 3, 10, 20])
def test_addition_any_n_digits(n):
    task = make_task(TaskConfig(name="addition", n_digits=n, n_train=50, n_valid=20))
    assert task.train.x.shape == (50, 3 * n + 3) and task.answer_start == 2 * n + 1
    for xs, ys in zip(task.train.x, task.train.y, strict=True):
        seq = np.concatenate([xs, ys[-1:]])
        text = decode(seq)
        a, rest = text.split("+")
        b, ans = rest.split("=")
        assert len(a) == len(b) == n and ans.endswith("<EOS>")
        assert int(ans[: n + 1][::-1]) == int(a) + int(b)
        np.testing.assert_array_equal(ys[:-1], xs[1:])  # Y is X shifted by one
    assert seq[n] == PLUS and seq[2 * n + 1] == EQUALS and seq[-1] == EOS


@pytest.mark.parametrize("n, n_digits, count, exclude, mixed", [
    (2, 10, 500, set(), False), (2, 10, 300, set(), True),  # the board's pairs, plain and with short blocks
    (2, 1, 95, {(3, 4), (0, 0), (9, 9)}, False),  # 97 of 100 pairs free: many redraws, duplicates within batches
    (2, 2, 800, {(i, i) for i in range(50)}, True), (3, 1, 400, {(1, 2, 3)}, False)])
def test_draw_distinct_keeps_the_rows_a_row_by_row_loop_keeps(n, n_digits, count, exclude, mixed):
    """The same rows in the same order from the same generator (every task's training and held-out pairs, and so
    every run, depend on it), each distinct and none excluded."""
    from miiii.tokens import draw_distinct, draw_distinct_by_tuples

    got = draw_distinct(np.random.default_rng(3), n, n_digits, count, exclude, mixed)
    np.testing.assert_array_equal(got, draw_distinct_by_tuples(np.random.default_rng(3), n, n_digits, count, exclude,
                                                               mixed))
    rows = {tuple(r) for r in got.tolist()}
    assert got.shape == (count, n) and got.dtype == np.int64 and len(rows) == count and not rows & exclude


def test_sequence_train_and_valid_disjoint():
    task = make_task(TaskConfig(name="addition", n_digits=2, n_train=3000, n_valid=500))
    key = lambda x: (tuple(x[:2]), tuple(x[3:5]))  # noqa: E731
    valid = {key(x) for x in task.valid.x}
    valid |= {(b, a) for a, b in valid}
    assert not any(key(x) in valid for x in task.train.x)
    assert len({key(x) for x in task.train.x}) == 3000
    # seeds as in the book: held-out set from seed 123 is independent of the training-set size
    other = make_task(TaskConfig(name="addition", n_digits=2, n_train=1000, n_valid=500))
    np.testing.assert_array_equal(other.valid.x, task.valid.x)


def oracle_logits(task, x, y, n_digits, name):
    """An independent oracle: uniform over digits where the target is not determined by the prefix
    (operand digits after the first), certain of the true token everywhere else."""
    n = n_digits
    if name == "addition":
        free = list(range(0, n - 1)) + list(range(n, 2 * n))
    else:
        free = list(range(0, n - 1))
    logits = np.full((*y.shape, task.d_out), -1e4, np.float32)
    np.put_along_axis(logits, y[..., None], 0.0, axis=-1)
    logits[:, free, :] = -1e4
    logits[:, free, :10] = 0.0
    return jnp.asarray(logits)


@pytest.mark.parametrize("name,n,floor", [("addition", 3, 0.9594), ("reversal", 5, 0.8373), ("addition", 5, None)])
def test_loss_floor_of_a_perfect_model(name, n, floor):
    task = make_task(TaskConfig(name=name, n_digits=n, n_train=200, n_valid=10))
    spec = {k: jnp.asarray(v) for k, v in task.arrays().items()}
    logits = oracle_logits(task, task.train.x, task.train.y, n, name)
    loss, _, acc = jax.jit(loss_and_metrics)(logits, jnp.asarray(task.train.y), spec)  # jitted as in training
    assert abs(float(loss) - loss_floor(name, n)) < 1e-5
    if floor is not None:
        assert round(loss_floor(name, n), 4) == floor
    assert float(acc[0]) == 1.0  # the answer span is deterministic


def test_reversal_encoding_and_answer_span():
    task = make_task(TaskConfig(name="reversal", n_digits=5, n_train=100, n_valid=10))
    assert task.train.x.shape == (100, 11) and task.answer_start == 5
    for xs, ys in zip(task.train.x, task.train.y, strict=True):
        seq = np.concatenate([xs, ys[-1:]])
        assert seq[5] == EQUALS and seq[-1] == EOS
        np.testing.assert_array_equal(seq[6:11], seq[:5][::-1])
    assert task.groups[0].nonzero()[0].tolist() == list(range(5, 11))


@pytest.mark.parametrize(
    "sets,msg",
    [
        (["task.name=sorting"], "unknown task"),
        (["p=12"], "prime"),
        (["p=3"], "p >= 5"),
        (["task.train_frac=0"], "strictly between"),
        (["task.train_frac=1"], "strictly between"),
        (["task.train_frac=nan"], "strictly between"),
        (["task.train_frac=0.99"], "split impossible"),
        (["task.valid_size=0"], "split impossible"),
        (["steps=0"], "at least 1"),
        (["dropout=1.5"], "dropout"),
        (["task.variant=weird"], "variant"),
    ],
)
def test_bad_configs_raise_config_error(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        validate(apply_overrides(get_preset("miiii-tiny"), sets))


def test_nanda_accepts_p3_but_not_p2():
    validate(apply_overrides(get_preset("nanda-tiny"), ["p=3", "task.valid_size=2"]))
    with pytest.raises(ConfigError, match="prime p >= 3"):
        validate(apply_overrides(get_preset("nanda-tiny"), ["p=2"]))


def test_override_type_errors():
    with pytest.raises(ConfigError, match="takes a int"):
        apply_overrides(get_preset("nanda"), ["model.d_model=big"])
    with pytest.raises(ConfigError, match="unknown config key"):
        apply_overrides(get_preset("nanda"), ["model.width=3"])
    with pytest.raises(ConfigError, match="takes a bool"):
        apply_overrides(get_preset("nanda"), ["model.causal=maybe"])
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides(get_preset("nanda"), ["lr"])
    cfg = apply_overrides(get_preset("nanda"), ["lr=3e-4", "model.causal=true", "wd=0.5", "task.name=miiii"])
    assert (cfg.optim.lr, cfg.model.causal, cfg.optim.weight_decay, cfg.task.name) == (3e-4, True, 0.5, "miiii")


def test_class_buckets_minimise_the_logits_computed():
    from miiii.tasks import class_buckets
    from miiii.tokens import primes_below

    q = tuple(int(v) for v in primes_below(113))
    b = class_buckets(q)
    assert b == ((0, 8, 19), (8, 15, 47), (15, 21, 73), (21, 29, 109))  # 1,791 logits instead of 29 x 109 = 3,161
    assert sum((s1 - s0) * w for s0, s1, w in b) == 1791
    # exhaustive check on a small case: no split into <= 4 contiguous ranges is cheaper
    import itertools

    small = (2, 3, 5, 7, 11, 13, 17)
    cost = lambda cuts: sum((j - i) * max(small[i:j]) for i, j in zip((0, *cuts), (*cuts, len(small)), strict=True))  # noqa: E731
    best = min(cost(c) for k in range(4) for c in itertools.combinations(range(1, len(small)), k))
    assert sum((s1 - s0) * w for s0, s1, w in class_buckets(small)) == best
    assert class_buckets((113,)) == ((0, 1, 113),)


# ---------------------------------------------------------------- the registry and Power et al.'s tasks


def power_answer(name, x0, x1, p):
    """(x0 op x1) mod p with Python ints; div by searching the z with z * x1 = x0 (mod p), beside pow(x1, -1, p)."""
    if name == "sub":
        return (x0 - x1) % p
    if name == "mul":
        return (x0 * x1) % p
    z = next(z for z in range(p) if (z * x1) % p == x0)
    assert z == (x0 * pow(x1, -1, p)) % p
    return z


@pytest.mark.parametrize("name", ["sub", "mul", "div"])
@pytest.mark.parametrize("p", [7, 13])
def test_power_tasks_labels_and_split(name, p):
    cfg = TaskConfig(name=name, p=p, train_frac=0.4, valid_size=9, split_seed=2)
    task = make_task(cfg)
    seen = []
    for split in (task.train, task.valid, task.test):
        for (x0, x1, eq), (y,) in zip(split.x, split.y, strict=True):
            x0, x1 = int(x0), int(x1)
            assert eq == p and y == power_answer(name, x0, x1, p)
            seen.append((x0, x1))
    grid = [(a, b) for a in range(p) for b in range(p) if name != "div" or b != 0]  # div: x1 != 0 only
    assert sorted(seen) == grid  # every sample exactly once
    n = p * (p - 1) if name == "div" else p * p
    sizes = [len(task.train.x), len(task.valid.x), len(task.test.x)]
    assert sizes == [math.floor(0.4 * n), 9, n - math.floor(0.4 * n) - 9] and sum(sizes) == n
    assert task.d_vocab == p + 1 and task.n_classes.tolist() == [p] and task.task_names == (f"mod {p}",)
    np.testing.assert_allclose(task.loss_weight, [1 / math.log(p)], rtol=1e-6)
    np.testing.assert_array_equal(make_task(cfg).train.x, task.train.x)  # seeded


def test_div_split_is_over_its_samples():
    """validate counts div's p(p - 1) samples: a split that fits p^2 but not p(p - 1) is refused, naming the count."""
    cfg = apply_overrides(get_preset("nanda-tiny"), ["task.name=div", "p=11", "task.train_frac=0.5"])
    validate(apply_overrides(cfg, ["task.valid_size=55"]))  # 55 train + 55 = 110 = 11 * 10
    with pytest.raises(ConfigError, match="> 110 samples"):
        validate(apply_overrides(cfg, ["task.valid_size=56"]))


def _train_power(name: str, run_dir: Path) -> Path:
    from miiii.runner import train_run

    # no log-spaced checkpoints: both chunks are one program
    cfg = apply_overrides(get_preset("nanda-tiny"), [f"task.name={name}", "steps=20", "chunk=10", "record.every=10",
                                                     "ckpt.keep_log=0"])
    train_run(cfg, run_dir, progress=False, tensorboard=False)
    return run_dir


def div_run() -> Path:
    """nanda-tiny as div, trained once per session (`_runhelp.shared`) for the two tests that read it."""
    return shared("tasks-div", lambda d: _train_power("div", d / "run")) / "run"


# mul: sub's code path (the same p x p grid, shapes and programs; its labels: test_power_tasks_labels_and_split)
@pytest.mark.parametrize("name", ["sub", pytest.param("mul", marks=SLOW), "div"])
def test_power_tasks_train_from_the_nanda_preset(name, tmp_path):
    """`--set task.name=NAME` on nanda-tiny trains, with its default recording (inputs: the whole p x p grid)."""
    import json

    run = div_run() if name == "div" else _train_power(name, tmp_path / "run")
    s = json.loads((run / "summary.json").read_text())
    assert s["task"] == name and s["task_names"] == ["mod 37"] and s["steps"] == 20
    assert np.load(run / "acts" / "inputs.npy").shape == (37 * 37, 3)  # inputs only: all p^2


def test_unknown_task_lists_the_registry():
    from miiii.tasks import TASKS

    for make in (lambda: validate(apply_overrides(get_preset("nanda-tiny"), ["task.name=modpow"])),
                 lambda: make_task(TaskConfig(name="modpow"))):
        with pytest.raises(ConfigError) as e:
            make()
        assert str(e.value) == f"unknown task 'modpow'; choose one of: {', '.join(TASKS)}"
    assert {"nanda", "miiii", "addition", "reversal", "sub", "mul", "div"} <= set(TASKS)


def test_each_task_has_its_own_smallest_p_and_variants():
    """A grid task's minimum p is its registry entry's, not miiii's 5; miiii's variants are refused elsewhere."""
    from miiii.tasks import TASKS, task_spec

    for name in ("nanda", "sub", "mul", "div"):
        assert task_spec(name).min_p == 3
        validate(apply_overrides(get_preset("nanda-tiny"), [f"task.name={name}", "p=3", "task.valid_size=1"]))
    with pytest.raises(ConfigError, match="miiii needs a prime p >= 5"):
        validate(apply_overrides(get_preset("miiii-tiny"), ["p=3", "task.valid_size=1"]))
    for name in TASKS:
        base = get_preset("addition-tiny" if task_spec(name).is_sequence else "nanda-tiny")
        for variant in ("masked", "basis"):
            cfg = apply_overrides(base, [f"task.name={name}", f"task.variant={variant}"])
            if name == "miiii":
                continue
            with pytest.raises(ConfigError, match=f"variant '{variant}' exists only for the miiii task"):
                validate(cfg)


def test_only_the_registry_compares_task_names():
    """No module but tasks.py (and presets.py, which names presets' tasks) tests a task's name: what differs between
    tasks is a field of its TaskSpec. report.py's "nanda" and "miiii" are the study's roles (runs), not tasks."""
    import re
    from pathlib import Path

    from miiii.tasks import TASKS

    names = "|".join(TASKS)
    compare = re.compile(rf"""\b(task|t)\.name\s*(==|!=)|(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)"""
                         rf"""|\bin\s*[(\[{{]\s*["']({names})["']""")
    package = Path(__file__).resolve().parents[1] / "miiii"
    found = [f"{f.name}:{i}: {line.strip()}" for f in sorted(package.glob("*.py"))
             if f.name not in ("tasks.py", "presets.py", "report.py")
             for i, line in enumerate(f.read_text().splitlines(), 1) if compare.search(line)]
    assert compare.search('if cfg.task.name != "addition":') and compare.search("if t.name in ('miiii', 'nanda')")
    assert not found, found


def test_div_grid_inputs_are_the_whole_grid_and_its_labels_say_why_not():
    from miiii.interventions import frequency_ablation
    from miiii.run import load_run

    run = load_run(div_run())  # test_power_tasks_train_from_the_nanda_preset's: one training for both
    assert len(run.inputs("grid")) == 37 * 37 and (run.inputs("grid")[:37, 1] == 0).all()  # row n = x0 + 37 x1
    with pytest.raises(ConfigError, match="labels only some of the p"):
        run.labels("grid")
    with pytest.raises(ConfigError, match="labels only some of the p"):
        frequency_ablation(run)


def test_an_entry_without_its_familys_rules_fails_at_once():
    from miiii.tasks import GRID, TaskSpec

    with pytest.raises(ValueError, match="lacks"):
        TaskSpec("half", GRID, "a grid task with no labels", metric_names=lambda cfg, m: ("x",))
    with pytest.raises(ValueError, match="family"):
        TaskSpec("odd", "tree", "no such family", metric_names=lambda cfg, m: ("x",))
