"""The book's sentences about its training curve (experiments/book/curve_rules.py): each rule both ways on synthetic
per-epoch records, and the committed gap.md judging them on the loops it names."""

from pathlib import Path

from experiments.book import curve_rules as C

ROOT = Path(__file__).resolve().parents[1]
FLOOR = 0.9594


def run(acc, loss=None, seed=0):
    """A seed record as gap.md's samples hold it: held-out exact match per epoch, the jump epochs read from it, and
    the epoch's mean training loss when given."""
    first = lambda t: next((i + 1 for i, a in enumerate(acc) if a >= t), None)  # noqa: E731
    r = dict(seed=seed, valid_acc=list(acc), jump_epoch={"0.5": first(0.5), "0.99": first(0.99)}, loss_floor=FLOOR)
    return r | ({"epoch_loss": list(loss)} if loss is not None else {})


BOOKS_CURVE = [0.01] * 20 + [0.1, 0.6, 1.0] + [1.0] * 10  # 20 epochs near zero, then 50 -> 99 % in one epoch


def test_near_zero_then_jumps_both_ways():
    assert C.rule_near_zero_then_jumps(run(BOOKS_CURVE)) is True
    assert C.rule_near_zero_then_jumps(run([0.01] * 5 + [0.1] * 15 + [0.6, 1.0])) is False  # near zero 5 epochs only
    assert C.rule_near_zero_then_jumps(run([0.01] * 20 + [0.6] * 10 + [1.0])) is False  # 10 epochs from 50 to 99 %
    assert C.rule_near_zero_then_jumps(run([0.01] * 30)) is False  # no jump within the budget
    assert C.near_zero_epochs(run([0.01] * 12 + [0.2] * 3 + [0.01] * 2 + [0.7, 1.0])) == 14


def test_memorizes_first_needs_a_low_training_loss_while_held_out_is_low():
    acc = [0.01] * 20 + [1.0] * 5
    plateau = [1.34] * 20 + [0.96] * 5  # the book's chapter 3 log: the loss falls with the jump
    memorizer = [1.34] * 5 + [0.97] * 15 + [0.96] * 5  # the loss at the floor 15 epochs before the jump
    assert C.rule_memorizes_first(run(acc, plateau)) is False
    assert C.rule_memorizes_first(run(acc, memorizer)) is True
    assert C.rule_memorizes_first(run(acc)) is None  # no per-epoch loss recorded
    assert C.rule_memorizes_first(run([0.01] * 25, memorizer)) is None  # no jump to memorise before


def test_decouple_needs_many_epochs_in_some_seed():
    acc = [0.01] * 20 + [1.0] * 5
    long, short = [1.34] * 5 + [0.97] * 15 + [0.96] * 5, [1.34] * 17 + [0.97] * 3 + [0.96] * 5
    assert C.rule_decouple([run(acc, short), run(acc, long, seed=1)]) is True  # sometimes: one seed suffices
    assert C.rule_decouple([run(acc, short), run(acc, short, seed=1)]) is False  # 3 epochs are not many
    assert C.rule_decouple([run(acc), run(acc, seed=1)]) is None  # no losses recorded


def test_low_loss_not_generalized_needs_a_run_that_fits_without_transfer():
    def end(loss, acc):
        return dict(final_epoch_loss=loss, valid_autoregressive_acc=acc, loss_floor=FLOOR)

    assert C.rule_low_loss_not_generalized([end(0.96, 1.0), end(0.97, 0.1)]) is True  # low loss, held-out at 10 %
    assert C.rule_low_loss_not_generalized([end(0.96, 1.0), end(1.15, 0.1)]) is False  # the stuck run's loss is high
    assert C.rule_low_loss_not_generalized([end(0.90, 0.2)]) is True  # below the floor: memorised
    row = C.pooled_row([end(0.96, 1.0), end(1.15, 0.1)], 2)
    assert "1 of 2 runs end within 0.05 of the floor" in row and "1.1500–1.1500" in row
    assert row.endswith("**does not hold** |")


def test_rows_judge_loss_rules_only_where_losses_are_recorded():
    jax, torch = [run(BOOKS_CURVE, seed=s) for s in (0, 1)], [run(BOOKS_CURVE, [1.2] * 33, seed=s) for s in (0, 1)]
    lines = [ln for ln in C.rows([("jax", jax), ("torch", torch)]) if ln.startswith(("| jax", "| torch"))]
    assert len(lines) == 4 and sum(ln.startswith("| jax") for ln in lines) == 1  # the curve rule alone on jax
    assert all(ln.endswith(("**holds** |", "**does not hold** |", "**not testable** |")) for ln in lines)


def test_committed_gap_md_judges_the_curve_sentences_on_both_loops():
    text = (ROOT / "results" / "book" / "gap.md").read_text()
    rows = [ln for ln in text.splitlines() if "(ch. 3, Assembly and Training) |" in ln]
    assert len(rows) == 4 and sum("PyTorch" in ln for ln in rows) == 3
    assert all(q in text for q, *_ in C.CLAIMS)
    assert sum(C.LOW_LOSS_QUOTE in ln and "(ch. 7, Connections) |" in ln for ln in text.splitlines()) == 1
