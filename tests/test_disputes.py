"""The dispute studies' rules on synthetic members, each both ways, and their bundles regenerated from the committed
summaries (experiments/disputes.py, experiments/<study>/study.py)."""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from experiments import disputes as D
from experiments.wd_regimes import study as W

ROOT = Path(__file__).resolve().parents[1]
STEPS = [0, 10, 100, 200, 400, 800, 1600, 2999]


def member(wd=None, grok=None, train_end=1.0, seed=0, hs=None, es=None, values=None, ml=10.0):
    hs = hs or [0.5] * len(STEPS)
    es = es or [0.1] * len(STEPS)
    return {"seed": seed, "values": values if values is not None else {W.WD: wd}, "grok": {"37": grok},
            "fit": {"37": 100}, "valid_end": {"37": 1.0 if grok else 0.3}, "train_end": {"37": train_end},
            "steps": 3000, "curve": {"step": STEPS, "valid_acc": [0.0] * len(STEPS), "train_acc": [1.0] * len(STEPS),
                                     "head_similarity": hs, "entropy_spread": es,
                                     "weight_norm_total": [1.0] * len(STEPS), "max_logit": [ml] * len(STEPS)}}


def grid(spec: dict, seeds: int = 5) -> dict:
    """{wd: (grok step or None, train_end) or a list of those per seed} -> runs."""
    out = []
    for wd, v in spec.items():
        per = v if isinstance(v, list) else [v] * seeds
        out += [member(wd, g, te, s) for s, (g, te) in enumerate(per)]
    return {W.SETTING: out}


MEMO, COLLAPSE = (None, 1.0), (None, 0.2)


def test_regimes_separate_only_in_order_and_all_three():
    good = grid({0.0: MEMO, 0.01: MEMO, 0.03: (800, 1.0), 0.1: (400, 1.0), 3.0: COLLAPSE})
    assert W.rule_separates(good)[0] is True
    assert "0.03: grokking" in W.rule_separates(good)[1]
    no_collapse = grid({0.0: MEMO, 0.03: (800, 1.0), 3.0: (300, 1.0)})
    assert W.rule_separates(no_collapse)[0] is False
    disordered = grid({0.0: (800, 1.0), 0.03: MEMO, 3.0: COLLAPSE})
    assert W.rule_separates(disordered)[0] is False
    split = [(800, 1.0)] * 3 + [MEMO] * 2  # 3 of 5: mixed, allowed between memorisation and grokking
    assert W.rule_separates(grid({0.0: MEMO, 0.01: split, 0.03: (800, 1.0), 3.0: COLLAPSE}))[0] is True
    assert W.rule_separates(grid({0.0: split, 0.03: (800, 1.0), 3.0: COLLAPSE}))[0] is False  # mixed at an end


def test_the_boundary_inside_outside_and_undecided():
    inside = grid({0.003: MEMO, 0.0109: MEMO, 0.0158: (900, 1.0), 0.02: (700, 1.0), 0.1: (300, 1.0)})
    assert W.boundary(inside[W.SETTING]) == (0.0109, 0.0158) and W.rule_boundary(inside)[0] is True
    below = grid({0.001: MEMO, 0.003: (900, 1.0), 0.0109: (700, 1.0)})
    assert W.rule_boundary(below)[0] is False
    coarse = grid({0.003: MEMO, 0.1: (300, 1.0)})  # 0.003 .. 0.1 contains their interval: cannot place it
    assert W.rule_boundary(coarse)[0] is None
    assert W.rule_boundary(grid({0.003: MEMO, 0.1: MEMO}))[0] is None
    assert W.rule_boundary(grid({0.0: (900, 1.0), 0.1: (300, 1.0)}))[0] is None  # even 0 groks
    assert "smallest weight decay (0) groks" in W.rule_boundary(grid({0.0: (900, 1.0), 0.1: (300, 1.0)}))[1]
    half = [(800, 1.0)] * 3 + [MEMO] * 2  # 3 of 5 grok at 0: neither end of a boundary
    value, said = W.rule_boundary(grid({0.0: half, 0.1: (300, 1.0)}))
    assert value is None and "below 0.1" in said and "smallest" not in said
    assert W.boundary(grid({0.0: MEMO, 1.0: (300, 1.0)})[W.SETTING]) == (0.0, 1.0)  # 0 is a lower end


