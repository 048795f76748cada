"""The committed result bundles back the README: every claim row has a verdict, the file names its commit and seeds."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from experiments.paper.claims import CLAIMS, VERDICTS
from experiments.paper.report import load_summaries, regenerate

ROOT = Path(__file__).resolve().parents[1]
BUNDLES = [ROOT / "results" / name / "results.md" for name in ("paper-cpu", "paper-cpu-original")]


def claim_rows(text: str) -> list[list[str]]:
    table = text.split("| # | claim |")[1].split("\n\n")[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:] if line.strip()]


def run_roles(text: str) -> set[str]:
    """The roles of the bundle's runs table (its first column)."""
    table = text.split("## Runs")[1].strip().split("\n\n")[0]
    return {line.strip("|").split("|")[0].strip() for line in table.splitlines()[2:] if line.strip()}


def assert_provenance(text: str, keys: tuple[str, ...]) -> None:
    """The bundle's provenance table names a clean commit of this repository and has these rows."""
    commit = re.search(r"\| commit \| ([0-9a-f]{40})(-dirty)? \|", text)
    assert commit and not commit.group(2), "the bundle must name the clean commit that generated it"
    if (ROOT / ".git").exists():
        ok = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", commit.group(1) + "^{commit}"]).returncode
        assert ok == 0, f"commit {commit.group(1)} is not in this repository"
    for key in keys:
        assert f"| {key} |" in text


@pytest.mark.parametrize("name", ["paper", "paper-original"])
def test_the_full_scale_bundles_regenerate_and_say_their_seeds_and_device(name):
    """The paper at p = 113 (a GPU run, committed with fewer seeds than the CPU bundles): results.md is what its
    summaries give, every row has a verdict, and its provenance names the commit, the device and the seeds it holds,
    which the README's generated line counts."""
    path = ROOT / "results" / name / "results.md"
    text = path.read_text()
    assert regenerate(path.parent) == text, f"python -m experiments.paper.report {path.parent}"
    ms, _ = load_summaries(path.parent)
    assert ms and all(m["run"]["p"] == 113 for v in ms.values() for m in v)
    assert f"| seeds | {min(len(v) for v in ms.values())} per role:" in text
    for row in claim_rows(text):
        assert re.sub(r"\*\*(.*?)\*\*.*", r"\1", row[-1]) in VERDICTS, row
    assert_provenance(text, ("date", "device", "jax", "precision", "seeds", "wall time"))
    assert list(path.parent.glob("figures/*.png"))


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.parent.name)
def test_paper_bundle_regenerates_from_its_summaries_and_names_its_commit(path):
    """results.md is exactly what its committed summaries give (`python -m experiments.paper.report`): no verdict,
    number or rule can drift from the files; every claim its roles support has a row over three seeds or more."""
    assert path.is_file(), f"{path} is not committed"
    text = path.read_text()
    assert regenerate(path.parent) == text, (f"{path} differs from its summaries: python -m experiments.paper.report "
                                             f"{path.parent}")
    ms, _ = load_summaries(path.parent)
    rows = claim_rows(text)
    assert len(rows) == sum(set(c.roles) <= set(ms) for c in CLAIMS) and set(ms) == run_roles(text)
    for row in rows:
        verdict = re.sub(r"\*\*(.*?)\*\*.*", r"\1", row[-1])
        assert verdict in VERDICTS, row
    assert min(len(v) for v in ms.values()) >= 3  # every role over three seeds or more
    assert_provenance(text, ("date", "device", "jax", "precision", "seeds", "wall time"))
    # the frequency ablation: one row per task of the first nanda and miiii runs
    section = text.split("## Which frequencies each task needs")[1].split("\n## ")[0]
    p = ms["miiii"][0]["run"]["p"]
    n_primes = sum(all(q % d for d in range(2, q)) for q in range(2, p))
    assert len(re.findall(r"^\| (nanda|miiii) \|", section, re.M)) == 1 + 1 + n_primes  # + nanda's cross-check
    assert list(path.parent.glob("figures/*.png"))


def test_results_stay_under_ten_megabytes():
    size = sum(p.stat().st_size for p in (ROOT / "results").rglob("*") if p.is_file() and p.suffix != ".pdf"
               and not {"runs", "acts", "ckpt"} & set(p.parts))  # what .gitignore lets a bundle commit
    assert size < 10 * 2**20, size


