"""findings.md and findings_attention.png, rendered from results/book/findings.json alone (experiments/book/bundle.py
regenerates them with the book's other tables, and a test requires the committed file to equal its rendering).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.book import findings_rules as F
from miiii.provenance import short_commit
from miiii.rules import printed_rule, seeds_counted, verdict

SRC = {  # the chapter each claim quotes
    3: "ch. 3, Assembly and Training",
    4: "ch. 4 (interpretability: attention and embeddings)",
    6: "ch. 6, Two Tasks, One Architecture",
    7: "ch. 7, Connections",
}


def _masses(values) -> str:
    return "/".join(v if isinstance(v, str) else f"{v:.2f}" for v in values)


def _layers(fn, m: dict, reading: str) -> str:
    """`fn(m, layer, reading, which)` per layer, trained and untrained."""
    layers = range(m["n_layers"])
    return ("; ".join(f"layer {i + 1} {_masses(fn(m, i, reading))}" for i in layers) + " (untrained "
            + "; ".join(_masses(fn(m, i, reading, "init")) for i in layers) + ")")


def _split(m, layer, reading, which="trained"):
    """Per answer digit: its attention on each position it reads, a's digit + b's digit (one value for reversal)."""
    return ["+".join(f"{v:.2f}" for v in vs) for vs in F.read_masses(m, layer, reading, which)]


def _columns(m, reading):
    return _layers(_split, m, reading)


def _entropies(m, reading):
    e = {w: [F.entropy(m[w]["probes"][p][1], m["answer_start"]) for p in ("cascade", "no_carry")]
         for w in ("trained", "init")}
    return (f"{e['trained'][0]:.2f} − {e['trained'][1]:.2f} nats (untrained {e['init'][0]:.2f} − "
            f"{e['init'][1]:.2f})")


def _cos89(m, reading):
    c = m["trained"]["digit_cos"]
    return f"cos(8,9) {c[8][9]:+.2f}; to 0/1 at most {max(c[8][0], c[8][1], c[9][0], c[9][1]):+.2f}"


def _positions(m, reading):
    """Per column: its two operand positions' cosine, and the nearest other operand position's to either."""
    c, operands = m["trained"]["pos_cos"], sorted(k for keys in m["reads"] for k in keys)

    def rival(a, b):
        return max(c[x][k] for x in (a, b) for k in operands if k not in (a, b))
    return "; ".join(f"cos(pos {a}, pos {b}) {c[a][b]:+.2f}, next {rival(a, b):+.2f}" for a, b in m["reads"])


READ = tuple(F.READINGS)  # every attention rule in both readings of the query
NONE = (None,)
# (claim, chapter, config(s), per-seed rule, readings, what a seed shows): each quoted verbatim from the book
SEED_CLAIMS = (
    ("Layer 1 typically handles column alignment: each output digit attends to the corresponding input digits (ones "
     "to ones, tens to tens).", 4, "addition", F.rule_layer1_columns, READ, _columns),
    ("(the same sentence, read at operand b's digits: layer 1 lines up each column's two input digits)", 4,
     "addition", F.rule_layer1_operand_columns, NONE,
     lambda m, r: "b→a, ones first: " + "/".join(f"{v:.2f}" for v in F.operand_alignment(m)) + " (untrained "
     + "/".join(f"{v:.2f}" for v in F.operand_alignment(m, 0, "init")) + ")"),
    ("Addition produces column-alignment attention; reversal produces anti-diagonal attention.", 6,
     ("addition", "reversal"), F.rule_two_patterns, READ,
     lambda ms, r: f"addition {_columns(ms[0], r)}; reversal {_columns(ms[1], r)}"),
    ("Addition attention: Output positions attend to the corresponding columns of both operands (ones to ones, tens "
     "to tens).", 6, "addition", F.rule_columns, READ, _columns),
    ("Layer 2 handles carry propagation: output digits look at adjacent output positions to check whether a carry is "
     "needed.", 4, "addition", F.rule_layer2_carries, READ, lambda m, r: _layers(F.carry_mass, m, r)),
    ("999+001 (cascading carries) should show more complex layer-2 patterns than 123+456 (no carries), because "
     "carries must ripple across all three columns.", 4, "addition", F.rule_more_complex, NONE, _entropies),
    ("Reversal attention: Output position \\(i\\) attends to input position \\(n-i\\) — a perfect anti-diagonal.", 6,
     "reversal", F.rule_anti_diagonal, READ, _columns),
    ("(the same sentence, its “perfect”)", 6, "reversal", F.rule_perfect_anti_diagonal, READ, _columns),
    ("Trained embeddings cluster digits with similar arithmetic roles.", 4, "addition", F.rule_carry_role, NONE,
     lambda m, r: f"ρ {F.carry_rank(m):+.2f} (untrained {F.carry_rank(m, 'init'):+.2f})"),
    ("digits that behave similarly during carry computation (e.g., 8 and 9 frequently trigger carries) should end up "
     "nearby, while digits that rarely cause carries (0, 1) should separate.", 4, "addition", F.rule_eight_nine, NONE,
     _cos89),
    ("Positions with the same computational role should be similar after training — for example, position 2 (ones "
     "of operand A) and position 6 (ones of operand B) both feed into the ones-digit output.", 4, "addition",
     F.rule_column_positions, NONE, _positions),
)
# (claim, chapter, ablation, rule): every seed of the ablation against the baseline's seeds (`addition`); where the
# claim is about the baseline itself, the ablation is the rule's control
ABLATION_CLAIMS = (
    ("This seems to contradict Chapter 5, where our one-layer ablation showed degraded accuracy.", 7, "one_layer",
     F.rule_degraded),
    ("One layer \\(\\to\\) limited carry propagation.", 7, "one_layer", F.rule_limited_carries),
    ("The resolution: one layer is sufficient for the task but harder to train with our budget.", 7, "one_layer",
     F.rule_sufficient_but_harder),
    ("No positional embeddings \\(\\to\\) can’t distinguish columns.", 7, "no_pos_embed", F.rule_no_columns),
    ("(the same sentence, read in the attention)", 7, "no_pos_embed", F.rule_no_column_attention),
    ("No causal mask \\(\\to\\) train/test mismatch.", 7, "no_causal_mask", F.rule_mismatch),
    ("Autoregressive generation is a stricter test than teacher-forced evaluation: each predicted token feeds into "
     "the next, so errors compound.", 3, "no_causal_mask", F.rule_stricter),  # the ablation as the rule's control
    ("These small models need aggressive learning rates — 1e-3 doesn’t work.", 3, "lr_1e-3", F.rule_lr_never_solves),
    ("(the same sentence, “doesn’t work” as fails)", 3, "lr_1e-3", F.rule_lr_fails),
)


def _solves(m, paired: bool) -> list[float]:
    return [x["autoregressive"] for x in (m if paired else (m,))]


def _apply(fn, m, paired: bool, reading):
    """fn on one seed's member (or, for a claim about two configs, its pair of members), in `reading` if any."""
    args = tuple(m) if paired else (m,)
    return fn(*args, reading) if reading else fn(*args)