def test_the_exponent_is_fitted_above_the_boundary():
    lo, hi = 0.0109, 0.0158
    lc = np.sqrt(lo * hi)
    wds = [0.0158, 0.02, 0.03, 0.1, 0.3]
    spec = {0.003: MEMO, lo: MEMO} | {wd: (int(round(1e3 * (wd - lc) ** -0.757)), 1.0) for wd in wds}
    nu, r2, pts = W.power_law(grid(spec)[W.SETTING])
    assert nu == pytest.approx(0.757, abs=0.01) and r2 > 0.99 and len(pts) == len(wds)
    assert W.rule_exponent(grid(spec))[0] is True
    steep = {0.003: MEMO, lo: MEMO} | {wd: (int(round(1e2 * (wd - lc) ** -1.5)), 1.0) for wd in wds}
    assert W.rule_exponent(grid(steep))[0] is False
    flat = {0.003: MEMO, lo: MEMO} | {wd: (t, 1.0) for wd, t in zip(wds, [500, 900, 300, 800, 400], strict=True)}
    assert W.power_law(grid(flat)[W.SETTING])[1] < W.MIN_R2 and W.rule_exponent(grid(flat))[0] is False
    assert W.rule_exponent(grid({0.003: MEMO, lo: MEMO, 0.1: (300, 1.0)}))[0] is None  # one point


def test_collapse_needs_identical_heads_in_every_collapsed_seed():
    same, apart = [1.0] * len(STEPS), [0.5] * len(STEPS)
    runs = {W.SETTING: [member(0.0, None, seed=s) for s in range(5)]
            + [member(20.0, None, 0.2, seed=s, hs=same) for s in range(5)]}
    assert W.rule_identical_at_collapse(runs)[0] is True
    runs[W.SETTING][-1] = member(20.0, None, 0.2, seed=4, hs=apart)
    assert W.rule_identical_at_collapse(runs)[0] is False
    runs[W.SETTING][-1] = member(20.0, None, 0.2, seed=4, hs=[float("nan")] * len(STEPS))  # diverged: no patterns
    assert W.rule_identical_at_collapse(runs)[0] is False
    assert W.rule_identical_at_collapse({W.SETTING: runs[W.SETTING][:5]})[0] is None  # nothing collapses


def test_diagnostics_track_only_against_a_still_control():
    step_at = lambda t, lo, hi: [lo if s < t else hi for s in STEPS]  # noqa: E731
    grokking = [member(0.1, 400, seed=s, hs=step_at(400, 0.2, 0.8), es=step_at(400, 0.5, 0.1)) for s in range(4)]
    still = [member(0.0, None, seed=s) for s in range(4)]
    assert W.rule_tracks({W.SETTING: grokking + still})[0] is True
    moving = [member(0.0, None, seed=s, hs=step_at(400, 0.2, 0.8), es=step_at(400, 0.5, 0.1)) for s in range(4)]
    assert W.rule_tracks({W.SETTING: grokking + moving})[0] is False  # the control moves as much: no tracking
    half = [member(0.1, 400, seed=s, hs=step_at(400, 0.2, 0.8)) for s in range(4)]  # entropy spread never moves
    assert W.rule_tracks({W.SETTING: half + still})[0] is False
    assert W.rule_tracks({W.SETTING: grokking + still[:2]})[0] is None


