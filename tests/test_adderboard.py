"""results/adderboard/: results.md regenerates from its summary, every score is consistent with its own cases, and a
committed submission file, re-scored on the verifier's first cases, fails exactly where its record says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.adderboard import launch, study
from experiments.adderboard.score import MAX_LISTED, load, score
from miiii.tokens import board_pairs

BUNDLE = Path(__file__).resolve().parents[1] / "results" / "adderboard"
SUMMARY = json.loads((BUNDLE / "summaries" / "search.json").read_text())


def test_results_md_is_generated_from_the_summary():
    assert study.main(["--bundle", str(BUNDLE), "--check"]) == 0


def test_every_score_adds_up():
    for s in SUMMARY["scores"]:
        assert s["cases"] == s["pairs"] + s["edge_cases"] == 10_010 and s["seed"] == 2025
        assert s["accuracy"] == s["passed"] / s["cases"]
        if len(s["failures"]) < MAX_LISTED:
            assert s["passed"] == s["cases"] - len(s["failures"])
    for r in SUMMARY["settings"]:
        assert all(m["exact"] is None or 0 <= m["exact"] <= 1 for m in r["members"])
        if r.get("phases"):  # a phased preset's run is its last phase
            assert [m["exact"] for m in r["members"]] == [r["phases"][-1]["exact"]]
            assert r["members"][0]["steps"] == r["phases"][-1]["steps"] == r["steps"]


FIRST = 50  # random pairs re-scored (a case costs ~25 ms: 300 took ~8 s a file, 20 files)
LATER = 4  # recorded failures past them, spread over the record, each checked to fail still


@pytest.mark.parametrize("entry", SUMMARY["scores"], ids=lambda s: s["file"])
def test_a_submission_fails_where_its_record_says(entry):
    """The edge cases and the first 50 random pairs, re-scored: the same failures as the record's among them; and the
    record's first, last and two middle failures past those still fail (few of them fall in any short prefix)."""
    mod = load(BUNDLE / entry["file"])
    first = {f"{a}+{b}" for a, b in board_pairs(FIRST)}
    again = score(mod, FIRST)
    assert again["params"] == entry["params"]
    assert set(again["failures"]) == {f for f in entry["failures"] if f in first}
    later = [f for f in entry["failures"] if f not in first]
    assert later  # every committed file fails somewhere: the check below bites
    model, _ = mod.build_model()
    for k in sorted({round(i * (len(later) - 1) / (LATER - 1)) for i in range(LATER)}):
        a, b = map(int, later[k].split("+"))
        try:
            right = mod.add(model, a, b) == a + b
        except Exception:  # noqa: BLE001 -- a raised error is a miss, as score (and verify.py) count it
            right = False
        assert not right, later[k]


def test_the_boards_own_verifier_agrees_with_the_record():
    """results/adderboard/verify/NAME.txt is anadim/AdderBoard's verify.py run on the committed file (its progress
    and timing lines left out): its count is the record's."""
    for s in SUMMARY["scores"]:
        out = BUNDLE / "verify" / (Path(s["file"]).stem + ".txt")
        if out.is_file():
            text = out.read_text()
            assert f"Results: {s['passed']}/{s['cases']} correct" in text
            assert f"Parameters (unique): {s['params']}" in text


def test_only_repeats_add_up():
    names = [s.name for s in study.SEARCH]
    assert study.parser().parse_args(["--only", *names[:2], "--only", names[3]]).only == [*names[:2], names[3]]
    assert study.parser().parse_args([]).only is None


