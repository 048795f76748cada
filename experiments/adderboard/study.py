"""The AdderBoard search: the smallest decoder of this project's one model family that adds two 10-digit numbers at
>= 99 % on the board's verifier (its 10 edge cases and 10,000 pairs of random.Random(2025)), trained by the generic
trainer from a seed.

    python -m experiments.adderboard.study                 # train the settings not trained yet (runs/adder/), then
                                                           # write the bundle (default runs/adderboard, scratch)
    python -m experiments.adderboard.study --no-train --only NAME --out results/adderboard   # NAME's records in
                                                           # the committed bundle, the others kept (a rewrite without
                                                           # --only needs every setting's runs)
    python -m experiments.adderboard.study --bundle results/adderboard [--check]  # results.md from its summaries

Each setting is a vmapped sweep over seeds (one compile per shape) or one solo run (a phase: `--init-from` another
setting's run), on the preset adder-146 with the changes it names. A run's exact match is the share of the 2,000
held-out pairs whose 11 sum digits it decodes autoregressively (summary.json); a run at >= 0.99 there is exported
(`python -m miiii export-adder`) and scored as the board scores (experiments/adderboard/score.py); the submission
files and their scores join the bundle. results.md is regenerated from summaries/search.json alone.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments.generated import same_or_say
from miiii.errors import ConfigError, OneLineParser, one_line_errors, out_folder
from miiii.files import write_json_atomic, write_text_atomic
from miiii.presets import SHARED_NORMS

# the training loss (nats per answer digit, 10-digit operands) of a uniform guess at every digit, and of each digit's
# marginal: the ten sum digits uniform, the eleventh (the carry out) 0 or 1 about evenly
UNIFORM = math.log(10)
MARGINALS = (10 * math.log(10) + math.log(2)) / 11
QUALIFY = 0.99  # the board's bar, on its verifier's 10,010 cases
EXPORT_AT = 0.99  # a run is exported and scored when its held-out autoregressive exact match reaches this
# Taghadouini's recipe (adder-146) with PyTorch's / MLX's initialisation and 300k training pairs
BASE = ("model.init=torch", "task.n_train=300000")
SMALL = ("model.n_heads=1", "model.d_mlp=2", "model.embed=arc")  # one head of size 4 on d 3, SwiGLU 2, the arc
TIES_62 = "model.ties=attn.W_V=attn.W_K,attn.W_O=T(attn.W_Q)"  # V = K, O = Q^T
TIED_62 = (*SMALL, TIES_62, "optim.weight_decay=0")


FROM_ARC = ("model.init=qwen", "model.arc_init=2.5,-1.2,0.29")  # every matrix N(0, 0.02), the open arc
DATA = ("task.n_train=2000000", "train.chunk=5000", "train.eval_every=5000")
START_62 = (*SMALL, TIES_62, *FROM_ARC, "optim.lr=1e-2", *DATA)
# The later sub-50 ties on that start (tbukic/M10S-Transformer, experiments/sub50_sweep.py, its 36's): V = Q, K = Q
# with every plane turned (rot: the head's halves, the entry's interleaved pairs in its RoPE layout), O = Q^T, the
# RMSNorms one scale and the QK-norms another: 41 parameters; down = up turned, then transposed: 36. (The board's 41
# itself turned one plane of Q: T41R below.)
T41 = "model.ties=attn.W_K=rot(attn.W_Q),attn.W_V=attn.W_Q,attn.W_O=T(attn.W_Q)"
T36 = T41 + ",mlp.W_out=Trot(mlp.W_in)"
SHARED = SHARED_NORMS
START_41 = (*SMALL, T41, SHARED, *FROM_ARC, "optim.lr=1e-2", *DATA)
# 36 parameters, every turned tie starting at 0.1 as the entry's; the lr a grid
MODEL_36 = (*SMALL, T36, SHARED, "model.tie_angle=0.1", *FROM_ARC)
START_36 = (*MODEL_36, *DATA)
# 41 parameters from every initial parameter times 3 (model.init_scale), the arc's start and stride given as a third
# so that they start where the open arc does (its amplitude 7.5). Its continuations repeat this arc_init, which their
# loaded parameters override (as every init setting)
MODEL_S3 = (*SMALL, T41, SHARED, "model.init=qwen", "model.arc_init=2.5,-0.4,0.096667")
SCALE3_41 = (*MODEL_S3, "optim.lr=1e-2", *DATA, "model.init_scale=3")
# The board's 41 as its entry builds it (experiments/sub50_sweep_obsolete.py's apply_k_rot_q): K = V = its q_proj, Q
# that turned in its first plane alone (its interleaved dims 0 and 1, RoPE's fastest plane) from -0.5; T41 above is
# the later sub50_sweep's "rotation" (every plane of K turned, from 0.1), which its 36 uses
T41R = "model.ties=attn.W_Q=rot1(attn.W_K),attn.W_V=attn.W_K,attn.W_O=T(attn.W_K)"
MODEL_41R = (*SMALL, T41R, SHARED, "model.tie_angle=-0.5", *FROM_ARC)
MODEL_35R = (*SMALL, T41R + ",mlp.W_out=T(mlp.W_in)", SHARED, "model.tie_angle=-0.5", *FROM_ARC)  # down = up^T
# the 41 and the 36 with every turned tie starting at the angle 1 (0 is K = Q at the start; the entry's is 0.1)
MODEL_41A1 = (*SMALL, T41, SHARED, "model.tie_angle=1.0", *FROM_ARC)
MODEL_36A1 = (*SMALL, T36, SHARED, "model.tie_angle=1.0", *FROM_ARC)


@dataclass(frozen=True)
class Setting:
    name: str
    why: str
    sets: tuple[str, ...]
    grid: tuple[str, ...] = ()
    steps: int = 12_000
    seeds: int = 4
    init_from: str = ""  # a solo phase: "SETTING/member_k" (a run of another setting, under the same runs folder)
    seed: int | None = None  # a solo phase's seed (0 if None); a phased preset's (its own if None)
    phased: str = ""  # a phased preset (presets.PHASED) trained whole: its last phase is the setting's run


def continued(model: tuple[str, ...], member: str, seed: int, stem: str, why: str) -> tuple[Setting, ...]:
    """A screen's member continued as three solo phases: 150k cosine steps 1e-2 -> 1e-3, 50k at 1e-3 (batch 256),
    50k cosine 1e-3 -> 0 without weight decay (batch 256): adder-62-phases' stages after its first, without its 30k
    at 3e-4."""
    run = (*model, *DATA)
    return (Setting(f"{stem}-cosine", f"{why}, continued 150k cosine steps from lr 1e-2 to 1e-3",
                    (*run, "optim.lr=1e-2", "optim.schedule=cosine", "optim.final_lr_frac=0.1"), steps=150_000,
                    init_from=member, seed=seed),
            Setting(f"{stem}-1e-3", f"{stem}-cosine, 50k steps at lr 1e-3 (batch 256)",
                    (*run, "optim.lr=1e-3", "train.batch_size=256"), steps=50_000, init_from=f"{stem}-cosine",
                    seed=seed),
            Setting(f"{stem}-nowd", f"{stem}-1e-3, 50k cosine steps from 1e-3 to 0 without weight decay (batch 256)",
                    (*run, "optim.lr=1e-3", "optim.weight_decay=0", "optim.schedule=cosine", "optim.final_lr_frac=0",
                     "train.batch_size=256"), steps=50_000, init_from=f"{stem}-1e-3", seed=seed))


SEARCH = (
    Setting("sweep-torch", "adder-146 (Taghadouini's 146 parameters) at two learning rates", BASE, ("lr=5e-3,1e-2",)),
    Setting("146-phase2-m5", "sweep-torch's best member (lr 1e-2, seed 1) continued 33k steps: a second phase",
            ("model.init=torch", "optim.lr=1e-2"), steps=33_000, init_from="sweep-torch/member_005", seed=1),
    Setting("C-62", "the 62-parameter entry's architecture: arc embedding, K = V, O = Q^T, one head, SwiGLU 2, Adam "
            "without weight decay", BASE + TIED_62, ("lr=1e-2,2e-2",), 15_000),
    Setting("preset-146-phases", "the preset adder-146-phases from its seed: sweep-torch's member 5 and a second phase "
            "with a cosine decay as one command (a solo run is not the vmapped member bit for bit: phase 1 differs)",
            (), phased="adder-146-phases"),
    Setting("146-phase2-constant", "the preset's phase 1, then 33k steps at a constant lr 1e-2 (146-phase2-m5's phase "
            "2)", ("model.init=torch", "optim.lr=1e-2"), steps=33_000, init_from="preset-146-phases/phase-1", seed=1),
    Setting("146-phase2-cosine", "the preset's phase 1, then 33k steps decaying lr 1e-2 to 0 (cosine): the preset's "
            "phase 2", ("model.init=torch", "optim.lr=1e-2", "optim.schedule=cosine"), steps=33_000,
            init_from="preset-146-phases/phase-1", seed=1),
    Setting("D-62-cur3", "C-62 on 3-digit operands (zero-padded to 10): the first phase of the 62-parameter entry's "
            "3 -> 6 -> 10-digit curriculum", BASE + TIED_62 + ("task.train_digits=3",), ("lr=1e-2,2e-2",), 10_000),
    Setting("E-62-cur6", "D-62-cur3's lowest-loss member (lr 1e-2, seed 2) on 6-digit operands: the curriculum's "
            "second phase", BASE + TIED_62 + ("optim.lr=1e-2", "task.train_digits=6"), steps=10_000,
            init_from="D-62-cur3/member_002", seed=2),
    Setting("F-62-cur10", "E-62-cur6 on 10-digit operands: the curriculum's last phase",
            BASE + TIED_62 + ("optim.lr=1e-2",), steps=25_000, init_from="E-62-cur6", seed=2),
    Setting("preset-62-phases", "the preset adder-62-phases from its seed: the 62-parameter entry's four stages (V = "
            "K, O = Q^T, arc embedding from its open arc, N(0, 0.02); 200k cosine steps 1e-2 -> 1e-3, 50k at 1e-3 and "
            "30k at 3e-4 at batch 256, 50k cosine 1e-3 -> 0 without weight decay)", (), phased="adder-62-phases"),
    Setting("preset-62-phases-s2", "preset-62-phases at seed 2", (), phased="adder-62-phases", seed=2),
    Setting("62-start-seeds", "adder-62-phases' start (V = K, O = Q^T, arc embedding from the open arc, N(0, 0.02)) "
            "at 4 seeds, 30k steps at a constant lr 1e-2 (its phase 1's first 30k of 200k are within 5 % of it): how "
            "often the recipe's start leaves the plateau near 2.27 nats", START_62, steps=30_000),
    Setting("41-start-seeds", "62-start-seeds with the later sub-50 ties, its 36's (V = Q, K = Q with every plane "
            "turned, O = Q^T, the RMSNorms one scale, the QK-norms another): 41 parameters, 4 seeds, 30k steps at lr "
            "1e-2", START_41,
            steps=30_000),
    Setting("36-start-angle", "41-start-seeds' start at 36 parameters (down = up turned, then transposed), every "
            "turned tie from the angle 0.1 (the entry's), 4 seeds at lr 1e-2 and 2e-2, 30k steps", START_36,
            ("lr=1e-2,2e-2",), 30_000),
    Setting("41-start-scale3", "41-start-seeds from every initial parameter times 3 (model.init_scale; the arc from "
            "the same open arc, amplitude 7.5): sharper attention from the start (QK-norm scales 3)", SCALE3_41,
            steps=30_000),
    Setting("52-start-seeds", "62-start-seeds with the RMSNorms one scale and the QK-norms another (SHARED): 52 "
            "parameters, the 62's ties otherwise, 8 seeds, 30k steps at lr 1e-2", (*START_62, SHARED), steps=30_000,
            seeds=8),
    Setting("preset-52-phases", "the preset adder-52-phases from its seed: adder-62-phases with the norms shared "
            "(52 parameters) at seed 4, 52-start-seeds' member that left the plateau first", (),
            phased="adder-52-phases"),
    Setting("41-start-angle1", "41-start-seeds with K = Q turned from the angle 1 (model.tie_angle; 0 is K = Q at "
            "the start), 8 seeds, 30k steps at lr 1e-2: is it the tie's start that holds the 41 on the plateau?",
            (*START_41, "model.tie_angle=1.0"), steps=30_000, seeds=8),
    Setting("41-start-kscale", "41-start-seeds with K = a Q (scale, the 58's tie) in place of K = Q turned: 41 "
            "parameters, 8 seeds, 30k steps at lr 1e-2", (*SMALL, T41.replace("rot(", "scale("), SHARED, *FROM_ARC,
                                                           "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("41-start-scale3-4to11", "41-start-scale3 at the next 8 seeds (4 to 11)", (*SCALE3_41, "train.seed=4"),
            steps=30_000, seeds=8),
    Setting("36-start-angle1", "36-start-angle's model with every turned tie (K = Q turned, down = up turned then "
            "transposed) from the angle 1, 8 seeds, 30k steps at lr 1e-2: does 41-start-angle1's lever move the 36?",
            (*MODEL_36A1, "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("41r-start-seeds", "the board's 41 as its entry builds it: Q = K turned in its first plane alone (RoPE's "
            "fastest) from -0.5, V = K, O = K^T, the norms shared (41-start-seeds turns every plane of K, from 0), 8 "
            "seeds, 30k steps at lr 1e-2", (*MODEL_41R, "optim.lr=1e-2", *DATA), steps=30_000, seeds=8),
    Setting("41r-start-gf", "41r-start-seeds with grokfast EMA (0.98, 2) from the first step, as its entry's "
            "'Curriculum + Grokfast-EMA + adaptive weight decay' (its submission's metadata; less the curriculum, the "
            "adaptive decay and its cosine lr; every setting here clips the gradient's norm at 1 as it does, though "
            "before grokfast, it after), 8 seeds, 30k steps at lr 1e-2",
            (*MODEL_41R, "optim.lr=1e-2", "optim.grokfast=ema", "optim.alpha=0.98", "optim.lamb=2", *DATA),
            steps=30_000, seeds=8),
    Setting("35r-start-seeds", "41r-start-seeds with down = up^T (its sweep's downUpT, no angle): 35 parameters, "
            "below the board's 36, 8 seeds, 30k steps at lr 1e-2", (*MODEL_35R, "optim.lr=1e-2", *DATA),
            steps=30_000, seeds=8),
    *continued(MODEL_41R, "41r-start-seeds/member_006", 6, "41r-m6",
               "41r-start-seeds' lowest-loss member (seed 6, train loss 0.95 at 30k)"),
    *continued(MODEL_41A1, "41-start-angle1/member_007", 7, "41a1-m7",
               "41-start-angle1's lowest-loss member (seed 7, train loss 0.90 at 30k)"),
    Setting("41a1-m7-gf", "41a1-m7-nowd continued 80k steps with grokfast EMA (0.98, 2), cosine from lr 1e-3 to 1e-4: "
            "the 58's second phase", (*MODEL_41A1, *DATA, "optim.lr=1e-3", "optim.grokfast=ema", "optim.alpha=0.98",
                                      "optim.lamb=2", "optim.schedule=cosine", "optim.final_lr_frac=0.1"),
            steps=80_000, init_from="41a1-m7-nowd", seed=7),
    *continued(MODEL_S3, "41-start-scale3/member_000", 0, "41s3-m0",
               "41-start-scale3's lowest-loss member (seed 0, train loss 1.27 at 30k)"),
    *continued(MODEL_36, "36-start-angle/member_003", 3, "36-m3",
               "36-start-angle's lowest-loss member (lr 1e-2, seed 3, train loss 1.65 at 30k)"),
    Setting("preset-58-phases", "the preset adder-58-phases from its seed: the board's sub-60 entries' recipe (K = "
            "a Q, O = Q^T, gate = a up, arc embedding; 290k cosine steps from lr 1e-2 to 1e-3, then 80k with grokfast "
            "from 1e-3 to 1e-4)", (), phased="adder-58-phases"),
)


def phase_dirs(d: Path) -> list[Path]:
    """RUN/phase-1, phase-2, ... in their order (by number, not by name)."""
    return sorted(d.glob("phase-*"), key=lambda p: int(p.name.rpartition("-")[2]))


def setting_steps(s: Setting) -> int:
    """A setting's own steps: a phased preset's last phase's, else the setting's."""
    from miiii.presets import phase_configs

    return phase_configs(s.phased)[-1].train.steps if s.phased else s.steps


def command(s: Setting, runs: Path) -> list[str]:
    """The `python -m miiii` arguments that train setting `s` into runs/NAME."""
    sets = [a for kv in s.sets for a in ("--set", kv)]
    if s.phased:
        seed = [] if s.seed is None else ["--seed", str(s.seed)]
        return ["train", "--preset", s.phased, *seed, "--run-dir", str(runs / s.name), "--no-progress"]
    if s.init_from:
        return ["train", "--preset", "adder-146", "--steps", str(s.steps), *sets, "--seed", str(s.seed or 0),
                "--init-from", str(runs / s.init_from), "--run-dir", str(runs / s.name), "--no-progress"]
    return ["sweep", "--preset", "adder-146", "--seeds", str(s.seeds), *(["--grid", *s.grid] if s.grid else []),
            "--steps", str(s.steps), *sets, "--no-progress", "--out", str(runs / s.name)]


def unique_params(run_dir: Path) -> int:
    """The unique count of a run's model (model.count_params: ties and the tied head counted once)."""
    from dataclasses import replace

    import jax

    from miiii.model import build_model, count_params
    from miiii.rundir import read_config
    from miiii.tasks import make_task

    cfg = read_config(run_dir)
    task = make_task(replace(cfg.task, n_train=8, n_valid=8, replay=""))
    model = build_model(cfg.model, task)
    return count_params(jax.eval_shape(lambda: model.init({"params": jax.random.key(0)}, task.train.x[:1]))["params"])


