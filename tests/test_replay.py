"""Hard-example replay: experiments.adderboard.hard finds exactly the pairs a model gets wrong (against the exported
numpy adder, an independent decoder), and task.replay puts them into the training set, held-out pairs excepted."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _runhelp import load_module

from experiments.adderboard.hard import main
from miiii.config import ConfigError, apply_overrides
from miiii.export import export_adder
from miiii.hard import hard_pairs
from miiii.presets import get_preset
from miiii.rundir import flatten_params
from miiii.tasks import make_task
from miiii.train import make_trainer
from miiii.validate import validate

BOARD_2 = ["task.name=board", "n_digits=2", "n_train=300", "n_valid=50", "steps=1"]


@pytest.fixture(scope="module")
def untrained_board(tmp_path_factory):
    path = tmp_path_factory.mktemp("hard") / "run"
    cfg = validate(apply_overrides(get_preset("adder-146"), BOARD_2))
    params = jax.jit(make_trainer(cfg, make_task(cfg.task)).init, static_argnums=0)(3).params  # one compile
    path.mkdir()
    (path / "config.json").write_text(cfg.to_json())
    np.savez(path / "params.npz", **flatten_params(params))
    return path


def test_hard_pairs_are_exactly_the_wrong_ones(untrained_board, tmp_path):
    wrong, tried = hard_pairs(untrained_board, 200, seed=5)
    export_adder(untrained_board, tmp_path / "adder.py")
    mod = load_module(tmp_path / "adder.py")
    model, _ = mod.build_model()
    ops = np.random.default_rng(5)  # the same draw: hard_pairs' rows are a subset of it, in its order
    from miiii.tokens import draw_distinct

    drawn = draw_distinct(ops, 2, 2, 200, set())
    truly_wrong = [tuple(map(int, r)) for r in drawn if mod.add(model, int(r[0]), int(r[1])) != int(r[0] + r[1])]
    assert tried == 200 and [tuple(map(int, r)) for r in wrong] == truly_wrong


def test_hard_refuses_the_verifiers_seed_and_an_existing_file(untrained_board, tmp_path, capsys):
    assert main([str(untrained_board), "--seed", "2025", "--out", str(tmp_path / "h.npy")]) == 2
    (tmp_path / "e.npy").write_bytes(b"")
    assert main([str(untrained_board), "--out", str(tmp_path / "e.npy")]) == 2
    assert capsys.readouterr().err.count("error:") == 2


def test_replay_adds_the_rows_copies_times_without_held_out_pairs(tmp_path):
    cfg = apply_overrides(get_preset("adder-146"), BOARD_2)
    held = make_task(cfg.task).valid.x[0]
    held_pair = (int("".join(map(str, held[1:3][::-1]))), int("".join(map(str, held[5:7][::-1]))))
    rows = np.array([[12, 34], [99, 99], held_pair], np.int64)
    np.save(tmp_path / "hard.npy", rows)
    task = make_task(apply_overrides(cfg, [f"task.replay={tmp_path / 'hard.npy'}", "replay_copies=3"]).task)
    assert len(task.train.x) == 300 + 3 * 2
    tail = task.train.x[-6:]
    assert (tail[:, 1:3] == [[2, 1], [9, 9]] * 3).all()  # 12 and 99 ones-first
    np.save(tmp_path / "bad.npy", np.array([[1, 2, 3]]))
    with pytest.raises(ConfigError, match="want \\(N, 2\\)"):
        validate(apply_overrides(cfg, [f"task.replay={tmp_path / 'bad.npy'}"]))
    with pytest.raises(ConfigError, match="not a readable"):
        validate(apply_overrides(cfg, [f"task.replay={tmp_path / 'none.npy'}"]))


def test_a_union_of_sources_keeps_each_row_once_and_reads_kept_rows(untrained_board, tmp_path):
    import os

    from miiii.hard import hard_union

    five, six = hard_pairs(untrained_board, 200, 5)[0], hard_pairs(untrained_board, 200, 6)[0]
    both = np.unique(np.concatenate([five, six]), axis=0)
    assert len(both) < len(five) + len(six)  # the two draws overlap (2-digit pairs): united, each row once
    out = str(tmp_path / "u.npy")
    assert main([f"{untrained_board}@5", f"{untrained_board}@6", "--pairs", "200", "--out", out]) == 0
    assert (np.load(tmp_path / "u.npy") == both).all()
    kept = untrained_board.with_name(f"{untrained_board.name}.hard-5-200.npy")
    try:
        rows, tried = hard_union([(untrained_board, 5)], 200, keep=True)
        assert (rows == np.unique(five, axis=0)).all() and tried == 200 and (np.load(kept) == five).all()
        np.save(kept, np.array([[1, 1]]))  # a kept source is read, not decoded again ...
        assert hard_union([(untrained_board, 5)], 200, keep=True)[0].tolist() == [[1, 1]]
        assert len(hard_union([(untrained_board, 5)], 100, keep=True)[0]) > 1  # ... for its own count of pairs
        params = untrained_board / "params.npz"
        os.utime(kept, (params.stat().st_mtime - 10,) * 2)  # older than its run (retrained): decoded again
        assert (hard_union([(untrained_board, 5)], 200, keep=True)[0] == np.unique(five, axis=0)).all()
    finally:
        for f in untrained_board.parent.glob(f"{untrained_board.name}.hard-*.npy"):
            f.unlink()
    assert main([f"{untrained_board}@x", "--out", str(tmp_path / "v.npy")]) == 2


def test_column_values_by_hand():
    from experiments.adderboard.hard import column_values

    value, carry = column_values(np.array([[5, 5], [55, 45], [99, 99], [0, 7]]), 2)
    assert value.tolist() == [[10, 1, 0], [10, 10, 1], [18, 19, 1], [7, 0, 0]]  # 99 + 99 = 198: 18, 9 + 9 + 1, 1
    assert carry.astype(int).tolist() == [[0, 1, 0], [0, 1, 1], [0, 1, 1], [0, 0, 0]]


def test_carry_chains_by_hand():
    """The chain into each column: generated just below (1), passed on through 9s (2, 3), none (0)."""
    from experiments.adderboard.hard import carry_chains

    chains = carry_chains(np.array([[5, 5], [55, 45], [99, 99], [0, 7], [995, 5]]), 3)
    assert chains.tolist() == [[0, 1, 0, 0], [0, 1, 2, 0], [0, 1, 1, 0], [0, 0, 0, 0], [0, 1, 2, 3]]


def test_every_round_draws_its_hard_pairs_off_the_profile_verifier_and_held_out_seeds():
    from experiments.adderboard import study
    from experiments.adderboard.hard import source
    from experiments.adderboard.recipes import targeted

    seeds = [source(h, 0)[1] for s in study.SEARCH for h in s.hard]
    assert seeds and not {study.PROFILE_SEED, 2025, 123} & set(seeds)
    with pytest.raises(ValueError, match="strictly between"):
        targeted("t", "w", "a", ("a@1",), share=1.0)


def test_a_targeted_round_replays_its_hard_pairs_as_its_share_of_the_set(tmp_path):
    from experiments.adderboard import launch
    from experiments.adderboard.recipes import REPLAY_N, targeted

    s = targeted("t", "w", "a", ("a@1",))
    np.save(launch.hard_file(s, tmp_path), np.zeros((30_000, 2), np.int64))
    three = launch.command(targeted("t", "w", "a", ("a@1",), share=0.75), tmp_path)
    assert f"task.replay_copies={round(3 * REPLAY_N / 30_000)}" in three  # 3 replayed rows to every fresh one
    cmd = launch.command(s, tmp_path)
    assert cmd[cmd.index("--init-from") + 1] == str(tmp_path / "a")
    assert f"task.replay={tmp_path / 't.hard.npy'}" in cmd and f"task.replay_copies={round(REPLAY_N / 30_000)}" in cmd
    assert f"task.n_train={REPLAY_N}" in cmd
    want = f"{tmp_path / 'a@1'} --pairs 100000 --out {tmp_path / 't.hard.npy'}"
    assert launch.hard_command(s, tmp_path).endswith(want)


def test_the_error_profile_counts_what_the_exported_adder_gets_wrong(untrained_board, tmp_path):
    """Against the exported numpy adder and plain integer arithmetic: where each wrong sum first differs, by how
    much, and the column there (a_k + b_k + the carry into k)."""
    from collections import Counter

    from experiments.adderboard.hard import carry_shaped, error_profile
    from miiii.tokens import draw_distinct

    prof = error_profile(untrained_board, 200, seed=5)
    export_adder(untrained_board, tmp_path / "adder.py")
    mod = load_module(tmp_path / "adder.py")
    model, _ = mod.build_model()
    firsts, offsets, columns, base, signs, chains = Counter(), Counter(), Counter(), Counter(), Counter(), Counter()
    n_wrong = 0
    per_digit = np.zeros(3)
    for a, b in draw_distinct(np.random.default_rng(5), 2, 2, 200, set()).tolist():
        carries = [int(a % 10**k + b % 10**k >= 10**k) for k in range(2)]
        base.update(a // 10**k % 10 + b // 10**k % 10 + carries[k] for k in range(2))
        got, want = [f"{x:03d}"[::-1] for x in (mod.add(model, a, b), a + b)]
        per_digit += [g != w for g, w in zip(got, want, strict=True)]
        if got == want:
            continue
        n_wrong += 1
        k = next(i for i in range(3) if got[i] != want[i])
        firsts[k] += 1
        offset = (int(got[k]) - int(want[k])) % 10
        offsets[offset] += 1
        carry = int(a % 10**k + b % 10**k >= 10**k)
        columns[a // 10**k % 10 + b // 10**k % 10 + carry] += 1
        signs[carry, offset] += 1
        chain, j = 0, k - 1  # the carry chain into digit k: walk down through 9s to the column that made it
        while j >= 0 and a // 10**j % 10 + b // 10**j % 10 == 9:
            j -= 1
        if j >= 0 and a // 10**j % 10 + b // 10**j % 10 >= 10:
            chain = k - j
        chains[chain] += 1
    assert prof["exact"] == 1 - n_wrong / 200 and n_wrong > 0
    assert prof["first_wrong_digit"] == [firsts[k] for k in range(3)]
    assert prof["first_offset"] == [offsets[d] for d in range(10)]
    assert prof["first_column_value"] == [columns[v] for v in range(20)]
    assert prof["column_value_base"] == [base[v] for v in range(20)]
    assert prof["first_carry_by_sign"] == [[signs[c, d] for d in (1, 9)] for c in (0, 1)]
    assert prof["first_chain"] == [chains[c] for c in range(3)] and sum(prof["chain_base"]) == 200 * 3
    assert carry_shaped(prof) == signs[1, 9] + signs[0, 1]  # one low after a carry, one high without one
    assert np.allclose(prof["wrong_per_digit"], per_digit / 200, atol=1e-5)
    with pytest.raises(ConfigError, match="verifier"):
        error_profile(untrained_board, 10, seed=2025)


def test_a_targeted_run_decodes_without_its_replay_file(untrained_board, tmp_path):
    """A round's config names its replay file by a relative path; the decoder builds no training set, so a run read
    from elsewhere (or whose file is gone) still yields its hard pairs."""
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(untrained_board, run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["task"].update(replay="runs/gone.hard.npy", replay_copies=3)
    (run / "config.json").write_text(json.dumps(cfg))
    (run / "checksums.json").unlink(missing_ok=True)
    # 200 pairs, as the tests above: the decoder's programs (one per batch and length) are compiled already
    assert (hard_pairs(run, 200, 5)[0] == hard_pairs(untrained_board, 200, 5)[0]).all()


def test_chains_unite_their_hard_pairs_and_a_round_needs_some(tmp_path):
    from experiments.adderboard import launch
    from experiments.adderboard.recipes import chain, targeted

    plain = chain("c", "s", range(1, 4), "w")
    assert [(r.name, r.init_from, r.hard) for r in plain] == [("c1", "s", ("s@1",)), ("c2", "c1", ("c1@2",)),
                                                              ("c3", "c2", ("c2@3",))]
    kept = chain("c", "s", range(1, 3), "w", keep=("x@9",))
    assert [r.hard for r in kept] == [("x@9", "s@1"), ("x@9", "s@1", "c1@2")]
    for bad in (dict(share=0.0), dict(hard=("a",))):
        with pytest.raises(ValueError):
            targeted("t", "w", "a", **{"hard": ("a@1",), **bad})
    s = targeted("t", "w", "a", ("a@1",))
    with pytest.raises(ConfigError, match="missing"):
        launch.command(s, tmp_path)
    np.save(launch.hard_file(s, tmp_path), np.zeros((0, 2), np.int64))
    with pytest.raises(ConfigError, match="no hard pairs"):
        launch.command(s, tmp_path)


@pytest.mark.study  # two trainings and three decodes (about 40 s): make test-studies keeps make test in its budget
def test_a_phased_round_replays_the_pairs_the_phase_before_decodes_wrong(tmp_path, monkeypatch, capsys):
    """task.replay_hard in a recipe in phases: the round's file is exactly the phase before's wrong pairs of its seed
    (united with what that phase replayed itself, if it was a round); the copies follow task.replay_share; a rerun
    skips every phase."""
    from miiii import presets
    from miiii.cli import main as miiii
    from miiii.hard import replay_copies, with_hard_pairs
    from miiii.run import load_run

    tiny = ("adder-146", *BOARD_2[:-1], "train.steps=2", "train.chunk=2", "train.eval_every=2", "ckpt.every=2")
    round_ = (*tiny, "task.replay_hard=200@5", "task.replay_share=0.25")
    monkeypatch.setitem(presets.PHASED, "tiny-rounds", ("a phase, a round", (tiny, round_)))
    run = tmp_path / "p"
    assert miiii(["train", "--preset", "tiny-rounds", "--run-dir", str(run), "--no-progress"]) == 0
    two = np.load(run / "phase-2.hard.npy")
    assert len(two) and (two == np.unique(hard_pairs(run / "phase-1", 200, 5)[0], axis=0)).all()
    task = load_run(run / "phase-2").config.task
    assert task.replay == str(run / "phase-2.hard.npy") and task.replay_hard == "200@5"
    assert task.replay_copies == replay_copies(300, 0.25, len(two)) == max(1, round(100 / len(two)))
    capsys.readouterr()
    assert miiii(["train", "--preset", "tiny-rounds", "--run-dir", str(run), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("finished") == 2
    # the same folder named another way (a symlink: its phases' saved init_from and replay name the first spelling)
    (tmp_path / "link").symlink_to(run)
    assert miiii(["train", "--preset", "tiny-rounds", "--run-dir", str(tmp_path / "link"), "--no-progress"]) == 0
    assert capsys.readouterr().out.count("finished") == 2
    # a round after a round: its own phase's wrong pairs (seed 6) and the ones that phase replayed, each once
    cfg = apply_overrides(presets.phase_configs("tiny-rounds")[1], ["task.replay_hard=200@6"])
    cfg = with_hard_pairs(cfg, tmp_path / "three.npy", run / "phase-2", run / "phase-2.hard.npy")
    three = np.load(tmp_path / "three.npy")
    assert (three == np.unique(np.concatenate([hard_pairs(run / "phase-2", 200, 6)[0], two]), axis=0)).all()
    assert cfg.task.replay == str(tmp_path / "three.npy")
    assert cfg.task.replay_copies == max(1, round(100 / len(three)))
    monkeypatch.setitem(presets.PHASED, "tiny-rounds", ("a round first", (round_,)))
    assert miiii(["train", "--preset", "tiny-rounds", "--run-dir", str(tmp_path / "q"), "--no-progress"]) == 2
    assert "no phase before it" in capsys.readouterr().err and not (tmp_path / "q").exists()


@pytest.mark.parametrize("sets, message", [
    (["task.replay_hard=200@5"], "is a later phase of a recipe in phases"),
    (["task.replay_hard=200@2025", "task.replay=x.npy"], "the verifier's or the held-out set's"),
    (["task.replay_hard=200@123", "task.replay=x.npy"], "the verifier's or the held-out set's"),
    (["task.replay_hard=200", "task.replay=x.npy"], "want PAIRS@SEED"),
    (["task.replay_hard=0@1", "task.replay=x.npy"], "want PAIRS@SEED"),
    (["task.replay_hard=200@1", "task.replay=x.npy", "task.replay_share=1"], "strictly between 0 and 1"),
])
def test_replay_hard_is_refused_with_a_reason(sets, message):
    with pytest.raises(ConfigError, match=message):
        validate(apply_overrides(get_preset("adder-146"), [*BOARD_2, *sets]), host=False)
