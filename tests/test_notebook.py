"""examples/grokking.ipynb is its jupytext twin examples/grokking.py, cell for cell and without outputs (make test,
no jupytext needed; with jupytext, exactly as jupytext writes it), and it runs end to end in a fresh kernel, saying
what the run did: it grokked, the checkpoint after the grok step generalises and the one before does not, a few
frequencies carry the grokked model, the sweep's comparison is drawn (make test-notebook: the `notebook` extra)."""

from __future__ import annotations

import json
import re

import pytest
from _runhelp import ROOT

NOTEBOOK, SCRIPT = ROOT / "examples" / "grokking.ipynb", ROOT / "examples" / "grokking.py"


def percent_cells(text: str) -> list[tuple[str, str]]:
    """(cell type, source) of each cell of a jupytext percent-format file without magics: `# %%` opens a code cell,
    `# %% [markdown]` a markdown one (its lines commented); the header and the blank lines between cells are not
    part of any cell."""
    lines = text.splitlines()
    if lines and lines[0] == "# ---":
        lines = lines[lines.index("# ---", 1) + 1:]
    cells: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            cells[-1][1].append(line)
    out = []
    for kind, body in cells:
        while body and not body[-1].strip():
            body.pop()
        if kind == "markdown":
            body = [line[2:] if line.startswith("# ") else line.removeprefix("#") for line in body]
        out.append((kind, "\n".join(body)))
    return out


def notebook_cells(nb: dict) -> list[tuple[str, str]]:
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def test_the_notebook_is_its_py_file_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    assert notebook_cells(nb) == percent_cells(SCRIPT.read_text()), (
        "examples/grokking.ipynb and examples/grokking.py differ: run `jupytext --sync examples/grokking.py` "
        "(the notebook extra) after editing the .py")
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(code) >= 6 and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert nb["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"


@pytest.mark.notebook
def test_jupytext_writes_the_committed_notebook():
    jupytext = pytest.importorskip("jupytext", reason="the notebook extra: make test-notebook")
    written = json.loads(jupytext.writes(jupytext.read(SCRIPT), fmt="ipynb"))
    committed = json.loads(NOTEBOOK.read_text())
    assert notebook_cells(written) == notebook_cells(committed)
    assert written["metadata"] == committed["metadata"]


def stdout(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream" and o.name == "stdout")


@pytest.mark.notebook
def test_the_notebook_trains_groks_ablates_and_compares(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="the notebook extra: make test-notebook")
    nbclient = pytest.importorskip("nbclient", reason="the notebook extra: make test-notebook")
    out = tmp_path / "nb"
    monkeypatch.setenv("MIIII_NOTEBOOK_OUT", str(out))  # the kernel inherits it; the compile cache's too (conftest)
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()  # raises on a failing cell
    text = stdout(nb)

    grok = int(re.search(r"^grok step: (\d+)$", text, re.M).group(1))  # None would not match: it did not grok
    assert int(re.search(r"validation accuracy in metrics\.jsonl: (\d+)", text).group(1)) == grok  # pandas agrees
    ckpt = {m[0]: (int(m[1]), float(m[2]), float(m[3])) for m in re.findall(
        r"^(pre|post)-grok checkpoint: step (\d+), validation accuracy ([\d.]+) \(logged in training: ([\d.]+)\)$",
        text, re.M)}
    (pre, pre_acc, pre_logged), (post, post_acc, post_logged) = ckpt["pre"], ckpt["post"]
    assert pre < grok <= post and post_acc >= 0.99 > pre_acc
    # the restored checkpoints are the ones training measured (its own forward pass: an input's argmax may differ)
    assert pre_acc == pytest.approx(pre_logged, abs=1e-3) and post_acc == pytest.approx(post_logged, abs=1e-3)

    p = 59  # nanda-cpu
    keys = json.loads(re.search(r"^key frequencies \(ablation, post-grok\): (\[.*\])$", text, re.M).group(1))
    assert 1 <= len(keys) <= p // 4 and all(1 <= k <= p // 2 for k in keys)  # a few of the 29 carry it
    base, top, worst = re.search(r"^post-grok loss (\S+); without frequency (\d+): (\S+)$", text, re.M).groups()
    assert int(top) in keys and float(worst) >= 10 * float(base)
    assert re.search(r"^key frequencies \(neurons, post-grok\): \[[\d, ]*\]$", text, re.M)

    figures = out / "figures"
    assert (figures / "fig_grokking_nanda-cpu.png").stat().st_size > 1000
    assert (figures / "freq_ablation.png").stat().st_size > 1000
    assert all((figures / f"compare_{n}.png").stat().st_size > 1000 for n in ("grokking", "loss", "accuracy", "grok"))
    rows = (out / "sweep" / "members.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("member,seed")  # a header and the two seeds
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    tables = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "text/html" in o.get("data", {})]
    assert len(images) == 3 and len(tables) >= 2  # the figures shown; metrics.jsonl's rows and members.csv
