"""The README's headline table is the committed bundles' verdicts, regenerated (python -m experiments.headline)."""

import shutil
from pathlib import Path

from _runhelp import ROOT

from experiments import headline


def test_the_readmes_table_is_what_the_bundles_say():
    assert headline.main(["--check"]) == 0


def test_a_changed_verdict_in_a_bundle_changes_the_table(tmp_path):
    for f in (*(f for f, _ in headline.PAPER), *headline.BOOK):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    for f, _ in headline.PAPER:  # the bundle's summaries: the table's scale (p, seeds) is read from them
        shutil.copytree(ROOT / Path(f).parent / "summaries", tmp_path / Path(f).parent / "summaries")
    before = headline.table(tmp_path)
    path = tmp_path / headline.PAPER[0][0]
    text = path.read_text()
    assert "| **holds** |" in text
    path.write_text(text.replace("| **holds** |", "| **does not hold** |", 1))
    after = headline.table(tmp_path)
    assert after != before and after.count("does not hold") == before.count("does not hold") + 1
