"""Score an exported adder as AdderBoard's verify.py does: its 10 edge cases, then 10,000 random pairs drawn by
Python's random.Random(2025), every one exact or wrong.

    python -m miiii export-adder RUN_DIR adder10.py
    python -m experiments.adderboard adder10.py [--pairs 10000] [--seed 2025] [--smoke]

Runtime: ~1-3 minutes for the 10,010 cases on one CPU core (numpy, one token at a time); --smoke scores the edge
cases and 200 pairs. Expected: prints the accuracy over all cases (the board's number: >= 99 % qualifies) and the
unique parameter count. The board's own script on the same file: `python verify.py adder10.py` in a clone of
anadim/AdderBoard (experiments/adderboard/README.md).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

from miiii.errors import OneLineParser, lead, module_prog
from miiii.tokens import board_pairs


def load(path: Path):
    """An exported adder: a self-contained numpy file that `python -m miiii export-adder` writes (miiii/export.py) and
    AdderBoard loads by its path, not a module of this repository; loaded so here too."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def export_scored(run_dir: Path, out: Path, name: str, history: str | None = None) -> dict:
    """RUN_DIR exported as OUT/submissions/NAME.py (written aside, then moved: never half a file) and scored on the
    verifier's 10,010 cases; its score with the file's path under OUT."""
    import shutil

    from miiii.export import export_adder

    path = out / "submissions" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.py")
    export_adder(run_dir, tmp, name=name, force=True, history=history)
    shutil.move(tmp, path)
    return dict(file=f"submissions/{path.name}", **score(load(path), 10_000))


MAX_LISTED = 200  # failures listed in order (a model at >= 99 % of 10,010 cases has at most 100: all of them)


def score(mod, n_pairs: int, seed: int = 2025) -> dict:
    """verify.py's cases (its edge cases when n = 10) through the module's own `add`; an exception is a miss."""
    model, meta = mod.build_model()
    n = model["n_digits"]
    cases = board_pairs(n_pairs, seed, n)
    t0 = time.perf_counter()
    wrong = []
    for a, b in cases:
        try:
            ok = mod.add(model, a, b) == a + b
        except Exception:  # noqa: BLE001 -- verify.py counts a raised error as a failure
            ok = False
        if not ok:
            wrong.append(f"{a}+{b}")
    n_edge = len(cases) - n_pairs
    return dict(name=meta["name"], params=meta["params"], n_digits=n, pairs=n_pairs, seed=seed, cases=len(cases),
                passed=len(cases) - len(wrong), accuracy=(len(cases) - len(wrong)) / len(cases),
                qualified=(len(cases) - len(wrong)) / len(cases) >= 0.99,
                edge_cases=n_edge, failed_edge_cases=[w for w in wrong if w in {f"{a}+{b}" for a, b in cases[:n_edge]}],
                failures=wrong[:MAX_LISTED], seconds=round(time.perf_counter() - t0, 1))


def main(argv=None) -> int:
    ap = OneLineParser(prog=module_prog(), description=lead(__doc__))
    ap.add_argument("module", type=Path, help="a file written by `python -m miiii export-adder`")
    ap.add_argument("--pairs", type=int, default=10_000, help="random pairs after the edge cases (verify.py: 10,000)")
    ap.add_argument("--seed", type=int, default=2025, help="verify.py's --seed (the board scores with 2025)")
    ap.add_argument("--smoke", action="store_true", help="the edge cases and 200 pairs")
    args = ap.parse_args(argv)
    r = score(load(args.module), 200 if args.smoke else args.pairs, args.seed)
    print(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
