"""Command line: `python -m miiii COMMAND` runs what `cliargs.build_parser` parsed (train, sweep, presets, figures,
compare, film, page, book, export-adder, export-tl, doctor). Bad input exits with status 2 and one message."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path

from miiii.cliargs import build_parser
from miiii.compile_cache import setup_compile_cache
from miiii.config import SECTIONS, ConfigError, apply_overrides, resolve_key, shown
from miiii.errors import (
    DONE_THEN_STOPPED,
    carrying_stops,
    deferred_interrupts,
    interrupt_pending,
    remember_interrupt,
    take_interrupt,
)
from miiii.files import RunError, check_output
from miiii.gpu import check_backend
from miiii.presets import DEFAULT_PRESET, PHASED, PRESETS, get_preset, measured_time

COMPILES = ("train", "sweep", "book", "llc")  # the commands that compile: they use the persistent compilation cache


def cmd_book(args) -> int:
    from miiii.bookeval import evaluate_to_file

    evaluate_to_file(args.run_dir)
    return 0


def cmd_llc(args) -> int:
    from miiii.llc import LLCConfig, llc_over_run
    from miiii.run import load_run
    from miiii.rundir import LLC, write_llc_report

    for k in ("chains", "draws"):
        if getattr(args, k) < 1:
            raise ConfigError(f"--{k} must be at least 1")
    if args.burnin < 0 or not args.lr > 0 or args.gamma < 0 or args.nbeta < 0:
        raise ConfigError("--lr must be positive; --gamma, --nbeta and --burnin non-negative")
    cfg = LLCConfig(lr=args.lr, gamma=args.gamma, nbeta=args.nbeta, chains=args.chains, draws=args.draws,
                    burnin=args.burnin, batch=args.batch, seed=args.seed)
    report = llc_over_run(load_run(args.run_dir), args.steps, cfg)
    write_llc_report(args.run_dir, report)
    print(f"LLC (nβ {report['nbeta']:.1f}, batch {report['batch']}, {cfg.chains} chains x {cfg.draws} draws):")
    for s, v, sd in zip(report["steps"], report["llc"], report["llc_std"], strict=True):
        print(f"  step {s:>7}: {v:9.3f} ± {sd:.3f}")
    print(f"wrote {args.run_dir / LLC}")
    return 0


def cmd_export_adder(args) -> int:
    from miiii.export import export_adder

    meta = export_adder(args.run_dir, args.out, force=args.force)
    print(f"wrote {args.out}: {meta['name']}, {meta['params']:,} parameters")
    return 0


def cmd_export_tl(args) -> int:
    from miiii.transformerlens import export_tl, load_lines

    cfg = export_tl(args.run_dir, args.out_dir, args.step)
    print(f"wrote {args.out_dir}/model.safetensors and config.json: step {cfg['miiii']['steps']}, "
          f"{cfg['n_layers']} layer(s), d_model {cfg['d_model']}, d_vocab_out {cfg['d_vocab_out']}; load it in "
          f"TransformerLens 3.x with\n")
    print(load_lines(args.out_dir, 3))
    print("\nor in TransformerLens 4.x with\n")
    print(load_lines(args.out_dir, 4))
    return 0


def cmd_doctor(args) -> int:
    from miiii.doctor import doctor

    return doctor()


def cmd_presets(args) -> int:
    for name in args.names:
        if name in PHASED:
            print(f"# {name}: {PHASED[name][0]}")
            for k, (preset, *sets) in enumerate(PHASED[name][1], 1):
                print(f"phase {k}: {preset} " + " ".join(f"--set {s}" for s in sets)
                      + (f" (from phase {k - 1}'s final parameters)" if k > 1 else ""))
            continue
        cfg, desc = get_preset(name), PRESETS[name][1]  # get_preset: an unknown name is one error line
        took = measured_time(name)
        print(f"# {name}: {desc}" + (f" [measured: {took}]" if took else ""))
        for sec, values in cfg.to_dict().items():
            for key, value in values.items():
                print(f"{sec}.{key} = {value!r}")
        print(f"# train it: python -m miiii train --preset {name} [--set KEY=VALUE ...]")
    if args.names:
        return 0
    width = max(map(len, [*PRESETS, *PHASED]))
    for name, (_, desc) in PRESETS.items():
        took = measured_time(name)  # from the committed record (results/timings), never typed in a description
        print(f"{name:<{width}}  {desc}" + (f" [measured: {took}]" if took else ""))
    for name, (desc, phases) in PHASED.items():
        print(f"{name:<{width}}  {desc} [{len(phases)} phases: train --preset {name} [--seed S] --run-dir D]")
    if args.keys:
        print("\nconfig keys (--set section.key=value):")
        for sec, typ in SECTIONS.items():
            for f in typ.__dataclass_fields__.values():
                print(f"  {sec}.{f.name} = {f.default!r}")
    return 0


def resolve_config(args, base=None):
    cfg = get_preset(args.preset or DEFAULT_PRESET) if args.preset or base is None else base
    extra = list(args.overrides)
    if args.steps is not None:
        extra.append(f"train.steps={args.steps}")
    if args.seed is not None:
        extra.append(f"train.seed={args.seed}")
    if getattr(args, "init_from", None) is not None:
        extra.append(f"train.init_from={args.init_from}")
    return apply_overrides(cfg, extra)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """`2GiB`, `500MB`, `1.5gb`, `123456` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"--record-budget takes a size such as 2GiB, 500MB or 123456, not '{shown(text)}'")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def cmd_train(args) -> int:
    from miiii.rundir import read_config

    with deferred_interrupts():  # a Ctrl-C during the imports (jax, orbax) is raised once they are done
        from miiii.runner import resume_run, train_run

    budget = parse_bytes(args.record_budget)
    check_backend(args.device)  # before anything compiles: no silent CPU training on a GPU box
    if args.resume is not None:
        if args.run_dir is not None:
            raise ConfigError("--resume continues RUN_DIR in place: leave out --run-dir")
        changed = (args.preset is not None or args.overrides or args.steps is not None or args.seed is not None
                   or args.init_from is not None)
        # --set/--steps/--seed change the run's own config (or --preset's): any real change is refused
        cfg = resolve_config(args, base=read_config(args.resume)) if changed else None
        summary = resume_run(args.resume, cfg, progress=not args.no_progress, tensorboard=args.tensorboard,
                             profile=args.profile)
        print_summary(summary, args.resume)
        return 0
    if args.preset in PHASED:
        return train_phases(args, budget)
    cfg = resolve_config(args)
    preset = args.preset or DEFAULT_PRESET
    run_dir = args.run_dir or Path("runs") / f"{preset}-s{cfg.train.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = train_run(cfg, run_dir, progress=not args.no_progress, record_budget=budget,
                        tensorboard=args.tensorboard, profile=args.profile)
    print_summary(summary, run_dir)
    link_latest(run_dir)
    print_next(run_dir)
    return 0