def test_book_bundle_has_both_implementations_over_five_seeds_and_names_its_commit():
    book = ROOT / "results" / "book"
    text = (book / "seeds.md").read_text()
    assert_provenance(text, ("date", "device", "jax", "precision", "PyTorch loop"))
    data = json.loads((book / "seeds.json").read_text())
    for side in ("jax", "torch"):
        for task in ("addition", "reversal"):
            assert [r["seed"] for r in data[side][task]] == [0, 1, 2, 3, 4], (side, task)
    verdicts = re.findall(r"\*\*(holds|does not hold)\*\* \|$", text, re.M)
    assert len(verdicts) == 8  # 2 tasks x 2 implementations + 2 agreements + reversal faster x 2 implementations
    assert sum(p.stat().st_size for p in book.rglob("*") if p.is_file() and "runs" not in p.parts) < 10 * 2**20


def test_book_unstated_bundle_has_a_verdict_per_setting_over_three_seeds_or_more_and_names_its_commit():
    """results/book/unstated.md backs the README's weight-decay finding and the preset addition-wd0.1."""
    book = ROOT / "results" / "book"
    text = (book / "unstated.md").read_text()
    assert_provenance(text, ("date", "device", "jax", "precision", "sweeps"))
    rows = [r.split(" | ") for r in text.splitlines() if re.match(r"\| [0-9.e+]+ \| [0-9.e+]+ \| \d", r)]
    verdicts = re.findall(r"^\| `addition-97` .*?, weight decay ([0-9.e+]+), clip ([0-9.e+]+): 150 epochs .*"
                          r"\*\*(holds|does not hold)"
                          r"\*\* \|$", text, re.M)
    assert len(rows) >= 5 and [(r[0][2:], r[1]) for r in rows] == [v[:2] for v in verdicts]
    assert all(len(r[2].split(", ")) >= 3 for r in rows)  # seeds per setting
    data = json.loads((book / "unstated.json").read_text())
    assert sorted(data) == sorted(f"wd={wd} clip={clip}" for wd, clip, _ in verdicts)
    share = {(r[0][2:], r[1]): int(r[3].split("/")[0]) / int(r[3].split("/")[1]) for r in rows}  # grokked, 7/8
    assert max(share, key=share.get) == ("0.1", "1")  # the preset addition-wd0.1's setting groks the most seeds
    assert "in most seeds: weight decay 0.1, clip 1" in text


def test_book_gap_bundle_compares_the_loops_it_names_and_names_its_commit():
    """results/book/gap.md backs the README's account of where this project's loop and the book's part."""
    book = ROOT / "results" / "book"
    text = (book / "gap.md").read_text()
    assert_provenance(text, ("date", "seeds.json", "batches98.json", "torch_book_addition.json",
                             "torch_book_addition_drop_last.json", "torch_book_addition_warmup0.json",
                             "same_start.json", "warmup1.json"))
    rows = re.findall(r"^\| (.+?) \| .* \*\*(differ|no difference detected)\*\* \|$", text, re.M)
    data = json.loads((book / "gap.json").read_text())
    assert [q for q, _ in rows] == [c["question"] for c in data["comparisons"]] and len(rows) >= 5
    assert all((v == "differ") == c["differ"] == (min(c["p_grokked"], c["p_jump"]) < 0.05)
               for (_, v), c in zip(rows, data["comparisons"], strict=True))
    sizes = {s["key"]: s["distribution"]["n"] for s in data["samples"]}
    assert sizes["PyTorch"] >= 8 and sizes["miiii 98"] >= 8 and sizes["PyTorch_drop_last"] >= 5
    assert min(sizes[k] for k in ("miiii PyTorch starts", "PyTorch_warmup0", "miiii warmup1")) >= 8