def test_rewriting_some_settings_keeps_the_bundles_others(tmp_path):
    """--only replaces its settings' records and scores and keeps the rest, in the search's order."""
    path = tmp_path / "search.json"
    path.write_text(json.dumps(SUMMARY))
    name = SUMMARY["settings"][1]["name"]
    new_rec = dict(SUMMARY["settings"][1], steps=-1)
    new = {"qualify": study.QUALIFY, "settings": [new_rec], "scores": []}
    out = study.merged(path, new)
    assert [r["name"] for r in out["settings"]] == [r["name"] for r in SUMMARY["settings"]]
    assert [r["steps"] for r in out["settings"] if r["name"] == name] == [-1]
    assert [s for s in out["scores"] if s["setting"] == name] == []
    assert [s for s in out["scores"] if s["setting"] != name] == [s for s in SUMMARY["scores"] if s["setting"] != name]
    assert study.merged(tmp_path / "absent.json", new) is new
    gone = dict(SUMMARY, settings=[*SUMMARY["settings"], dict(SUMMARY["settings"][0], name="no-longer-searched")])
    path.write_text(json.dumps(gone))
    assert study.merged(path, new)["settings"][-1]["name"] == "no-longer-searched"


def test_a_phased_setting_trains_its_preset_at_its_seed_and_reads_its_last_phase(tmp_path):
    """The command names --seed only where the setting does; a recipe with a phase unfinished has no record yet."""
    by = {s.name: s for s in study.SEARCH}
    assert "--seed" not in launch.command(by["preset-62-phases"], tmp_path)
    assert launch.command(by["preset-62-phases-s2"], tmp_path)[3:5] == ["--seed", "2"]
    assert study.setting_steps(by["preset-62-phases"]) == 50_000
    for k in (1, 2, 3, 10):
        (tmp_path / "preset-62-phases" / f"phase-{k}").mkdir(parents=True)
    (tmp_path / "preset-62-phases" / "phase-3.hard.npy").write_bytes(b"")  # a round's hard pairs: no phase
    assert [p.name for p in study.phase_dirs(tmp_path / "preset-62-phases")][-2:] == ["phase-3", "phase-10"]
    assert study.setting_record(by["preset-62-phases"], tmp_path) is None


def test_a_derived_folder_of_a_phased_setting_is_written_from_its_last_phase(tmp_path):
    """gauge.py's source for a recipe in phases is its last phase (by number), for any other setting its folder."""
    by = {d.name: d for d in study.DERIVED}
    for k in (1, 2, 10):
        (tmp_path / "preset-41-screened" / f"phase-{k}").mkdir(parents=True)
    assert by["preset-41-screened-32p"].source_run(tmp_path) == tmp_path / "preset-41-screened" / "phase-10"
    assert by["41a1-m7-b17-32p"].source_run(tmp_path) == tmp_path / "41a1-m7-b17"
    # a screen's member: that folder, and the walk of what a run needs reaches its setting
    member = tmp_path / "preset-41-screened" / "phase-1" / "member_004"
    assert by["preset-41-m4-32m"].source_run(tmp_path) == member
    assert study.needs(["32m-m4-r1"]) == ("preset-41-screened", "32m-m4-long", "32m-m4-r1", "preset-41-m4-32m")
    assert by["preset-41-m4-32m"].flags == " --head-free --temperature --at 7,17,5,6.5"


def test_derived_records_merge_render_and_are_scored():
    """A derived folder (gauge.py) keeps its record through --only rewrites of others, is rendered with its pins
    and check, and its export is among the scores; each derived in the bundle qualifies as its source does."""
    derived = SUMMARY["derived"]
    assert {d["name"] for d in derived} == {d.name for d in study.DERIVED}
    scored = {s["setting"]: s for s in SUMMARY["scores"]}
    for d in derived:
        assert d["same_argmax"] and d["params"] < 36
        if d["exact"] < study.EXPORT_AT:  # a start to train on (a screen's member), not exported: as a run's rule
            assert d["name"] not in scored
            continue
        assert scored[d["name"]]["params"] == d["params"]
        assert set(scored[d["name"]]["failures"]) == set(scored[d["source"]]["failures"])  # the source's decoder
        assert all(f"`{p}`" in study.results_md(SUMMARY) for p in d["pins"])
    new = {"qualify": study.QUALIFY, "settings": [SUMMARY["settings"][0]], "scores": []}
    out = study.merged(BUNDLE / "summaries" / "search.json", new)
    assert out["derived"] == derived and [s for s in out["scores"] if s["setting"] == derived[0]["name"]]