def seed_rows(sw: dict) -> list[tuple]:
    """(claim, source, reading, rule, per-seed cells, per-seed verdicts, per-seed 'solves its task') of every
    per-seed claim and reading."""
    rows = []
    for claim, ch, cfg, rule, readings, shown in SEED_CLAIMS:
        paired = isinstance(cfg, tuple)
        groups = list(zip(*(sw[c] for c in cfg), strict=True)) if paired else sw[cfg]
        for reading in readings:
            per = [_apply(rule, m, paired, reading) for m in groups]
            cells = "; ".join(
                f"seed {(m[0] if paired else m)['seed']} (exact match {_masses(_solves(m, paired))}): "
                f"{shown(m, reading)} → {_cell(v)}" for m, v in zip(groups, per, strict=True))
            learned = [all(x >= F.SOLVED for x in _solves(m, paired)) for m in groups]
            rows.append((claim, SRC[ch], reading or "–", rule, cells, per, learned))
    return rows


def _cell(v) -> str:
    return {True: "yes", False: "no", None: "–"}[v]


def _acc_row(name: str, runs: list[dict], sets: list[str]) -> str:
    ar = [m["autoregressive"] for m in runs]
    tf = [m["teacher_forced"] for m in runs]
    gap = [F.carry_gap(m) for m in runs] if "by_carries" in runs[0] else []
    return (f"| {name} | {' '.join(f'`{s}`' for s in sets) or '–'} | {' / '.join(f'{v:.3f}' for v in tf)} | "
            f"{' / '.join(f'{v:.3f}' for v in ar)} | "
            f"{' / '.join('–' if g is None else f'{g:+.3f}' for g in gap) or '–'} |")


