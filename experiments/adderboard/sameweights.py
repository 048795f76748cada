r"""Whether two submission files hold the same weights, byte for byte: the check that a run trained again is the
committed one when the files' text may differ (the exporter has gained lines since the file was written).

    python -m experiments.adderboard.sameweights runs/adder-41-bundle/submissions/adder-41p-41a1-m7-b17.py \
        results/adderboard/submissions/adder-41p-41a1-m7-b17.py

Exit 0 when both files export the same run (RUN) and every weight (`_WEIGHTS`: name, dtype, shape and bytes) is
equal; else exit 1, naming what differs. A file that is not a submission is exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from experiments.adderboard.restore import read_submission
from miiii.errors import OneLineParser, one_line_errors


def weight_differences(a: Path, b: Path) -> list[str]:
    """What differs between two submission files' runs and weights, one line each ([] when nothing does)."""
    run_a, wa = read_submission(a)
    run_b, wb = read_submission(b)
    out = [f"RUN: {run_a} against {run_b}"] if run_a != run_b else []
    out += [f"{k}: only in {a if k in wa else b}" for k in sorted(set(wa) ^ set(wb))]
    for k in sorted(set(wa) & set(wb)):
        x, y = wa[k], wb[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            out.append(f"{k}: {x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)}")
        elif x.tobytes() != y.tobytes():
            raw = [np.ascontiguousarray(v).reshape(-1).view(np.uint8).reshape(v.size, -1) for v in (x, y)]
            n = int((raw[0] != raw[1]).any(-1).sum())  # entries whose bytes differ (NaNs compared as bits)
            out.append(f"{k}: {n} of {x.size} entries differ")
    return out


def main(argv=None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, metavar="FILE", help="a submission file export-adder wrote")
    ap.add_argument("b", type=Path, metavar="OTHER", help="the file to compare it with (the committed one)")
    args = ap.parse_args(argv)

    def run() -> int:
        diff = weight_differences(args.a, args.b)
        for line in diff:
            print(line)
        print(f"{args.a} and {args.b}: " + ("different weights" if diff else "the same run and weights, byte for "
                                             "byte"))
        return 1 if diff else 0

    return one_line_errors(run)


if __name__ == "__main__":
    sys.exit(main())