def test_member_summary_reads_a_metrics_table():
    from miiii.config import apply_overrides
    from miiii.presets import get_preset

    T = 50
    step = np.arange(T)
    va = np.full((T, 1), np.nan)
    va[::5, 0] = np.linspace(0, 1, 10)
    metrics = {"step": step, "task_names": np.array(["37"]), "valid_acc": va, "train_acc": np.ones((T, 1)),
               "head_similarity": np.linspace(0, 1, T), "entropy_spread": np.zeros(T)}
    cfg = apply_overrides(get_preset("nanda-tiny"), ["train.seed=3", "optim.weight_decay=0.5"])
    s = D.member_summary(metrics, cfg, [W.WD])
    assert s["seed"] == 3 and s["values"] == {W.WD: 0.5} and s["grok"] == {"37": 45} and s["fit"] == {"37": 0}
    assert s["reach95"] == {"37": 45}  # 0.89 at step 40 (NaN between evaluations), 1.0 at 45
    late = D.member_summary(metrics | {"train_acc": np.linspace(0, 1, T)[:, None]}, cfg, [W.WD])
    assert late["fit"] == {"37": int(np.argmax(np.linspace(0, 1, T) >= 0.99))} and late["train_end"] == {"37": 1.0}
    assert s["curve"]["step"][-1] == T - 1 and s["curve"]["valid_acc"][-1] == 1.0
    assert np.isnan(s["curve"]["weight_norm_total"]).all()  # a metric the run lacks
    json.dumps(D.member_summary(metrics, cfg, [W.WD]), allow_nan=True)


@pytest.mark.parametrize("name", ["wd_regimes", "muon", "omnigrok", "readout_scale", "logit_scale"])
def test_a_committed_bundle_is_its_summaries(name):
    out = ROOT / "results" / name
    if not (out / "summaries" / "runs.json").is_file():
        pytest.skip(f"results/{name} not committed yet")
    import importlib

    study = importlib.import_module(f"experiments.{name}.study").STUDY
    assert D.write_bundle(study, out, check=True) == 0


def muon_runs(times: dict, steps: int = 4000) -> dict:
    """{setting: [time to 0.95 or None per seed]} -> runs of members with that reach95."""
    from experiments.muon import study as Mu

    out = {}
    for s in Mu.SETTINGS:
        ts = times.get(s.name, [1000, 1100, 900, 1050, 950])
        out[s.name] = [dict(member(values={}), reach95={"37": t}, steps=steps) for t in ts]
    return out


def test_muon_faster_only_when_significant_and_every_seed_reaches():
    from experiments.muon import study as Mu

    fast = [500, 520, 480, 510, 490]
    assert Mu.rule_faster_here(muon_runs({"Muon, preset": fast}))[0] is True
    assert Mu.rule_faster_here(muon_runs({}))[0] is False  # the same times: no difference
    noisy = [300, 1900, 400, 1800, 500]  # a lower mean, but not significant
    assert Mu.rule_faster_here(muon_runs({"Muon, preset": noisy}))[0] is False
    assert Mu.rule_faster_here(muon_runs({"Muon, preset": fast[:4] + [None]}))[0] is False  # a seed never reached
    assert Mu.times([dict(member(values={}), reach95={"37": None}, steps=4000)]) == [4000.0]


