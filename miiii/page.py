"""A run on one page: `python -m miiii page RUN --out FILE.html` writes one self-contained HTML file (images inline as
data URIs, no script, no network): the config and provenance, the summary, loss and accuracy curves, the grok step
of every task, the embedding's key frequencies (grid tasks), the film (`film.py`, when the run recorded enough steps)
and links to the run's files. Reads the run directory only (no jax).
"""

from __future__ import annotations

import base64
import html
import io
import os
import tempfile
from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.config import ConfigError
from miiii.files import write_text_atomic
from miiii.plotstyle import OKABE_ITO, grok_heading, grok_lines, markers, plt, task_grok
from miiii.run import Run, load_run
from miiii.rundir import flatten_params
from miiii.tasks import loss_unit

PAGE_FRAMES = 30  # the page's film: enough to see grokking, small enough to inline
STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
         "img{max-width:100%}h2{border-bottom:1px solid #ddd;margin-top:1.6em}code{background:#f4f4f4}")


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _table(rows, head=None) -> str:
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    top = "<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>" if head else ""
    return f"<table>{top}{cells}</table>"


def curves(m: dict, unit: str = "loss") -> str:
    """Loss (log-log, in the run's `unit`) and per-task validation accuracy, each task's grok step dotted on both."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4), sharex=True, layout="constrained")
    ok = np.isfinite(m["valid_loss"]).all(-1)
    x = m["step"] + 1
    a.plot(x, np.nanmean(m["train_loss"], -1), color=OKABE_ITO[0], label="train")
    a.plot(x[ok], np.nanmean(m["valid_loss"][ok], -1), color=OKABE_ITO[1], label="valid", **markers(int(ok.sum())))
    va = m["valid_acc"][ok]
    colours = [plt.cm.viridis(j / max(va.shape[1] - 1, 1)) for j in range(va.shape[1])]
    grok = grok_so_far(m)
    grok_lines(a, grok, colours, legend=False)
    a.set(xscale="log", yscale="log", xlabel="step + 1 (log)", ylabel=f"loss (mean over tasks, log)\n{unit}",
          title="loss; dotted: each task's grok step")
    a.legend(frameon=False)
    for j, c in enumerate(colours):
        b.plot(x[ok], va[:, j], color=c, lw=0.8)
    grok_lines(b, grok, colours, legend=False)
    b.set(xscale="log", ylim=(-0.02, 1.02), xlabel="step + 1 (log)", ylabel="valid accuracy",
          title=f"validation accuracy per task ({va.shape[1]})\n{grok_heading(grok)}")
    return _png(fig)


def key_frequencies(run: Run) -> list[int]:
    """The frequencies of the final W_E above mean + 2 std of the non-constant ones (the figures' definition)."""
    norms = A.freq_norms(np.asarray(run.params["W_E"][: run.config.task.p], np.float64))
    return [int(k) for k in np.flatnonzero(A.active_frequencies(norms))]


def headline(run: Run) -> str:
    """'task: N steps (of M), P parameters, W s on BACKEND': what the summary holds, and for a sweep member or an
    unfinished run (whose summary lacks some of it) what its metrics and parameters say."""
    s, cfg = run.summary, run.config
    m = run.metrics_so_far
    done = int(np.max(m["step"])) + 1 if len(m.get("step", ())) else 0
    steps = s.get("steps", done)
    text = f"{cfg.task.name}: {steps:,} steps" + ("" if steps == cfg.train.steps else f" of {cfg.train.steps:,}")
    n_params = s.get("n_params") or sum(a.size for a in flatten_params(run.params).values())
    if n_params:
        text += f", {n_params:,} parameters"
    if "wall_s" in s:
        text += f", {s['wall_s']:.1f} s"
    return text + (f" on {s['backend']}" if s.get("backend") else "") + "."


def grok_so_far(m: dict) -> dict:
    """{task: grok step or None} from the metrics written so far (a run whose summary.json is not written yet)."""
    return task_grok(m)


def read_gif(path: Path) -> bytes:
    """A film already drawn (`film --out X.gif`), checked to be a GIF before anything is written."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--film {path}: no such file (draw it with python -m miiii film RUN_DIR --out {path})")
    data = path.read_bytes()
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        raise ConfigError(f"--film {path}: not a GIF (a page embeds the film's .gif)")
    return data


def page(run_dir: Path, out: Path, with_film: bool = True, film_gif: Path | None = None) -> Path:
    """Write the page and return its path (the whole file or nothing: written atomically). `film_gif`: embed that
    film instead of drawing one (a film drawn once serves the page too)."""
    out = Path(out)
    if out.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {out}: a page is an .html file")
    given = read_gif(film_gif) if film_gif is not None else None
    run = load_run(run_dir)
    s, cfg = run.summary, run.config
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(run.path.name)}</title>"
             f"<style>{STYLE}</style></head><body><h1>{html.escape(run.path.name)}</h1>",
             f"<p>{html.escape(headline(run))}</p>"]
    final = s.get("final", {})
    unit = loss_unit(cfg.task.name, cfg.train.loss)  # of every loss the run reports
    rows = [(split, f"{final[split]['loss']:.4f}", f"{np.mean(final[split]['task_acc']):.4f}",
             f"{np.min(final[split]['task_acc']):.4f}") for split in ("train", "valid", "test") if split in final]
    parts += ["<h2>Summary</h2>", _table(rows, ("split", f"loss ({unit})", "accuracy (mean over tasks)", "lowest task"))
              if rows else "<p>No final evaluation yet: the run has not finished.</p>"]
    m = run.metrics_so_far
    drawn = f"<img alt='loss and accuracy curves' src='{curves(m, unit)}'>" if len(m.get("step", ())) else None
    parts += ["<h2>Curves</h2>", drawn or "<p>No metrics written yet.</p>"]
    grok = s.get("grok_step") or grok_so_far(m)
    done = sum(v is not None for v in grok.values())
    parts += [f"<h2>Grok step per task ({done}/{len(grok)} grokked: validation accuracy ≥ 0.99)</h2>",
              _table([(k, "–" if v is None else f"{v:,}") for k, v in grok.items()], ("task", "grok step"))]
    if not cfg.task.is_sequence and "W_E" not in run.params:
        parts += ["<h2>Key frequencies of W_E</h2>", "<p>No final parameters yet: the run has not finished.</p>"]
    elif not cfg.task.is_sequence:
        keys = key_frequencies(run)
        parts += ["<h2>Key frequencies of W_E</h2>",
                  f"<p>Above mean + 2 std of the non-constant frequencies' norms: {', '.join(map(str, keys)) or '–'}"
                  "</p>"]
    from miiii.plots import draw_llc

    llc = draw_llc(run)  # `python -m miiii llc RUN` wrote llc.json
    if llc is not None:
        parts += ["<h2>Local learning coefficient</h2>", f"<img alt='LLC over training' src='{_png(llc)}'>"]
    if given is not None:
        src = "data:image/gif;base64," + base64.b64encode(given).decode()
        parts += ["<h2>Film</h2>", f"<img alt='the run over its recorded steps' src='{src}'>"]
    elif with_film:
        from miiii.film import film

        try:
            with tempfile.TemporaryDirectory() as tmp:
                gif = film(run.path, Path(tmp) / "film.gif", max_frames=PAGE_FRAMES)
                src = "data:image/gif;base64," + base64.b64encode(gif.read_bytes()).decode()
            parts += ["<h2>Film</h2>", f"<img alt='the run over its recorded steps' src='{src}'>"]
        except ConfigError as e:
            parts += ["<h2>Film</h2>", f"<p>No film: {html.escape(str(e))}</p>"]
    parts += ["<h2>Config</h2>", _table([(f"{sec}.{k}", v) for sec, d in cfg.to_dict().items() for k, v in d.items()],
                                        ("key", "value"))]
    prov = {k: s[k] for k in ("device", "backend", "jax", "precision", "commit", "git_commit") if k in s}
    if prov:
        parts += ["<h2>Provenance</h2>", _table(prov.items(), ("what", "value"))]
    rel = os.path.relpath(run.path.resolve(), out.resolve().parent)
    files = sorted(p.name for p in run.path.iterdir())
    parts += ["<h2>Files</h2><ul>" + "".join(f"<li><a href='{html.escape(rel)}/{html.escape(f)}'>{html.escape(f)}"
                                              "</a></li>" for f in files) + "</ul>", "</body></html>"]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, "\n".join(parts) + "\n")
    return out
