"""The miiii-cpu search bundle: its reading of a run (tasks grokked against the step), its goal rule (every task in
>= 4 of 5 seeds within 30 minutes a seed) both ways, and results.md regenerated from the committed summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _runhelp import ROOT

from experiments.miiii_cpu import study as S

BUNDLE = ROOT / "results" / "miiii-cpu"


def _seed(grokked: int, tasks: int = 3) -> dict:
    names = [f"q={q}" for q in (2, 3, 5, 7)[:tasks]]
    return dict(seed=0, values={}, tasks=names, curve=[[0, 0], [99, grokked]],
                grok_step={n: 99 for n in names[:grokked]}, final={n: 1.0 if i < grokked else 0.1
                                                                    for i, n in enumerate(names)}, steps_done=100)


def _rec(seeds: list[dict], wall_s: float) -> dict:
    return dict(name="X", why="a test", sets=[], grid=[], steps=100, steps_done=100, p=11, d_model=16, train_frac=0.7,
                members=len(seeds), wall_s=wall_s, s_per_member_step=0.0, command="python -m miiii train", seeds=seeds)


@pytest.mark.parametrize(("grokked", "n", "minutes", "met"), [
    ([3, 3, 3, 3, 2], 5, 10, True),   # 4 of 5 seeds with every task, 10 min a seed
    ([3, 3, 3, 2, 2], 5, 10, False),  # 3 of 5
    ([3, 3, 3, 3, 3], 5, 31, False),  # every seed, but 31 min a seed
    ([3, 3, 3, 3], 4, 10, False),     # 4 of 4: fewer than the 5 seeds the goal asks for
])
def test_the_goal_needs_every_task_in_4_of_5_seeds_within_30_minutes(grokked, n, minutes, met):
    rec = _rec([_seed(g) for g in grokked], wall_s=minutes * 60 * n)
    assert S.meets_goal(rec) is met


def test_a_member_reads_tasks_grokked_against_the_step(tmp_path):
    """The curve counts a task from the first evaluated step at >= 0.99, and keeps it after (a grok step, as the
    project defines it), whatever the accuracy does later."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"train": {"seed": 4}}))
    rows = [{"step": 0, "valid_acc/q=2": 0.5, "valid_acc/q=3": 0.2},
            {"step": 100, "valid_acc/q=2": 0.995, "valid_acc/q=3": 0.4},
            {"step": 200, "valid_acc/q=2": 0.97, "valid_acc/q=3": 0.999}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = S.member_record(d)
    assert m["curve"] == [[0, 0], [100, 1], [200, 2]] and m["grok_step"] == {"q=2": 100, "q=3": 200}
    assert m["seed"] == 4 and m["steps_done"] == 201 and m["final"] == {"q=2": 0.97, "q=3": 0.999}


def test_results_md_says_the_nearest_setting_when_none_meets_the_goal(tmp_path):
    summary = {"goal": S.GOAL, "settings": [_rec([_seed(2), _seed(1)], 600) | {"name": "near"},
                                            _rec([_seed(1)], 600) | {"name": "far"}]}
    text = S.results_md(summary)
    assert "No setting searched meets the goal. The nearest: near" in text and "2 of 3 tasks" in text


def test_the_committed_bundle_regenerates_from_its_summary():
    assert (BUNDLE / "summaries" / "search.json").is_file(), "results/miiii-cpu is not committed"
    summary = json.loads((BUNDLE / "summaries" / "search.json").read_text())
    assert (BUNDLE / "results.md").read_text() == S.results_md(summary)
    assert (BUNDLE / "grokked.png").is_file()
    for rec in summary["settings"]:  # each setting names its own exact command, from the search's table
        setting = next(s for s in S.SEARCH if s.name == rec["name"])
        own = "python -m miiii " + " ".join(S.command(setting, Path("runs/miiii-cpu-search")))
        assert rec["command"].startswith(own)
        assert rec["command"].endswith(setting.also_command)  # and the command of the seeds it shares, if any


def test_a_stopped_and_continued_setting_is_charged_its_training_segments_only(tmp_path):
    d = tmp_path / "G"
    (d / "member_000").mkdir(parents=True)
    (d / "sweep-plan.json").write_text("{}")
    (d / "member_000" / "metrics.jsonl").write_text("{}\n")
    (d / S.WALL).write_text(json.dumps([[100.0, 400.0], [10_000.0, 10_060.5]]))  # a day between the two
    assert S.wall_seconds(d, [d / "member_000"]) == 360.5
    (d / S.WALL).unlink()  # a setting trained before wall.json: its files' times
    assert S.wall_seconds(d, [d / "member_000"]) >= 0
    s = S.Setting("G", "w", (), steps=10, seeds=2)
    assert S.resume_command(s, tmp_path) == ["sweep", "--resume", str(d), "--no-progress"]
    solo = S.Setting("F", "w", (), solo=True)
    assert S.resume_command(solo, tmp_path)[:2] == ["train", "--resume"]
