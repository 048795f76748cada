"""Replicate the paper: train nanda, miiii, miiii-masked, miiii-basis, miiii with λ = 0 and miiii without dropout
(the appendix), draw every figure, and write results.md (each claim of the paper beside the value measured).

    python -m experiments.paper            # `make paper`: the paper's recipe (p = 113), GPU scale
    python -m experiments.paper --smoke    # `make paper-cpu`: the same pipeline at CPU scale
    python -m experiments.paper --plan     # what it will write and need (disk, device memory, time); no training

Expected runtime. Full: one nanda run of 40,000 and five miiii runs of 65,536 full-batch steps (p = 113,
d 128 / d 256; miiii on 50 % of the 12,769 samples, as the original code): GPU work, hours on a CPU. Smoke
(--smoke): p = 53, d 96, 70 % train, 3k (nanda) / 25k (miiii) steps (miiii-cpu's recipe), every role but the
appendix's no-dropout run unless --roles names it (about 10-15 minutes a miiii run on 2 CPU cores). Each
results.md's provenance table records its training and report wall time, the machine and its load: the measured
figure for that bundle.

Expected result: results.md, each claim judged as written over the seeds (results/paper-cpu/results.md and
results/paper-cpu-original/results.md are the committed CPU-scale ones; results/paper/ and results/paper-original/
the full-scale ones, from the miiii role's first seed on an H200 so far).
`python -m experiments.paper.report BUNDLE` regenerates a results.md from the bundle's summaries/ without the runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from experiments.paper.report import write_results
from experiments.paper.resources import describe, role_plan
from miiii.claim import check_new
from miiii.compile_cache import setup_compile_cache
from miiii.config import ConfigError, RecordConfig, apply_overrides
from miiii.errors import OneLineParser, lead, one_line_errors, out_folder, raise_interrupt
from miiii.plots import draw_all
from miiii.presets import as_original_code, get_preset
from miiii.provenance import provenance
from miiii.record import GiB, check_budget
from miiii.run import load_run
from miiii.runner import build, prepare, resume_run, train_run
from miiii.sweep import make_members, member_dir, resume_sweep, run_sweep
from miiii.sweepmembers import plan_is

# role -> (full preset, CPU preset); the λ = 0 run is miiii with grokfast switched off.
ROLES = {
    "nanda": ("nanda", "nanda-paper-cpu"),
    "miiii": ("miiii", "miiii-paper-cpu"),
    "masked": ("miiii-masked", "miiii-masked-paper-cpu"),
    "basis": ("miiii-basis", "miiii-basis-paper-cpu"),
    "nogrokfast": ("miiii", "miiii-paper-cpu"),
    "nodropout": ("miiii", "miiii-paper-cpu"),
}
EXTRA = {"nogrokfast": ["optim.grokfast=none"], "nodropout": ["model.dropout=0"]}
# --variant original: the same roles as the original code ran them (presets.as_original_code: truncated he_normal,
# grokfast EMA from zeros, high digit first), and nanda as the paper ran it (the paper's model and recipe on nanda)
# instead of Nanda et al.'s recipe.
VARIANTS = {
    "project": "this codebase's definitions (docs/definitions.md §5): plain He-normal init, grokfast EMA from the "
               "first gradient, low digit first; nanda with Nanda et al.'s recipe",
    "original": "the original code's choices: truncated he_normal with its fan-ins, grokfast EMA from zeros, high "
                "digit first; nanda with the paper's model and recipe",
}
ORIGINAL_NANDA = ("nanda-original", "nanda-original-paper-cpu")


def role_config(role: str, smoke: bool, variant: str):
    """The role's preset, as this codebase defines it (variant project) or as the original code ran it."""
    if variant == "original":
        return get_preset(ORIGINAL_NANDA[smoke]) if role == "nanda" else as_original_code(
            get_preset(ROLES[role][smoke]))
    return get_preset(ROLES[role][smoke])
# The appendix run states no number: at CPU scale it is left out by default (each miiii run is 25k steps, 10-15
# minutes on 2 cores); `--roles ... nodropout` adds it back, as `make results` does.
SMOKE_ROLES = [r for r in ROLES if r != "nodropout"]
# Per-step recording for Fig. 16 (MLP neurons over the whole grid, attention) and, for nanda only, Nanda's progress
# measures (logits over the grid, W_E): applied only when the config has a `record` section (miiii/record.py). miiii's
# logits are left out: 29 heads over 12,769 inputs would be 80 MB a row (10 GiB for the run), and nothing reads them.
ACTS = "blocks.0.mlp.hook_post,blocks.0.attn.hook_pattern"


def _record(role: str) -> list[str]:
    return [f"record.acts={ACTS}" + (",logits" if role == "nanda" else ""), "record.params=W_E,W_pos",
            "record.inputs=grid"]


