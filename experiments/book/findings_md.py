"""findings.md and findings_attention.png, rendered from results/book/findings.json alone (experiments/book/bundle.py
regenerates them with the book's other tables, and a test requires the committed file to equal its rendering).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments.book import findings_rules as F
from miiii.rules import printed_rule, verdict

SRC = {  # the chapter each claim quotes
    3: "ch. 3, Assembly and Training",
    4: "ch. 4 (interpretability: attention and embeddings)",
    6: "ch. 6, Two Tasks, One Architecture",
    7: "ch. 7, Connections",
}


def _per_layer(m: dict, untrained: bool) -> str:
    """Each layer's smallest mass on the positions its queries read (`read_mass`), and the untrained ones'."""
    layers = range(m["n_layers"])
    text = "; ".join(f"layer {i + 1} min {min(F.read_mass(m, i)):.2f}" for i in layers)
    return text + (" (untrained " + ", ".join(f"{min(F.read_mass(m, i, 'init')):.2f}" for i in layers) + ")"
                   if untrained else "")


# (claim, chapter, config, per-seed rule, what a seed shows): each quoted verbatim from the book
SEED_CLAIMS = (
    ("Layer 1 typically handles column alignment: each output digit attends to the corresponding input digits (ones "
     "to ones, tens to tens).", 4, "addition", F.rule_layer1_columns,
     lambda m: "layer 1 " + "/".join(f"{v:.2f}" for v in F.read_mass(m, 0)) + " (untrained "
     + "/".join(f"{v:.2f}" for v in F.read_mass(m, 0, "init")) + "); layer 2 "
     + "/".join(f"{v:.2f}" for v in F.read_mass(m, 1))),
    ("Addition produces column-alignment attention; reversal produces anti-diagonal attention.", 6, "addition",
     F.rule_columns, lambda m: _per_layer(m, True)),
    ("Layer 2 handles carry propagation: output digits look at adjacent output positions to check whether a carry is "
     "needed.", 4, "addition", F.rule_layer2_carries,
     lambda m: f"layer 2 {F.previous_output_mass(m, 1):.2f}, layer 1 {F.previous_output_mass(m, 0):.2f} (untrained "
     f"{F.previous_output_mass(m, 1, 'init'):.2f}, {F.previous_output_mass(m, 0, 'init'):.2f})"),
    ("999+001 (cascading carries) should show more complex layer-2 patterns than 123+456 (no carries), because "
     "carries must ripple across all three columns.", 4, "addition", F.rule_more_complex,
     lambda m: " − ".join(f"{F.entropy(m['trained']['probes'][p][1], m['answer_start']):.2f}"
                          for p in ("cascade", "no_carry"))
     + f" nats (untrained {F.entropy(m['init']['probes']['cascade'][1], m['answer_start']):.2f} − "
     f"{F.entropy(m['init']['probes']['no_carry'][1], m['answer_start']):.2f})"),
    ("Reversal attention: Output position \\(i\\) attends to input position \\(n-i\\) — a perfect anti-diagonal.", 6,
     "reversal", F.rule_anti_diagonal, lambda m: _per_layer(m, True)),
    ("(the same sentence, its “perfect”)", 6, "reversal", F.rule_perfect_anti_diagonal, lambda m: _per_layer(m, False)),
    ("Trained embeddings cluster digits with similar arithmetic roles.", 4, "addition", F.rule_carry_role,
     lambda m: f"ρ {F.carry_rank(m):+.2f} (untrained {F.carry_rank(m, 'init'):+.2f})"),
    ("digits that behave similarly during carry computation (e.g., 8 and 9 frequently trigger carries) should end up "
     "nearby, while digits that rarely cause carries (0, 1) should separate.", 4, "addition", F.rule_eight_nine,
     lambda m: (lambda c: f"cos(8,9) {c[8][9]:+.2f}; to 0/1 at most "
                f"{max(c[8][0], c[8][1], c[9][0], c[9][1]):+.2f}")(m["trained"]["digit_cos"])),
)
# (claim, chapter, ablation, rule): judged on every seed of the ablation against every seed of the baseline
ABLATION_CLAIMS = (
    ("This seems to contradict Chapter 5, where our one-layer ablation showed degraded accuracy.", 7, "one_layer",
     F.rule_degraded),
    ("One layer \\(\\to\\) limited carry propagation.", 7, "one_layer", F.rule_limited_carries),
    ("No positional embeddings \\(\\to\\) can’t distinguish columns.", 7, "no_pos_embed", F.rule_no_columns),
    ("No causal mask \\(\\to\\) train/test mismatch.", 7, "no_causal_mask", F.rule_mismatch),
    ("These small models need aggressive learning rates — 1e-3 doesn’t work.", 3, "lr_1e-3", F.rule_lr_fails),
)


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
        "untrained parameters, and a seed where those pass too, or whose model does not solve its task (held-out "
        "exact match below 0.99: not the trained model the sentence describes), is *not testable*. Verdict: holds "
        "only when it holds in every seed.",
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
        "| claim | source | rule | per seed | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for claim, ch, cfg, rule, shown in SEED_CLAIMS:
        per = [rule(m) for m in sw[cfg]]
        cells = "; ".join(f"seed {m['seed']} (exact match {m['autoregressive']:.2f}): {shown(m)} → {_cell(v)}"
                          for m, v in zip(sw[cfg], per, strict=True))
        lines.append(f"| “{claim}” | {SRC[ch]} | {printed_rule(rule)} | {cells} | **{verdict(per)}** "
                     f"({sum(v is True for v in per)}/{len(per)}) |")
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
              *[f"| {k} | {v['commit'][:7]} | {v['date']} | {v.get('wall_s', 0) / 60:.1f} min |"
                for k, v in data["trained_by"].items()],
              "", f"Measured at commit {data['measured_by']['commit'][:7]} ({data['measured_by']['device']}, jax "
              f"{data['measured_by']['jax']}).", ""]
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
