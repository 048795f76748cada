"""The figures command on tiny runs writes every expected file; results.md is generated from the runs."""

import json
import os
import shutil
from pathlib import Path

import jax
import matplotlib.axes
import matplotlib.collections
import matplotlib.figure
import matplotlib.image
import matplotlib.pyplot
import numpy as np
import pytest
from _runhelp import SLOW, finished_run, shared

from experiments.paper import study as paper
from experiments.paper.claims import CLAIMS, VERDICTS, claims, rule_text
from experiments.paper.measures import run_measures
from experiments.paper.report import load_summaries, regenerate, write_results
from experiments.paper.report import main as report_main
from miiii import analysis as A
from miiii import plots, plots_neurons, plots_sequence, plotstyle
from miiii.cli import main
from miiii.config import ConfigError, apply_overrides
from miiii.integrity import write_manifest
from miiii.presets import get_preset
from miiii.record import plan
from miiii.run import load_run
from miiii.runner import prepare, train_run
from miiii.sweep import plot_grok_steps
from miiii.train import make_trainer
from miiii.validate import validate

# the nanda run is also test_examples.py's (the same overrides: `finished_run` trains it once per session), which
# reads its kept steps 0, 1, 6 and 40
TINY = ("p=13", "task.train_frac=0.5", "task.valid_size=30", "model.d_model=32", "model.d_mlp=64", "steps=40",
        "train.chunk=40", "ckpt.keep_log=3")


def _build_runs(root: Path) -> None:
    """Copies named as the figures name them (fig05_accuracy_nanda: the run directory's name) of the two runs, and a
    relabelled copy of the miiii run: the report reads only files, so the basis run saves a training."""
    for preset in ("nanda-tiny", "miiii-tiny"):
        shutil.copytree(finished_run(preset, *TINY).path, root / preset.removesuffix("-tiny"))
    assert (root / "nanda" / "acts" / "index.json").is_file()  # the preset records W_E, W_pos, neurons, logits
    basis = root / "basis"
    shutil.copytree(root / "miiii", basis, ignore=shutil.ignore_patterns("ckpt", "ckpt.json"))  # no config to clash
    cfg = json.loads((basis / "config.json").read_text())
    cfg["task"]["variant"] = "basis"
    (basis / "config.json").write_text(json.dumps(cfg))
    write_manifest(basis)  # the edited copy's checksums.json, or load_run refuses its config.json as damaged


@pytest.fixture(scope="module")
def runs():
    """The nanda, miiii and basis runs the figure tests read, trained once per session (by whichever worker asks
    first: `_runhelp.finished_run`, `_runhelp.shared`)."""
    root = shared("figures-runs", _build_runs)
    return {name: root / name for name in ("nanda", "miiii", "basis")}


@pytest.fixture(scope="module")
def drawn(runs):
    """The figures of the nanda and miiii runs, drawn once per session by the command line; `CHECKED` gets each
    figure's layout problems, found as it was saved (test_every_figure_is_readable reads them)."""
    def draw(out: Path) -> None:
        found: dict = {}
        with pytest.MonkeyPatch.context() as mp:
            _checking(mp, found)
            assert main(["figures", str(runs["nanda"]), str(runs["miiii"]), "--out", str(out / "figures")]) == 0
        (out / "checked.json").write_text(json.dumps(found))

    out = shared("figures-drawn", draw)
    CHECKED.update(json.loads((out / "checked.json").read_text()))
    return out / "figures"


CHECKED: dict = {}


def assert_figures(out: Path, stems, absent=()) -> None:
    """Every figure in `out` is a PNG with its PDF, neither empty; each of `stems` is there and none of `absent`.
    The stems are the ones a test is about: a figure added to draw_all is checked by its own test, and by this
    (and test_every_figure_is_readable) as one of every figure drawn."""
    drawn = {f.stem for f in out.glob("*.png")}
    assert set(stems) <= drawn, set(stems) - drawn
    assert not drawn & set(absent), drawn & set(absent)
    for stem in drawn:
        for ext in ("png", "pdf"):
            f = out / f"{stem}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f
    assert {f.stem for f in out.glob("*.pdf")} == drawn