def test_book_same_start_bundle_pairs_every_start_with_pytorchs_run_and_names_its_commit():
    """results/book/same_start.md backs the README's 'Both loops from one start': every seed has a step-agreement
    row and an outcome row, the same warm-up agrees to 1e-4 over the first 10 steps and parts later than each loop's
    own, and the stated verdict follows the gap rule on the counts in same_start.json."""
    book = ROOT / "results" / "book"
    text = (book / "same_start.md").read_text()
    assert_provenance(text, ("date", "seed records made at", "device", "jax", "precision", "seeds"))
    data = json.loads((book / "same_start.json").read_text())
    runs = data["runs"]
    assert len(runs) >= 8
    for r in runs:
        same, own = r["same_warmup"], r["own_warmup"]
        assert same["max_10"] < 1e-4 and (same["part_step"] or same["steps"] + 1) > (own["part_step"] or 0)
        assert re.search(rf"^\| {r['seed']} \| [0-9.e+-]+ \| [0-9.e+-]+ \| {same['part_step'] or '>'}", text, re.M)
    o = data["outcomes"]
    assert o["a"]["grokked"] == sum(r["valid_autoregressive_acc"] >= 0.99 for r in runs)
    assert ("**differ**" in text) == o["differ"] == (min(o["p_grokked"], o["p_jump"]) < 0.05)


def test_book_tables_regenerate_from_their_committed_records():
    """seeds.md, unstated.md, gap.md and findings.md: what experiments.book.bundle makes of the committed records."""
    from experiments.book.bundle import regenerate

    texts = regenerate(ROOT / "results" / "book")
    assert set(texts) == {"seeds.md", "unstated.md", "gap.md", "findings.md"}
    for name, text in texts.items():
        assert (ROOT / "results" / "book" / name).read_text() == text, f"results/book/{name} differs from its records"


def test_the_book_weight_decay_rule_needs_its_control():
    """The book's memorization regime is its chapter 3 plateau (held-out exact match near 0-1 %, loss ≈ 1.34), not a
    training loss below the population floor: a seed that ends part-way (50 % or more) or grokked is out of it,
    whatever its loss."""
    from experiments.book.records import rule_stays_memorizing

    def run(acc, loss=1.34):
        return {"valid_autoregressive_acc": acc, "final_epoch_loss": loss, "loss_floor": 0.9594}

    control = [run(1.0, 0.9596), run(0.1, 1.15)]
    assert rule_stays_memorizing([run(0.01), run(0.02, 0.5)], control) is True  # the plateau, whatever the loss
    assert rule_stays_memorizing([run(0.01), run(0.7, 1.0)], control) is False  # one seed left the plateau
    assert rule_stays_memorizing([run(0.01), run(1.0, 0.95960)], control) is False  # one seed groks (above floor)
    assert rule_stays_memorizing([run(0.01), run(1.0, 0.95940)], control) is False  # one seed groks (below floor)
    assert rule_stays_memorizing([run(0.01)], [run(0.1, 1.15)]) is None  # the control does not grok either


def test_fitting_without_transfer_needs_a_low_training_loss_and_a_low_held_out_match():
    from experiments.book.records import rule_fits_without_transfer

    def run(acc, loss):
        return {"valid_autoregressive_acc": acc, "final_epoch_loss": loss, "loss_floor": 0.9594}

    assert rule_fits_without_transfer([run(0.01, 1.38), run(0.02, 0.97)]) is True  # one seed fits and does not transfer
    assert rule_fits_without_transfer([run(0.01, 0.90)]) is True  # below the floor: memorised inputs too
    assert rule_fits_without_transfer([run(0.01, 1.38), run(0.10, 1.15)]) is False  # the plateau fits nothing
    assert rule_fits_without_transfer([run(1.0, 0.9596)]) is False  # it fits, and transfers: a grokked run
    text = (ROOT / "results" / "book" / "unstated.md").read_text()
    assert "model can fit the training data" in text and "(floor 0.9594)" in text


def test_reversal_much_faster_is_seed_by_seed_at_half_the_epochs():
    from experiments.book.records import rule_reversal_much_faster

    def d(*censored):
        return {"censored": list(censored)}
    assert rule_reversal_much_faster(d(32, 151, 82), d(3, 5, 3)) is True
    assert rule_reversal_much_faster(d(32, 10, 82), d(3, 6, 3)) is False  # one seed only 1.7x faster
    assert rule_reversal_much_faster(d(90, 15), d(2, 81)) is False  # a reversal seed that never converged
