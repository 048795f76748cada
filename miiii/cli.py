"""Command line: `python -m miiii {train,sweep,presets,figures,compare,film,page,book,export-adder,export-tl}`.
Bad input exits with status 2 and one message."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import textwrap
import time
import traceback
from pathlib import Path

from miiii.compile_cache import setup_compile_cache
from miiii.config import SECTIONS, SWEEPABLE, ConfigError, apply_overrides, shown
from miiii.errors import deferred_interrupts, interrupt_pending, remember_interrupt
from miiii.files import RunError
from miiii.presets import DEFAULT_PRESET, PRESETS, get_preset
from miiii.transformerlens import LOAD

COMPILES = ("train", "sweep", "book")  # the commands that compile: they use the persistent compilation cache
CACHE_NOTE = ("Compiled programs are cached in ~/.cache/miiii/jax ($XDG_CACHE_HOME/miiii/jax) and loaded by later "
              "runs: MIIII_COMPILE_CACHE=DIR puts the cache elsewhere, MIIII_COMPILE_CACHE=off switches it off.")


def add_ops_options(ap: argparse.ArgumentParser, what: str) -> None:
    """--no-tensorboard and --profile, shared by train and sweep."""
    ap.add_argument("--no-tensorboard", dest="tensorboard", action="store_false",
                    help=f"do not write TensorBoard scalars to {what}/tb/ (written by default when the optional "
                    "tensorboardX is installed: pip install -e '.[tensorboard]'); metrics.jsonl is written either way")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="trace one chunk with jax.profiler into DIR: the first chunk whose program is already "
                    "compiled (the second, usually; the only one if there is one); open "
                    "DIR/plugins/profile/*/perfetto_trace.json.gz at https://ui.perfetto.dev, or run "
                    "xprof --logdir DIR (TensorBoard's profile plugin). DIR is checked before training: a file, an "
                    "empty path or a directory that cannot be written is refused")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.exit(2, f"error: {shown(message, 300)}\n(see `python -m miiii {self.prog.split()[-1]} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="miiii", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    tr = sub.add_parser("train", help="train a preset and write a run directory",
                        description="Train a preset (optionally changed with --set) and write a run directory: "
                        "config.json, metrics.npz, params.npz, summary.json, acts/ (the recording), "
                        "ckpt/ (checkpoints), and, after every chunk, metrics.jsonl (one JSON line per evaluated "
                        "step: `tail -f RUN_DIR/metrics.jsonl`) and tb/ (TensorBoard). --resume RUN_DIR continues "
                        "an interrupted run.", epilog=CACHE_NOTE)
    tr.add_argument("--preset", default=None, help=f"preset name (default {DEFAULT_PRESET}; "
                    "`python -m miiii presets` lists them)")
    tr.add_argument("--run-dir", type=Path, default=None,
                    help="where to write the run (default runs/PRESET-sSEED-TIME); must not hold anything yet")
    tr.add_argument("--steps", type=int, default=None, help="number of optimizer steps (overrides train.steps)")
    tr.add_argument("--seed", type=int, default=None, help="init/dropout/batch-order seed (overrides train.seed)")
    tr.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="change any config field, e.g. --set model.d_model=64 --set lr=3e-4 (a unique field "
                    "name or section.field; repeatable; `python -m miiii presets --keys` lists them). Optimizer and "
                    "loss options (docs/training.md): optimizer=muon, orthograd=true, loss=stablemax, "
                    "loss_dtype=float64")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    tr.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                    help="continue RUN_DIR from its newest good checkpoint (its config.json is the config; "
                    "--preset/--set/--steps/--seed, if given, must agree with it)")
    tr.add_argument("--record-budget", default="2GiB", metavar="BYTES",
                    help="refuse a recording larger than this (default 2GiB; e.g. 500MB, 8GiB, 123456789)")
    add_ops_options(tr, "RUN_DIR")

    sw = sub.add_parser("sweep", help="train seeds x a hyper-parameter grid in one vmapped program",
                        description="Train every member (seeds x grid) in one jitted, vmapped program, sharded "
                        "over all devices; writes a run directory per member (its metrics.jsonl and tb/ after every "
                        "chunk), sweep.json and grok_steps.png.", epilog=CACHE_NOTE)
    sw.add_argument("--preset", default=DEFAULT_PRESET, help="preset every member starts from")
    sw.add_argument("--seeds", type=int, default=8, help="seeds per grid point (train.seed, +1, +2, ...)")
    sw.add_argument("--grid", nargs="*", action="extend", default=[], metavar="KEY=V1,V2",
                    help="scalar hyper-parameters to cross: "
                    f"{', '.join(k.partition('.')[2] for k in SWEEPABLE)} (wd = weight_decay); "
                    "e.g. --grid lr=1e-3,3e-3 wd=0.3,1.0 (repeatable: every --grid's keys are crossed, "
                    "--grid lr=1e-3,3e-3 --grid wd=0.3,1.0 is the same 4 points; a key given twice is refused)")
    sw.add_argument("--out", type=Path, default=None, help="sweep directory (default runs/sweep-PRESET-TIME)")
    sw.add_argument("--steps", type=int, default=None, help="steps per member (overrides train.steps)")
    sw.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="change the base config like `train --set`")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_ops_options(sw, "each member's directory")
    mp = sw.add_argument_group(
        "several processes (hosts)",
        "Start the same command (same preset, --set, --seeds, --grid) on every host, adding --coordinator, "
        "--num-processes and its own --process-id: jax.distributed.initialize joins them (each process says what it "
        "waits for, and gives up after --join-timeout), the members are sharded over every process's devices, "
        "and process 0 alone writes --out (on its own disk) and prints the results. CPU processes talk through gloo. "
        "Tested with two processes on one machine (CPU); not on several machines or GPUs.")
    mp.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                    help="process 0's address and a free port on it, the same for every process")
    mp.add_argument("--num-processes", type=int, default=None, metavar="N", help="how many processes join")
    mp.add_argument("--process-id", type=int, default=None, metavar="I",
                    help="this process's number, 0 .. N-1 (0: the one that writes)")
    mp.add_argument("--join-timeout", type=float, default=300.0, metavar="SECONDS",
                    help="how long a process waits for all N to join (default 300, jax's own) before it gives up "
                    "with an error, exit status 2; it says what it waits for, and Ctrl-C stops the wait")

    pr = sub.add_parser("presets", help="list the presets, one line each; or one preset's whole config",
                        description="List the presets, or print the whole config of the ones named (every "
                                    "section.key = value, the form --set takes).")
    pr.add_argument("names", nargs="*", metavar="NAME", help="presets to print in full (default: list them all)")
    pr.add_argument("--keys", action="store_true", help="also list every config key with its default")

    fg = sub.add_parser("figures", help="draw every paper figure the given run directories support",
                        description="Draw the paper's figures (docs/definitions.md §4) from run dirs, PNG and PDF.")
    fg.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                    help="one or more run directories (nanda, miiii, masked, basis runs compare side by side)")
    fg.add_argument("--out", type=Path, default=Path("figures"), help="output directory (default figures/)")
    cp = sub.add_parser("compare", help="overlay several runs' (or sweeps' members') curves and grok steps",
                        description="Overlay the loss, per-task validation accuracy and grok steps of runs or of a "
                                    "sweep's members, labelled by the settings that differ between them.")
    cp.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_OR_SWEEP",
                    help="run directories and/or sweep directories (a sweep stands for its members); two or more "
                         "runs in all")
    cp.add_argument("--out", type=Path, default=Path("compare"), help="output directory (default compare/)")
    fm = sub.add_parser("film", help="a run over its recorded steps as an animation (GIF, or MP4 with ffmpeg)",
                        description="Animate a run over its recorded steps, frames in log time: W_E's Fourier "
                                    "spectrum, the most active neurons over the grid (or each layer's attention on "
                                    "the first probe), and the per-task accuracy with a line at the frame's step.")
    fm.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished run with a per-step recording")
    fm.add_argument("--out", type=Path, required=True, metavar="FILE",
                    help="FILE.gif (Pillow), or FILE.mp4 (needs ffmpeg on the PATH)")
    fm.add_argument("--fps", type=float, default=8.0, help="frames per second (default 8)")
    fm.add_argument("--frames", type=int, default=60, help="at most this many frames, log-spaced (default 60)")
    pg = sub.add_parser("page", help="a run on one self-contained HTML page (images inline, no network)",
                        description="One HTML file: summary, curves, grok step per task, key frequencies, the film, "
                                    "config, provenance and links to the run's files.")
    pg.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished run")
    pg.add_argument("--out", type=Path, required=True, metavar="FILE.html", help="where to write the page")
    pg.add_argument("--no-film", action="store_true", help="leave the film out (it takes a minute on a long run)")
    bk = sub.add_parser("book", help="the book's evaluation of a finished addition or reversal run",
                        description="Edge cases (ones-first output and a verdict), autoregressive exact match, the "
                        "epoch of the jump and the final loss beside the loss floor; prints them and writes "
                        "RUN_DIR/book.json.")
    bk.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished addition or reversal run directory")
    ex = sub.add_parser("export-adder", help="write a trained addition run as a numpy-only AdderBoard module",
                        description="Write RUN_DIR's adder as OUT.py: build_model() -> (model, metadata) and "
                        "add(model, a, b) -> int, numpy only.")
    ex.add_argument("run_dir", type=Path, help="a finished addition run directory")
    ex.add_argument("out", type=Path, help="the Python file to write (not an existing one, unless --force; never a "
                    "file of a run)")
    ex.add_argument("--force", action="store_true", help="replace OUT if it exists (never a run's own file)")
    tl = sub.add_parser("export-tl", help="write a finished run as a TransformerLens model (safetensors + config)",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description=textwrap.dedent("""\
                            Write RUN_DIR's final parameters as TransformerLens's model, without torch:
                              OUT_DIR/model.safetensors  the weights by TransformerLens's state-dict names, float32:
                                zero biases where this model has none, W_pos zeros without a positional
                                embedding, W_U = W_E.T for a tied head (the book), miiii's per-task
                                unembeddings side by side (each task's own classes)
                              OUT_DIR/config.json  HookedTransformerConfig's keyword arguments and a "miiii"
                                section: the task and its names, the position the answer is read at (last: the
                                paper's tasks; all: the book's), each task's [start, stop) columns of the logits"""),
                        epilog="load it in TransformerLens 3.x (pip install -e '.[tl]'; HookedTransformer was removed "
                        "in 4.0):\n\n" + textwrap.indent(LOAD, "  ")
                        + "\n\n  logits = model(tokens)  # miiii: logits[:, -1, slice(*miiii['slices']['q=2'])]")
    tl.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                    help="a finished run directory (config.json, params.npz, summary.json) of any task")
    tl.add_argument("out_dir", type=Path, metavar="OUT_DIR",
                    help="the directory to write model.safetensors and config.json into; created if missing, "
                    "refused if it holds anything")
    return ap