def member_record(run_dir: Path) -> dict | None:
    if not (run_dir / "summary.json").is_file():
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = json.loads((run_dir / "config.json").read_text())
    info = json.loads((run_dir / "member.json").read_text()) if (run_dir / "member.json").is_file() else {}
    return dict(run=run_dir.name, seed=cfg["train"]["seed"], lr=cfg["optim"]["lr"], values=info.get("values", {}),
                steps=summary["steps"], exact=summary.get("valid_autoregressive_acc"),
                train_loss=round(float(summary["final"]["train"]["loss"]), 4))


def setting_record(s: Setting, runs: Path) -> dict | None:
    from miiii.presets import PHASED

    d = runs / s.name
    if s.phased:  # only a recipe whose every phase finished: its run is the last phase
        phases = phase_dirs(d)
        if len(phases) != len(PHASED[s.phased][1]) or not all((p / "summary.json").is_file() for p in phases):
            return None
    members = [phases[-1]] if s.phased else [d] if s.init_from else sorted(d.glob("member_*"))
    recs = [r for m in members if (r := member_record(m)) is not None]
    if not recs:
        return None
    files = [p for m in members for p in (m / "metrics.jsonl", m / "config.json") if p.is_file()]
    wall = max(p.stat().st_mtime for p in files) - min(p.stat().st_mtime for p in files)
    rec = dict(name=s.name, why=s.why, params=unique_params(members[0]), steps=setting_steps(s),
               init_from=s.init_from or (f"{s.phased}'s earlier phases" if s.phased else ""),
               command="python -m miiii " + " ".join(command(s, runs)),
               wall_s=round(wall, 1), members=recs)
    if s.phased:  # every phase's own record: how far each got, and how long it took (its summary's wall time)
        done = [json.loads((p / "summary.json").read_text()) for p in phases]
        rec["phases"] = [dict(steps=x["steps"], exact=x.get("valid_autoregressive_acc"), wall_s=round(x["wall_s"], 1),
                              resumed=x.get("resumed_from") is not None) for x in done]
        rec["wall_s"] = round(sum(x["wall_s"] for x in rec["phases"]), 1)
    return rec


