"""Preset times are measured, never typed: experiments.timings' record, `presets` printing it, and the committed
record regenerating its table."""

import json
import re
from pathlib import Path

import pytest

from experiments.timings import study as T
from miiii.presets import PRESETS, measured_time

ROOT = Path(__file__).resolve().parents[1]


def test_no_preset_description_promises_a_time():
    for name, (_, desc) in PRESETS.items():
        assert not re.search(r"(seconds|minutes?|hours?|a minute) on a (CPU|GPU)", desc), name


def test_presets_print_the_measured_time_from_the_record(tmp_path):
    rec = dict(commit="abc", date="today", machine=dict(cores=2, cpu="x", python="Python 3"), miiii_cpu_min=20.8,
               miiii_cpu_setting="H",
               presets={"nanda-cpu": dict(process_s=95.3, train_s=52.0, steps=3000, device="cpu")})
    path = tmp_path / "timings.json"
    path.write_text(json.dumps(rec))
    assert measured_time("nanda-cpu", path) == "95 s on 2 CPU cores, start to end"
    assert measured_time("miiii-cpu", path) == "20.8 min a seed on 2 CPU cores"
    assert measured_time("nanda", path) == "" and measured_time("nanda-cpu", tmp_path / "none.json") == ""
    text = T.timings_md(rec)
    assert "| nanda-cpu | 3,000 | 95 s | 52 s |" in text and "miiii-cpu: 20.8 min a seed" in text
    assert T.fmt_seconds(150) == "2.5 min"


def test_the_committed_record_regenerates():
    if not (ROOT / "results" / "timings" / "timings.json").is_file():
        pytest.skip("no timings record committed yet")
    assert T.write_bundle(ROOT / "results" / "timings", check=True) == 0
    rec = json.loads((ROOT / "results" / "timings" / "timings.json").read_text())
    assert set(rec["presets"]) == set(T.TIMED)
    assert (rec["miiii_cpu_min"], rec["miiii_cpu_setting"]) == T.miiii_cpu_minutes()  # the search bundle's, as it is
