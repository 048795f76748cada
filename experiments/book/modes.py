"""The book study's modes beside the replication (python -m experiments.book): the runs it trains or reuses
(`configs`, `train_or_reuse`, the seeds' runs, the recipe's sweeps), and each mode's files: --seeds (seeds.md),
--unstated (unstated.md), --gap (gap.md). The command line and the replication itself: study.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from experiments.book.figures import fig_gap, fig_seed_curves, fig_unstated  # noqa: E402
from experiments.book.records import (  # noqa: E402
    ABLATIONS,
    distribution,
    finished_sweeps,
    gap_provenance,
    gap_samples,
    seed_provenance,
    seed_record,
    sweep_records,
    sweeps_provenance,
    torch_book_runs,
    unstated_groups,
)
from experiments.book.tables import gap_md, seeds_md, unstated_md  # noqa: E402
from miiii.config import ConfigError, RunConfig, apply_overrides  # noqa: E402
from miiii.presets import get_preset  # noqa: E402
from miiii.provenance import git_commit, to_jsonable  # noqa: E402
from miiii.runner import train_run  # noqa: E402
from miiii.sweep import make_members, member_dir, resume_sweep, run_sweep  # noqa: E402
from miiii.train import steps_per_epoch  # noqa: E402


def configs(smoke: bool, ablation_epochs: int | None) -> dict[str, RunConfig]:
    if smoke:  # CPU minutes: the tiny presets, shorter still
        add = apply_overrides(get_preset("addition-tiny"), ["steps=400", "eval_every=20", "chunk=100"])
        rev = apply_overrides(get_preset("reversal-tiny"), ["steps=300", "eval_every=20", "chunk=100"])
    else:
        add, rev = get_preset("addition-97"), get_preset("reversal-97")  # what results/book/ measured
    out = {"addition": add, "reversal": rev}
    for name, (switches, _) in ABLATIONS.items():
        cfg = apply_overrides(add, switches)
        if ablation_epochs and not smoke:
            spe = steps_per_epoch(cfg.train, cfg.task.n_train)
            cfg = replace(cfg, train=replace(cfg.train, steps=ablation_epochs * spe))
        out[name] = cfg
    return out


def train_or_reuse(name: str, cfg: RunConfig, run_dir: Path) -> Path:
    if (run_dir / "summary.json").is_file():
        print(f"{name}: reusing {run_dir}")
        return run_dir
    t0 = time.perf_counter()
    train_run(cfg, run_dir, progress=True)
    print(f"{name}: trained in {time.perf_counter() - t0:.0f} s")
    return run_dir


def seed_runs(out: Path, n: int, smoke: bool) -> dict[str, list[dict]]:
    """Addition and reversal at the book's recipe for seeds 0 .. n-1 (seed 0 is the main run), each evaluated."""
    base = configs(smoke, None)
    reports = {}
    for name in ("addition", "reversal"):
        reports[name] = []
        for seed in range(n):
            cfg = replace(base[name], train=replace(base[name].train, seed=seed))
            run_dir = train_or_reuse(f"{name} seed {seed}", cfg, out / "runs" / (name if seed == 0 else
                                                                                 f"{name}-s{seed}"))
            reports[name].append(seed_record(run_dir, seed))
    return reports


def seed_study(out: Path, n: int, smoke: bool, with_torch: bool) -> str:
    jax_runs = seed_runs(out, n, smoke)
    torch_runs, torch_meta = {}, {}
    for name in ("addition", "reversal"):
        f = out / f"torch_book_{name}.json"
        if with_torch and not f.is_file():
            from experiments.book import torch_loop  # needs the optional torch extra

            torch_loop.main(["--task", name, "--seeds", str(n), "--out", str(out)] +
                            (["--epochs", "3"] if smoke else []))
        if f.is_file():
            torch_meta[name] = json.loads(f.read_text())
            torch_runs[name] = torch_book_runs(f)[:n]
    fig_seed_curves(jax_runs, torch_runs, out)
    (out / "seeds.json").write_text(json.dumps(to_jsonable(dict(jax=jax_runs, torch=torch_runs)), indent=1))
    text = seeds_md(jax_runs, torch_runs, smoke, seed_provenance(out, jax_runs, torch_meta))
    (out / "seeds.md").write_text(text)
    return text


def unstated_sweep(out: Path, n: int, grid: dict, smoke: bool, first_seed: int = 0) -> Path:
    """The addition recipe over seeds first_seed .. first_seed + n - 1 x `grid` as one sweep, trained into
    OUT/runs/unstated-GRID[_seeds=A-B] unless it is there (then checked to be that sweep)."""
    slug = "_".join(f"{k.split('.')[-1]}={','.join(f'{v:g}' for v in vals)}" for k, vals in grid.items())
    return recipe_sweep(out / "runs" / f"unstated-{slug}", configs(smoke, None)["addition"], n, grid, first_seed)