def render(data: dict) -> str:
    sw, cfgs = data["sweeps"], data["configs"]
    seeds = [m["seed"] for m in sw["addition"]]
    lines = [
        "# The book's findings about what its model learns, over seeds",
        "",
        *(["**Smoke run** (`--smoke`: the tiny presets for 60 steps; nothing here is meant to match).", ""]
          if data.get("smoke") else []),
        f"Each config is one vmapped sweep of seeds {', '.join(map(str, seeds))} of the book's loop (presets "
        "`addition` / `reversal`, as written: 98 batches an epoch, the warm-up's first step at lr / 200), measured "
        "on its final parameters (`python -m experiments.book.findings`; this file is rendered from "
        "`findings.json` alone by `python -m experiments.book.bundle results/book`). Each claim is quoted from the "
        "book with its chapter; its rule is printed as applied (`experiments/book/findings_rules.py`). Attention is "
        f"the mean pattern over {data['attn_samples']:,} held-out inputs; every per-seed rule is also applied to the "
        "same seed's "
        "untrained parameters, and a seed where those pass too is *not testable*. A seed whose model does not solve "
        "its task (held-out exact match below 0.99: not the trained model the sentence describes) is set aside. "
        "Verdict: holds only when it holds in every seed that solves its task, "
        "at least two of them; one such seed against it makes it *does not hold*. Which query stands for answer "
        "digit j is read two ways, and every "
        "attention rule is applied in both: *predicts*, the position whose output is digit j (where the causal "
        "model computes it), and *holds*, the position one later whose token is digit j (how the book reads its "
        "heatmaps). Attention on a column is printed as a's digit + b's digit, columns ones first, separated by /.",
        "",
        "## The runs",
        "",
        "| config | switches | held-out exact match, teacher-forced (per seed) | autoregressive | exact match "
        "without a carry minus with two or more (autoregressive) |",
        "| --- | --- | --- | --- | --- |",
        *[_acc_row(k, sw[k], cfgs[k]["sets"]) for k in cfgs],
        "",
        "## Claims about the trained models",
        "",
        "| claim | source | reading | rule | per seed | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for claim, src, reading, rule, cells, per, learned in seed_rows(sw):
        lines.append(f"| “{claim}” | {src} | {reading} | {printed_rule(rule)} | {cells} | "
                     f"**{verdict(per, learned)}** ({seeds_counted(per, learned)}) |")
    lines += ["", "## The ablations (chapter 5's switches, and lr 1e-3, on `addition`), against the baseline", "",
              "| claim | source | ablation | rule | verdict |", "| --- | --- | --- | --- | --- |"]
    for claim, ch, name, rule in ABLATION_CLAIMS:
        v = rule(sw[name], sw["addition"])
        lines.append(f"| “{claim}” | {SRC[ch]} | {name} | {printed_rule(rule)} | **{verdict([v])}** |")
    lines += ["", "Figure: `findings_attention.png` (each seed's mean attention per layer; red: the positions the "
              "column and anti-diagonal rules read, white dashed: the output digit before each output digit, which "
              "the carry rule reads).", "", "## Provenance", "",
              "| config | trained at commit | date | sweep's wall time |",
              "| --- | --- | --- | --- |",
              *[f"| {k} | {short_commit(v['commit'])} | {v['date']} | {v.get('wall_s', 0) / 60:.1f} min |"
                for k, v in data["trained_by"].items()],
              "", f"Measured at commit {short_commit(data['measured_by']['commit'])} ("
              f"{data['measured_by']['device']}, jax {data['measured_by']['jax']}).", ""]
    return "\n".join(lines)


def figure(data: dict, out: Path) -> Path:
    """Rows: addition layer 1 and 2, reversal layer 1 and 2; columns: seeds. Each seed's mean attention pattern
    over held-out inputs, with the positions the column and anti-diagonal rules read outlined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    from miiii.plotstyle import write_png

    rows = [(k, i) for k in ("addition", "reversal") for i in range(data["sweeps"][k][0]["n_layers"])]
    n = len(data["sweeps"]["addition"])
    fig, axes = plt.subplots(len(rows), n, figsize=(3.2 * n, 3.0 * len(rows)), layout="constrained", squeeze=False)
    for r, (k, layer) in enumerate(rows):
        for c, m in enumerate(data["sweeps"][k]):
            ax = axes[r, c]
            a = np.asarray(m["trained"]["attention"][layer])
            im = ax.imshow(a, cmap="viridis", vmin=0, vmax=1)
            for j, keys in enumerate(m["reads"]):
                for key in keys:
                    ax.add_patch(Rectangle((key - 0.5, m["answer_start"] + j - 0.5), 1, 1, fill=False, ec="red", lw=1))
            if k == "addition":  # the carry rule: each output digit's query on the output digit before it
                for q in range(m["answer_start"] + 2, a.shape[0]):
                    ax.add_patch(Rectangle((q - 1.5, q - 0.5), 1, 1, fill=False, ec="white", lw=1, ls="--"))
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set(title=f"{k}, layer {layer + 1}, seed {m['seed']}", xlabel="key position", ylabel="query position")
    fig.colorbar(im, ax=axes, shrink=0.6, label="mean attention")
    path = Path(out) / "findings_attention.png"
    write_png(fig, path)
    plt.close(fig)
    return path


def write(out: Path, figures: bool = True) -> str:
    import json

    from miiii.files import write_text_atomic

    data = json.loads((Path(out) / "findings.json").read_text())
    write_text_atomic(Path(out) / "findings.md", render(data))
    if figures:
        figure(data, out)
    return f"wrote {out}/findings.md" + (" and findings_attention.png" if figures else "")