def score_runs(summary: dict, runs: Path, out: Path) -> list[dict]:
    """Export and score (the verifier's 10,010 cases) every run at EXPORT_AT or above; the files join out/."""
    from experiments.adderboard.score import load, score
    from miiii.export import export_adder

    scores = []
    for rec in summary["settings"]:
        for m in rec["members"]:
            if m["exact"] is None or m["exact"] < EXPORT_AT:
                continue
            run_dir = runs / rec["name"]  # a solo phase's run, or the folder of members (a sweep) or phases (a preset)
            run_dir = run_dir if (run_dir / "summary.json").is_file() else run_dir / m["run"]
            name = f"adder-{rec['params']}p-{rec['name']}" + ("" if rec["init_from"] else f"-{m['run']}")
            path = out / "submissions" / f"{name}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp.py")
            export_adder(run_dir, tmp, name=name, force=True)
            shutil.move(tmp, path)
            scores.append(dict(setting=rec["name"], run=m["run"], file=f"submissions/{path.name}",
                               **score(load(path), 10_000)))
    return scores


def merged(path: Path, new: dict) -> dict:
    """`new`'s settings and scores in place of their namesakes in the summary at `path` (if any), in SEARCH's order."""
    if not path.is_file():
        return new
    old = json.loads(path.read_text())
    names = {r["name"] for r in new["settings"]}
    order = {s.name: k for k, s in enumerate(SEARCH)}  # a setting no longer searched keeps its record, last
    settings = sorted([r for r in old["settings"] if r["name"] not in names] + new["settings"],
                      key=lambda r: order.get(r["name"], len(order)))
    scores = sorted([s for s in old["scores"] if s["setting"] not in names] + new["scores"],
                    key=lambda s: order.get(s["setting"], len(order)))
    return {"qualify": QUALIFY, "settings": settings, "scores": scores}