def _divisor_at_most(n: int, k: int) -> int:
    """The largest divisor of n that is <= k (the recorder needs its rates to divide train.chunk)."""
    return max(d for d in range(1, min(n, k) + 1) if n % d == 0)


def overrides(cfg, role: str, smoke: bool, steps: int | None) -> list[str]:
    """About 100 rows of activations (smoke: every 50 steps, or every 1 % of a longer run, so 25k steps of d 96
    stay near 0.4 GiB a run) or 80-260 (full: every 256 steps for miiii, so Table 3's step 256 is a row),
    parameters 8x as often."""
    extra = EXTRA.get(role, []) + ([f"steps={steps}"] if steps is not None else [])
    chunk, n = cfg.train.chunk, steps or cfg.train.steps
    every = _divisor_at_most(chunk, max(50, n // 100) if smoke else 512 if role == "nanda" else 256)
    extra += _record(role)
    extra += [f"record.every={every}", f"record.params_every={_divisor_at_most(chunk, every // 8 or 1)}"]
    return extra


def seeds_config(cfg):
    """The config of a role's extra seeds: the next seeds, no recording (the sweep's members)."""
    return replace(seed_config(cfg, 1), record=RecordConfig())


def seed_dir(out: Path, role: str, k: int) -> Path:
    """The k-th extra seed of a role trained as its own recorded run (--recorded-seeds)."""
    return out / "runs" / f"{role}-s{k}"


def seed_config(cfg, k: int):
    """The role's config with seed train.seed + k, recording as the first seed does."""
    return replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + k))


def plan(out: Path, smoke: bool, roles, reuse: bool, steps: int | None = None, sets: list[str] = (),
         seeds: int = 1, variant: str = "project", recorded: bool = False) -> dict:
    """Every role's config, built and checked before anything trains (a ConfigError names the first fault): the
    config (validate, the task, the batch size), the recording (its names against the model, its size against the
    default budget), the extra seeds' sweep, and the directories each would write (not an earlier run's, unless
    --reuse)."""
    out_folder(out)
    if not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds must be 1 .. {MAX_SEEDS}, got {seeds:,}")
    held = held_seeds(out, roles)
    if held and seeds < max(held.values()):
        role = max(held, key=held.get)
        raise ConfigError(f"{out} holds {held[role]} seeds of {role}; --seeds {seeds} would replace them with fewer: "
                          f"pass --seeds {held[role]} or another --out")
    cfgs = {}
    for role in roles:
        cfg = role_config(role, smoke, variant)
        cfg = apply_overrides(cfg, [*sets, *overrides(cfg, role, smoke, steps)])
        task = prepare(cfg)
        check_budget(build(cfg, task)[1], out, 2 * GiB)
        run_dir, sweep_dir = out / "runs" / role, out / "runs" / f"{role}-seeds"
        solo = [run_dir] + ([seed_dir(out, role, k) for k in range(1, seeds)] if recorded else [])
        for d in solo:
            if not (reuse and ((d / "summary.json").is_file() or (d / "ckpt.json").is_file())):
                check_new(d)  # --reuse or not, an earlier run is never written over
        if seeds > 1 and not recorded:
            make_members(seeds_config(cfg), seeds - 1, {})
            done, planned = (sweep_dir / "sweep.json").is_file(), (sweep_dir / "sweep-plan.json").is_file()
            if sweep_dir.exists() and not (reuse and (done or planned)):  # --reuse resumes an interrupted sweep
                why = "neither a finished sweep nor an interrupted one" if reuse else "pass --reuse to use it"
                raise ConfigError(f"{sweep_dir} already exists ({why}); remove it or choose another --out")
            if reuse and planned and not done and not plan_is(sweep_dir, seeds_config(cfg), seeds - 1, {}):
                # checked now, not after the runs before it have trained
                raise ConfigError(f"{sweep_dir} is an interrupted sweep of other seeds or settings than --seeds "
                                  f"{seeds} with these --steps/--set; give the ones it was started with, or remove it")
        cfgs[role] = cfg
    return cfgs


# a stop asked in the chunk that ended a run (StopFlag remembers it): the study stops before its next run or report
STOPPED = "interrupted once a run was complete: the runs so far are kept; run again with --reuse to go on"
MAX_SEEDS = 256  # a bound that says so at once (a billion seeds would list a run directory each before any check)


def held_seeds(out: Path, roles) -> dict[str, int]:
    """role -> how many seeds the bundle in `out` holds (its summaries/ROLE-K.json), for the roles asked for."""
    found = {}
    for role in roles:
        n = len(list((out / "summaries").glob(f"{role}-[0-9]*.json")))
        if n:
            found[role] = n
    return found


