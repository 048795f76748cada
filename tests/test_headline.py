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


def test_a_book_claim_read_two_ways_is_one_row_and_a_rereading_joins_its_sentence(tmp_path):
    rows = ["| claim | source | reading | rule | per seed | verdict |", "| --- | --- | --- | --- | --- | --- |",
            "| “Layer 1 aligns columns.” | ch. 4 | predicts | r | s | **does not hold** (0/3) |",
            "| “Layer 1 aligns columns.” | ch. 4 | holds | r | s | **holds** (3/3) |",
            "| “(the same sentence, its “perfect”)” | ch. 4 | predicts | r | s | **not testable** (2/3) |", ""]
    (tmp_path / headline.BOOK[-1]).parent.mkdir(parents=True)
    (tmp_path / headline.BOOK[-1]).write_text("\n".join(rows))
    assert headline.book_verdicts(tmp_path) == {  # the re-reading joins its sentence's row, named, never cut short
        "Layer 1 aligns columns.": "predicts: does not hold; holds: holds; its “perfect”, predicts: not testable"}
    assert headline.counts(headline.book_verdicts(tmp_path).values()) == {"does not hold": 1, "not testable": 1,
                                                                          "holds": 1}


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


def test_the_readme_summarises_the_whole_table_and_a_changed_verdict_moves_its_count(tmp_path):
    """README.md's block counts the verdicts results/README.md lists whole; one verdict changed in a bundle moves one
    count from `holds` to `does not hold` in that study's row, and no quotation is cut in the whole table."""
    for f in (*(f for f, _ in headline.PAPER), *headline.BOOK, headline.STABILITY):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    for f, _ in headline.PAPER:
        shutil.copytree(ROOT / Path(f).parent / "summaries", tmp_path / Path(f).parent / "summaries")
    whole = headline.table(tmp_path)
    claims = [line.split(" | ")[0][2:] for line in whole.splitlines() if line.startswith("| ")]
    assert len(claims) > 50 and not [c for c in claims if len(c) == headline.SHORT and c.endswith("…")]

    def rows():
        return {ln.split("](")[1].split(")")[0]: ln for ln in headline.summary(tmp_path).splitlines()
                if ln.startswith("| [")}

    row = rows()
    path = tmp_path / headline.PAPER[0][0]
    path.write_text(path.read_text().replace("| **holds** |", "| **does not hold** |", 1))
    after = rows()

    def nums(line):
        return [int(c) for c in line.strip(" |").split(" | ")[1:]]

    (h0, d0, n0), (h1, d1, n1) = nums(row[headline.PAPER[0][0]]), nums(after[headline.PAPER[0][0]])
    assert (h1, d1, n1) == (h0 - 1, d0 + 1, n0)
    assert after[headline.PAPER[1][0]] == row[headline.PAPER[1][0]]
    paper_cells = [c for rows in (headline.paper_rows(ROOT / f) for f, _ in headline.PAPER) for c in rows.values()]
    assert sum(headline.counts(paper_cells).values()) == len(paper_cells)


def test_a_quotation_keeps_its_marks_when_words_follow_it():
    assert headline.short("“Whole sentence.”") == "Whole sentence."
    assert headline.short("“Quoted.” (on addition-97)") == "“Quoted.” (on addition-97)"
    assert headline.short("label: “Quoted.” (ch. 3)") == "label: “Quoted.” (ch. 3)"


def test_the_full_scale_line_counts_each_seed_and_survives_a_run_that_learned_nothing(tmp_path):
    """The README's line on the paper at p = 113 reads each seed of each full-scale bundle: grokked (first step at
    >= 0.99) and ending at >= 0.99 counted apart, seeds in numeric order (10 after 2), a seed with no grokked task
    counted as 0, the devices named; no bundle at all says so."""
    import json

    from experiments.headline import PAPER_GPU, paper_gpu_sentence

    assert paper_gpu_sentence(tmp_path) == "The paper's own scale (p = 113) has no committed bundle yet."
    out = tmp_path / PAPER_GPU[0][0] / "summaries"
    out.mkdir(parents=True)
    prov = {"device": "NVIDIA H100 (gpu)", "jax": "0.10.2"}
    (out / "report.json").write_text(json.dumps({"roles": ["miiii"], "provenance": prov}))
    seeds = {0: ([5, 9, None], [1.0, 0.98, 0.5]), 2: ([None, None, None], [0.1, 0.2, 0.3]),
             10: ([5, 7, 8], [1.0, 1.0, 0.995])}
    for k, (grok, final) in seeds.items():
        run = {"p": 113, "steps": 65536, "seed": k}
        (out / f"miiii-{k}.json").write_text(json.dumps({"measures": {"run": run, "grok_step": grok,
                                                                      "final_acc": {"valid": final}}}))
    line = paper_gpu_sentence(tmp_path)
    assert "of 3 tasks 2, 0, 3 grokked and 1, 0, 3 end at ≥ 0.99 validation accuracy (3 seeds;" in line, line
    assert line.startswith("At the paper's own scale (p = 113, 65,536 steps;")
    assert "on NVIDIA H100 (gpu), jax 0.10.2)" in line
    assert PAPER_GPU[1][0] not in line  # the bundle that is not there
