"""The book over seeds (python -m experiments.book --seeds): the verdict rules on synthetic seed tables both ways, and
the seed study end to end at smoke scale, with a provenance header and a PyTorch side read from its JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments.book import modes, records, tables  # the runs and modes; what the study reads and compares; markdown
from experiments.book import study as book  # the command line
from miiii.config import apply_overrides
from miiii.presets import get_preset
from miiii.train import steps_per_epoch

ROOT = Path(__file__).resolve().parents[1]


def _run(seed, jump, acc, loss=0.96):
    return dict(seed=seed, jump_epoch={"0.5": jump, "0.99": jump}, final_epoch_loss=loss, loss_floor=0.9594,
                valid_autoregressive_acc=acc, valid_teacher_forced_acc=acc, valid_acc=[0.1, acc], wall_s=1.0,
                edge_cases=6 if acc > 0.99 else 1, n_edge_cases=6)


def _verdicts(text: str) -> dict[str, str]:
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ") and "**" in line]
    return {r[1].strip(): r[4].strip().strip("*") for r in rows if not r[1].strip().startswith("“")}  # not quotes


def test_addition_groks_within_the_budget_only_if_every_seed_does():
    every = [_run(s, j, 1.0) for s, j in enumerate((60, 90, 10, 120, 75))]
    one_stuck = every[:4] + [_run(4, None, 0.103, 1.15)]
    d = records.distribution(one_stuck, 150)
    assert (d["grokked"], d["n"], d["jump_min"], d["jump_max"]) == (4, 5, 10, 120)
    assert d["jump_median"] == 90  # 10, 60, 90, 120, never (151)
    v_all, v_stuck = (_verdicts(tables.seeds_md({"addition": r}, {}, False)) for r in (every, one_stuck))
    key = next(k for k in v_all if k.startswith("addition, miiii"))
    assert v_all[key] == "holds" and v_stuck[key] == "does not hold"


def test_reversal_by_epoch_10_and_the_two_implementations_agreeing_both_ways():
    fast, late = [_run(s, 7, 1.0) for s in range(3)], [_run(0, 7, 1.0), _run(1, 12, 1.0), _run(2, 8, 1.0)]
    v = _verdicts(tables.seeds_md({"reversal": fast}, {}, False))
    assert list(v.values()) == ["holds"]
    assert list(_verdicts(tables.seeds_md({"reversal": late}, {}, False)).values()) == ["does not hold"]
    a = records.distribution([_run(s, j, 1.0) for s, j in enumerate((60, 70, 80))], 150)
    near = records.distribution([_run(s, j, 1.0) for s, j in enumerate((65, 85, 95))], 150)  # medians 70 vs 85
    far = records.distribution([_run(0, 60, 1.0), _run(1, None, 0.1), _run(2, None, 0.1)], 150)  # 1 of 3 groks
    assert records.agree(a, near) and not records.agree(a, far)
    assert not records.agree(a, records.distribution([_run(s, j, 1.0) for s, j in enumerate((90, 95, 100))], 150))


@pytest.mark.study
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
    assert len(verdicts) == 5  # addition and reversal in JAX, addition in PyTorch, the agreement for addition, and
    assert sum("Reversal converges much faster" in k for k in verdicts) == 1  # reversal against addition in JAX only
    assert sum("the book's way" in k for k in verdicts) == 1
    assert sum(k.startswith("addition, PyTorch") for k in verdicts) == 1
    assert set(verdicts.values()) <= {"holds", "does not hold"}
    assert (tmp_path / "seeds_addition.png").stat().st_size > 10_000


# ---------------------------------------------------------------- the settings the book does not state (--unstated)

def _epochs(seed, jump, ar, wd, budget=150):
    """A seed on the 10 % plateau until `jump` (None: never), at weight decay `wd` and clip 1."""
    acc = [0.1] * (budget if jump is None else jump - 1) + [1.0] * (0 if jump is None else budget - jump + 1)
    return _run(seed, jump, ar) | dict(valid_acc=acc, epochs=budget, weight_decay=wd, clip_norm=1.0)


def test_book_curve_needs_the_plateau_and_the_jump():
    assert records.book_curve(_epochs(0, 60, 1.0, 0.1))
    assert records.book_curve(_epochs(0, records.CURVE_PLATEAU + 1, 1.0, 0.1))  # the shortest plateau there is
    assert not records.book_curve(_epochs(0, records.CURVE_PLATEAU, 1.0, 0.1))  # jumps in epoch 10: no plateau
    assert not records.book_curve(_epochs(0, None, 0.103, 0.1))  # never jumps
    assert not records.book_curve(_epochs(0, 60, 0.98, 0.1))  # teacher-forced jump, autoregressive short of 99 %
    assert not records.book_curve(_epochs(0, None, 1.0, 0.1, budget=5))  # too short a run to show a plateau


def test_unstated_verdict_per_setting_and_the_finding_both_ways():
    groups = {(0.0, 1.0): [_epochs(0, 60, 1.0, 0.0), _epochs(1, None, 0.103, 0.0), _epochs(2, 80, 1.0, 0.0)],
              (0.1, 1.0): [_epochs(s, 40 + s, 1.0, 0.1) for s in range(3)],
              (1.0, 1.0): [_epochs(s, 3, 1.0, 1.0) for s in range(3)]}  # groks at once: no plateau
    text = tables.unstated_md(groups)
    loop = tables.LOOP_97  # every row names the loop it swept (this project's older one)
    assert _verdicts(text) == {f"{loop}, weight decay 0, clip 1: 150 epochs ensure grokking completes": "does not hold",
                               f"{loop}, weight decay 0.1, clip 1: 150 epochs ensure grokking completes": "holds",
                               f"{loop}, weight decay 1, clip 1: 150 epochs ensure grokking completes": "holds"}
    assert "(on `addition-97`" in text  # the memorisation sentence too
    assert "holds at: weight decay 0.1, clip 1; weight decay 1, clip 1." in text
    assert "in most seeds: weight decay 0.1, clip 1 (3/3 seeds)." in text
    assert "| 0 | 1 | 0, 1, 2 | 2/3 | 60, –, 80 | 80 | 60–80 | 2/3 |" in text  # median counts the stuck seed as 151
    groups[0.1, 1.0] = [_epochs(0, 40, 1.0, 0.1), _epochs(1, None, 0.1, 0.1), _epochs(2, 5, 1.0, 0.1)]  # 1 curve
    groups[0.0, 1.0] = [_epochs(s, None, 0.1, 0.0) for s in range(3)]
    text = tables.unstated_md(groups)
    assert "holds at: weight decay 1, clip 1." in text
    assert "in most seeds: no setting (at most 33% of a setting's seeds)." in text


@pytest.mark.study
def test_unstated_study_end_to_end_reuses_its_sweep_and_refuses_another(tmp_path, capsys, monkeypatch):
    smoke = modes.configs  # the smoke runs, shorter still: this test checks the plumbing, not grokking
    monkeypatch.setattr(modes, "configs", lambda *a: {k: apply_overrides(c, ["steps=60", "eval_every=20", "chunk=60"])
                                                     for k, c in smoke(*a).items()})
    args = ["--smoke", "--seeds", "1", "--out", str(tmp_path), "--unstated"]
    assert book.main(args + ["wd=0,0.1"]) == 0
    text = (tmp_path / "unstated.md").read_text()
    assert re.search(r"\| commit \| [0-9a-f]{40}(-dirty)? \|", text) and "| precision | highest |" in text
    assert len(_verdicts(text)) == 2 and (tmp_path / "unstated_addition.png").stat().st_size > 10_000
    member = tmp_path / "runs" / "unstated-weight_decay=0,0.1" / "member_001"
    assert json.loads((member / "config.json").read_text())["optim"]["weight_decay"] == 0.1
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert book.main(args[:-1] + ["--unstated", "wd=0,0.1"]) == 0  # reused: nothing trained, nothing new
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert book.main(["--smoke", "--seeds", "2", "--out", str(tmp_path), "--unstated", "wd=0,0.1"]) == 2
    assert book.main(args + ["lr=1e-3"]) == 2
    err = capsys.readouterr().err
    assert "holds another sweep" in err and "weight decay (wd) and the clipping norm" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert book.main(["--smoke", "--seeds", "1", "--first-seed", "1", "--out", str(tmp_path), "--unstated",
                      "wd=0.1"]) == 0
    assert (tmp_path / "runs" / "unstated-weight_decay=0.1_seeds=1-1" / "sweep.json").is_file()
    rows = {r.split("|")[1].strip(): r.split("|")[3].strip() for r in
            (tmp_path / "unstated.md").read_text().splitlines() if re.match(r"\| 0(\.1)? \|", r)}
    assert rows == {"0": "0", "0.1": "0, 1"}  # every sweep in runs/ counted: seed 1 joins seed 0 at wd 0.1


def test_addition_wd01_is_the_book_recipe_at_weight_decay_0_1():
    a, b = (get_preset(n).to_dict() for n in ("addition-97", "addition-wd0.1"))
    assert (a["optim"].pop("weight_decay"), b["optim"].pop("weight_decay")) == (0.01, 0.1)
    assert a == b  # the model, data, schedule, clipping, budget and recording are the addition preset's


def test_addition_98_is_the_book_recipe_with_the_dataloaders_98_batches_and_150_epochs():
    import pytest

    from miiii.train import steps_per_epoch

    def epoch_length(cfg):
        return steps_per_epoch(cfg.train, cfg.task.n_train)
    from miiii.config import ConfigError
    from miiii.validate import validate

    a, b = (get_preset(n) for n in ("addition-97", "addition-98"))
    assert (epoch_length(a), epoch_length(b)) == (97, 98) and b.train.steps == 150 * epoch_length(b)
    da, db = a.to_dict(), b.to_dict()
    changed = {k for k in da["train"] if da["train"][k] != db["train"][k]}
    assert changed == {"steps", "eval_every", "chunk", "last_batch"} and db["train"]["eval_every"] == 98
    assert {k: v for k, v in da.items() if k != "train"} == {k: v for k, v in db.items() if k != "train"}
    with pytest.raises(ConfigError, match="last_batch"):
        validate(apply_overrides(a, ["last_batch=partial"]))


def _clopper_pearson(k: int, n: int) -> str:
    """The exact 95 % interval of k successes in n, as the odds print it."""
    from scipy.stats import beta

    lo = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    hi = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    return f"{lo:.2f}–{hi:.2f}"


def test_the_odds_interval_is_clopper_pearsons():
    assert _clopper_pearson(7, 8) == "0.47–1.00" and _clopper_pearson(0, 3) == "0.00–0.71"
    assert _clopper_pearson(8, 8) == "0.63–1.00"


def test_addition_is_the_books_loop_and_its_odds_are_the_committed_ones():
    """`make train-addition`'s preset is addition-98 with the LambdaLR warm-up: the config results/book/warmup1.json
    ran over 8 seeds, whose count the preset's description (and the README through it) prints."""
    from miiii.presets import ADDITION_ODDS, PRESETS

    a = get_preset("addition")
    assert a.to_dict() == apply_overrides(get_preset("addition-98"), records.WARMUP1).to_dict()
    assert (a.optim.warmup_first, a.train.last_batch) == (1, "keep")
    data = json.loads((ROOT / "results" / "book" / "warmup1.json").read_text())
    runs = data["runs"]
    done = [r for r in runs if r["valid_autoregressive_acc"] >= 0.99]
    jumps, budget = [r["jump_epoch"]["0.99"] for r in done], a.train.steps // 98
    sweep = json.loads((ROOT / "results" / "book" / "findings.json").read_text())["sweeps"]["addition"]
    solved = sum(m["autoregressive"] >= 0.99 for m in sweep)
    assert len(runs) >= 8 and ADDITION_ODDS == (
        f"{len(done)} of {len(runs)} seeds grokked within the {budget} epochs as solo runs (95 % interval "
        f"{_clopper_pearson(len(done), len(runs))}; jumps at epochs {min(jumps)}–{max(jumps)}, the latest "
        f"{budget - max(jumps)} epochs before the end; results/book/warmup1.json), {solved} of {len(sweep)} as a "
        f"vmapped sweep (95 % interval {_clopper_pearson(solved, len(sweep))}; results/book/findings.json)")
    assert ADDITION_ODDS in PRESETS["addition"][1]
    for seed, r in enumerate(runs):  # each run is this preset at its seed
        assert r["seed"] == seed and r["epochs"] == a.train.steps // 98