def train_phases(args, budget: int) -> int:
    """A phased preset (presets.PHASED) into RUN_DIR/phase-1, phase-2, ... (miiii/phases.py)."""
    from miiii.phases import train_phases as train_all

    if args.overrides or args.steps is not None or args.init_from is not None:
        raise ConfigError(f"{args.preset} is a recipe in phases: it takes no --set, --steps or --init-from (--seed "
                          "sets every phase's seed)")
    run_dir = args.run_dir or Path("runs") / f"{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    last = train_all(args.preset, run_dir, args.seed, budget, print_summary, progress=not args.no_progress,
                     tensorboard=args.tensorboard, profile=args.profile)
    print_next(last)
    return 0


def link_latest(run_dir: Path) -> None:
    """RUN_DIR's parent/latest -> RUN_DIR (a symlink, replaced atomically): the README's code loads `runs/latest`
    whatever name `make train` gave the run. Best effort: a file system without symlinks just has none."""
    link = run_dir.parent / "latest"
    if link.exists() and not link.is_symlink():
        return  # a real file or folder called latest is the user's, never replaced
    tmp = run_dir.parent / f".latest-{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run_dir.name)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)


def print_next(run_dir: Path) -> None:
    print(f"next: python -m miiii figures {run_dir} --out {run_dir}/figures   # every figure the run supports\n"
          f"      python -c \"import miiii; run = miiii.load_run('{run_dir}'); print(run.summary['grok_step'])\"\n"
          f"      docs/extending.md: the run in JAX (hooks, caches, interventions, params_at)")


def processes(args) -> tuple | None:
    """(coordinator, N, I) from sweep's --coordinator/--num-processes/--process-id, all or none; None: one process."""
    given = (args.coordinator, args.num_processes, args.process_id)
    if all(v is None for v in given):
        return None
    if any(v is None for v in given):
        raise ConfigError("a sweep over several processes needs all three of --coordinator HOST:PORT, "
                          "--num-processes N and --process-id I")
    host, colon, port = args.coordinator.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ConfigError(f"--coordinator takes HOST:PORT (process 0's address), not '{shown(args.coordinator)}'")
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"--coordinator {shown(args.coordinator)}: a port is 1 .. 65535, not {shown(port)}")
    if not 0 < args.join_timeout < float("inf"):
        raise ConfigError(f"--join-timeout takes a number of seconds above 0, not {args.join_timeout:g}")
    if args.num_processes < 1 or not 0 <= args.process_id < args.num_processes:
        raise ConfigError(f"--process-id must be in 0 .. {args.num_processes - 1} and --num-processes at least 1, "
                          f"got {args.process_id} of {args.num_processes}")
    return given