def test_muon_the_two_sides_on_the_same_runs():
    from experiments.muon import study as Mu

    fast = [500, 520, 480, 510, 490]
    everywhere = muon_runs({s.name: fast for s in Mu.SETTINGS if s.name.startswith("Muon")})
    assert Mu.rule_faster_pooled(everywhere)[0] is True and Mu.rule_disappears(everywhere)[0] is False
    assert Mu.rule_faster_somewhere(everywhere)[0] is True
    only_here = muon_runs({"Muon, preset": fast})
    assert Mu.rule_disappears(only_here)[0] is True and Mu.rule_faster_somewhere(only_here)[0] is True
    slower_elsewhere = muon_runs({"Muon, preset": fast} | {f"Muon, {v}": [1500, 1600, 1400, 1550, 1450]
                                                           for v in Mu.VARIATIONS})
    assert Mu.rule_faster_pooled(slower_elsewhere)[0] is False  # pooled, Muon is slower
    barely = muon_runs({"Muon, preset": fast} | {f"Muon, {v}": [950, 1050, 850, 1000, 900] for v in Mu.VARIATIONS})
    assert Mu.rule_disappears(barely)[0] is False  # lower everywhere, if not significantly: not gone
    nowhere = muon_runs({})
    assert Mu.rule_disappears(nowhere)[0] is None and Mu.rule_faster_somewhere(nowhere)[0] is False
    stalled = {f"{o}, {v}": [None] * 5 for o in ("AdamW", "Muon") for v in Mu.VARIATIONS}  # nothing reaches 0.95
    assert Mu.rule_disappears(muon_runs({"Muon, preset": fast} | stalled))[0] is None  # both at the budget: unread
    one_stalled = {k: v for k, v in stalled.items() if "d 128" in k}
    muon_fast = {s.name: fast for s in Mu.SETTINGS if s.name.startswith("Muon")}
    assert Mu.rule_disappears(muon_runs(muon_fast | one_stalled))[0] is False  # d 128 unread, Muon faster elsewhere
    assert Mu.rule_disappears(muon_runs({"Muon, preset": fast, "Muon, d 128": [None] * 5}))[0] is True  # Muon stalls
    assert Mu.rule_faster_pooled(nowhere)[0] is False
    one_lucky = muon_runs({"Muon, d 128": [820, 920, 720, 970, 870]})  # 0.0125 < p < 0.05: not below 0.05 / 4
    assert Mu.rule_faster_somewhere(one_lucky)[0] is False


def test_muon_sensitivity_needs_both_factors_for_both_optimizers():
    from experiments.muon import study as Mu

    slow = [2000, 2100, 1900, 2050, 1950]  # x2 the preset's median
    quick = [500, 520, 480, 510, 490]  # x0.5
    moved = {"AdamW, batch 128": slow, "Muon, batch 128": slow, "AdamW, d 128": quick, "Muon, d 128": quick}
    assert Mu.rule_sensitive(muon_runs(moved))[0] is True
    assert Mu.rule_sensitive(muon_runs({**moved, "Muon, d 128": [1000] * 5}))[0] is False


def test_muon_sensitivity_reads_epochs_not_steps():
    """Batch 128 taking 5x the steps at 5 steps an epoch is the same onset in epochs: not a sensitivity."""
    from experiments.muon import study as Mu

    quick = [500, 520, 480, 510, 490]
    runs = muon_runs({"AdamW, batch 128": [5000, 5500, 4500, 5250, 4750], "Muon, batch 128": [5000] * 5,
                      "AdamW, d 128": quick, "Muon, d 128": quick}, steps=8000)
    assert Mu.rule_sensitive(runs)[0] is True  # counted in steps, batch 128 looks x5 slower
    for s in ("AdamW, batch 128", "Muon, batch 128"):
        runs[s] = [dict(m, steps_per_epoch=5) for m in runs[s]]
    assert Mu.rule_sensitive(runs)[0] is False