def _write_gap_inputs(out, miiii_jumps, torch_jumps, drop_last_jumps=None, b98_jumps=None, warmup0_jumps=None,
                      same_start_jumps=None, warmup1_jumps=None):
    """seeds.json / unstated.json / batches98.json / torch_book_addition*.json as the studies write them (what
    --gap reads): miiii_jumps are 5 solo seeds, then 3 sweep members of seeds 0-2."""
    def runs(jumps, batches):
        return [_run(s, j, 1.0 if j else 0.1) | dict(epochs=150, batches_per_epoch=batches)
                for s, j in enumerate(jumps)]

    mj = runs(miiii_jumps, 97)
    (out / "seeds.json").write_text(json.dumps(dict(jax=dict(addition=mj[:5]), torch={})))
    (out / "unstated.json").write_text(json.dumps({"wd=0.01 clip=1": [r | {"seed": i} for i, r in enumerate(mj[5:])]}))
    if b98_jumps is not None:
        prov = dict(commit="f" * 40, device="cpu (cpu)", jax="0.x", precision="highest", sweeps="gap-addition-98 (8)")
        (out / "batches98.json").write_text(json.dumps(dict(provenance=prov, runs=runs(b98_jumps, 98))))
    if same_start_jumps is not None:
        prov = {"seed records made at": "a" * 12, "device": "cpu (cpu)", "jax": "0.x", "precision": "highest",
                "torch (the starts)": "2.x"}
        (out / "same_start.json").write_text(json.dumps(dict(provenance=prov, runs=runs(same_start_jumps, 98))))
    if warmup1_jumps is not None:
        prov = dict(command="python -m miiii train …", numerics=["cpu (cpu), jax 0.x, precision highest"],
                    collected_at="c" * 40, seeds=list(range(len(warmup1_jumps))))
        (out / "warmup1.json").write_text(json.dumps(dict(provenance=prov, runs=runs(warmup1_jumps, 98))))
    for tag, jumps, batches in (("", torch_jumps, 98), ("_drop_last", drop_last_jumps, 97),
                                ("_warmup0", warmup0_jumps, 98)):
        if jumps is not None:
            (out / f"torch_book_addition{tag}.json").write_text(json.dumps(dict(
                task="addition", torch="2.x", threads=1, loss_floor=0.9594, runs=runs(jumps, batches))))