def results_md(summary: dict) -> str:
    lines = ["# AdderBoard: the smallest trained 10-digit adder of the model family", "",
             "Generated by `python -m experiments.adderboard.study` from `summaries/search.json`; do not edit.", "",
             f"The board's bar: >= {QUALIFY:.0%} of its verifier's 10,010 cases (10 edge cases, then 10,000 pairs of "
             "random.Random(2025)). *Exact match* below is the share of this project's 2,000 held-out pairs decoded "
             "whole (autoregressive, 11 digits); a run at >= "
             f"{EXPORT_AT:.2f} there is exported and scored on the verifier's cases. *Loss* is the final training "
             "loss in nats per answer digit. On 10-digit operands a uniform guess at every digit costs "
             f"{UNIFORM:.2f} and each digit's marginal (the eleventh, the carry out, is 0 or 1) {MARGINALS:.2f}; "
             "runs that learned nothing of the sum stop near 2.27, between the two.", "",
             "| setting | unique params | steps | seed: exact match (lr, loss) | runs at >= 0.99 "
             "| wall (min, shared) |",
             "|---|---|---|---|---|---|"]
    for r in summary["settings"]:
        per = ", ".join(f"{m['seed']}: {m['exact']:.3f} ({m['lr']:g}, {m['train_loss']:.2f})" for m in r["members"])
        hit = sum(m["exact"] is not None and m["exact"] >= 0.99 for m in r["members"])
        after = f" after {r['init_from']}" if r["init_from"] else ""
        lines.append(f"| {r['name']} | {r['params']} | {r['steps']:,}{after} | {per} | {hit} of {len(r['members'])} | "
                     f"{r['wall_s'] / 60:.1f} |")
    phased = [r for r in summary["settings"] if r.get("phases")]
    if phased:
        lines += ["", "## Phased presets, phase by phase", "",
                  "Each phase's held-out exact match at its end and its own wall time (its summary.json; a resumed "
                  "phase's, marked *, is its last session's only). The main table's wall time for these is the sum.",
                  "", "| setting | phase | steps | exact match | wall (min) |", "|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {k} | {x['steps']:,} | {'–' if x['exact'] is None else format(x['exact'], '.4f')} "
                  f"| {x['wall_s'] / 60:.1f}{'*' if x.get('resumed') else ''} |"
                  for r in phased for k, x in enumerate(r["phases"], 1)]
        lines += [f"| {r['name']} | all | {sum(x['steps'] for x in r['phases']):,} | | "
                  f"{sum(x['wall_s'] for x in r['phases']) / 60:.1f} |" for r in phased]
    lines += ["", "## Scored on the verifier's cases", ""]
    if summary["scores"]:
        lines += ["| file | unique params | cases passed | accuracy | qualifies |", "|---|---|---|---|---|"]
        lines += [f"| `{s['file']}` | {s['params']} | {s['passed']:,} of {s['cases']:,} | {s['accuracy']:.2%} | "
                  f"{'yes' if s['accuracy'] >= QUALIFY else 'no'} |" for s in summary["scores"]]
    else:
        lines.append(f"No run has reached {EXPORT_AT:.2f} exact match on the held-out pairs yet: nothing qualifies.")
    lines += ["", "## What each setting asks", ""]
    lines += [f"- **{r['name']}**: {r['why']}. `{r['command']}`" for r in summary["settings"]]
    return "\n".join(lines) + "\n"