def test_epoch_steps_of_a_dispute_member():
    from experiments.disputes import epoch_steps
    from miiii.config import apply_overrides
    from miiii.presets import get_preset
    from miiii.tasks import split_sizes

    cfg = get_preset("nanda-tiny")
    assert epoch_steps(cfg) == 1
    n = split_sizes(cfg.task)[0]
    assert epoch_steps(apply_overrides(cfg, ["train.batch_size=128"])) in (n // 128, -(-n // 128))


def test_results_md_renders_the_verdicts_and_the_headline_reads_them(tmp_path):
    from experiments.headline import dispute_rows

    runs = grid({0.0: MEMO, 0.0158: MEMO, 0.1: MEMO, 1.0: (800, 1.0), 2.0: (500, 1.0), 3.0: (400, 1.0),
                 10.0: COLLAPSE})
    summary = {"seeds": 5, "steps": 3000, "wall_s": {W.SETTING: 12.0}, "runs": runs, "provenance": {"commit": "x"}}
    (tmp_path / "summaries").mkdir()
    (tmp_path / "summaries" / "runs.json").write_text(json.dumps(summary))
    assert D.write_bundle(W.STUDY, tmp_path) == 0 and D.write_bundle(W.STUDY, tmp_path, check=True) == 0
    rows = dispute_rows(tmp_path / "results.md")
    want = [D.MARK[c.rule(runs)[0]] for c in W.STUDY.claims]
    assert list(rows.values()) == want and want[0] == "holds" and want[1] == "does not hold"
    assert all(k.startswith("Verma (2026): ") for k in rows)
    (tmp_path / "results.md").write_text((tmp_path / "results.md").read_text().replace("holds", "held"))
    assert D.write_bundle(W.STUDY, tmp_path, check=True) == 1


def plain(groks, **kw) -> list[dict]:
    """Members of a setting without a grid, one per grok step (delay: grok - 100)."""
    return [member(values={}, grok=g, seed=i, **kw) for i, g in enumerate(groks)]


def test_omnigrok_large_init_and_the_held_norm():
    from experiments.omnigrok import study as O

    runs = {"init x1": plain([1000] * 5), "init x3": plain([2000] * 5), "init x1, norm held": plain([200] * 5),
            "init x3, norm held": plain([250] * 5)}
    assert O.rule_large_init(runs)[0] is True and O.rule_eliminate(runs)[0] is True
    assert O.rule_large_init({**runs, "init x3": plain([1000] * 5)})[0] is False  # no longer delay
    assert O.rule_large_init({**runs, "init x3": plain([2000, 2000, 2000, None, None])})[0] is False
    assert O.rule_eliminate({**runs, "init x3, norm held": plain([250] * 4 + [None])})[0] is False
    assert O.rule_eliminate({**runs, "init x1, norm held": plain([600] * 5)})[0] is False  # delay 500 > 900 / 4
    instant = {k: plain([100] * 5) for k in runs}  # every delay 0: nothing to grow or to eliminate
    assert O.rule_large_init(instant)[0] is None and O.rule_eliminate(instant)[0] is None


def test_the_held_norm_is_the_presets_initial_norm():
    """omnigrok.INIT_NORM (and logit_scale's first norm) against nanda-tiny's global weight norm at initialisation."""
    import jax

    from experiments.logit_scale import study as L
    from experiments.omnigrok import study as O
    from miiii import apply_overrides, get_preset
    from miiii.runner import prepare
    from miiii.train import make_trainer

    norms = []
    for seed in range(3):
        cfg = apply_overrides(get_preset(O.STUDY.preset), [f"train.seed={seed}"])
        params = make_trainer(cfg, prepare(cfg)).init(seed).params
        norms.append(float(np.sqrt(sum(np.sum(np.square(np.asarray(v, np.float64))) for v in jax.tree.leaves(params)))))
    assert O.INIT_NORM == pytest.approx(np.median(norms), rel=0.01) and L.NORMS[0] == O.INIT_NORM


def readout_runs(delay_at, base_only=None) -> dict:
    """{α: function (lr, wd) -> grok step} -> readout_scale runs (5 seeds a cell, grok steps spread by seed)."""
    from experiments.readout_scale import study as R

    runs = {}
    for a in R.ALPHAS:
        cell = lambda lr, wd, s, a=a: None if delay_at(a, lr, wd) is None else delay_at(a, lr, wd) + s  # noqa: E731
        runs[f"α {a:g}"] = [member(values={"optim.lr": lr, "optim.weight_decay": wd}, grok=cell(lr, wd, s), seed=s)
                            for lr in R.LRS for wd in R.WDS for s in range(5)]
    for name in ("LayerNorm pre", "LayerNorm post"):
        runs[name] = plain([(base_only or {}).get(name, 600) + s for s in range(5)])
    return runs


def test_readout_scale_kumar_and_singh_on_the_same_runs():
    from experiments.readout_scale import study as R

    rising = readout_runs(lambda a, lr, wd: int(300 * a) + 100)  # delay 300 α everywhere
    assert R.rule_output_scale(rising)[0] is True and R.rule_confounded(rising)[0] is False
    flat = readout_runs(lambda a, lr, wd: 600)
    assert R.rule_output_scale(flat)[0] is False
    flipped = readout_runs(lambda a, lr, wd: int(300 * (a if (lr, wd) == R.BASE else 1 / a)) + 100)
    assert R.rule_confounded(flipped)[0] is True and R.rule_output_scale(flipped)[0] is True
    assert R.rule_without_wd(rising)[0] is True
    never = readout_runs(lambda a, lr, wd: None if wd == 0 else 600)
    assert R.rule_without_wd(never)[0] is False
    ln = readout_runs(lambda a, lr, wd: 500, {"LayerNorm pre": 2000})
    assert R.rule_ln_position(ln)[0] is True and R.rule_ln_position(flat)[0] is False
    noise = readout_runs(lambda a, lr, wd: 600 + int(40 * np.sin(7 * a + 13 * lr * 1e3 + wd)))
    assert R.rule_confounded(noise)[0] is None  # no effect of α at the preset: nothing to confound
    weak = readout_runs(lambda a, lr, wd: int(300 * a) + 100 if (lr, wd) == R.BASE else 600 + int(30 * np.sin(a)))
    assert R.rule_confounded(weak)[0] is True  # the effect vanishes elsewhere: x1 against x7
    zero = readout_runs(lambda a, lr, wd: 100)  # delays 0-4 (the seed): no effect, no crash
    assert R.rule_confounded(zero)[0] is None and R.rule_output_scale(zero)[0] is False
    instant = readout_runs(lambda a, lr, wd: 700)  # α 4 groks the step it fits: a delay of 0 over one of 600
    instant["α 4"] = [dict(m, grok={"37": 100}) for m in instant["α 4"]]
    assert np.isnan(R.alpha_ratio(instant, *R.BASE)) and R.rule_confounded(instant)[0] is None  # no 1 / 0
    unfinished = readout_runs(lambda a, lr, wd: None)  # nothing groks; the fits alone order the censored delays
    for a, fit in zip(R.ALPHAS, (1600, 1200, 600, 100), strict=True):
        unfinished[f"α {a:g}"] = [dict(m, fit={"37": fit}) for m in unfinished[f"α {a:g}"]]
    assert R.rule_output_scale(unfinished)[0] is False  # 1,400 .. 2,900 rise x2.1, but they are bounds, not delays
    falling = readout_runs(lambda a, lr, wd: int(1200 / a) + 100)
    assert R.rule_output_scale(falling)[0] is True  # either direction: the sentence names none


def logit_runs(ce_delay, ce_scale, mse_delay=lambda n, s: 500, mse_scale=lambda n, s: 1.0) -> dict:
    from experiments.logit_scale import study as L

    runs = {}
    for n, s in itertools.product(L.NORMS, L.SCALES):
        runs[L.cell(n, s)] = [member(values={}, grok=int(ce_delay(n, s) * (1 + 0.01 * k)) + 100, seed=k,
                                     ml=ce_scale(n, s) * (1 + 0.01 * k)) for k in range(5)]
    for n, s in L.MSE_CELLS:
        runs[L.cell(n, s, "mse")] = [member(values={}, grok=int(mse_delay(n, s)) + 100, seed=k, ml=mse_scale(n, s))
                                     for k in range(5)]
    return runs


def test_logit_scale_mediation_rules():
    from experiments.logit_scale import study as L

    z = lambda n, s: n * s / 29  # noqa: E731 - the logit scale grows with the norm and the output scale alike
    mediated = logit_runs(lambda n, s: 500 * z(n, s), z, mse_delay=lambda n, s: 500 * n / 29)
    assert L.rule_slides(mediated)[0] is True and L.rule_collapses(mediated)[0] is True
    assert L.rule_mse(mediated)[0] is True
    norm_only = logit_runs(lambda n, s: 500 * n / 29, z)  # the temperature moves the logits, not the delay
    assert L.rule_slides(norm_only)[0] is False and L.rule_collapses(norm_only)[0] is False
    assert L.rule_slides(logit_runs(lambda n, s: 500, z))[0] is None  # the norm moves nothing
    assert L.rule_mse(logit_runs(lambda n, s: 500 * z(n, s), z, mse_scale=z))[0] is False  # not pinned
    flat_mse = logit_runs(lambda n, s: 500 * z(n, s), z, mse_delay=lambda n, s: 500)
    assert L.rule_mse(flat_mse)[0] is False  # the norm moves no MSE delay
    assert L.rule_mse(logit_runs(lambda n, s: 0, z, mse_delay=lambda n, s: 0))[0] is False  # zero delays, no crash
    unfit = {**mediated, L.cell(29.0, 2.0, "mse"): [dict(m, fit={"37": None}, grok={"37": None})
                                                    for m in mediated[L.cell(29.0, 2.0, "mse")]]}
    assert L.rule_mse(unfit)[0] is False  # a cell that never fit has no logit scale: it pins nothing
    unfinished = dict(mediated)
    for n, fit in ((29.0, 1500), (58.0, 100)):  # nothing groks under MSE; censored delays 1,500 and 2,900
        unfinished[L.cell(n, 1.0, "mse")] = [dict(m, fit={"37": fit}, grok={"37": None})
                                             for m in mediated[L.cell(n, 1.0, "mse")]]
    assert L.rule_mse(unfinished)[0] is False  # bounds x1.9 apart, not delays
    assert L.rule_slides(logit_runs(lambda n, s: 0, z))[0] is None
    bound = dict(mediated)  # norm 58 never groks: its censored 'delay' is a bound, no range to cover
    bound[L.cell(58.0, 1.0)] = [dict(m, grok={"37": None}) for m in mediated[L.cell(58.0, 1.0)]]
    assert L.rule_slides(bound)[0] is None and "half or fewer" in L.rule_slides(bound)[1]


def llc_run(role, seed, peak, grok, names=("q=2", "q=3")):
    steps = [0, 10, 100, 1000, 10000]
    series = [1.0 if s != peak else 9.0 for s in steps]
    return {"role": role, "seed": seed, "steps": steps, "llc": series, "llc_std": [0.1] * 5,
            "llc_tasks": [[v] * len(names) for v in series], "task_names": list(names),
            "grok": {n: grok for n in names}}


def test_llc_tracks_only_where_the_control_does_not(tmp_path):
    from experiments.llc_transition import study as T

    assert T.rule_tracks(llc_run("miiii", 0, 1000, 800), llc_run("basis", 0, 10, None)) == [True, True]
    assert T.rule_tracks(llc_run("miiii", 0, 10, 800), llc_run("basis", 0, 10, None)) == [False, False]
    assert T.rule_tracks(llc_run("miiii", 0, 1000, 800), llc_run("basis", 0, 1000, None)) == [None, None]
    assert T.rule_tracks(llc_run("miiii", 0, 1000, None), llc_run("basis", 0, 10, None)) == [None, None]
    assert T.rule_tracks(llc_run("miiii", 0, 1000, 800), None) == [None, None]  # miiii without its control
    # a λ̂ that does not turn at the grok step does not hold, whatever its control does or whether it is there
    assert T.rule_tracks(llc_run("miiii", 0, 10000, 800), llc_run("basis", 0, 1000, None)) == [False, False]
    assert T.rule_tracks(llc_run("miiii", 0, 10, 800), None) == [False, False]
    assert T.rule_tracks(llc_run("nanda", 0, 10000, 8000), None, controlled=False) == [False, False]  # never turns
    runs = [llc_run("nanda", k, 1000, 800, ("p=37",)) for k in range(3)] + [
        llc_run("miiii", k, 1000, 800) for k in range(3)] + [llc_run("basis", k, 10, None) for k in range(3)]
    assert {r: v["verdict"] for r, v in T.judge(runs).items()} == {"nanda": "holds", "miiii": "holds"}
    runs[0] = llc_run("nanda", 0, 10, 800, ("p=37",))
    assert T.judge(runs)["nanda"]["verdict"] == "does not hold"
    assert T.pooled([True, None, None]) == "not testable" and T.pooled([True, True, None]) == "holds"
    text = T.render({"source": "runs", "llc": {"lr": 1e-4, "gamma": 100, "chains": 4, "draws": 200, "batch": 512},
                     "runs": runs})
    assert "**does not hold**" in text and "**holds**" in text
    from experiments.headline import dispute_rows

    (Path(tmp_path) / "r.md").write_text(text)
    assert list(dispute_rows(Path(tmp_path) / "r.md").values()) == ["does not hold", "holds"]


def test_llc_runs_meet_their_control_by_the_seed_in_their_name(tmp_path):
    from experiments.llc_transition import study as T
    from miiii.rundir import write_llc_report

    for name in ("nanda", "miiii", "miiii-s2", "basis", "basis-s1", "basis-s2", "miiii-seeds"):  # no miiii-s1
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"grok_step": {"q=2": 800}}))
        write_llc_report(d, {k: [] for k in ("steps", "llc", "llc_std", "llc_tasks", "task_names", "config")}
                         | {"nbeta": 1.0, "name": name})
    got = T.measure(tmp_path, None)
    assert [(s["role"], s["seed"], Path(s["run"]).name) for s in got] == [
        ("nanda", 0, "nanda"), ("miiii", 0, "miiii"), ("miiii", 2, "miiii-s2"), ("basis", 0, "basis"),
        ("basis", 1, "basis-s1"), ("basis", 2, "basis-s2")]  # the sweep folder miiii-seeds is no run