def _gap_verdicts(text: str) -> dict[str, str]:
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ") and "**" in line]
    return {r[1].strip(): r[-2].strip().strip("*") for r in rows}


def test_gap_tells_two_loops_apart_only_when_the_seeds_do(tmp_path):
    apart, alike = tmp_path / "apart", tmp_path / "alike"
    for d in (apart, alike):
        d.mkdir()
    never = [None] * 8
    _write_gap_inputs(apart, never, [10, 12, 15, 20, 22, 25, 30, 40], drop_last_jumps=never, b98_jumps=never,
                      warmup0_jumps=never, same_start_jumps=never, warmup1_jumps=[10, 12, 15, 20, 22, 25, 30, 40])
    _write_gap_inputs(alike, [30, None, 80, 33, 35, None, 50, 60], [90, 65, 10, 15, 51, None, 40, 33],
                      drop_last_jumps=[20, 30, None, 60, 70, 80, 45, 33], b98_jumps=[40, None, 20, 70, 33, 90, 60, 12],
                      warmup0_jumps=[70, 14, 20, None, 60, 33, 41, 90],
                      same_start_jumps=[12, 80, 50, 33, None, 40, 61, 9],
                      warmup1_jumps=[33, 41, None, 60, 14, 20, 70, 90])
    v_apart, v_alike = (_gap_verdicts(modes.gap_study(d)) for d in (apart, alike))
    questions = [q for q, _, _ in records.GAP_COMPARISONS]
    assert [v_apart[q] for q in questions[:5]] == ["differ", "differ", "differ", "no difference detected", "differ"]
    assert all(v_alike[q] == "no difference detected" for q in questions[:5] + questions[6:])
    # warm-up at lr 0 in PyTorch: never vs its own loop (differ), never vs miiii's never (alike); same starts: never
    # the book's warm-up here: never (b98) vs 8/8 (differ); 8/8 vs PyTorch's 8/8 at the same epochs (alike)
    assert [v_apart[q] for q in questions[6:]] == ["differ", "no difference detected", "differ", "differ",
                                                   "no difference detected"]
    gap = json.loads((apart / "gap.json").read_text())
    assert gap["comparisons"][0]["p_grokked"] < 0.001  # 0/5 vs 8/8 seeds: Fisher p = 1/1287
    assert (apart / "gap_addition.png").stat().st_size > 10_000
    text = (alike / "gap.md").read_text()
    assert "| 0 | 30, 100.0% | –, 10.0% |" in text  # seed 0 groks solo, not as a member: its outcome splits
    assert "outcome (grokked or not) changes: 0, 1 of 3." in text  # seed 1: never solo, 50 as a member
    assert "Not compared, for want of a sample: “at weight decay 0.1" in text  # no wd 0.1 samples written
    # pooled: this project 4/5 solo + 2/3 swept + 7/8 each (b98, same start, warmup1); PyTorch 7/8 in each of 3
    assert "| miiii | 32 | 27 | 84% | 5 |" in text and "| PyTorch, the book's loop | 24 | 21 | 88% | 3 |" in text
    assert re.search(r"\| commit \| [0-9a-f]{40}(-dirty)? \|", text)
    assert "| batches98.json | recorded at ffffffffffff, cpu (cpu), jax 0.x, precision highest;" in text
    assert "| warmup1.json | `python -m miiii train …`, cpu (cpu), jax 0.x, precision highest; collected at c" in text


