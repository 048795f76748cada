"""Command line: `python -m miiii {train,presets} ...`. Bad input exits with status 2 and one message."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from miiii.config import (
    _SECTION_TYPES,
    DEFAULT_PRESET,
    PRESETS,
    ConfigError,
    apply_overrides,
    get_preset,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.exit(2, f"error: {message}\n(see `python -m miiii {self.prog.split()[-1]} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="miiii", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    tr = sub.add_parser("train", help="train a preset and write a run directory",
                        description="Train a preset (optionally changed with --set) and write a run directory: "
                        "config.json, metrics.npz, params.npz, summary.json.")
    tr.add_argument("--preset", default=DEFAULT_PRESET, help=f"preset name (default {DEFAULT_PRESET}; "
                    "`python -m miiii presets` lists them)")
    tr.add_argument("--run-dir", type=Path, default=None,
                    help="where to write the run (default runs/PRESET-sSEED-TIME); must not hold anything yet")
    tr.add_argument("--steps", type=int, default=None, help="number of optimizer steps (overrides train.steps)")
    tr.add_argument("--seed", type=int, default=None, help="init/dropout/batch-order seed (overrides train.seed)")
    tr.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="change any config field, e.g. --set model.d_model=64 --set lr=3e-4 (a unique field "
                    "name or section.field; repeatable)")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")

    pr = sub.add_parser("presets", help="list the presets, one line each", description="List the presets.")
    pr.add_argument("--keys", action="store_true", help="also list every config key with its default")
    ex = sub.add_parser("export-adder", help="write a trained addition run as a numpy-only AdderBoard module",
                        description="Write RUN_DIR's adder as OUT.py: build_model() -> (model, metadata) and "
                        "add(model, a, b) -> int, numpy only.")
    ex.add_argument("run_dir", type=Path, help="a finished addition run directory")
    ex.add_argument("out", type=Path, help="the Python file to write")
    return ap


def cmd_export_adder(args) -> int:
    from miiii.export import export_adder

    meta = export_adder(args.run_dir, args.out)
    print(f"wrote {args.out}: {meta['name']}, {meta['params']:,} parameters")
    return 0


def cmd_presets(args) -> int:
    width = max(map(len, PRESETS))
    for name, (_, desc) in PRESETS.items():
        print(f"{name:<{width}}  {desc}")
    if args.keys:
        print("\nconfig keys (--set section.key=value):")
        for sec, typ in _SECTION_TYPES.items():
            for f in typ.__dataclass_fields__.values():
                print(f"  {sec}.{f.name} = {f.default!r}")
    return 0


def resolve_config(args):
    cfg = get_preset(args.preset)
    extra = list(args.overrides)
    if args.steps is not None:
        extra.append(f"train.steps={args.steps}")
    if args.seed is not None:
        extra.append(f"train.seed={args.seed}")
    return apply_overrides(cfg, extra)


def cmd_train(args) -> int:
    from miiii.runner import train_run  # jax is imported only once the input is known to be good

    cfg = resolve_config(args)
    run_dir = args.run_dir or Path("runs") / f"{args.preset}-s{cfg.train.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = train_run(cfg, run_dir, progress=not args.no_progress)
    print_summary(summary, run_dir)
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"train": cmd_train, "presets": cmd_presets, "export-adder": cmd_export_adder}[args.command](args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FloatingPointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