@pytest.mark.study  # every paper figure of two runs, drawn (make test-studies: make test's 10 minutes)
def test_figures_command_writes_every_expected_file(drawn):
    stems = ["fig01_polar", "fig02_inputs_p11", "fig03_targets_p11", "fig07_positional", "fig08_singular_values",
             "fig18_attention"]
    for run in ("nanda", "miiii"):
        stems += [f"fig04_neuron_{run}", f"fig05_accuracy_{run}", f"fig06_loss_{run}",
                  f"fig09_singular_vectors_{run}", f"fig11_embed_fft_{run}", f"fig14_neurons_{run}",
                  f"fig17_grad_norms_{run}", f"fig_freq_ablation_{run}"]
    # both presets record neurons over the grid (fig. 16); Nanda's progress measures exist for nanda only
    stems += ["fig16_frequency_dominance_nanda", "fig16_frequency_dominance_miiii", "fig_progress_nanda"]
    assert_figures(drawn, stems, absent=["fig_progress_miiii"])


def test_figures_on_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["figures", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err
    (tmp_path / "config.json").write_text(json.dumps({}))
    assert main(["figures", str(tmp_path)]) == 2  # a config but no metrics/params: not a finished run


def test_results_md_is_generated_from_the_committed_summaries_alone(runs, tmp_path):
    """write_results: each run's measures into summaries/, then results.md from those files; regenerate gives the
    same text with the run directories gone (what the bundle test relies on)."""
    loaded = {k: [load_run(v)] for k, v in runs.items()}
    bundle = tmp_path / "bundle"
    path = write_results(loaded, bundle, title="test", provenance={"commit": "0" * 40})
    text = path.read_text()
    ms, _ = load_summaries(bundle)
    assert ms["miiii"][0] == run_measures(loaded["miiii"][0])
    rows = claims(ms)
    r_nanda = A.pearson(*loaded["nanda"][0].params["W_pos"][:2])
    r_miiii = A.pearson(*loaded["miiii"][0].params["W_pos"][:2])
    assert f"r = {r_nanda:.2f}" in text and f"r = {r_miiii:.2f}" in text
    assert {"claim", "paper", "rule", "measured", "verdict", "holds_in", "seeds"} <= set(rows[0])
    assert all(r["verdict"] in VERDICTS and r["rule"] == rule_text(c) for r in rows for c in CLAIMS
               if c.key == r["key"])
    keys = {r["key"] for r in rows}
    assert {"pos-nanda", "succession", "no-order", "svd", "basis", "fft-above_mean_2std", "fft-energy_90",
            "harder-slower", "table3-0"} <= keys
    assert "Table 3 by every definition" in text and "| commit | 0000000000" in text
    # the frequency ablation: one row per task of each grid run, its loss as frequency_ablation computes it
    from miiii.interventions import frequency_ablation

    section = text[text.index("## Which frequencies each task needs"):]
    ab = frequency_ablation(loaded["miiii"][0])
    for slot, name in enumerate(ab["tasks"]):
        assert f"| miiii | {name} | " in section and f"| {ab['base'][slot]:.3f} |" in section
    assert "the neurons' key frequencies" in section
    # a claim needing a run that is missing is left out, not invented
    assert not keys & {"lambda-0", "grokfast-faster", "masked-first", "no-dropout"}
    assert regenerate(bundle) == text  # from summaries/ alone
    assert report_main([str(bundle), "--check"]) == 0
    path.write_text(text.replace("**holds**", "**does not hold**", 1) if "**holds**" in text else text + "x")
    assert report_main([str(bundle), "--check"]) == 1  # a hand edit is caught


def test_results_judge_every_seed_of_a_role(runs):
    m = {k: run_measures(load_run(v)) for k, v in runs.items()}
    two = {"nanda": [m["nanda"]] * 2, "miiii": [m["miiii"]] * 2, "nodropout": [m["miiii"]] * 2}
    rows = {r["key"]: r for r in claims(two)}
    assert rows["pos-miiii"]["seeds"] == 2 and rows["table3-0"]["pooled"]  # Table 3: one verdict over the seeds
    row = rows["no-dropout"]  # any miiii run stands in for the appendix run
    assert row["verdict"] in VERDICTS and row["measured"].startswith("generalise")


def test_paper_experiment_has_the_house_docstring_and_smoke_flag():
    doc = paper.__doc__
    assert "python -m experiments.paper" in doc and "--smoke" in doc
    assert "Expected runtime" in doc and "Expected result" in doc
    for full, cpu in paper.ROLES.values():  # every preset the experiment names exists
        get_preset(full)
        get_preset(cpu)
    with pytest.raises(ConfigError):
        get_preset("no-such-preset")


def test_full_paper_recordings_fit_the_default_budget():
    """`make paper` at the paper's scale: every role's recording (Fig. 16 grid, nanda's logits) fits 2 GiB, and
    miiii's every-256-steps rate makes Table 3's step 256 a recorded row."""
    for role, (full, _) in paper.ROLES.items():
        cfg = get_preset(full)
        cfg = validate(apply_overrides(cfg, paper.overrides(cfg, role, smoke=False, steps=None)))
        task = prepare(cfg)
        tr = make_trainer(cfg, task)
        rec = plan(cfg, task, lambda p, x, tr=tr: tr.model.apply({"params": p}, x), jax.eval_shape(tr.init, 0).params)
        assert rec.nbytes < 2 * 2**30, (role, rec.nbytes)
        assert ("logits" in cfg.record.acts) == (role == "nanda")
        assert role == "nanda" or 256 % cfg.record.every == 0


def test_curves_draw_at_most_max_points_per_task(runs, tmp_path, monkeypatch):
    """A 65,536-step run's curves are drawn from log-spaced evaluated steps only (first and last kept)."""
    run = load_run(runs["miiii"])
    lengths = []
    orig = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda self, x, y, **kw: lengths.append((x[0], x[-1], len(x)))
                        or orig(self, x, y, **kw))
    plots.fig_curves(run, tmp_path, "acc", max_points=7)
    n = len(run.metrics["step"])
    assert n > 7 and len(lengths) == 2 * len(run.metrics["task_names"])
    assert all(k == 7 and first == 1 and last == n for first, last, k in lengths)


