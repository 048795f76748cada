"""The book over seeds (experiments/book.py --seeds): the verdict rules on synthetic seed tables both ways, and the
seed study end to end at smoke scale, with a provenance header and a PyTorch side read from its JSON."""

from __future__ import annotations

import json
import re

from _runhelp import ROOT, load_module

book = load_module(ROOT / "experiments" / "book.py")


def _run(seed, jump, acc, loss=0.96):
    return dict(seed=seed, jump_epoch={"0.5": jump, "0.99": jump}, final_epoch_loss=loss, loss_floor=0.9594,
                valid_autoregressive_acc=acc, valid_teacher_forced_acc=acc, valid_acc=[0.1, acc], wall_s=1.0,
                edge_cases=6 if acc > 0.99 else 1, n_edge_cases=6)


def _verdicts(text: str) -> dict[str, str]:
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ") and "**" in line]
    return {r[1].strip(): r[4].strip().strip("*") for r in rows}


def test_addition_groks_within_the_budget_only_if_every_seed_does():
    every = [_run(s, j, 1.0) for s, j in enumerate((60, 90, 10, 120, 75))]
    one_stuck = every[:4] + [_run(4, None, 0.103, 1.15)]
    d = book.distribution(one_stuck, 150)
    assert (d["grokked"], d["n"], d["jump_min"], d["jump_max"]) == (4, 5, 10, 120)
    assert d["jump_median"] == 90  # 10, 60, 90, 120, never (151)
    v_all, v_stuck = (_verdicts(book.seeds_md({"addition": r}, {}, False)) for r in (every, one_stuck))
    key = next(k for k in v_all if k.startswith("addition, miiii"))
    assert v_all[key] == "holds" and v_stuck[key] == "does not hold"


def test_reversal_by_epoch_10_and_the_two_implementations_agreeing_both_ways():
    fast, late = [_run(s, 7, 1.0) for s in range(3)], [_run(0, 7, 1.0), _run(1, 12, 1.0), _run(2, 8, 1.0)]
    v = _verdicts(book.seeds_md({"reversal": fast}, {}, False))
    assert list(v.values()) == ["holds"]
    assert list(_verdicts(book.seeds_md({"reversal": late}, {}, False)).values()) == ["does not hold"]
    a = book.distribution([_run(s, j, 1.0) for s, j in enumerate((60, 70, 80))], 150)
    near = book.distribution([_run(s, j, 1.0) for s, j in enumerate((65, 85, 95))], 150)  # medians 70 vs 85
    far = book.distribution([_run(0, 60, 1.0), _run(1, None, 0.1), _run(2, None, 0.1)], 150)  # 1 of 3 groks
    assert book.agree(a, near) and not book.agree(a, far)
    assert not book.agree(a, book.distribution([_run(s, j, 1.0) for s, j in enumerate((90, 95, 100))], 150))


def test_seed_study_writes_provenance_both_sides_and_a_verdict_per_claim(tmp_path):
    torch_runs = [_run(s, 200, 1.0) | {"epochs": 20} for s in range(2)]  # the PyTorch side, read from its JSON
    (tmp_path / "torch_book_addition.json").write_text(json.dumps(dict(task="addition", torch="2.x", threads=1,
                                                                       loss_floor=1.0, runs=torch_runs)))
    assert book.main(["--smoke", "--seeds", "2", "--only-seeds", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "seeds.md").read_text()
    data = json.loads((tmp_path / "seeds.json").read_text())
    assert [len(data["jax"][n]) for n in ("addition", "reversal")] == [2, 2] and len(data["torch"]["addition"]) == 2
    assert re.search(r"\| commit \| [0-9a-f]{40}(-dirty)? \|", text) and "| PyTorch loop | addition: torch 2.x" in text
    assert "| jax |" in text and "| precision | highest |" in text
    verdicts = _verdicts(text)
    assert len(verdicts) == 4  # addition and reversal in JAX, addition in PyTorch, and the agreement for addition
    assert sum("the book's way" in k for k in verdicts) == 1
    assert sum(k.startswith("addition, PyTorch") for k in verdicts) == 1
    assert set(verdicts.values()) <= {"holds", "does not hold"}
    assert (tmp_path / "seeds_addition.png").stat().st_size > 10_000