def cmd_sweep(args) -> int:
    with deferred_interrupts():
        from miiii.sweep import join_processes, make_members, parse_grid, resume_sweep, run_sweep
        from miiii.sweepfiles import summary_lines

    args.seed = None
    budget = parse_bytes(args.record_budget)
    if args.split_seeds is not None:  # sugar for --grid task.split_seed=S,S+1,...: crossed with the init seeds
        if not 1 <= args.split_seeds <= 4096:
            raise ConfigError(f"--split-seeds takes 1 to 4096 splits, not {args.split_seeds}")
        if any(resolve_key(g.partition("=")[0].strip()) == ("task", "split_seed") for g in args.grid):
            raise ConfigError("--split-seeds and --grid split_seed both set the splits: give one")
        if args.resume is None:
            base = resolve_config(args).task.split_seed
        else:
            from miiii.sweepmembers import read_plan

            base = read_plan(args.resume)[0].task.split_seed
        args.grid = [*args.grid, "task.split_seed=" + ",".join(str(base + i) for i in range(args.split_seeds))]
    given = args.preset is not None or args.overrides or args.steps is not None or args.seeds is not None or args.grid
    seeds = 8 if args.seeds is None else args.seeds
    if args.resume is not None:
        if args.out is not None:
            raise ConfigError("--resume continues OUT in place: leave out --out")
        if processes(args):
            raise ConfigError("sweep --resume runs in one process: leave out --coordinator, --num-processes and "
                              "--process-id")
        expect = None
        if given:  # what the command line changes, on the sweep's own plan: it must change nothing
            from miiii.sweepmembers import read_plan

            base, plan_seeds, plan_grid = read_plan(args.resume)
            grid = parse_grid(args.grid) if args.grid else plan_grid
            expect = (resolve_config(args, base=None if args.preset else base),
                      plan_seeds if args.seeds is None else args.seeds, grid)
        check_backend(args.device)
        res = resume_sweep(args.resume, progress=not args.no_progress, tensorboard=args.tensorboard,
                           profile=args.profile, expect=expect)
        keys = [k for k in res["members"][0]["values"]] if res["members"] else []
        print("\n" + "\n".join(summary_lines(res, keys, args.resume, None)))
        return 0
    cfg = resolve_config(args)
    grid = parse_grid(args.grid)
    make_members(cfg, seeds, grid)  # validates every member before anything is written
    joined = processes(args)
    out = args.out or Path("runs") / f"sweep-{args.preset or DEFAULT_PRESET}-{time.strftime('%Y%m%d-%H%M%S')}"
    if joined:
        join_processes(*joined, timeout=args.join_timeout)  # before anything touches a device
    check_backend(args.device)  # after the join (it may start the backend), before anything compiles
    res = run_sweep(cfg, seeds, grid, out, progress=not args.no_progress, tensorboard=args.tensorboard,
                    profile=args.profile, record_budget=budget)
    if joined and args.process_id != 0:
        print(f"process {args.process_id} of {args.num_processes}: done; process 0 wrote the sweep directory")
        return 0
    print("\n" + "\n".join(summary_lines(res, list(grid), out, joined)))
    return 0


def print_summary(summary: dict, run_dir: Path) -> None:
    f = summary["final"]
    print(f"\nrun directory: {run_dir}")
    print(f"{summary['task']}: {summary['steps']} steps, {summary['n_params']:,} parameters, "
          f"{summary['wall_s']:.1f} s ({summary['steps_per_s'] or '-'} steps/s after {summary['compile_s']:.1f} s "
          f"compile) on {summary['backend']}")
    unit = f" ({summary['loss_unit']})" if summary.get("loss_unit") else ""
    for split in ("train", "valid", "test"):
        if split in f:
            acc = f[split]["task_acc"]
            print(f"  {split:<5} loss{unit} {f[split]['loss']:.4f}  accuracy mean {sum(acc) / len(acc):.4f} "
                  f"min {min(acc):.4f}")
    if "valid_autoregressive_acc" in summary:
        print(f"  autoregressive exact match (valid): {summary['valid_autoregressive_acc']:.4f}")
    grok = summary["grok_step"]
    done = {k: v for k, v in grok.items() if v is not None}
    print(f"  grokked (valid acc >= 0.99): {len(done)}/{len(grok)} tasks"
          + (": " + ", ".join(f"{k}@{v}" for k, v in list(done.items())[:12]) if done else ""))


