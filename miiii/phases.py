"""A recipe in phases (presets.PHASED) trained into RUN/phase-1, phase-2, ...: each later phase starts from the one
before (train.init_from); a finished phase is skipped, a stopped one resumed. Two kinds of phase are more than one
run: a *screen* (train.screen = N, the first phase) trains N seeds from train.seed as one vmapped sweep and the next
phase continues its member with the lowest final training loss, with that member's seed, as the board's small
entries screened seeds before their later stages; a *round* (task.replay_hard) first finds the pairs the phase before
decodes wrong (miiii.hard.with_hard_pairs).

A screen's members are one program: their floats are not a lone run's of the same seed (XLA rounds a batched step
otherwise), and a long run amplifies that, so a screen is the sweep itself, not its best seed rerun alone.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from miiii.config import RunConfig, apply_overrides
from miiii.errors import ConfigError
from miiii.rundir import CONFIG, SUMMARY, read_config, read_json
from miiii.sweepmembers import PLAN, RESULT, plan_digest

PICK = "the lowest final training loss"  # how a screen's member is chosen: no held-out pair is read


def finished_file(d: Path) -> Path:
    """The file a phase writes last: a run's summary.json, a screen's sweep.json."""
    return d / (RESULT if (d / PLAN).is_file() else SUMMARY)


def started_file(d: Path) -> Path:
    """The file a phase writes first, before its task is drawn: a run's config.json, a screen's sweep-plan.json."""
    return d / (PLAN if (d / PLAN).is_file() else CONFIG)


def screen_pick(sweep_dir: Path) -> dict:
    """The member a finished screen hands on: of its members that did not diverge, the one with the lowest final
    training loss (ties: the first); its sweep.json row with its run directory as `dir`."""
    from miiii.sweep import member_dir

    rows = [r for r in read_json(Path(sweep_dir) / RESULT)["members"]
            if r["diverged_at"] is None and math.isfinite(r["final"]["train"]["loss"])]
    if not rows:
        raise ConfigError(f"{sweep_dir}: every member of the screen diverged; there is no member to continue")
    best = min(rows, key=lambda r: (r["final"]["train"]["loss"], r["member"]))
    return best | {"dir": str(member_dir(sweep_dir, best["member"]))}


def phase_summary(d: Path) -> dict | None:
    """What a finished phase hands on (None: not finished): its run's summary.json, or a screen's chosen member's
    with the screen's wall time and `screen` = {members, member, seed, train_loss}."""
    if not finished_file(d).is_file():
        return None
    if not (d / PLAN).is_file():
        return read_json(d / SUMMARY)
    sweep, pick = read_json(d / RESULT), screen_pick(d)
    return read_json(Path(pick["dir"]) / SUMMARY) | dict(
        wall_s=sweep["wall_s"], resumed_from=sweep["resumed_from"] or None,  # a fresh sweep's is step 0
        screen=dict(members=sweep["n_members"], member=pick["member"], seed=pick["seed"],
                    train_loss=pick["final"]["train"]["loss"]))


def _same_screen(d: Path, cfg: RunConfig, n: int) -> bool:
    plan = read_json(d / PLAN)
    return plan_digest(RunConfig.from_dict(plan["config"]), int(plan["seeds"]), {}) == plan_digest(cfg, n, {})


def _as_saved(cfg: RunConfig, d: Path) -> RunConfig:
    """`cfg` with the paths it names (train.init_from, task.replay) spelled as phase `d`'s config.json spells them
    wherever both name the same file: the same run folder given as a symlink, with ./ or as an absolute path trains
    the same phase, so it is skipped or resumed as given the first time (a folder moved elsewhere is not: its saved
    paths name the old place)."""
    if not (d / CONFIG).is_file():
        return cfg
    saved = read_config(d)

    def same_file(a: str, b: str) -> bool:  # init_from's RUN@STEP: the same step of the same folder
        (ra, _, sa), (rb, _, sb) = (v.rpartition("@") if v.rpartition("@")[2].isdigit() else (v, "", "")
                                    for v in (a, b))
        return sa == sb and Path(ra).resolve() == Path(rb).resolve()

    pairs = (("train.init_from", cfg.train.init_from, saved.train.init_from),
             ("task.replay", cfg.task.replay, saved.task.replay))
    sets = [f"{key}={theirs}" for key, ours, theirs in pairs if ours and theirs and ours != theirs
            and same_file(ours, theirs)]
    return apply_overrides(cfg, sets) if sets else cfg


