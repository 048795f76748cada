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


def test_a_book_claim_read_two_ways_is_one_row_and_a_rereading_names_its_sentence(tmp_path):
    rows = ["| claim | source | reading | rule | per seed | verdict |", "| --- | --- | --- | --- | --- | --- |",
            "| “Layer 1 aligns columns.” | ch. 4 | predicts | r | s | **does not hold** (0/3) |",
            "| “Layer 1 aligns columns.” | ch. 4 | holds | r | s | **holds** (3/3) |",
            "| “(the same sentence, its “perfect”)” | ch. 4 | predicts | r | s | **not testable** (2/3) |", ""]
    (tmp_path / headline.BOOK[-1]).parent.mkdir(parents=True)
    (tmp_path / headline.BOOK[-1]).write_text("\n".join(rows))
    assert headline.book_verdicts(tmp_path) == {
        "Layer 1 aligns columns.": "predicts: does not hold; holds: holds",
        "Layer 1 aligns columns.… (the same sentence, its “perfect”)": "predicts: not testable"}


def test_a_generated_block_is_checked_without_being_written_and_written_between_its_markers(tmp_path):
    from experiments.generated import write_or_check

    doc = tmp_path / "doc.md"
    doc.write_text("intro\n\n<!-- s -->\nold\n<!-- /s -->\n\noutro\n")
    new = "<!-- s -->\nnew\n<!-- /s -->"
    assert write_or_check(doc, "<!-- s -->", "<!-- /s -->", new, "x", "cmd", check=True) == 1
    assert "old" in doc.read_text()  # a check writes nothing
    assert write_or_check(doc, "<!-- s -->", "<!-- /s -->", new, "x", "cmd", check=False) == 0
    assert doc.read_text() == "intro\n\n" + new + "\n\noutro\n"
    assert write_or_check(doc, "<!-- s -->", "<!-- /s -->", new, "x", "cmd", check=True) == 0


def test_a_dirty_commit_is_said_not_cut_off():
    from miiii.provenance import short_commit

    assert short_commit("3fcfb794baefdc1bc38ba3ee051377094d31cee7") == "3fcfb79"
    assert short_commit("3fcfb794baefdc1bc38ba3ee051377094d31cee7-dirty") == "3fcfb79 with uncommitted changes"