def train_role(role: str, cfg, run_dir: Path, reuse: bool, progress: bool) -> None:
    """The role's recorded run (figures, Table 3): reused, resumed (bit-identical) or trained."""
    if reuse and (run_dir / "summary.json").is_file():
        print(f"{role}: reusing {run_dir}", flush=True)
    elif reuse and (run_dir / "ckpt.json").is_file():  # an interrupted run: continue it, bit-identical
        resume_run(run_dir, progress=progress)
        print(f"{role}: resumed {run_dir}", flush=True)
    else:
        t = time.perf_counter()
        s = train_run(cfg, run_dir, progress=progress)
        done = sum(v is not None for v in s["grok_step"].values())
        print(f"{role}: {time.perf_counter() - t:.0f} s, {done}/{len(s['grok_step'])} tasks grok", flush=True)


def train_seeds(role: str, cfg, n: int, sweep_dir: Path, reuse: bool, progress: bool) -> list[Path]:
    """Seeds cfg.train.seed + 1 ... + n as one vmapped sweep without recording (metrics, summaries, final params)."""
    if not (reuse and (sweep_dir / "sweep.json").is_file()):
        cfg = seeds_config(cfg)
        t = time.perf_counter()
        if (sweep_dir / "sweep-plan.json").is_file() and not (sweep_dir / "sweep.json").is_file():
            res = resume_sweep(sweep_dir, progress=progress, expect=(cfg, n, {}))  # an interrupted sweep goes on
        elif sweep_dir.exists():
            raise ConfigError(f"{sweep_dir} holds something other than an interrupted sweep; remove it and run again")
        else:
            res = run_sweep(cfg, n, {}, sweep_dir, progress=progress)
        done = [sum(v is not None for v in m["grok_step"].values()) for m in res["members"]]
        print(f"{role}: {n} more seeds in {time.perf_counter() - t:.0f} s, tasks grokked per seed {done}", flush=True)
    return [member_dir(sweep_dir, i) for i in range(n)]


def run_all(out: Path, smoke: bool, roles, reuse: bool, progress: bool, steps: int | None = None,
            sets: list[str] = (), seeds: int = 1, variant: str = "project", recorded: bool = False) -> dict[str, list]:
    """role -> its runs, seed order: the recorded run (train.seed) first, then the other seeds (each recorded as the
    first with `recorded`, else one vmapped sweep without recording). Every role is planned (`plan`: built and
    checked) before the first trains."""
    runs = {}
    for role, cfg in plan(out, smoke, roles, reuse, steps, sets, seeds, variant, recorded).items():
        train_role(role, cfg, out / "runs" / role, reuse, progress)
        raise_interrupt(STOPPED)
        dirs = [out / "runs" / role]
        if recorded:
            for k in range(1, seeds):
                train_role(f"{role} seed +{k}", seed_config(cfg, k), seed_dir(out, role, k), reuse, progress)
                raise_interrupt(STOPPED)
                dirs.append(seed_dir(out, role, k))
        elif seeds > 1:
            dirs += train_seeds(role, cfg, seeds - 1, out / "runs" / f"{role}-seeds", reuse, progress)
            raise_interrupt(STOPPED)
        runs[role] = [load_run(d) for d in dirs]
    return runs


def paper_provenance(runs: dict, args) -> dict:
    """What a reader needs to trust or redo results.md: the code, the machine, the numerics, the seeds."""
    s = next(iter(runs.values()))[0].summary
    seeds = sorted({r.config.train.seed for rs in runs.values() for r in rs})
    precision = ", ".join(sorted({r.summary.get("precision", r.config.train.precision) for rs in runs.values()
                                  for r in rs}))
    return provenance(s, precision) | {"seeds": f"{len(seeds)} per role: {', '.join(map(str, seeds))}",
                                       "variant": VARIANTS[args.variant],
                                       "command": "python -m experiments.paper " + " ".join(args.argv)}