@pytest.mark.study  # the paper study's runs (make test-studies; make test's 10 minutes, compile cache empty)
def test_paper_applies_set_to_every_run_and_reuse_resumes_an_interrupted_one(tmp_path, monkeypatch, capsys):
    """`python -m experiments.paper --set` reaches the run's config (beside the recording overrides); `--reuse`
    continues a run that died after its first checkpoint instead of retraining it."""
    sets = ["p=13", "task.valid_size=30", "model.d_model=32", "model.d_mlp=64", "train.chunk=20", "ckpt.every=20"]
    train = paper.train_run

    def dies_after_first_chunk(cfg, run_dir, progress):
        def crash(step):
            raise RuntimeError(f"killed at step {step}")
        return train(cfg, run_dir, progress=progress, on_chunk=crash)

    monkeypatch.setattr(paper, "train_run", dies_after_first_chunk)
    with pytest.raises(RuntimeError, match="killed at step 20"):
        paper.run_all(tmp_path, True, ["nanda"], reuse=False, progress=False, steps=40, sets=sets)
    monkeypatch.setattr(paper, "train_run", lambda *a, **k: pytest.fail("--reuse retrained an interrupted run"))
    runs = paper.run_all(tmp_path, True, ["nanda"], reuse=True, progress=False, steps=40, sets=sets)
    assert "nanda: resumed" in capsys.readouterr().out
    run = runs["nanda"][0]
    assert run.config.task.p == 13 and run.config.model.d_model == 32 and run.config.train.steps == 40
    assert "logits" in run.config.record.acts and run.config.record.inputs == "grid"  # the experiment's recording
    assert run.summary["resumed_from"] == 20 and len(run.metrics["step"]) == 40


@pytest.mark.study  # the paper study's runs (make test-studies; make test's 10 minutes, compile cache empty)
def test_paper_train_only_trains_and_writes_no_report(tmp_path, capsys):
    """`python -m experiments.paper --train-only` (several of them can share a GPU, a last --reuse reports): runs, no
    results.md."""
    sets = ["--set", "p=13", "--set", "task.valid_size=30", "--set", "model.d_model=32", "--set", "model.d_mlp=64",
            "--set", "train.chunk=20"]
    assert paper.main(["--smoke", "--steps", "20", "--roles", "nanda", "--train-only", "--no-progress",
                       "--out", str(tmp_path), *sets]) == 0
    assert (tmp_path / "runs" / "nanda" / "summary.json").is_file() and not (tmp_path / "results.md").exists()
    assert "run again with --reuse" in capsys.readouterr().out


