"""What a finished sweep writes beside its members' run directories: `members.csv` (one row per member) and
`grok_steps.png` (each member's grokking step per grid point); the grid points' summary and the members marked
diverged. Plain numpy and matplotlib over the sweep's rows.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

MEMBER_COLUMNS = ("member", "seed", "train_acc", "valid_acc", "train_loss", "valid_loss", "loss_unit", "grok_step",
                  "diverged_at")


def member_rows(rows: list[dict], keys: list[str]) -> list[dict]:
    """One row per member: its seed, every grid key's value, its final (after the last update) train / valid
    accuracy (mean over tasks) and loss, the unit of that loss (summary.json's `loss_unit`), the step every task had
    grokked by (empty: not all did) and the step it diverged at (empty: it did not)."""
    out = []
    for r in rows:
        f = r["final"]
        row = {"member": r["member"], "seed": r["seed"]} | {k: r["values"][k] for k in keys}
        row |= {f"{split}_acc": round(float(np.mean(f[split]["task_acc"])), 6) for split in ("train", "valid")}
        row |= {f"{split}_loss": round(float(f[split]["loss"]), 6) for split in ("train", "valid")}
        row |= {"loss_unit": r.get("loss_unit", ""), "grok_step": r["grok_step_all"], "diverged_at": r["diverged_at"]}
        out.append(row)
    return out


def members_csv(rows: list[dict], keys: list[str]) -> str:
    """OUT/members.csv: `member_rows` with a header (pandas.read_csv or csv.DictReader read it)."""
    import csv
    import io

    table = member_rows(rows, keys)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[*MEMBER_COLUMNS[:2], *keys, *MEMBER_COLUMNS[2:]], lineterminator="\n")
    w.writeheader()
    for row in table:
        w.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def point_label(values: dict) -> str:
    """A grid point as `lr=0.001, weight_decay=1` ("seeds" without a grid)."""
    return ", ".join(f"{k.split('.')[1]}={v:g}" for k, v in values.items()) or "seeds"


def plot_grok_steps(points: list[dict], steps: int, path: Path) -> None:

    import sys

    import matplotlib

    if "ipykernel" not in sys.modules:  # as plotstyle.file_backend (below it in the layers): a notebook keeps its own
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(max(5.5, 1.5 * len(points) + 3), 3.8), layout="constrained")
    for i, pt in enumerate(points):
        ys = [g if g is not None else steps for g in pt["grok_steps"]]
        xs = i + np.linspace(-0.15, 0.15, len(ys)) if len(ys) > 1 else [i]
        never = [g is None for g in pt["grok_steps"]]
        gone = np.array([d is not None for d in pt.get("diverged_at", [None] * len(ys))])
        colors = np.array(["#d55e00" if nv else "#0072b2" for nv in never])
        xs, ys = np.asarray(xs, float), np.asarray(ys, float)
        ax.scatter(xs[~gone], ys[~gone], c=colors[~gone], s=18, zorder=3)
        if gone.any():
            ax.scatter(xs[gone], ys[gone], c="k", marker="x", s=24, zorder=3)
        if pt["mean"] is not None:
            ax.hlines(pt["mean"], i - 0.3, i + 0.3, color="k", lw=1.5)
    labels = [point_label(pt["values"]).replace(", ", "\n") for pt in points]  # a value a line: none runs into the next
    ax.set_xticks(range(len(points)), labels, fontsize=8)
    ax.set_xlim(-0.5, len(points) - 0.5)
    ax.set_xlabel("sweep point")
    ax.set_ylabel("grokking step\n(all tasks ≥ 0.99 valid acc)")
    shown = [y for pt in points for y in pt["grok_steps"] if y] + [steps]
    log = min(shown) * 10 <= max(shown)  # a log axis over less than a decade (1,000-1,500) shows one tick label
    ax.set_yscale("log" if log else "linear")
    ax.axhline(steps, color="#d55e00", ls=":", lw=1)
    ax.set_title("grokking step per member")
    key = [Line2D([], [], color="#0072b2", marker="o", ls="", label="grokked"),
           Line2D([], [], color="#d55e00", marker="o", ls="", label=f"not grokked by step {steps:,} (dotted)"),
           Line2D([], [], color="k", marker="x", ls="", label="diverged"),
           Line2D([], [], color="k", lw=1.5, label="mean")]
    fig.legend(handles=key, loc="outside right upper", fontsize=8, frameon=False)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def summary_lines(res: dict, keys: list[str], out: Path, joined) -> list[str]:
    """What `python -m miiii sweep` prints at the end: where the sweep is, each grid point's grokking, and the
    members' table (members.csv)."""
    where = f", {res['n_processes']} processes" if joined else ""
    lines = [f"sweep directory: {out}  ({res['n_members']} members on {res['n_devices']} device(s){where}, "
             f"{res['wall_s']:.1f} s" + (f" for steps {res['resumed_from']:,} on" if res.get("resumed_from") else "")
             + f", {res['member_steps_per_s']} member-steps/s)"]
    for pt in res["points"]:
        label = point_label(pt["values"])
        mean = f"{pt['mean']:.0f}" if pt["mean"] is not None else "-"
        std = f" ± {pt['std']:.0f}" if pt["std"] is not None else ""
        gone = [d for d in pt["diverged_at"] if d is not None]
        diverged = (f", diverged {len(gone)}/{len(pt['grok_steps'])} (at step {', '.join(map(str, gone))})"
                    if gone else "")
        lines.append(f"  {label}: grokked {pt['n_grokked']}/{len(pt['grok_steps'])}{diverged}, grokking step "
                     f"{mean}{std}")
    spread = res.get("split_spread")
    if spread is not None:
        show = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
        lines.append(f"  grok step spread: from the init seed (std within a split, mean over {spread['n_within']}) "
                     f"{show(spread['within_split'])}; from the split (std of {spread['n_splits']} splits' means) "
                     f"{show(spread['between_splits'])}")
    table = member_rows(res["members"], keys)
    cols = list(table[0]) if table else []
    cells = [[("-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)) for v in r.values()] for r in table]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    lines.append(f"members ({out / 'members.csv'}):")
    lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in [cols, *cells]]
    return lines


SPLIT = "task.split_seed"


def split_spread(rows: list[dict]) -> dict | None:
    """Where the grid sweeps the split: the spread of the grok step (every task) from the init seed, within a split
    (the std over its seeds, averaged over the splits with two grokked seeds or more), beside the spread from the
    split (the std of the splits' means, the other grid values held). None without a split axis."""
    if not rows or SPLIT not in rows[0]["values"]:
        return None
    groups: dict = {}
    for r in rows:
        if r["grok_step_all"] is not None:
            groups.setdefault(tuple(r["values"].items()), []).append(r["grok_step_all"])
    within = [float(np.std(g)) for g in groups.values() if len(g) > 1]
    means: dict = {}
    for values, g in groups.items():
        means.setdefault(tuple((k, v) for k, v in values if k != SPLIT), []).append(float(np.mean(g)))
    between = [float(np.std(m)) for m in means.values() if len(m) > 1]
    return dict(within_split=float(np.mean(within)) if within else None, n_within=len(within),
                between_splits=float(np.mean(between)) if between else None,
                n_splits=max((len(m) for m in means.values()), default=0))


def grid_points(rows: list[dict]) -> list[dict]:
    """Each grid point's members: their grokking steps, how many grokked and diverged, mean and spread."""
    points = []
    for combo, group in itertools.groupby(rows, key=lambda r: tuple(r["values"].items())):
        group = list(group)
        g = [r["grok_step_all"] for r in group]
        done_g = [x for x in g if x is not None]
        gone = [r["diverged_at"] for r in group]
        points.append(dict(values=dict(combo), grok_steps=g, n_grokked=len(done_g), diverged_at=gone,
                           n_diverged=sum(d is not None for d in gone),
                           mean=float(np.mean(done_g)) if done_g else None,
                           std=float(np.std(done_g)) if len(done_g) > 1 else None))
    return points


DIVERGENCE_SIGNALS = ("loss", "weight_norm_total", "max_logit")  # per-step scalars, computed at every step


def mark_diverged(hist: dict, diverged: np.ndarray, start: int, stop: int) -> list[int]:
    """After steps [start, stop) reached `hist` (metric -> (members, steps, ...)): a member whose loss, parameters
    (their total norm) or logits (the largest) are not finite there for the first time gets that step in `diverged`
    (-1: not diverged), and every metric of a diverged member is NaN from its step on (its accuracies on NaN logits
    say nothing). A NaN model can keep a finite loss (StableMax at lr = inf, dropout 1.0), so the loss alone is not
    the test. Returns the members new to `diverged`."""
    bad = np.zeros(hist["loss"][:, start:stop].shape, bool)
    for key in DIVERGENCE_SIGNALS:
        if key in hist:
            bad |= ~np.isfinite(hist[key][:, start:stop])
    new = [int(i) for i in np.nonzero((diverged < 0) & bad.any(1))[0]]
    for i in new:
        diverged[i] = start + int(np.argmax(bad[i]))
    for i in np.nonzero(diverged >= 0)[0]:
        for h in hist.values():
            h[i, max(start, int(diverged[i])):stop] = np.nan
    return new