def _finished(d: Path, same: bool, name: str, k: int) -> None:
    """A finished phase is skipped only when it was trained with the config the recipe gives it now."""
    if not same:
        raise ConfigError(f"{d} was trained with another config than {name}'s phase {k} (or another --seed); choose "
                          "a new --run-dir, or give the --seed it was trained with")
    print(f"{d}: finished")


def train_phases(name: str, run_dir: Path, seed: int | None, budget: int, report, progress: bool = True,
                 tensorboard: bool = True, profile=None) -> Path:
    """Train the recipe `name` into run_dir (see the module); `seed` sets every phase's train.seed (None: the
    recipe's), but the phase after a screen takes its chosen member's; `report(summary, dir)` after each run trained
    here. Returns the last phase's directory."""
    from miiii.hard import round_file, with_hard_pairs
    from miiii.presets import phase_configs
    from miiii.runner import resume_run, train_run
    from miiii.sweep import resume_sweep, run_sweep

    configs = phase_configs(name)
    for k, c in enumerate(configs, 1):  # before anything trains
        if c.train.screen < 0:
            raise ConfigError(f"{name}: train.screen = {c.train.screen} in phase {k}: a screen's seeds, at least 1")
        if c.train.screen and (k != 1 or k == len(configs)):
            raise ConfigError(f"{name}: train.screen = {c.train.screen} in phase {k} of {len(configs)}: a screen "
                              "starts its members fresh and a later phase continues its best, so it is a recipe's "
                              "first phase and not its only one (python -m miiii sweep --seeds N screens alone)")
    before = replayed = picked = None
    for k, cfg in enumerate(configs, 1):
        d = Path(run_dir) / f"phase-{k}"
        sets = [] if seed is None else [f"train.seed={seed}"]
        sets += [] if before is None else [f"train.init_from={before}"]
        sets += [] if picked is None else [f"train.seed={picked}"]
        cfg, picked = apply_overrides(cfg, sets), None
        if n := cfg.train.screen:
            base = replace(cfg, train=replace(cfg.train, screen=0))  # the sweep's own plan: a plain sweep's
            if finished_file(d).is_file():
                _finished(d, _same_screen(d, base, n), name, k)
            elif d.exists():
                resume_sweep(d, progress=progress, tensorboard=tensorboard, expect=(base, n, {}))
            else:
                run_sweep(base, n, {}, d, progress=progress, tensorboard=tensorboard, profile=profile,
                          record_budget=budget)
            pick = screen_pick(d)
            before, picked = Path(pick["dir"]), pick["seed"]
            print(f"{d}: member {pick['member']} (seed {pick['seed']}) has {PICK} of the {n}, "
                  f"{pick['final']['train']['loss']:.4f}; phase {k + 1} continues it")
            continue
        if cfg.task.replay_hard:
            cfg = with_hard_pairs(cfg, round_file(run_dir, k), before, replayed)
        cfg = _as_saved(cfg, d)
        replayed = Path(cfg.task.replay) if cfg.task.replay_hard else None
        if (d / SUMMARY).is_file():
            _finished(d, read_config(d) == cfg, name, k)
        elif d.exists():
            report(resume_run(d, cfg, progress=progress, tensorboard=tensorboard), d)
        else:
            report(train_run(cfg, d, progress=progress, record_budget=budget, tensorboard=tensorboard,
                             profile=profile), d)
        before = d
    return before
