"""Grokking as a film: `python -m miiii film RUN --out FILE.gif` animates a run over its recorded steps, frames in log
time. Each frame: the token embedding's Fourier spectrum (grid tasks; recorded `W_E`), the most active MLP neurons
over the (x0, x1) grid (grid tasks; recorded `blocks.0.mlp.hook_post` over `record.inputs=grid`) or the attention
of each layer on the first probe (the book's tasks; recorded `blocks.{i}.attn.hook_pattern`), and the per-task
validation accuracy with a marker at the frame's step; with the local learning coefficient (`python -m miiii llc
RUN`, RUN/llc.json) between them. Pillow (a matplotlib dependency) writes the GIF; an `.mp4`
needs ffmpeg on the PATH. Reads the run directory only (no jax).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from miiii import analysis as A
from miiii.config import ConfigError
from miiii.plots_neurons import top_neurons
from miiii.plotstyle import OKABE_ITO, colorbar, grok_heading, grok_lines, plt, run_title, sample_steps, task_grok
from miiii.run import Run, load_run
from miiii.rundir import read_llc_report

NEURONS = "blocks.0.mlp.hook_post"
MIN_FRAMES = 8  # fewer recorded steps than this is a slide show, not a film
MAX_FRAMES = 60
SHOWN_NEURONS = 3
RECORD_HINT = ("record a per-step quantity at enough steps, e.g. `--set record.acts=blocks.0.mlp.hook_post --set "
               "record.params=W_E --set record.inputs=grid --set record.every=STEPS/40` (grid tasks), or "
               "`--set record.acts=blocks.0.attn.hook_pattern --set record.inputs=probes` (the book's tasks), or "
               "`--set record.log=40` for log-spaced rows")


def _nearest_row(steps: np.ndarray, step: int) -> int:
    """The last recorded row at or before `step` (the first row if none)."""
    return max(int(np.searchsorted(steps, step, side="right")) - 1, 0)


def plan_frames(run: Run, max_frames: int = MAX_FRAMES) -> tuple[str, np.ndarray]:
    """(the recorded array whose steps set the frames, the frames' steps, log-spaced): the steps every shown array
    recorded when there are MIN_FRAMES of them, so each panel shows the frame's own step (parameters are often
    recorded more often than activations), else the steps of the array with the most rows; a ConfigError that says
    which `record.*` settings make a film when the run recorded too few steps."""
    heads = [k for k in run.acts if k.endswith("attn.hook_pattern")]
    candidates = [NEURONS, "W_E", *sorted(heads)] if not run.config.task.is_sequence else sorted(heads)
    have = [(len(run.acts[k]), k) for k in candidates if k in run.acts]
    if not have or max(have)[0] < MIN_FRAMES:
        got = ", ".join(f"{k}: {n} rows" for n, k in have) or "nothing a film shows"
        raise ConfigError(f"{run.path} recorded too few steps for a film ({got}; at least {MIN_FRAMES} needed): "
                          + RECORD_HINT)
    n, key = max(have)
    steps = np.asarray(run.steps_of(key))
    common = steps
    for _, k in have:
        common = np.intersect1d(common, run.steps_of(k))
    steps = common if len(common) >= MIN_FRAMES else steps
    return key, steps[sample_steps(len(steps), max_frames, log=True)]


def _at(step: int, recorded: int) -> str:
    """A panel's step: said only where its recording's nearest row is not the frame's step."""
    return "" if recorded == step else f" (recorded at step {recorded})"


def _spectrum(ax, run: Run, step: int, top: float) -> None:
    p = run.config.task.p
    steps = run.steps_of("W_E")
    row = _nearest_row(steps, step)
    norms = A.freq_norms(np.asarray(run.acts["W_E"][row][:p], np.float64))[1:]
    k = np.arange(1, len(norms) + 1)
    ax.bar(k, norms, color=OKABE_ITO[0], width=0.9)
    ax.set(ylim=(0, top), xlabel="frequency k", ylabel="norm of W_E's component",
           title=f"W_E's Fourier spectrum{_at(step, int(steps[row]))}")