def cmd_book(args) -> int:
    from miiii.bookeval import evaluate_to_file

    evaluate_to_file(args.run_dir)
    return 0


def cmd_export_adder(args) -> int:
    from miiii.export import export_adder

    meta = export_adder(args.run_dir, args.out, force=args.force)
    print(f"wrote {args.out}: {meta['name']}, {meta['params']:,} parameters")
    return 0


def cmd_export_tl(args) -> int:
    from miiii.transformerlens import export_tl, load_lines

    cfg = export_tl(args.run_dir, args.out_dir)
    print(f"wrote {args.out_dir}/model.safetensors and config.json: {cfg['n_layers']} layer(s), d_model "
          f"{cfg['d_model']}, d_vocab_out {cfg['d_vocab_out']}; load it in TransformerLens 3.x with\n")
    print(load_lines(args.out_dir))
    return 0


def cmd_presets(args) -> int:
    for name in args.names:
        cfg, desc = get_preset(name), PRESETS[name][1]  # get_preset: an unknown name is one error line
        print(f"# {name}: {desc}")
        for sec, values in cfg.to_dict().items():
            for key, value in values.items():
                print(f"{sec}.{key} = {value!r}")
        print(f"# train it: python -m miiii train --preset {name} [--set KEY=VALUE ...]")
    if args.names:
        return 0
    width = max(map(len, PRESETS))
    for name, (_, desc) in PRESETS.items():
        print(f"{name:<{width}}  {desc}")
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
    if args.resume is not None:
        if args.run_dir is not None:
            raise ConfigError("--resume continues RUN_DIR in place: leave out --run-dir")
        changed = args.preset is not None or args.overrides or args.steps is not None or args.seed is not None
        # --set/--steps/--seed change the run's own config (or --preset's): any real change is refused
        cfg = resolve_config(args, base=read_config(args.resume)) if changed else None
        summary = resume_run(args.resume, cfg, progress=not args.no_progress, tensorboard=args.tensorboard,
                             profile=args.profile)
        print_summary(summary, args.resume)
        return 0
    cfg = resolve_config(args)
    preset = args.preset or DEFAULT_PRESET
    run_dir = args.run_dir or Path("runs") / f"{preset}-s{cfg.train.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = train_run(cfg, run_dir, progress=not args.no_progress, record_budget=budget,
                        tensorboard=args.tensorboard, profile=args.profile)
    print_summary(summary, run_dir)
    link_latest(run_dir)
    print_next(run_dir)
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
        from miiii.sweep import join_processes, make_members, member_rows, parse_grid, run_sweep

    args.seed = None
    cfg = resolve_config(args)
    grid = parse_grid(args.grid)
    make_members(cfg, args.seeds, grid)  # validates every member before anything is written
    joined = processes(args)
    out = args.out or Path("runs") / f"sweep-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    if joined:
        join_processes(*joined, timeout=args.join_timeout)  # before anything touches a device
    res = run_sweep(cfg, args.seeds, grid, out, progress=not args.no_progress, tensorboard=args.tensorboard,
                    profile=args.profile)
    if joined and args.process_id != 0:
        print(f"process {args.process_id} of {args.num_processes}: done; process 0 wrote the sweep directory")
        return 0
    where = f", {res['n_processes']} processes" if joined else ""
    print(f"\nsweep directory: {out}  ({res['n_members']} members on {res['n_devices']} device(s){where}, "
          f"{res['wall_s']:.1f} s, {res['member_steps_per_s']} member-steps/s)")
    for pt in res["points"]:
        label = ", ".join(f"{k}={v:g}" for k, v in pt["values"].items()) or "seeds"
        mean = f"{pt['mean']:.0f}" if pt["mean"] is not None else "-"
        std = f" ± {pt['std']:.0f}" if pt["std"] is not None else ""
        gone = [d for d in pt["diverged_at"] if d is not None]
        diverged = (f", diverged {len(gone)}/{len(pt['grok_steps'])} (at step {', '.join(map(str, gone))})"
                    if gone else "")
        print(f"  {label}: grokked {pt['n_grokked']}/{len(pt['grok_steps'])}{diverged}, grokking step {mean}{std}")
    table = member_rows(res["members"], list(grid))
    cols = list(table[0]) if table else []
    shown_rows = [[("-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)) for v in r.values()]
                  for r in table]
    widths = [max(len(c), *(len(r[i]) for r in shown_rows)) for i, c in enumerate(cols)]
    print(f"members ({out / 'members.csv'}):")
    for r in [cols, *shown_rows]:
        print("  " + "  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))
    return 0


def print_summary(summary: dict, run_dir: Path) -> None:
    f = summary["final"]
    print(f"\nrun directory: {run_dir}")
    print(f"{summary['task']}: {summary['steps']} steps, {summary['n_params']:,} parameters, "
          f"{summary['wall_s']:.1f} s ({summary['steps_per_s'] or '-'} steps/s after {summary['compile_s']:.1f} s "
          f"compile) on {summary['backend']}")
    for split in ("train", "valid", "test"):
        if split in f:
            acc = f[split]["task_acc"]
            print(f"  {split:<5} loss {f[split]['loss']:.4f}  accuracy mean {sum(acc) / len(acc):.4f} "
                  f"min {min(acc):.4f}")
    if "valid_autoregressive_acc" in summary:
        print(f"  autoregressive exact match (valid): {summary['valid_autoregressive_acc']:.4f}")
    grok = summary["grok_step"]
    done = {k: v for k, v in grok.items() if v is not None}
    print(f"  grokked (valid acc >= 0.99): {len(done)}/{len(grok)} tasks"
          + (": " + ", ".join(f"{k}@{v}" for k, v in list(done.items())[:12]) if done else ""))


def cmd_compare(args) -> int:
    from miiii.compare import compare

    paths = compare(args.run_dirs, args.out)
    print(f"{len(paths)} files in {args.out}: " + ", ".join(p.name for p in paths if p.suffix == ".png"))
    return 0


def cmd_film(args) -> int:
    from miiii.film import film

    if args.fps <= 0 or args.frames < 2:
        raise ConfigError("--fps must be above 0 and --frames at least 2")
    path = film(args.run_dir, args.out, fps=args.fps, max_frames=args.frames)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


def cmd_page(args) -> int:
    from miiii.page import page

    path = page(args.run_dir, args.out, with_film=not args.no_film)
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


def cmd_figures(args) -> int:
    from miiii.plots import draw_all

    paths = draw_all(args.run_dirs, args.out)
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
                    "export-adder": cmd_export_adder, "export-tl": cmd_export_tl}
        if args.command in COMPILES:
            with deferred_interrupts():  # imports jax
                setup_compile_cache()
        rc = commands[args.command](args)
        if rc == 0 and interrupt_pending():  # a Ctrl-C swallowed after the last safe point: the command was stopped
            rc, msg = 130, "interrupted"
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