def test_with_deps_is_every_setting_a_run_starts_from_or_draws_hard_pairs_from(tmp_path, capsys):
    """needs() against a walk of the settings written out here: the closure of the committed 32 from its seed is its
    19 rounds, the four runs near the 41 its union starts from, the 41's whole lineage (from the screen whose seed 7
    it continues) and the three folders derived from that 41, each after what it needs and no other chain (32p-a*);
    a folder already there (the restored 41) cuts the walk."""
    from experiments.adderboard.settings import DERIVED, SEARCH, needs

    by = {s.name: s for s in SEARCH} | {d.name: d for d in DERIVED}

    def direct(name):
        s = by[name]
        if hasattr(s, "source"):
            return {s.source}
        return {h.split("@")[0] for h in s.hard} | ({s.init_from.split("/")[0]} if s.init_from else set())

    full = needs(["32p-b36"])
    assert len(set(full)) == len(full) and {f"32p-b{k}" for k in range(18, 37)} <= set(full)
    assert {"41-plain", "35p-b18", "33p-b18", "32p-t18", "41a1-m7-b17", "41a1-m7-long5", "41-start-angle1"} <= set(full)
    assert not any(n.startswith("32p-a") for n in full) and "41a1-m7-b17-32p" in full
    trained = [n for n in full if not hasattr(by[n], "source")]  # derived folders train nothing

    def trained_first(name):  # the settings a name needs trained, through derived folders
        return {t for d in direct(name) for t in ({by[d].source} if hasattr(by[d], "source") else {d})}

    for name in full:  # closed, and each setting trains after every setting it needs
        assert direct(name) <= set(full)
        assert all(trained.index(t) < trained.index(name) for t in trained_first(name) if name in trained)
    cut = needs(["32p-b36"], present={"41a1-m7-b17"})
    rounds = {f"32p-b{k}" for k in range(18, 37)}
    from_41 = {d.name for d in DERIVED if d.source == "41a1-m7-b17"}
    assert set(cut) == {"41a1-m7-b17", "41-plain", "35p-b18", "33p-b18", "32p-t18", *rounds, *from_41}
    out = tmp_path / "out"  # --with-deps without --only: one line, exit 2, nothing written
    assert study.main(["--with-deps", "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert "--with-deps" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_a_stopped_study_continues_its_unfinished_run_in_place(tmp_path, monkeypatch, capsys):
    """A folder without the file its run writes last (summary.json; a sweep's sweep.json) is continued with
    --resume, its hard pairs not drawn again; a finished or restored folder is passed over; nothing else trains."""
    import miiii.cli

    runs, calls = tmp_path / "runs", []
    monkeypatch.setattr(miiii.cli, "main", lambda argv: calls.append(argv) or 0)
    by = {s.name: s for s in study.SEARCH}
    for name in ("32p-b33", "32p-b34", "41-start-angle1", "41a1-m7-b17"):
        (runs / name).mkdir(parents=True)
    (runs / "32p-b33" / "summary.json").write_text("{}")
    (runs / "41a1-m7-b17" / "restored.json").write_text("{}")
    assert [launch.unfinished(by[n], runs) for n in ("32p-b33", "32p-b34", "41-start-angle1", "41a1-m7-b17")] == [
        False, True, True, False]
    only = ["--only", "32p-b34", "41-start-angle1", "41a1-m7-b17"]
    assert study.main(["--runs", str(runs), *only, "--out", str(tmp_path / "out")]) == 2  # no summary to record
    assert calls == [["sweep", "--resume", str(runs / "41-start-angle1"), "--no-progress"],
                     ["train", "--resume", str(runs / "32p-b34"), "--no-progress"]]
    assert not launch.hard_file(by["32p-b34"], runs).exists() and "no setting" in capsys.readouterr().err


@pytest.mark.parametrize("resumed_from", [5000, None])
def test_a_sweep_stopped_and_resumed_has_its_wall_marked(tmp_path, resumed_from):
    """A sweep's wall is the span of its files, so one that was stopped and resumed (its sweep.json's resumed_from)
    holds the pause: its record says so and results.md marks its wall with *; one run straight through is unmarked."""
    from miiii.config import apply_overrides
    from miiii.presets import get_preset
    from miiii.rundir import write_config

    by = {s.name: s for s in study.SEARCH}
    s = by["32p-start-angle1-b16-cos"]
    member = tmp_path / s.name / "member_000"
    member.mkdir(parents=True)
    write_config(member, apply_overrides(get_preset("adder-146"), list(s.sets)))
    (member / "summary.json").write_text(json.dumps({"steps": 1, "valid_autoregressive_acc": 0.0,
                                                        "final": {"train": {"loss": 2.0}}}))
    (member / "metrics.jsonl").write_text("{}\n")
    (tmp_path / s.name / "sweep.json").write_text(json.dumps({"resumed_from": resumed_from}))
    rec = study.setting_record(s, tmp_path)
    assert rec["params"] == 32 and rec.get("resumed", False) == (resumed_from is not None)
    row = next(line for line in study.results_md({"qualify": 0.99, "settings": [rec], "scores": []}).splitlines()
               if line.startswith(f"| {s.name} |"))
    assert row.endswith(f"| {rec['wall_s'] / 60:.1f}{'*' if resumed_from else ''} |")


def test_a_phased_settings_elapsed_time_is_its_phases_spans_not_the_wait_between_them(tmp_path):
    """Each phase's elapsed time is the span from its config.json to its summary.json (start-up and the final
    evaluation included, which its loop's wall time leaves out); the row *all* sums them, so a recipe that waited
    between two phases does not count the wait; a record from before the column renders –."""
    import os

    from miiii.presets import phase_configs
    from miiii.rundir import write_config

    by = {s.name: s for s in study.SEARCH}
    s = by["preset-41-phases"]
    times = {1: (0, 600), 2: (1000, 1300)}  # phase 2 began 400 s after phase 1 ended
    for k, cfg in enumerate(phase_configs(s.phased), 1):
        d = tmp_path / s.name / f"phase-{k}"
        d.mkdir(parents=True)
        write_config(d, cfg)
        (d / "summary.json").write_text(json.dumps({"steps": 10, "wall_s": 60.0 * k, "valid_autoregressive_acc": 0.5,
                                                    "final": {"train": {"loss": 1.0}}}))
        for name, t in zip(("config.json", "summary.json"), times[k], strict=True):
            os.utime(d / name, (1e9 + t, 1e9 + t))
    rec = study.setting_record(s, tmp_path)
    assert [x["elapsed_s"] for x in rec["phases"]] == [600, 300] and rec["elapsed_s"] == 900
    assert rec["wall_s"] == 180  # the loops' own
    old = json.loads(json.dumps(rec))
    del old["elapsed_s"], old["phases"][0]["elapsed_s"]
    lines = study.results_md({"qualify": 0.99, "settings": [rec], "scores": []}).splitlines()
    rows = [line for line in lines if line.startswith(f"| {s.name} |")][1:]  # the main table's row first
    assert [r.rsplit("|", 3)[1:3] for r in rows] == [[" 1.0 ", " 10.0 "], [" 2.0 ", " 5.0 "], [" 3.0 ", " 15.0 "]]
    lines = study.results_md({"qualify": 0.99, "settings": [old], "scores": []}).splitlines()
    rows = [line for line in lines if line.startswith(f"| {s.name} |")][1:]
    assert [r.rsplit("|", 2)[1] for r in rows] == [" – ", " 5.0 ", " – "]
