"""The book's sentences about its training curve (ch. 3, Assembly and Training; one of ch. 7 on the loss), judged on
the per-epoch records gap.md compares: the held-out exact match per epoch (teacher-forced, every loop's records)
and the epoch's mean training loss (the PyTorch loop's records only; this project's keep the held-out curve alone).
A rule's docstring (its first paragraph) is the rule gap.md prints. A per-seed rule returns True, False or None (not
testable in this seed); `miiii.rules.verdict` pools the seeds.
"""

from __future__ import annotations

from miiii.rules import printed_rule, verdict

NEAR_ZERO = 0.05  # "accuracy sits near zero": held-out exact match below 5 % (ch. 3's log: 0.1-1.0 %)
MANY = 10  # "for many epochs": at least 10 (ch. 3's log: epochs 20-50 at 0.9-1.0 %)
JUMP = 5  # "then jumps": from 50 % to 99 % held-out exact match within 5 epochs
LOW_LOSS = 0.05  # "low training loss": within 0.05 of the loss floor, where a run that groks ends
LOW_ACC = 0.5  # "low test accuracy": held-out exact match below 50 %
SRC = "(ch. 3, Assembly and Training)"


def near_zero_epochs(run: dict) -> int:
    """The epochs before the seed first reaches 50 % held-out exact match (all, if it never does) in which it is
    below 5 %."""
    j50 = run["jump_epoch"]["0.5"] or len(run["valid_acc"]) + 1
    return sum(a < NEAR_ZERO for a in run["valid_acc"][: j50 - 1])


def rule_near_zero_then_jumps(run: dict) -> bool:
    """holds if the seed's held-out exact match sits below 5 % (near zero) in at least 10 epochs before it first
    reaches 50 %, then reaches 99 % within 5 epochs of reaching 50 % (the jump); does not hold otherwise, a seed
    that does not reach 99 % within the budget included (it shows no jump)."""
    j50, j99 = run["jump_epoch"]["0.5"], run["jump_epoch"]["0.99"]
    if j50 is None or j99 is None:
        return False
    return near_zero_epochs(run) >= MANY and j99 - j50 <= JUMP


def memorizing_epochs(run: dict) -> int | None:
    """The epochs before the jump (the first at 99 % held-out exact match) whose mean training loss is within 0.05
    of the loss floor while the held-out exact match is below 50 %; None without per-epoch losses or a jump."""
    j99 = run["jump_epoch"]["0.99"]
    if "epoch_loss" not in run or j99 is None:
        return None
    pairs = zip(run["epoch_loss"][: j99 - 1], run["valid_acc"][: j99 - 1], strict=True)
    return sum(loss <= run["loss_floor"] + LOW_LOSS and acc < LOW_ACC for loss, acc in pairs)


def lowest_loss_before(run: dict) -> float | None:
    """The lowest mean training loss of an epoch whose held-out exact match is below 50 %, before the jump."""
    j99 = run["jump_epoch"]["0.99"]
    if "epoch_loss" not in run or j99 is None:
        return None
    low = [loss for loss, acc in zip(run["epoch_loss"][: j99 - 1], run["valid_acc"][: j99 - 1], strict=True)
           if acc < LOW_ACC]
    return min(low) if low else None


def rule_memorizes_first(run: dict) -> bool | None:
    """holds if, before its jump (the first epoch at 99 % held-out exact match), the seed has an epoch whose mean
    training loss is within 0.05 of the loss floor (low training loss: where a run that groks ends) while its
    held-out exact match is below 50 % (low test accuracy); not testable in a seed without per-epoch training
    losses or that does not reach 99 % within the budget (no jump to memorise before)."""
    n = memorizing_epochs(run)
    return None if n is None else n >= 1


def rule_decouple(runs: list[dict]) -> bool | None:
    """holds if at least one seed spends at least 10 epochs before its jump with its mean training loss within 0.05
    of the loss floor while its held-out exact match is below 50 % (training loss and generalisation decoupled
    "for many epochs"); does not hold if no seed does; not testable when no seed has per-epoch training losses and
    a jump."""
    n = [k for k in map(memorizing_epochs, runs) if k is not None]
    return None if not n else max(n) >= MANY


def fits_without_transfer(run: dict) -> bool:
    """The run ends with its training loss (the last epoch's mean) within 0.05 of the loss floor, or below it, while
    its held-out exact match (autoregressive) is below 50 %: a fit that does not transfer."""
    return run["final_epoch_loss"] <= run["loss_floor"] + LOW_LOSS and run["valid_autoregressive_acc"] < LOW_ACC