def main(argv=None) -> int:
    """The study; bad input (a --set, --out, --steps, --seeds) is one `error:` line and exit status 2 before anything
    trains, a write error (disk full) one line and exit status 1."""
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--smoke", action="store_true",
                    help="CPU scale (p = 53, d 96, 3k / 25k steps: the preset miiii-cpu's recipe)")
    ap.add_argument("--out", type=Path, default=None,
                    help="the bundle (default runs/paper[-cpu][-original], a scratch folder; --out results/paper-cpu "
                         "etc. rewrites a committed one, as `make results` does, and never with fewer seeds than it "
                         "holds)")
    ap.add_argument("--roles", nargs="+", default=None, choices=list(ROLES),
                    help="which runs (default: all six; with --smoke all but nodropout, the appendix run); "
                         "results.md covers the claims these runs support")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse finished runs under OUT/runs and resume interrupted ones instead of retraining")
    ap.add_argument("--steps", type=int, default=None, help="override every run's train.steps (quick checks)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every run (as `train --set`), e.g. task.train_frac=0.5")
    ap.add_argument("--seeds", type=int, default=1,
                    help="seeds per role (default 1): the recorded run, then N-1 more seeds as one vmapped sweep "
                         "without recording; every claim reports in how many seeds it holds")
    ap.add_argument("--recorded-seeds", action=argparse.BooleanOptionalAction, default=None,
                    help="train every seed as its own recorded run (activations, checkpoints: Table 3 and every "
                         "figure measure over all seeds) instead of one sweep without recording; default on with "
                         "--smoke (on CPU a sweep saves little), off at full scale")
    ap.add_argument("--variant", choices=list(VARIANTS), default="project",
                    help="; ".join(f"{k}: {v}" for k, v in VARIANTS.items()) + " (default project)")
    ap.add_argument("--train-only", action="store_true",
                    help="train (or reuse) the runs and stop before the figures and results.md: several of these "
                         "with different --roles can share one GPU; a last call with --reuse then draws and reports")
    ap.add_argument("--plan", action="store_true",
                    help="print the plan and exit without training: per role and seed the bytes of its recording, "
                         "checkpoints and metrics, their sum against the free disk, each program's device memory "
                         "against the device's, and the wall time from a short timed segment of each role on this "
                         "device (the study prints the same before it trains, and refuses a plan that does not fit)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars (logs, CI)")
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    return one_line_errors(study, args)


def study(args) -> int:
    setup_compile_cache()  # ~/.cache/miiii/jax, MIIII_COMPILE_CACHE=DIR or off (miiii/compile_cache.py)
    out = args.out or Path("runs") / (("paper-cpu" if args.smoke else "paper") +
                                         ("-original" if args.variant == "original" else ""))
    t0 = time.perf_counter()
    roles = args.roles or (SMOKE_ROLES if args.smoke else list(ROLES))
    recorded = args.smoke if args.recorded_seeds is None else args.recorded_seeds
    cfgs = plan(out, args.smoke, roles, args.reuse, args.steps, args.sets, args.seeds, args.variant, recorded)
    if args.plan or not args.reuse:  # a reused study's plan is its first one: nothing new is measured
        def planned(timed: bool):
            return describe([role_plan(role, cfg, args.seeds, recorded, timed) for role, cfg in cfgs.items()], out)

        # the bytes first: a plan the disk cannot hold is refused before its programs are compiled and timed
        lines, problems = planned(timed=False)
        if not problems:
            lines, problems = planned(timed=True)
        print("\n".join(lines), flush=True)
        if problems:
            raise ConfigError("the plan does not fit: " + "; ".join(problems) + " (fewer --seeds or --roles, or "
                              "--set record.every=K / ckpt.keep_log=K)")
        if args.plan:
            return 0
    runs = run_all(out, args.smoke, roles, args.reuse, not args.no_progress, args.steps, args.sets, args.seeds,
                   args.variant, recorded)
    t_train = time.perf_counter() - t0
    if args.train_only:
        print(f"trained {', '.join(roles)} in {t_train / 60:.1f} min under {out / 'runs'}; run again with --reuse "
              "to draw the figures and write results.md")
        return 0
    first = {role: rs[0] for role, rs in runs.items()}
    head = paper_provenance(runs, args)  # the commit before this call rewrites the bundle's tracked files
    for stale in (out / "figures").glob("*.*"):  # only this study's runs' figures: none of an earlier one stays
        stale.unlink()
    paths = draw_all([r.path for r in first.values()], out / "figures")
    wall = time.perf_counter() - t0
    every = [r for rs in runs.values() for r in rs]
    run_s = sum(r.summary.get("wall_s", 0.0) for r in every)  # each run's own training loop (report.py: resumes)
    notes = (f"Scale: {'CPU smoke (--smoke)' if args.smoke else 'paper recipe'}. Figures are drawn from each role's "
             f"first (recorded) seed: {len(paths) // 2} figures (PNG + PDF) in `{out / 'figures'}`.")
    prov = head | {
        "wall time": f"{wall / 60:.1f} min ({t_train / 60:.1f} min training{', reused runs' if args.reuse else ''}, "
                     f"{(wall - t_train) / 60:.1f} min figures); the {len(every)} runs' own training loops took "
                     f"{run_s / 60:.1f} min in all",
        "host": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end"}
    path = write_results(runs, out, notes=notes, provenance=prov)
    print(path.read_text())
    print(f"wrote {path} and {len(paths)} figure files in {wall / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
