"""The scale ladder (experiments/paper/ladder.py): its trend rule, which seeds a rung counts, and the committed
bundle regenerating from its summaries."""

from pathlib import Path

import pytest

from experiments.paper import ladder as L

BUNDLE = Path(__file__).resolve().parents[1] / "results" / "paper-cpu" / "ladder"


@pytest.mark.parametrize(("vals", "paper", "want"), [
    ([0.1, -0.2, -0.5], -0.64, "toward"),  # the distance shrinks at every rung
    ([-0.5, -0.2, 0.1], -0.64, "away"),
    ([-0.5, 0.1, -0.6], -0.64, "mixed"),
    ([-0.7, -0.6, -0.5], -0.64, "mixed"),  # passes the paper's number: the distance shrinks, then grows
    ([1, 2, 3], None, "rises"),
    ([3, 2, 2], None, "mixed"),
])
def test_trend_against_the_papers_number(vals, paper, want):
    assert L.trend(list(zip((37, 53, 71), vals, strict=True)), paper) == want
    assert L.trend([(37, 1.0)], paper) == "–"


def _m(seed, steps, pos_r):
    return {"run": {"seed": seed, "p": 37, "steps": 1000}, "task_names": [f"q={q}" for q in (2, 3, 5, 7, 11)],
            "grok_step": steps, "pos_r": pos_r, "fft": {"above_mean_2std": 3}, "svd": {"tick_s_50": 5, "tick_s_90": 9}}


def test_a_rung_counts_the_seeds_that_generalised_or_all_of_them_marked():
    done, partial = _m(0, [1, 2, 3, 4, 500], -0.5), _m(1, [1, 2, 3, 4, None], 0.9)
    q = next(q for q in L.QUANTITIES if q.key == "pos_r")
    assert L.rung_seeds([done, partial]) == ([done], True)
    assert L.rung_stats([done, partial], q) == (-0.5, 0.0, 1)  # the partly trained seed is left out
    assert L.rung_seeds([partial]) == ([partial], False)
    rem = next(q for q in L.QUANTITIES if q.key == "remaining")
    assert rem.read(done) == 0.5 and rem.read(partial) == 1.0  # not grokked: counted at the run's end
    small = next(q for q in L.QUANTITIES if q.key == "small_last")
    assert small.read(done) == 0.004
    text = L.ladder_md({37: [partial], 53: [{**done, "run": {**done["run"], "p": 53}}]})
    assert "*partly trained*" in text and "| seeds that generalised every task | 0 of 1 | 1 of 1 |" in text


def test_bad_rung_arguments_are_one_line_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        L.main(["--rung", "x=runs", "--no-train", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "expected P=DIR" in capsys.readouterr().err
    assert L.main(["--p", "37", "--runs", str(tmp_path), "--no-train", "--out", str(tmp_path / "o")]) == 2
    assert "holds no member_*" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_the_committed_ladder_regenerates_from_its_summaries():
    if not BUNDLE.is_dir():
        pytest.skip("no ladder bundle committed yet")
    assert L.write_bundle(BUNDLE, check=True) == 0, f"python -m experiments.paper.ladder --bundle {BUNDLE}"


def test_the_miiii_cpu_search_names_the_ladders_own_command_for_the_seeds_it_shares():
    from experiments.miiii_cpu import study as S

    h = next(s for s in S.SEARCH if s.also)
    for d in h.also:
        p = int(Path(d).name[1:])
        assert h.also_command.startswith("python -m miiii " + " ".join(L.command(p, Path(d))))
    assert L.valid_size(37) == 37 * 37 - int(0.7 * 37 * 37) == 411 and L.valid_size(53) == 500
    assert "task.valid_size=411" in L.command(37, Path("x")) and "task.valid_size" not in " ".join(
        L.command(53, Path("x")))