def _unreadable(fig) -> list[str]:
    """What a reviewer would miss in `fig` besides clean text: a heat map (image or mesh) with no labelled colour bar
    for its colour scale, an axis with no label or no ticks, a sparse curve (< plotstyle.SPARSE points) drawn without
    markers."""
    maps = fig.findobj(lambda a: isinstance(a, (matplotlib.image.AxesImage, matplotlib.collections.QuadMesh)))
    bars = [m.colorbar for m in maps if m.colorbar is not None]
    bar_axes = {cb.ax for cb in bars}
    problems = [f"heat map without a colour bar in {m.axes.get_title()!r}" for m in maps
                if not any(cb.mappable.norm is m.norm and cb.mappable.cmap == m.cmap for cb in bars)]
    problems += [f"colour bar without a label beside {cb.mappable.axes.get_title()!r}" for cb in bars
                 if not (cb.ax.get_ylabel() or cb.ax.get_xlabel()).strip()]
    for ax in fig.findobj(matplotlib.axes.Axes):
        if ax in bar_axes or not ax.get_visible() or ax.name == "polar":  # fig. 1's polar scatter: no x or y
            continue
        for name, axis, siblings in (("x", ax.xaxis, ax.get_shared_x_axes()), ("y", ax.yaxis, ax.get_shared_y_axes())):
            if not any(a.get_visible() and getattr(a, f"get_{name}label")() for a in siblings.get_siblings(ax)):
                problems.append(f"no {name} label on {ax.get_title()!r}")
            if len(axis.get_majorticklocs()) == 0:
                problems.append(f"no {name} ticks on {ax.get_title()!r}")
        for line in ax.get_lines():
            n = len(line.get_xdata())
            bare = line.get_marker() in (None, "None", "", " ")
            if line.get_transform() is ax.transData and 2 < n < plotstyle.SPARSE and bare:
                problems.append(f"sparse curve {line.get_label()!r} ({n} points) without markers")
    return problems


def _checking(monkeypatch, found: dict | None = None) -> dict:
    """Figure name -> its problems (layout_problems and _unreadable), for every figure saved from now on."""
    found = {} if found is None else found
    save = plotstyle.save_figure

    def checked(fig, out, name):
        found[name] = plotstyle.layout_problems(fig) + _unreadable(fig)
        return save(fig, out, name)

    for module in (plotstyle, plots, plots_neurons, plots_sequence):
        monkeypatch.setattr(module, "save_figure", checked)
    return found


@pytest.mark.study  # every paper figure of two runs, drawn (make test-studies: make test's 10 minutes)
def test_every_figure_is_readable(drawn, tmp_path, monkeypatch):
    """Every figure draw_all draws (and the sweep's grok_steps.png): no two texts overlap, none is cut off at the
    figure's edge (plotstyle.layout_problems); every heat map has a labelled colour bar, every axis a label and
    ticks, sparse curves their markers."""
    found = dict(CHECKED)  # every figure the drawn fixture's `figures` command saved, checked as it was saved
    assert len(found) == len(list(drawn.glob("*.png"))) > 20
    grok = [{"values": {"optim.lr": lr, "optim.weight_decay": wd}, "grok_steps": [120, None, 300], "mean": 210.0,
             "diverged_at": [None, None, 50]} for lr in (1e-3, 3e-3) for wd in (0.1, 1.0)]
    savefig = matplotlib.figure.Figure.savefig

    def checked_savefig(fig, path, *args, **kw):
        found[f"{Path(path).stem}_{len(found)}"] = plotstyle.layout_problems(fig) + _unreadable(fig)
        return savefig(fig, path, *args, **kw)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", checked_savefig)
    for points in (grok, grok[:1]):
        plot_grok_steps(points, 1000, tmp_path / "grok_steps.png")
    assert {k: v for k, v in found.items() if v} == {}


def test_layout_problems_sees_overlaps_and_cut_off_text():
    fig, ax = matplotlib.pyplot.subplots(figsize=(3, 2))
    ax.set_title("a title far too long to fit in a figure three inches wide, cut off at both ends")
    ax.text(0.5, 0.5, "here", transform=ax.transAxes)
    ax.text(0.5, 0.5, "there", transform=ax.transAxes)
    problems = plotstyle.layout_problems(fig)
    assert any(p.startswith("cut off: 'a title") for p in problems)
    assert any(p.startswith("overlap: 'here'") and "'there'" in p for p in problems)
    matplotlib.pyplot.close(fig)