def cmd_compare(args) -> int:
    from miiii.compare import compare

    check_output(args.out, "dir", runs=args.run_dirs)
    paths = compare(args.run_dirs, args.out)
    print(f"{len(paths)} files in {args.out}: " + ", ".join(p.name for p in paths if p.suffix == ".png"))
    return 0


def cmd_film(args) -> int:
    from miiii.film import film

    check_output(args.out, "file", runs=[args.run_dir])
    path = film(args.run_dir, args.out, fps=args.fps, max_frames=args.frames)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


def cmd_page(args) -> int:
    from miiii.page import page

    check_output(args.out, "file", runs=[args.run_dir])
    if args.film is not None and args.no_film:
        raise ConfigError("--film embeds a film and --no-film leaves it out: give one")
    path = page(args.run_dir, args.out, with_film=not args.no_film, film_gif=args.film)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


def cmd_figures(args) -> int:
    from miiii.plots import draw_all

    check_output(args.out, "dir", runs=args.run_dirs)
    if args.crop < 0:
        raise ConfigError(f"--crop must be 0 (the whole grid) or a positive size, got {args.crop}")
    paths = draw_all(args.run_dirs, args.out, crop=args.crop)
    print(f"{len(paths)} files in {args.out}")
    return 0


def _unraisable(u) -> None:
    """sys.unraisablehook of the command-line process: a Ctrl-C that landed where it cannot be raised (jax's garbage-
    collection callback) is remembered, and raised at the command's next safe point (errors.remember_interrupt;
    while Python shuts down nothing is left to stop); tensorstore's callbacks into orbax's closed event loop after a
    failed checkpoint write are dropped (that outcome is already reported in one line); anything else is passed on."""
    if issubclass(u.exc_type, KeyboardInterrupt):
        remember_interrupt()
        return
    if issubclass(u.exc_type, RuntimeError) and "Event loop is closed" in str(u.exc_value):
        return
    sys.__unraisablehook__(u)


def one_line(msg: str) -> str:
    """A message as one line: control characters (a newline in a value or a path) shown escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in msg)


def main(argv=None) -> int:
    """Run one command; `argv` None: this process's own command line (its exit is kept quiet too)."""
    args = build_parser().parse_args(argv)
    if getattr(args, "coordinator", None) is None:
        return run_command(args, argv)
    try:  # one of several processes: the others may be waiting for this one inside a collective
        code = run_command(args, argv)
    except BaseException:
        traceback.print_exc()
        code = 1
    if code:  # leave at once: jax's coordination service then stops the others now, not after its 5-minute shutdown
        sys.stdout.flush()  # barrier (measured: the other process aborts within a second instead of 5 minutes)
        sys.stderr.flush()
        os._exit(code)
    return code


def run_command(args, argv=None) -> int:
    """The command itself, its errors as one line and an exit status; `argv` None: this process's own command line
    (its exit is kept quiet too)."""
    if argv is None:
        sys.unraisablehook = _unraisable
    msg = None
    try:
        commands = {"train": cmd_train, "presets": cmd_presets, "sweep": cmd_sweep, "figures": cmd_figures,
                    "compare": cmd_compare, "film": cmd_film, "page": cmd_page, "book": cmd_book,
                    "export-adder": cmd_export_adder, "export-tl": cmd_export_tl, "doctor": cmd_doctor,
                    "llc": cmd_llc}
        if args.command in COMPILES:
            with deferred_interrupts():  # imports jax
                setup_compile_cache()
        with carrying_stops():
            rc = commands[args.command](args)
        if rc == 0 and take_interrupt():  # a stop after the last safe point: the command was stopped, its work done
            rc, msg = 130, DONE_THEN_STOPPED
    except ConfigError as e:
        rc, msg = 2, f"error: {e}"
    except FloatingPointError as e:
        rc, msg = 1, f"error: {e}"
    except RunError as e:  # disk full, write errors: the message says what is left of the run
        rc, msg = 1, f"error: {e}"
    except KeyboardInterrupt as e:
        rc, msg = 130, str(e) or "interrupted"
    except ImportError:  # a Ctrl-C inside an extension module's initialisation reads `initialization failed`
        if not interrupt_pending():
            raise
        rc, msg = 130, "interrupted"
    if argv is None:  # the command is over: a Ctrl-C while Python shuts down has nothing left to stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if msg is not None:
        print(one_line(msg), file=sys.stderr)
    return rc
