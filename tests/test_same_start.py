"""experiments/same_start.py: this project's trainer driven from a given start (initial parameters and every epoch's
sample order) computes exactly the run that start describes; with torch, a start exported from the book's loop
gives PyTorch's model and batches, and the two loops' first steps agree."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _runhelp import ROOT, load_module

from miiii.presets import get_preset
from miiii.tasks import make_task
from miiii.train import epoch_order, make_trainer, task_data

same_start = load_module(ROOT / "experiments" / "same_start.py")


def test_laid_out_reads_the_wanted_order_through_the_trainers():
    train = np.arange(10) * 10
    own, wanted = np.random.default_rng(0).permutation(10), np.random.default_rng(1).permutation(10)
    out = same_start.laid_out(train, own, wanted)
    assert (out[own] == train[wanted]).all() and sorted(out) == sorted(train)


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
    _, m = trainer.chunk(ref, task_data(task), steps)
    assert np.array_equal(loss[:steps], np.asarray(m["loss"]))
    assert run.metrics["valid_acc"].shape == (3 * 98, 1) and np.isfinite(run.metrics["valid_acc"][[98, 196], 0]).all()


def test_the_loops_from_one_start_agree_step_by_step_with_the_same_warmup(tmp_path):
    """PyTorch's start for seed 3 as miiii parameters gives PyTorch's logits; this project's first 30 steps from it
    have PyTorch's losses with optax's warm-up to 1e-4, and not with the book's (its first step at lr / 200)."""
    torch = pytest.importorskip("torch")
    tb = load_module(ROOT / "experiments" / "torch_book.py")
    task = make_task(get_preset("addition").task)
    f = tb.export_start(tmp_path, task, 3, epochs=1, n_steps=30)
    start = same_start.read_start(f)
    torch.manual_seed(3)
    model = tb.AdditionTransformer()
    x = task.valid.x[:64]
    want = model(torch.as_tensor(x, dtype=torch.long)).detach().numpy()
    cfg = get_preset(same_start.PRESET)
    trainer = make_trainer(cfg, task)
    got = np.asarray(trainer.apply(jax.tree.map(np.asarray, start["params"]), x)[0])
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    back = tb.torch_state(start["params"])
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())
    # the DataLoader over (x, y) pairs, as the committed runs were trained, yields the exported order
    torch.manual_seed(3)
    tb.AdditionTransformer()
    pairs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.as_tensor(task.train.x)),
                                        batch_size=512, shuffle=True)
    first = next(iter(pairs))[0].numpy()
    assert np.array_equal(first, task.train.x[start["orders"][0][:512]])
    _, loss = same_start.train_from(start, epochs=1)
    same, own = same_start.agreement(loss, start["step_loss_warmup0"]), same_start.agreement(loss, start["step_loss"])
    assert same["steps"] == 30 and same["max_all"] < 1e-4 and same["part_step"] is None
    assert own["part_step"] == 2  # the first step is the same (its loss is taken before any update); then not