@pytest.mark.study  # make test-studies: an end-to-end run kept out of make test's 10 minutes
def test_a_sequence_run_gets_only_the_figures_of_its_task(tmp_path, monkeypatch):
    """The book's addition has no input grid: `figures` draws its curves, gradient norms and the book's attention,
    embedding and position figures, not the p = 11 grid illustrations or any figure over the grid (the task
    registry's family decides), and every one is readable."""
    run = tmp_path / "addition"
    train_run(apply_overrides(get_preset("addition-tiny"), ["steps=20", "train.chunk=20", "train.eval_every=10",
                                                             "task.n_train=200", "task.n_valid=50",
                                                             "train.batch_size=64"]), run, progress=False)
    found = _checking(monkeypatch)
    assert main(["figures", str(run), "--out", str(tmp_path / "figures")]) == 0
    stems = ["book_attention_addition", "book_embeddings_addition", "book_positions_addition",
             "fig05_accuracy_addition", "fig06_loss_addition", "fig17_grad_norms_addition"]
    grid = ("fig01_", "fig02_", "fig03_", "fig04_", "fig07_", "fig08_", "fig09_", "fig11_", "fig14_", "fig16_",
            "fig18_", "fig_freq_ablation_", "fig_progress_")  # the grid illustrations and the figures over the grid
    drawn = [p.stem for p in (tmp_path / "figures").glob("*.png")]
    assert_figures(tmp_path / "figures", stems, absent=[s for s in drawn if s.startswith(grid)])
    assert found == dict.fromkeys(drawn, [])


def test_compare_overlays_runs_and_a_sweeps_members_labelled_by_what_differs(runs, tmp_path, monkeypatch):
    """`compare` takes runs and sweeps (a sweep stands for its members), labels each by the settings that differ,
    and draws three readable figures; fewer than two runs, or a path that is not a run, is one error line."""
    from miiii import compare as C

    loaded = [load_run(runs["miiii"]), load_run(runs["basis"])]
    assert C.labels(loaded) == ["variant=none", "variant=basis"]
    assert C.labels([loaded[0], loaded[0]]) == [loaded[0].path.name] * 2  # nothing differs: the directory names
    sweep = tmp_path / "sweep"
    for i, r in enumerate(("miiii", "basis")):
        shutil.copytree(runs[r], sweep / f"member_{i:03d}")
    (sweep / "sweep.json").write_text("{}")
    assert C.expand([sweep, runs["nanda"]]) == [sweep / "member_000", sweep / "member_001", runs["nanda"]]
    found = _checking(monkeypatch)
    monkeypatch.setattr(C, "save_figure", plotstyle.save_figure)  # the checking one
    assert main(["compare", str(sweep), "--out", str(tmp_path / "cmp")]) == 0
    assert {p.name for p in (tmp_path / "cmp").glob("*.png")} == {"compare_loss.png", "compare_accuracy.png",
                                                                   "compare_grok.png", "compare_grokking.png"}
    assert set(found) == {"compare_loss", "compare_accuracy", "compare_grok", "compare_grokking"}
    assert {k: v for k, v in found.items() if v} == {}
    assert main(["compare", str(runs["nanda"])]) == 2  # one run
    assert main(["compare", str(runs["nanda"]), str(tmp_path / "nothing")]) == 2  # not a run


@SLOW
def test_film_and_page_of_a_run(runs, tmp_path, monkeypatch):
    """`film` writes a GIF with a frame per recorded step (up to --frames); a run with too few recorded steps, or a
    file type it cannot write, is one error line and exit 2, nothing written. `page` writes one self-contained file
    with the film in it, or says why there is none."""
    from types import SimpleNamespace

    from PIL import Image

    from miiii import film as F

    run = runs["nanda"]  # W_E recorded at every step
    out = tmp_path / "film.gif"
    assert main(["film", str(run), "--out", str(out), "--frames", "8"]) == 0
    with Image.open(out) as im:
        assert im.n_frames == 8 and im.size[0] > im.size[1] > 100
    steps = F.plan_frames(load_run(run), 8)[1]
    assert steps[0] == 0 and steps[-1] == load_run(run).steps_of("W_E")[-1] and np.all(np.diff(steps) > 0)
    bare = SimpleNamespace(acts={"W_E": np.zeros((3, 2))}, config=load_run(run).config, path=Path("bare"))
    with pytest.raises(ConfigError, match="too few steps for a film.*record.every"):
        F.plan_frames(bare)
    assert main(["film", str(run), "--out", str(tmp_path / "film.avi")]) == 2
    assert not list(tmp_path.glob(".*part*")) and not (tmp_path / "film.avi").exists()
    # the run's page: one self-contained file (images inline, no script, nothing fetched), the film in it
    html_path = tmp_path / "pages" / "run.html"
    assert main(["page", str(run), "--out", str(html_path)]) == 0
    text = html_path.read_text()
    for section in ("Summary", "Curves", "Grok step per task", "Key frequencies of W_E", "Film", "Config", "Files"):
        assert f"<h2>{section}" in text, section
    assert text.count("data:image/png;base64,") == 1 and text.count("data:image/gif;base64,") == 1
    assert "<script" not in text and "http://" not in text and "https://" not in text
    rel = os.path.relpath(run, html_path.parent)
    assert f"href='{rel}/summary.json'" in text  # links to the run's files, relative to the page

    def no_film(*a, **k):
        raise ConfigError("too few steps")

    monkeypatch.setattr(F, "plan_frames", no_film)
    # the film drawn once serves the page: --film embeds that GIF, byte for byte, and draws nothing
    import base64

    assert main(["page", str(run), "--film", str(out), "--out", str(tmp_path / "shared.html")]) == 0
    assert base64.b64encode(out.read_bytes()).decode() in (tmp_path / "shared.html").read_text()
    assert main(["page", str(run), "--film", str(tmp_path / "film.avi"), "--out", str(tmp_path / "x.html")]) == 2
    (tmp_path / "notgif.gif").write_bytes(b"PNG not a gif")
    assert main(["page", str(run), "--film", str(tmp_path / "notgif.gif"), "--out", str(tmp_path / "x.html")]) == 2
    assert main(["page", str(run), "--film", str(out), "--no-film", "--out", str(tmp_path / "x.html")]) == 2
    assert not (tmp_path / "x.html").exists()
    assert main(["page", str(run), "--out", str(tmp_path / "bare.html")]) == 0  # no film: the page says why
    assert "No film: too few steps" in (tmp_path / "bare.html").read_text()
    assert main(["page", str(run), "--out", str(tmp_path / "run.txt")]) == 2
    chromium = next((shutil.which(b) for b in ("chromium", "chromium-browser") if shutil.which(b)), None)
    if chromium:  # rendered by a real browser where one is installed (Debian's chromium)
        import subprocess

        shot = tmp_path / "shot.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                        "--window-size=1200,2000", html_path.as_uri()], capture_output=True, timeout=120)
        with Image.open(shot) as im:
            assert im.size == (1200, 2000) and len(set(im.convert("L").getdata())) > 10  # not a blank page