def test_the_committed_llc_bundle_is_its_summaries():
    from experiments.llc_transition import study as T

    if not (ROOT / T.OUT / "summaries" / "llc.json").is_file():
        pytest.skip("results/llc_transition not committed yet")
    assert T.main(["--check", "--out", str(ROOT / T.OUT)]) == 0


def test_the_llc_figure_draws_every_role_with_its_grok_steps_and_nothing_overlaps(tmp_path, monkeypatch):
    """llc.png from a small synthetic bundle: one panel per role, one line per seed, a dotted line at each grok step
    (the first and last task), log steps, and no text over another or past the edge."""
    from experiments.llc_transition import study as T
    from miiii import plotstyle

    seen = {}
    monkeypatch.setattr(plotstyle, "write_png", lambda fig, path: seen.update(fig=fig, path=path))
    monkeypatch.setattr(plotstyle.plt, "close", lambda fig=None: None)  # kept open to read its layout
    steps = [0, 10, 100, 1000]
    run = lambda role, seed, grok: {"role": role, "seed": seed, "steps": steps, "llc": [1.0, 5.0, 3.0, 2.0],  # noqa
                                    "llc_std": [0.1] * 4, "grok": grok}
    data = {"runs": [run("nanda", 0, {"mod 53": 100}), run("miiii", 0, {"q=2": 10, "q=3": 1000}),
                     run("basis", 0, {"q=2": None})]}
    assert T.figure(data, tmp_path) == tmp_path / "llc.png"
    fig = seen["fig"]
    axes = fig.axes
    assert [a.get_title() for a in axes] == ["nanda", "miiii", "basis (shuffled labels)"]
    assert all(a.get_xscale() == "log" for a in axes)
    vlines = lambda a: sorted(line.get_xdata()[0] for line in a.lines if line.get_linestyle() == ":")  # noqa
    assert [vlines(a) for a in axes] == [[100], [10, 1000], []]
    assert plotstyle.layout_problems(fig) == []