def recipe_sweep(sweep_dir: Path, base: RunConfig, n: int, grid: dict, first_seed: int = 0) -> Path:
    """`base` over seeds first_seed .. first_seed + n - 1 x `grid` as one vmapped sweep, trained into
    SWEEP_DIR[_seeds=A-B] unless it is there (then checked to be that sweep: a ConfigError if not)."""
    base = replace(base, train=replace(base.train, seed=first_seed))
    if first_seed:
        sweep_dir = sweep_dir.with_name(f"{sweep_dir.name}_seeds={first_seed}-{first_seed + n - 1}")
    if (sweep_dir / "sweep-plan.json").is_file() and not (sweep_dir / "sweep.json").is_file():
        resume_sweep(sweep_dir, tensorboard=False, expect=(base, n, grid))  # an interrupted sweep goes on
    elif not (sweep_dir / "sweep.json").is_file():
        run_sweep(base, n, grid, sweep_dir, tensorboard=False)
    result = json.loads((sweep_dir / "sweep.json").read_text())
    want = [m.config for m in make_members(base, n, grid)]
    # compared as configs: a sweep written before a config field existed reads back with that field's default
    got = [RunConfig.from_dict(json.loads((member_dir(sweep_dir, m["member"]) / "config.json").read_text()))
           for m in result["members"]]
    if got != want:
        raise ConfigError(f"{sweep_dir} holds another sweep than --seeds {n} of this recipe; "
                          "move it away to train this one")
    return sweep_dir


def unstated_study(out: Path, n: int, grids: list[dict], smoke: bool, first_seed: int = 0) -> str:
    """Each grid's sweep (trained or reused), then one table over every setting of every sweep in OUT/runs."""
    for grid in grids:
        unstated_sweep(out, n, grid, smoke, first_seed)
    sweeps = finished_sweeps(out)
    groups = unstated_groups(out, sweeps)
    prov = sweeps_provenance(out, sweeps)
    fig_unstated(groups, out)
    (out / "unstated.json").write_text(json.dumps(to_jsonable({f"wd={k[0]:g} clip={k[1]:g}": v
                                                              for k, v in groups.items()}), indent=1))
    text = unstated_md(groups, prov)
    (out / "unstated.md").write_text(text)
    return text


def batches98_runs(out: Path, n: int, smoke: bool, first_seed: int = 0) -> list[dict]:
    """This project's addition with the DataLoader's 98 batches an epoch (preset addition-98) over seeds as one
    vmapped sweep into OUT/runs/gap-addition-98[_seeds=A-B] (reused when done), then the records of every such
    sweep in OUT/runs, sorted by seed, kept in OUT/batches98.json (which --gap reads when the runs are gone)."""
    base = configs(True, None)["addition"] if smoke else get_preset("addition-98")
    base = replace(base, train=replace(base.train, last_batch="keep"))  # smoke: the tiny recipe, remainder kept
    recipe_sweep(out / "runs" / "gap-addition-98", base, n, {}, first_seed)
    sweeps, runs = finished_sweeps(out, "gap-addition-98*"), {}
    for r in sweep_records(out, sweeps):
        runs.setdefault(r["seed"], r)  # a seed in two sweeps: the first by name
    records = [runs[seed] for seed in sorted(runs)]
    (out / "batches98.json").write_text(json.dumps(to_jsonable(dict(provenance=sweeps_provenance(out, sweeps),
                                                                    runs=records)), indent=1))
    return records


def gap_study(out: Path, n: int = 0, smoke: bool = False, first_seed: int = 0) -> str:
    """The gap table over every sample OUT holds, after training this project's 98-batch sweep when n > 0."""
    head = {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M %Z")}  # before batches98.json is rewritten
    if n:
        batches98_runs(out, n, smoke, first_seed)
    samples = gap_samples(out)
    if not samples:
        raise ConfigError(f"{out} holds none of seeds.json, unstated.json, batches98.json, torch_book_addition*.json: "
                          "run --seeds, --unstated, --gap --seeds N or python -m experiments.book.torch_loop first")
    out.mkdir(parents=True, exist_ok=True)
    text, results = gap_md(samples, gap_provenance(out, samples, head))
    fig_gap(samples, out)
    (out / "gap.json").write_text(json.dumps(to_jsonable(dict(comparisons=results, samples=[
        {k: v for k, v in smp.items() if k != "runs"} | dict(distribution=distribution(smp["runs"], smp["budget"]))
        for smp in samples])), indent=1))
    (out / "gap.md").write_text(text)
    return text