# ---------------------------------------------------------------- the grokking figure, grok markers, loss units, crops


def _grokked(run, at: dict[int, int]):
    """`run` with task k's validation accuracy 1 at every evaluated step from at[k] on: the tiny runs do not grok in 40
    steps, and a grok marker needs a grok step."""
    from dataclasses import replace

    m = dict(run.metrics)
    va = np.array(m["valid_acc"], np.float64)
    for k, s in at.items():
        late = (m["step"] >= s)[:, None] & np.isfinite(va) & (np.arange(va.shape[1]) == k)
        va[late] = 1.0
    return replace(run, metrics=m | {"valid_acc": va})


def _first_grok(m: dict) -> list:
    """Each task's grok step read straight from the metrics: the first step whose validation accuracy is >= 0.99."""
    va = np.asarray(m["valid_acc"])
    return [int(m["step"][np.flatnonzero(va[:, k] >= 0.99)[0]]) if (va[:, k] >= 0.99).any() else None
            for k in range(va.shape[1])]


def _kept(monkeypatch, *modules) -> dict:
    """Figure name -> its figure (left open), for each figure the modules would save."""
    figs = {}
    for module in modules:
        monkeypatch.setattr(module, "save_figure", lambda fig, out, name: figs.setdefault(name, fig) and [])
    return figs


def _vlines(ax) -> set:
    return {float(ln.get_xdata()[0]) for ln in ax.get_lines() if len(set(np.ravel(ln.get_xdata()))) == 1
            and len(ln.get_xdata()) == 2}


def test_grokking_figure_draws_loss_and_accuracy_on_log_axes_with_every_tasks_grok_step(runs, tmp_path, monkeypatch):
    """fig_grokking: train and validation loss (log-log) and accuracy (log x) on one step axis, a vertical line at
    step + 1 of each task's grok step (read from the metrics here), its step in the legend, the loss unit in the
    label; readable by the layout tests."""
    figs = _kept(monkeypatch, plots)
    for name, unit, at in (("miiii", "cross-entropy / ln q", {0: 20, 2: 31}), ("nanda", "cross-entropy / ln p",
                                                                               {0: 12})):
        run = _grokked(load_run(runs[name]), at)
        plots.fig_grokking(run, tmp_path)
        fig = figs[f"fig_grokking_{name}"]
        a_loss, a_acc = fig.axes[:2]
        assert a_loss.get_xscale() == a_acc.get_xscale() == a_loss.get_yscale() == "log"
        assert a_loss.get_shared_x_axes().joined(a_loss, a_acc)
        assert unit in a_loss.get_ylabel()
        grok = _first_grok(run.metrics)
        assert [g is not None for g in grok] == [k in at for k in range(len(grok))]
        want = {g + 1.0 for g in grok if g is not None}
        assert _vlines(a_loss) == _vlines(a_acc) == want
        legend = " ".join(t.get_text() for t in a_acc.get_legend().get_texts())
        assert all(f"grok step {g:,}" in legend for g in grok if g is not None)
        splits = {t.get_text() for t in a_loss.get_legend().get_texts()}
        assert {"train", "validation"} <= splits and ("test (final)" in splits) == ("test" in run.summary["final"])
        assert plotstyle.layout_problems(fig) + _unreadable(fig) == []
        matplotlib.pyplot.close(fig)


