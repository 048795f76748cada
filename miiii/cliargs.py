"""The command line's arguments: every subcommand, every option and its --help text (cli.py runs them)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from miiii.config import SWEEPABLE, shown
from miiii.presets import DEFAULT_PRESET
from miiii.transformerlens import LOAD, LOAD_TL4

DESCRIPTION = ("Command line: `python -m miiii COMMAND ...`, one of the commands below (`python -m miiii COMMAND "
               "--help` explains its options). Bad input exits with status 2 and one message.")
CACHE_NOTE = ("Compiled programs are cached in ~/.cache/miiii/jax ($XDG_CACHE_HOME/miiii/jax) and loaded by later "
              "runs: MIIII_COMPILE_CACHE=DIR puts the cache elsewhere, MIIII_COMPILE_CACHE=off switches it off.")


def add_ops_options(ap: argparse.ArgumentParser, what: str) -> None:
    """--device, --no-tensorboard and --profile, shared by train and sweep."""
    ap.add_argument("--device", choices=("auto", "cpu"), default="auto",
                    help="auto (default): the device JAX finds, but refuse to start when an NVIDIA GPU is visible "
                    "(nvidia-smi lists one) and JAX runs on the CPU (run `make install-gpu`); cpu: train on the CPU "
                    "as asked (as JAX_PLATFORMS=cpu does)")
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
    commands: dict[str, argparse.ArgumentParser] = {}  # the top parser's subcommands (build_parser)

    def error(self, message):  # argparse's own errors: one message, exit 2, and the --help that explains it
        self.exit(2, f"error: {shown(message, 300)}\n(see `python -m {self.prog} --help`)\n")

    def parse_args(self, args=None, namespace=None):
        """An option after the command that the command does not have is the command's error (`python -m miiii train
        --help`), not the top parser's, which argparse would report it as."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            argv = sys.argv[1:] if args is None else list(args)
            command = getattr(ns, "command", None)
            after = command in argv and not set(extra) & set(argv[:argv.index(command)])
            (self.commands[command] if after else self).error(f"unrecognized arguments: {' '.join(extra)}")
        return ns


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="miiii", description=DESCRIPTION)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser, metavar="COMMAND")
    ap.commands = sub.choices

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
    tr.add_argument("--seed", type=int, default=None,
                    help="init/dropout/batch-order seed (overrides train.seed; a recipe in phases: every phase's, a "
                         "screen's first, but the phase after a screen takes its chosen member's)")
    tr.add_argument("--init-from", default=None, metavar="RUN_DIR[@STEP]",
                    help="a phase of training: start from RUN_DIR's final parameters (or its kept step STEP) "
                    "instead of a fresh init, with this run's optimizer, schedule and data; the model settings "
                    "must match RUN_DIR's (train.init_from, recorded in config.json)")
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
                        "over all devices; writes a run directory per member as `train` writes a run's (acts/ with "
                        "the record.* settings, ckpt/ with the ckpt.* ones, metrics.jsonl and tb/ after every chunk: "
                        "load_run, params_at and `figures MEMBER_DIR` work on it), members.csv, grok_steps.png and, "
                        "last, sweep.json. Ctrl-C finishes the chunk, checkpoints every member and keeps the "
                        "(incomplete) directory: --resume OUT continues it, bit-identical to an uninterrupted sweep.",
                        epilog=CACHE_NOTE)
    sw.add_argument("--preset", default=None, help=f"preset every member starts from (default {DEFAULT_PRESET})")
    sw.add_argument("--seeds", type=int, default=None, help="seeds per grid point (train.seed, +1, +2, ...; default 8)")
    sw.add_argument("--grid", nargs="+", action="extend", default=[], metavar="KEY=V1,V2",
                    help="scalar hyper-parameters to cross: "
                    f"{', '.join(k.partition('.')[2] for k in SWEEPABLE)} (wd = weight_decay), and the split, "
                    "split_seed; "
                    "e.g. --grid lr=1e-3,3e-3 wd=0.3,1.0 (repeatable: every --grid's keys are crossed, "
                    "--grid lr=1e-3,3e-3 --grid wd=0.3,1.0 is the same 4 points; a key given twice is refused)")
    sw.add_argument("--split-seeds", type=int, default=None, metavar="N",
                    help="also vary the train/validation split: N splits (task.split_seed, +1, ...) crossed with "
                    "the --seeds init seeds, each member on its own split in the same program (the same as --grid "
                    "split_seed=0,1,...); members.csv names both seeds, and the summary tells the spread of the grok "
                    "step over init seeds within a split from the spread over splits")
    sw.add_argument("--out", type=Path, default=None, help="sweep directory (default runs/sweep-PRESET-TIME)")
    sw.add_argument("--steps", type=int, default=None, help="steps per member (overrides train.steps)")
    sw.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="change the base config like `train --set`")
    sw.add_argument("--no-progress", action="store_true", help="no progress bar")
    sw.add_argument("--resume", type=Path, default=None, metavar="OUT",
                    help="continue the interrupted sweep in OUT from the newest checkpoint every member has (its "
                    "sweep-plan.json holds the preset, --set, --seeds and --grid; given again, they must agree); "
                    "it ends bit-identical to an uninterrupted sweep. A complete sweep, or a directory that is no "
                    "sweep, is refused. One process only")
    sw.add_argument("--record-budget", default="2GiB", metavar="BYTES",
                    help="refuse a sweep whose members' recordings together exceed this (default 2GiB; e.g. 500MB, "
                    "8GiB); the recordings and checkpoints of all members must also fit the free disk")
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
    fg.add_argument("--crop", type=int, default=37, metavar="N",
                    help="figures 4, 14 and 18 show the grid's top-left N x N when p is larger (default 37, the "
                         "paper's; 0: the whole grid)")
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
    fm.add_argument("--fps", type=float, default=8.0, help="frames per second, 0.1 .. 100 (default 8)")
    fm.add_argument("--frames", type=int, default=60,
                    help="at most this many frames, log-spaced, 2 .. 500 (default 60)")
    pg = sub.add_parser("page", help="a run on one self-contained HTML page (images inline, no network)",
                        description="One HTML file: summary, curves, grok step per task, key frequencies, the film, "
                                    "config, provenance and links to the run's files.")
    pg.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished run")
    pg.add_argument("--out", type=Path, required=True, metavar="FILE.html", help="where to write the page")
    pg.add_argument("--no-film", action="store_true", help="leave the film out (it takes a minute on a long run)")
    pg.add_argument("--film", type=Path, default=None, metavar="FILM.gif",
                    help="embed this GIF (one `python -m miiii film RUN_DIR --out FILM.gif` drew) instead of drawing "
                    "the film again: the page and the film share one drawing")
    bk = sub.add_parser("book", help="the book's evaluation of a finished addition or reversal run",
                        description="Edge cases (ones-first output and a verdict), autoregressive exact match, the "
                        "epoch of the jump and the final loss beside the loss floor; prints them and writes "
                        "RUN_DIR/book.json.")
    bk.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished addition or reversal run directory")
    lc = sub.add_parser("llc", help="the local learning coefficient (SGLD, as devinterp) at a run's kept steps",
                        description="Estimate the LLC around each kept checkpoint of RUN_DIR (or --steps) with "
                        "SGLD chains on its training split, as devinterp does (miiii/llc.py says how to choose the "
                        "step size, the localisation and the temperature from the chains' loss traces); per task "
                        "for a multi-task run. Prints the series and writes RUN_DIR/llc.json.")
    lc.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory with kept checkpoints")
    lc.add_argument("--steps", type=int, nargs="+", default=None, metavar="N",
                    help="these kept steps only (default: every kept step)")
    lc.add_argument("--lr", type=float, default=1e-4, help="SGLD step size epsilon (default 1e-4)")
    lc.add_argument("--gamma", type=float, default=100.0, help="localisation strength gamma (default 100)")
    lc.add_argument("--nbeta", type=float, default=0.0,
                    help="inverse temperature n*beta (default 0: devinterp's m / ln m for batches of m)")
    lc.add_argument("--chains", type=int, default=4, help="independent SGLD chains (default 4)")
    lc.add_argument("--draws", type=int, default=200, help="SGLD steps averaged per chain (default 200)")
    lc.add_argument("--burnin", type=int, default=0, help="SGLD steps discarded first (default 0)")
    lc.add_argument("--batch", type=int, default=512, help="samples per SGLD step (default 512; 0: the whole split)")
    lc.add_argument("--seed", type=int, default=0, help="the chains' seed")
    ex = sub.add_parser("export-adder", help="write a trained addition run as a numpy-only AdderBoard module",
                        description="Write RUN_DIR's adder as OUT.py: build_model() -> (model, metadata) and "
                        "add(model, a, b) -> int, numpy only.")
    ex.add_argument("run_dir", type=Path, help="a finished addition run directory")
    ex.add_argument("out", type=Path, help="the Python file to write (not an existing one, unless --force; never a "
                    "file of a run)")
    ex.add_argument("--force", action="store_true", help="replace OUT if it exists (never a run's own file)")
    tl = sub.add_parser("export-tl", help="write a run (or a kept step of it) as a TransformerLens model (safetensors "
                        "+ config)", formatter_class=argparse.RawDescriptionHelpFormatter,
                        description=textwrap.dedent("""\
                            Write RUN_DIR's final parameters (--step N: a kept step's) as TransformerLens's model,
                            without torch:
                              OUT_DIR/model.safetensors  the weights by TransformerLens's state-dict names, float32:
                                zero biases where this model has none, W_pos zeros without a positional
                                embedding, W_U = W_E.T for a tied head (the book), miiii's per-task
                                unembeddings side by side (each task's own classes)
                              OUT_DIR/config.json  HookedTransformerConfig's keyword arguments and a "miiii"
                                section: the task and its names, the position the answer is read at (last: the
                                paper's tasks; all: the book's), each task's [start, stop) columns of the logits"""),
                        epilog="load it in TransformerLens 3.x (pip install -e '.[tl]'; make test-tl):\n\n"
                        + textwrap.indent(LOAD, "  ") + "\n\nor in TransformerLens 4.x (HookedTransformer was removed; "
                        "make test-tl4):\n\n" + textwrap.indent(LOAD_TL4, "  ")
                        + "\n\n  logits = model(tokens)  # miiii: logits[:, -1, slice(*miiii['slices']['q=2'])]")
    tl.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                    help="a finished run directory (config.json, params.npz, summary.json) of any task")
    tl.add_argument("out_dir", type=Path, metavar="OUT_DIR",
                    help="the directory to write model.safetensors and config.json into; created if missing, "
                    "refused if it holds anything")
    tl.add_argument("--step", type=int, metavar="N", help="export the parameters of kept step N (one of the run's "
                    "kept_steps: its checkpoints, ckpt.keep_log) instead of the final ones")
    sub.add_parser("doctor", help="what this machine runs miiii with, and whether that is well",
                   description="Python, jax/jaxlib and the CUDA plugins installed, JAX's backend and devices (with "
                   "their memory), the NVIDIA GPU and driver (nvidia-smi), the compile cache's place and size, the "
                   "free disk where runs go (runs/), and whether the installed versions are the tested ones "
                   "(pyproject.toml's pins). Exit 0 when all is well, 1 with the reasons otherwise.")
    return ap