def test_gap_without_inputs_or_with_other_studies_is_one_error_line(tmp_path, capsys):
    assert book.main(["--gap", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and not list(tmp_path.iterdir())
    import pytest

    for args in (["--torch"], ["--only-seeds"], ["--first-seed", "3"]):  # --first-seed without --seeds
        with pytest.raises(SystemExit) as e:
            book.main(["--gap", "--out", str(tmp_path)] + args)
        assert e.value.code == 2 and not list(tmp_path.iterdir())


@pytest.mark.study
def test_gap_trains_the_98_batch_sweep_once_and_reads_it_back(tmp_path, monkeypatch):
    """--gap --seeds N at smoke scale: the remainder is kept (one more batch an epoch than the smoke recipe's),
    the sweep is reused on a second call, --first-seed adds a sweep whose seeds join the sample."""
    smoke = modes.configs  # the smoke runs, shorter still: this test checks the plumbing, not grokking
    monkeypatch.setattr(modes, "configs", lambda *a: {k: apply_overrides(c, ["steps=40", "eval_every=20", "chunk=40"])
                                                     for k, c in smoke(*a).items()})
    _write_gap_inputs(tmp_path, [30, None, 80, 33, 35, None, 50, 60], [90, 65, 10, 15, 51])
    assert book.main(["--smoke", "--gap", "--seeds", "1", "--out", str(tmp_path)]) == 0
    sweep = tmp_path / "runs" / "gap-addition-98"
    cfg = json.loads((sweep / "member_000" / "config.json").read_text())
    assert cfg["train"]["last_batch"] == "keep"
    b98 = json.loads((tmp_path / "batches98.json").read_text())
    drop = (lambda c: steps_per_epoch(c.train, c.task.n_train))(smoke(True, None)["addition"])
    assert [r["seed"] for r in b98["runs"]] == [0] and b98["runs"][0]["batches_per_epoch"] == drop + 1
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert book.main(["--smoke", "--gap", "--seeds", "1", "--out", str(tmp_path)]) == 0  # reused
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert book.main(["--smoke", "--gap", "--seeds", "1", "--first-seed", "1", "--out", str(tmp_path)]) == 0
    assert [r["seed"] for r in json.loads((tmp_path / "batches98.json").read_text())["runs"]] == [0, 1]
    q = records.GAP_COMPARISONS[4][0]  # 98 batches in both: this project's sweep against the PyTorch loop
    assert q in _gap_verdicts((tmp_path / "gap.md").read_text())


def test_torch_book_files_grow_by_seeds_of_the_same_loop_only(tmp_path):
    """python -m experiments.book.torch_loop: a variant's file name, and the merge that adds seeds to a file of the
    same loop (settings and epochs) and refuses anything else before training (exit 2, the file untouched)."""
    import pytest

    pytest.importorskip("torch")
    from experiments.book import torch_loop as tb

    assert (tb.variant(0.01, False), tb.variant(0.1, True), tb.variant(0.01, True)) == ("", "_wd=0.1_drop_last",
                                                                                        "_drop_last")
    assert tb.variant(0.01, False, 0) == "_warmup0"
    out, book_loop = tmp_path / "torch_book_addition.json", dict(weight_decay=0.01, drop_last=False, warmup_first=1)
    out.write_text(json.dumps(dict(task="addition", torch="2.x", threads=1, loss_floor=1.0,
                                   runs=[dict(seed=s, epochs=150) for s in range(2)])))  # an older file
    merged = tb.merged(out, book_loop | dict(torch="2.y", threads=2), [dict(seed=2, epochs=150, torch="2.y")])
    assert [(r["seed"], r["torch"]) for r in merged["runs"]] == [(0, "2.x"), (1, "2.x"), (2, "2.y")]
    wd01 = dict(weight_decay=0.1, drop_last=False, warmup_first=1)
    for settings, runs, why in ((book_loop, [dict(seed=1, epochs=150)], "already holds seeds"),
                                (book_loop, [dict(seed=5, epochs=80)], "epochs"),
                                (wd01, [dict(seed=5, epochs=150)], "holds runs with"),
                                (book_loop | dict(warmup_first=0), [dict(seed=5, epochs=150)], "holds runs with")):
        with pytest.raises(ValueError, match=why):
            tb.merged(out, settings, runs)
    before = out.read_text()
    assert tb.main(["--seeds", "1", "--first-seed", "1", "--out", str(tmp_path)]) == 2 and out.read_text() == before


def test_warmup1_runs_refuse_a_directory_trained_otherwise(tmp_path):
    """OUT/runs/warmup1-sSEED must hold addition-98 with optim.warmup_first = 1 at that seed: a plain addition-98
    run there (or another seed's) is one ConfigError, before anything is written."""
    import pytest

    from miiii.config import ConfigError
    from miiii.rundir import write_config

    run = tmp_path / "runs" / "warmup1-s3"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    for cfg in (get_preset("addition-98"), apply_overrides(get_preset("addition-98"), records.WARMUP1 + ["seed=4"])):
        write_config(run, cfg)
        with pytest.raises(ConfigError, match="warmup1-s3's config is not addition-98"):
            records.warmup1_runs(tmp_path)
    assert not (tmp_path / "warmup1.json").exists()