def test_loss_unit_is_named_on_every_loss_axis_and_header(runs, tmp_path, monkeypatch):
    """One unit: summary.json says it, fig06, the progress measures (divided by ln p here too), the frequency ablation
    (bars for one task, not a one-row heat map) and the page's summary table name it."""
    from miiii import page as P
    from miiii.interventions import frequency_ablation

    nanda = load_run(runs["nanda"])
    assert nanda.summary["loss_unit"] == "cross-entropy / ln p"
    assert load_run(runs["miiii"]).summary["loss_unit"] == "cross-entropy / ln q"
    figs = _kept(monkeypatch, plots, plots_neurons)
    plots.fig_curves(nanda, tmp_path, "loss")
    assert all("cross-entropy / ln p" in ax.get_ylabel() for ax in figs["fig06_loss_nanda"].axes)
    steps = np.array([0, 10, 20, 30])
    measures = {k: np.full(4, 2.0) for k in ("train_loss", "test_loss", "restricted_loss", "excluded_loss", "gini")}
    plots_neurons.fig_progress(steps, measures, [1], tmp_path, "x", p=13, grok=20)
    top = figs["fig_progress_x"].axes[0]
    assert "cross-entropy / ln p" in top.get_ylabel() and _vlines(top) == {21.0}
    assert np.allclose(top.get_lines()[0].get_ydata(), 2 / np.log(13))
    ab = frequency_ablation(nanda)
    plots_neurons.fig_frequency_ablation(nanda, ab, tmp_path)
    fig = figs["fig_freq_ablation_nanda"]
    assert not fig.findobj(matplotlib.image.AxesImage) and "cross-entropy / ln p" in fig.axes[0].get_ylabel()
    assert plotstyle.layout_problems(fig) + _unreadable(fig) == []
    matplotlib.pyplot.close("all")
    html_path = P.page(runs["nanda"], tmp_path / "p.html", with_film=False)
    assert "<th>loss (cross-entropy / ln p)</th>" in html_path.read_text()


def test_crop_is_drawn_and_titled_only_where_p_exceeds_it(runs, tmp_path, monkeypatch):
    """figures --crop N: figures 4, 14 and 18 show the top-left N x N when p is larger, and only then say a crop; the
    neurons' spectra are on a log colour scale."""
    run = load_run(runs["nanda"])
    acts = plots_neurons.grid_acts(run)
    figs = _kept(monkeypatch, plots_neurons)
    p = run.config.task.p
    for crop, shown in ((37, p), (0, p), (5, 5)):
        plots_neurons.fig_neurons(run, acts, tmp_path, n=1, crop=crop)
        plots_neurons.fig_attention([(run, acts)], tmp_path, crop=crop)
        fig4, fig18 = figs.pop("fig04_neuron_nanda"), figs.pop("fig18_attention")
        titles = fig4.get_suptitle() + " ".join(s.get_suptitle() for s in fig18.subfigs)
        assert ("crop" in titles) == (shown < p) and (f"{shown} × {shown} crop" in titles) == (shown < p)
        images = fig4.findobj(matplotlib.image.AxesImage)
        assert images[0].get_array().shape == (shown, shown)
        assert isinstance(images[1].norm, matplotlib.colors.LogNorm)  # the |FFT|
        assert fig18.findobj(matplotlib.image.AxesImage)[0].get_array().shape == (shown, shown)
        matplotlib.pyplot.close("all")
    assert main(["figures", str(runs["nanda"]), "--crop", "-1", "--out", str(tmp_path / "f")]) == 2