def write_bundle(summary: dict, out: Path, check: bool = False) -> int:
    text = results_md(summary)
    if check:
        return same_or_say(out / "results.md", text, f"python -m experiments.adderboard.study --bundle {out}")
    write_text_atomic(out / "results.md", text)
    return 0


def study(args) -> int:
    if args.bundle is not None:
        summary = json.loads((args.bundle / "summaries" / "search.json").read_text())
        return write_bundle(summary, args.bundle, args.check)
    out_folder(args.out)
    if not args.no_train:
        from miiii.cli import main as miiii

        for s in SEARCH:
            if (not args.only or s.name in args.only) and (s.phased or not (args.runs / s.name).exists()):
                if miiii(command(s, args.runs)) != 0:
                    return 1
    settings = [r for s in SEARCH if not args.only or s.name in args.only
                if (r := setting_record(s, args.runs)) is not None]
    if not settings:
        raise ConfigError(f"no setting of the search has finished runs under {args.runs}")
    summary = {"qualify": QUALIFY, "settings": settings}
    summary["scores"] = score_runs(summary, args.runs, args.out)
    if args.only:  # the other settings' records stay as the bundle has them (their runs may be gone)
        summary = merged(args.out / "summaries" / "search.json", summary)
    (args.out / "summaries").mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "summaries" / "search.json", summary)
    return write_bundle(summary, args.out)


def parser() -> OneLineParser:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=Path("runs/adder"), help="where the settings train (runs/adder)")
    ap.add_argument("--out", type=Path, default=Path("runs/adderboard"),
                    help="the bundle (default runs/adderboard, scratch; --out results/adderboard rewrites the "
                         "committed one)")
    ap.add_argument("--only", nargs="+", action="extend", default=None, choices=[s.name for s in SEARCH],
                    help="these settings only (repeatable: --only A B --only C); the bundle's records of the others "
                         "are kept as they are")
    ap.add_argument("--no-train", action="store_true", help="write the bundle from the finished runs as they are")
    ap.add_argument("--bundle", type=Path, default=None,
                    help="regenerate BUNDLE's results.md from its summaries/search.json alone")
    ap.add_argument("--check", action="store_true", help="with --bundle: exit 1 when results.md differs")
    return ap


def main(argv=None) -> int:
    return one_line_errors(study, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
