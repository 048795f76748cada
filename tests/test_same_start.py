"""python -m experiments.book.same_start: this project's trainer driven from a given start (initial parameters and
every epoch's sample order) computes exactly the run that start describes; with torch, a start exported from the book's
loop gives PyTorch's model and batches, and the two loops' first steps agree."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from experiments.book import same_start
from miiii.presets import get_preset
from miiii.tasks import make_task
from miiii.train import epoch_order, make_trainer, task_data


def test_laid_out_reads_the_wanted_order_through_the_trainers():
    train = np.arange(10) * 10
    own, wanted = np.random.default_rng(0).permutation(10), np.random.default_rng(1).permutation(10)
    out = same_start.laid_out(train, own, wanted)
    assert (out[own] == train[wanted]).all() and sorted(out) == sorted(train)


@pytest.mark.study  # make test-studies: the book study's same-start tool end to end (30 s of make test's budget)
def test_a_start_of_another_seed_reproduces_that_seeds_own_run_bit_for_bit():
    """The start of seed 7 (its initial parameters, its epochs' orders), driven through the trainer of seed 0 by
    re-laying the data, is seed 7's run: the same losses, bit for bit, over two epochs of 98 batches (the padded
    last batch included) and into the third."""
    cfg = get_preset(same_start.PRESET)
    task = make_task(cfg.task)
    trainer = make_trainer(cfg, task)
    n, steps = len(task.train.x), 2 * 98 + 5
    ref = trainer.init(7)
    key7 = ref.key
    start = dict(seed=7, params=jax.tree.map(np.asarray, ref.params),
                 orders=np.stack([np.asarray(epoch_order(key7, e, n)) for e in range(3)]))
    run, loss = same_start.train_from(start, epochs=3)
    m = trainer.chunk(ref, task_data(task), steps)[1].metrics
    assert np.array_equal(loss[:steps], np.asarray(m["loss"]))
    assert run.metrics["valid_acc"].shape == (3 * 98, 1) and np.isfinite(run.metrics["valid_acc"][[98, 196], 0]).all()


def test_the_loops_from_one_start_agree_step_by_step_with_the_same_warmup(tmp_path):
    """PyTorch's start for seed 3 as miiii parameters gives PyTorch's logits; this project's first 30 steps from it
    have PyTorch's losses with optax's warm-up to 1e-4, and not with the book's (its first step at lr / 200)."""
    torch = pytest.importorskip("torch")
    from experiments.book import torch_loop as tb
    from experiments.book import torch_model

    task = make_task(get_preset("addition").task)
    f = tb.export_start(tmp_path, task, 3, epochs=1, n_steps=30)
    start = same_start.read_start(f)
    torch.manual_seed(3)
    model = torch_model.AdditionTransformer()
    x = task.valid.x[:64]
    want = model(torch.as_tensor(x, dtype=torch.long)).detach().numpy()
    cfg = get_preset(same_start.PRESET)
    trainer = make_trainer(cfg, task)
    got = np.asarray(trainer.apply(jax.tree.map(np.asarray, start["params"]), x)[0])
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    back = torch_model.torch_state(start["params"])
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())
    # the DataLoader over (x, y) pairs, as the committed runs were trained, yields the exported order
    torch.manual_seed(3)
    torch_model.AdditionTransformer()
    pairs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.as_tensor(task.train.x)),
                                        batch_size=512, shuffle=True)
    first = next(iter(pairs))[0].numpy()
    assert np.array_equal(first, task.train.x[start["orders"][0][:512]])
    _, loss = same_start.train_from(start, epochs=1)
    same, own = (same_start.agreement(same_start.loss_diff(loss, start[k])) for k in ("step_loss_warmup0", "step_loss"))
    assert same["steps"] == 30 and same["max_all"] < 1e-4 and same["part_step"] is None
    assert own["part_step"] == 2  # the first step is the same (its loss is taken before any update); then not


def test_the_loops_part_where_the_gap_lasts_not_at_one_spike():
    diff = np.full(300, 1e-5)
    diff[[50, 120]] = 0.5  # one batch's spike each
    diff[200:] = 1e-2
    a = same_start.agreement(diff)
    assert (a["part_step"], a["max_10"], a["max_100"], a["steps"]) == (201, 1e-5, 0.5, 300)
    diff[200:] = 1e-5
    assert same_start.agreement(diff)["part_step"] is None


def _record(seed, jump, part):
    agree = dict(diff=[1e-5] * (part - 1) + [1e-2] * (601 - part))
    return dict(seed=seed, jump_epoch={"0.5": jump, "0.99": jump}, valid_autoregressive_acc=1.0 if jump else 0.1,
                final_epoch_loss=0.96 if jump else 1.15, loss_floor=0.9594, epochs=150, batches_per_epoch=98,
                valid_acc=[0.1, 1.0 if jump else 0.1], wall_s=60.0, weight_decay=0.01, same_warmup=agree,
                own_warmup=dict(diff=[0.0] + [0.1] * 599), torch="2.x", commit="a" * 40,
                numerics=dict(backend="cpu", device="cpu", precision="highest", jax_version="0.x"))


def test_the_report_pairs_each_start_with_pytorchs_run_of_it_and_judges_by_the_gap_rule(tmp_path):
    """Seed records kept in OUT/runs/same-start are reused (nothing trains); the report tells 0/4 from 4/4 and
    names where the loops parted; no start files is one error line."""
    starts, out = tmp_path / "starts", tmp_path / "out"
    starts.mkdir()
    assert same_start.main(["--starts", str(starts), "--out", str(out)]) == 2 and not out.exists()
    torch_runs = [dict(seed=s, jump_epoch={"0.5": j, "0.99": j}, valid_autoregressive_acc=1.0, final_epoch_loss=0.96,
                       epochs=150, batches_per_epoch=98, valid_acc=[0.1, 1.0], wall_s=1.0) for s, j in
                  enumerate((20, 30, 40, 50))]
    out.mkdir()
    (out / "torch_book_addition.json").write_text(json.dumps(dict(loss_floor=0.9594, runs=torch_runs)))
    for seed in range(4):
        np.savez(starts / f"start_s{seed}.npz", seed=seed, orders=np.zeros((1, 2), np.uint16),
                 step_loss=np.zeros(2, np.float32), step_loss_warmup0=np.zeros(2, np.float32), torch_version="2.x")
    cache = out / "runs" / "same-start"
    cache.mkdir(parents=True)
    for jumps, verdict in (((None,) * 4, "**differ**"), ((25, 35, None, 45), "**no difference detected**")):
        for seed, j in enumerate(jumps):
            (cache / f"s{seed}.json").write_text(json.dumps(_record(seed, j, 194 + seed)))
        assert same_start.main(["--starts", str(starts), "--out", str(out)]) == 0
        text = (out / "same_start.md").read_text()
        assert verdict in text and "| 3 | 1.0e-05 | 1.0e-05 | 197 | 1.0e-01 | 2 |" in text
    assert "| 2 | 40 | – (stuck) | not run |" in text  # PyTorch's seed 2 jumped at 40; here it stayed
    saved = json.loads((out / "same_start.json").read_text())
    assert [r["seed"] for r in saved["runs"]] == [0, 1, 2, 3] and "diff" not in saved["runs"][0]["same_warmup"]