def model_neuron(run: Run, j: int) -> int:
    """The model's index of the recording's j-th neuron (record.neurons keeps a subset): the number fig14 and
    run_with_cache use for the same neuron."""
    kept = run.acts_index.get("neurons")
    return int(kept[j]) if kept else j


def _neurons(axes, run: Run, step: int, which: np.ndarray, tops: np.ndarray) -> None:
    """Each shown neuron over the grid on one colour scale for the whole film, 0 to `tops[i]`: a neuron that grows
    brightens instead of every frame being rescaled to its own maximum."""
    p = run.config.task.p
    steps = run.steps_of(NEURONS)
    row = _nearest_row(steps, step)
    acts = np.asarray(run.acts[NEURONS][row], np.float64)  # (p*p, N)
    for ax, j, top in zip(axes, which, tops, strict=True):
        grid = A.to_grid(acts[:, j], p)
        im = ax.imshow(grid.T, cmap="viridis", origin="lower", interpolation="nearest", vmin=0, vmax=top)  # post-ReLU
        ax.set(xlabel="x0", ylabel="x1", title=f"neuron {model_neuron(run, int(j))}{_at(step, int(steps[row]))}")
        colorbar(im, ax, "activation (post-ReLU)")


def _attention(axes, run: Run, step: int, heads: list[str]) -> None:
    for ax, name in zip(axes, heads, strict=True):
        steps = run.steps_of(name)
        row = _nearest_row(steps, step)
        pat = np.asarray(run.acts[name][row], np.float64)[0, 0]  # the first probe, the first head: (query, key)
        ax.imshow(pat, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
        ax.set(xlabel="key position", ylabel="query position",
               title=f"{name.split('.attn')[0]} attention{_at(step, int(steps[row]))}")


def _accuracy(ax, run: Run, step: int) -> None:
    m = run.metrics
    va = np.asarray(m["valid_acc"], np.float64)
    ok = np.isfinite(va).all(-1)
    x = m["step"][ok] + 1
    colours = [plt.cm.viridis(j / max(va.shape[1] - 1, 1)) for j in range(va.shape[1])]
    for j, c in enumerate(colours):
        ax.plot(x, va[ok, j], color=c, lw=0.8)
    grok_lines(ax, task_grok(m), colours, legend=False)  # each task's grok step, dotted
    ax.axvline(step + 1, color="k", lw=1)
    ax.set(xscale="log", ylim=(-0.02, 1.02), xlabel="step + 1 (log)", ylabel="valid accuracy per task",
           title=f"validation accuracy; dotted: grok\n{grok_heading(task_grok(m))}")


def _llc(ax, report: dict, step: int) -> None:
    """λ̂ at the run's kept steps (llc.json), the ones up to the frame's step dark, the rest pale."""
    steps, llc, sd = (np.asarray(report[k], np.float64) for k in ("steps", "llc", "llc_std"))
    done = steps <= step
    ax.errorbar(steps + 1, llc, yerr=sd, color="0.75", lw=1, capsize=2)
    ax.errorbar(steps[done] + 1, llc[done], yerr=sd[done], color="k", lw=1.5, capsize=2)
    ax.axvline(step + 1, color="k", lw=1)
    ax.set(xscale="log", xlabel="step + 1 (log)", ylabel="λ̂",
           title="local learning coefficient\n(kept steps; ± chains)")


def frames(run: Run, max_frames: int = MAX_FRAMES):
    """Each frame as an RGB array (H, W, 3), in step order."""
    _, steps = plan_frames(run, max_frames)
    grid = not run.config.task.is_sequence
    heads = sorted(k for k in run.acts if k.endswith("attn.hook_pattern"))[:2]
    panels = []
    if grid and "W_E" in run.acts:
        panels.append("spectrum")
        p = run.config.task.p
        top = max(float(A.freq_norms(np.asarray(run.acts["W_E"][i][:p], np.float64))[1:].max())
                  for i in sample_steps(len(run.acts["W_E"]), 20, log=True)) * 1.05
    if grid and NEURONS in run.acts and run.acts_index.get("inputs", {}).get("kind") == "grid":
        panels += ["neuron"] * SHOWN_NEURONS
        which = top_neurons(np.asarray(run.acts[NEURONS][-1], np.float64), SHOWN_NEURONS)
        rows = {_nearest_row(run.steps_of(NEURONS), int(s)) for s in steps}  # the rows the frames show
        tops = np.max([np.asarray(run.acts[NEURONS][i][:, which], np.float64).max(0) for i in rows], axis=0)
        tops = np.where(tops > 0, tops, 1.0)
    elif heads:
        panels += ["attention"] * len(heads)
    llc = read_llc_report(run.path)
    if llc is not None:
        panels.append("llc")
    panels.append("accuracy")
    for step in steps:
        fig, axes = plt.subplots(1, len(panels), figsize=(3.1 * len(panels), 3.0), layout="constrained")
        axes = np.atleast_1d(axes)
        i = 0
        if panels[0] == "spectrum":
            _spectrum(axes[0], run, int(step), top)
            i = 1
        if "neuron" in panels:
            _neurons(axes[i:i + SHOWN_NEURONS], run, int(step), which, tops)
        elif "attention" in panels:
            _attention(axes[i:i + len(heads)], run, int(step), heads)
        if llc is not None:
            _llc(axes[-2], llc, int(step))
        _accuracy(axes[-1], run, int(step))
        fig.suptitle(f"{run_title(run)}: step {int(step)}", fontsize=10)
        fig.canvas.draw()
        yield np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
        plt.close(fig)


def film(run_dir: Path, out: Path, fps: float = 8.0, max_frames: int = MAX_FRAMES) -> Path:
    """Write the film (GIF, or MP4 with ffmpeg on the PATH) and return its path; checks everything before writing."""
    out = Path(out)
    if out.suffix.lower() not in (".gif", ".mp4"):
        raise ConfigError(f"--out {out}: a film is a .gif or an .mp4")
    if out.suffix.lower() == ".mp4" and shutil.which("ffmpeg") is None:
        raise ConfigError("an .mp4 needs ffmpeg on the PATH (not found); write a .gif instead")
    check_rate(fps, max_frames)
    run = load_run(run_dir)
    plan_frames(run, max_frames)  # too few recorded steps: one error line before anything is drawn
    images = frames(run, max_frames)  # drawn one at a time, each handed to the writer as it comes
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.part{out.suffix}")
    try:
        if out.suffix.lower() == ".gif":
            from PIL import Image

            first = Image.fromarray(next(images))
            first.save(tmp, save_all=True, append_images=(Image.fromarray(a) for a in images),
                       duration=round(1000 / fps), loop=0, optimize=True)
        else:
            import subprocess

            a = next(images)
            h, w, _ = a.shape
            cmd = ["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
                   "-r", f"{fps:g}", "-i", "-", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2", "-pix_fmt", "yuv420p",
                   str(tmp)]
            with subprocess.Popen(cmd, stdin=subprocess.PIPE) as proc:
                for frame in _chain(a, images):
                    proc.stdin.write(frame.tobytes())
                proc.stdin.close()
            if proc.returncode:
                raise ConfigError(f"ffmpeg failed (exit {proc.returncode}) writing {out}")
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _chain(first, rest):
    yield first
    yield from rest


FRAMES_CAP = 500  # frames held by the GIF writer (about 1 MB each once paletted): a bound on memory and time
FPS_RANGE = (0.1, 100.0)  # a GIF frame lasts whole milliseconds: 100 fps is 10 ms, 0.1 fps 10 s


def check_rate(fps: float, max_frames: int) -> None:
    """--fps finite within FPS_RANGE, --frames 2 .. FRAMES_CAP: refused before anything is read or drawn."""
    if not (FPS_RANGE[0] <= fps <= FPS_RANGE[1]):  # NaN fails both comparisons
        raise ConfigError(f"--fps must be between {FPS_RANGE[0]:g} and {FPS_RANGE[1]:g}, got {fps!r}")
    if not 2 <= max_frames <= FRAMES_CAP:
        raise ConfigError(f"--frames must be 2 .. {FRAMES_CAP}, got {max_frames:,}")