def rule_low_loss_not_generalized(runs: list[dict]) -> bool:
    """holds if some run ends with its training loss within 0.05 of the loss floor (or below it) while its held-out
    exact match (autoregressive) is below 50 % (a low loss that did not generalise); does not hold if none does. The
    book says it of LLM evaluation, by grokking's lesson: it is judged on these runs of its adder only."""
    return any(map(fits_without_transfer, runs))


LOW_LOSS_QUOTE = "Conversely, low loss doesn’t mean it’s generalized."  # ch. 7, 7.5 Grokking


def pooled_row(runs: list[dict], n_loops: int) -> str:
    """The ch. 7 sentence judged over every run gap.md compares."""
    low = [r for r in runs if r["final_epoch_loss"] <= r["loss_floor"] + LOW_LOSS]
    stuck = [r["final_epoch_loss"] for r in runs if r["valid_autoregressive_acc"] < LOW_ACC]
    said = (f"{len(low)} of {len(runs)} runs end within {LOW_LOSS} of the floor ({runs[0]['loss_floor']:.4f}), "
            f"{sum(r['valid_autoregressive_acc'] < LOW_ACC for r in low)} of them below 50 % held-out; the "
            f"{len(stuck)} runs below 50 % held-out end at a training loss of "
            + (f"{min(stuck):.4f}–{max(stuck):.4f}" if stuck else "–"))
    v = verdict([rule_low_loss_not_generalized(runs)])
    return (f"| every addition run gap.md compares ({len(runs)} runs of {n_loops} loops and settings): "
            f"“{LOW_LOSS_QUOTE}” (ch. 7, Connections) | {printed_rule(rule_low_loss_not_generalized)} | {said} | "
            f"**{v}** |")


CLAIMS = (  # (quotation, rule, per seed or over the seeds)
    ("You can watch it happen: accuracy sits near zero for many epochs, then jumps — a phase transition called "
     "grokking.", rule_near_zero_then_jumps, True),
    ("The model first memorizes training examples (low training loss, low test accuracy), then discovers the "
     "underlying algorithm (low training loss, high test accuracy).", rule_memorizes_first, True),
    ("This challenges the standard intuition that training loss and generalization track together — here they "
     "decouple, sometimes for many epochs.", rule_decouple, False),
)


def _said(rule, runs: list[dict]) -> str:
    """What a rule reads, per seed."""
    def one(r):
        if rule is rule_near_zero_then_jumps:
            j50, j99 = r["jump_epoch"]["0.5"], r["jump_epoch"]["0.99"]
            then = f"50 % at epoch {j50}, 99 % at {j99}" if j50 and j99 else "never 99 %"
            return f"{near_zero_epochs(r)} epochs near zero; {then}"
        low = lowest_loss_before(r)
        return ("no jump" if r["jump_epoch"]["0.99"] is None else
                f"{memorizing_epochs(r)} epochs, lowest loss {low:.4f}" if low is not None else "0 epochs below 50 %")
    head = "" if rule is rule_near_zero_then_jumps else (
        f"epochs with a low training loss and held-out below 50 % before the jump (floor {runs[0]['loss_floor']:.4f}"
        "), per seed: ")
    return head + "; ".join(f"seed {r['seed']}: {one(r)}" for r in runs)


def rows(loops: list[tuple[str, list[dict]]], pooled: list[list[dict]] | None = None) -> list[str]:
    """gap.md's section: each claim on each loop whose records can test it, with its rule, what it read and its
    verdict; with `pooled` (every sample's runs) chapter 7's sentence on the loss over all of them."""
    lines = ["", "## The book's sentences about its training curve", "",
             "Judged on the loop `make train-addition` trains (preset `addition`, solo runs: `warmup1.json`) and "
             "on the book's loop as written (PyTorch, `torch_book_addition.json`); a loss rule only where the "
             "records keep the epoch's mean training loss (the PyTorch loop's; this project's records keep the "
             "held-out curve alone). The loss is the epoch's mean over its batches, as the book prints it, and the "
             "held-out exact match is read at the epoch's end, so an epoch's loss lags its accuracy: that leans "
             "toward *does not hold*.", "", "| claim | rule | measured | verdict |", "| --- | --- | --- | --- |"]
    for quote, rule, per_seed in CLAIMS:
        for label, runs in loops:
            if rule is not rule_near_zero_then_jumps and not all("epoch_loss" in r for r in runs):
                continue
            if per_seed:
                per = [rule(r) for r in runs]
                v = verdict(per, [r["jump_epoch"]["0.99"] is not None for r in runs]
                            if rule is rule_memorizes_first else None)
            else:
                v = verdict([rule(runs)])
            lines.append(f"| {label}: “{quote}” {SRC} | {printed_rule(rule)} | {_said(rule, runs)} | **{v}** |")
    if pooled:
        lines.append(pooled_row([r for runs in pooled for r in runs], len(pooled)))
    return lines