def test_film_marks_grok_steps_and_gives_neurons_a_colour_bar(runs, monkeypatch):
    """Each frame: the accuracy panel's grok lines, a labelled colour bar (one scale for the film) beside each neuron,
    and no panel showing another step than the frame's title without saying so."""
    from miiii import film as F

    run = _grokked(load_run(runs["nanda"]), {0: 12})
    shown = []
    monkeypatch.setattr(F.plt, "close", lambda fig: shown.append(fig))
    for _ in F.frames(run, 4):  # each frame is seconds of drawing; four span the run (before and after the grok)
        pass
    assert len(shown) == 4
    scale = {}  # neuron panel -> its colour scales over the frames
    for fig in shown:
        step = int(fig.get_suptitle().rsplit("step ", 1)[1])
        images = fig.findobj(matplotlib.image.AxesImage)
        assert images and all(im.colorbar is not None and im.colorbar.ax.get_ylabel() for im in images)
        for im in images:
            scale.setdefault(im.axes.get_title().split(" (")[0], set()).add((im.norm.vmin, im.norm.vmax))
        for ax in fig.axes:
            t = ax.get_title()
            assert "(step " not in t and ("recorded at step" not in t or f"step {step})" not in t)
        acc = [ax for ax in fig.axes if ax.get_title().startswith("validation accuracy")][0]
        assert {g + 1.0 for g in _first_grok(run.metrics) if g is not None} <= _vlines(acc)
    assert len(scale) == 3 and all(len(v) == 1 for v in scale.values())  # one scale per neuron for the whole film
    matplotlib.pyplot.close("all")


def test_grok_step_axes_are_log_only_over_a_decade(tmp_path, monkeypatch):
    """grok_steps.png (and compare_grok through plotstyle.log_or_linear): linear over 1,000-1,500, log over more."""
    scales = []
    savefig = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, path, *a, **k:
                        scales.append(fig.axes[0].get_yscale()) or savefig(fig, path, *a, **k))
    for grok, steps in (([1000, 1200, None], 1500), ([50, 1200, None], 1500)):
        plot_grok_steps([{"values": {}, "grok_steps": grok, "mean": None}], steps, tmp_path / "g.png")
    assert scales == ["linear", "log"]
    fig, ax = matplotlib.pyplot.subplots()
    plotstyle.log_or_linear(ax, [1000, 1500])
    assert ax.get_yscale() == "linear"
    plotstyle.log_or_linear(ax, [10, 1500])
    assert ax.get_yscale() == "log"
    matplotlib.pyplot.close(fig)


def test_the_figure_registry_is_well_formed():
    """Every FIGURES entry has a unique name and a scope draw_all knows; the paper's figures are all in it."""
    from miiii import plots

    names = [f.name for f in plots.FIGURES]
    assert len(set(names)) == len(names) and {f.scope for f in plots.FIGURES} <= set(plots.SCOPES)
    assert {"grokking", "neurons", "attention", "positional", "singular_values"} <= set(names)


def test_the_films_neuron_titles_are_the_models_indices():
    """A recording keeps some neurons (record.neurons): the film names each by the model's index, as fig14 and
    run_with_cache do, not by its place in the recording."""
    from types import SimpleNamespace

    from miiii.film import model_neuron

    assert model_neuron(SimpleNamespace(acts_index={"neurons": [5, 9, 11]}), 1) == 9
    assert model_neuron(SimpleNamespace(acts_index={}), 1) == 1


def test_the_film_shows_the_llc_when_the_run_has_one(runs, monkeypatch):
    """With RUN/llc.json (`python -m miiii llc`) each frame gains the λ̂ panel, cursor at the frame's step."""
    from miiii import film as F

    run = load_run(runs["nanda"])
    plain = next(F.frames(run, 8))
    last = int(F.plan_frames(run, 8)[1][-1])
    report = {"steps": [0, last // 2, last], "llc": [1.0, 5.0, 3.0], "llc_std": [0.1, 0.2, 0.1]}
    monkeypatch.setattr(F, "read_llc_report", lambda path: report)
    drawn = []
    monkeypatch.setattr(F, "_llc", lambda ax, r, step: drawn.append((r, step)))
    with_llc = next(F.frames(run, 8))  # the first frame: one more panel, drawn at the frame's step
    assert with_llc.shape[0] == plain.shape[0] and with_llc.shape[1] > plain.shape[1]
    assert drawn == [(report, int(F.plan_frames(run, 8)[1][0]))]
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    monkeypatch.undo()
    F._llc(ax, report, last // 2)  # the kept steps up to the frame's dark, the rest pale, a line at step + 1
    dark = [c for c in ax.containers if c.lines[0].get_color() == "k"][0]
    assert list(dark.lines[0].get_xdata()) == [1, last // 2 + 1] and ax.lines[-1].get_xdata()[0] == last // 2 + 1
    plt.close(fig)
