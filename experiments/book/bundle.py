"""The book bundle's tables regenerated from its committed JSON files alone (no runs, no training), so the files a
reader sees cannot drift from the records they summarise: `seeds.md` from `seeds.json`, `unstated.md` from
`unstated.json`, `gap.md` from every record `gap.md` compares, `findings.md` from `findings.json`.
Each keeps the provenance its committed file states (which commit trained it, when, on what).

    python -m experiments.book.bundle results/book            # rewrite the three tables
    python -m experiments.book.bundle results/book --check    # exit 1 when a committed table differs
    python -m experiments.book.bundle results/book --figures  # the tables and the figures drawn from the same records
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from experiments.book import findings_md
from experiments.book.figures import fig_gap, fig_seed_curves, fig_unstated
from experiments.book.records import gap_samples
from experiments.book.tables import gap_md, seeds_md, unstated_md
from miiii.errors import OneLineParser, lead
from miiii.files import write_text_atomic
from miiii.provenance import read_provenance_table


def _setting(key: str) -> tuple[float, float]:
    """'wd=0.01 clip=1e+09' -> (0.01, 1e9)."""
    wd, clip = (part.split("=")[1] for part in key.split())
    return float(wd), float(clip)


def regenerate(out: Path, figures: bool = False) -> dict[str, str]:
    """{file name: its text} for the tables whose records `out` holds; with `figures` the figures drawn from the
    same records are redrawn into `out` (seeds_addition.png, unstated_addition.png, gap_addition.png)."""
    out = Path(out)
    prov = lambda name: read_provenance_table((out / name).read_text()) if (out / name).is_file() else None  # noqa: E731
    texts = {}
    if (out / "seeds.json").is_file():
        data = json.loads((out / "seeds.json").read_text())
        texts["seeds.md"] = seeds_md(data["jax"], data["torch"], False, prov("seeds.md"))
        if figures:
            fig_seed_curves(data["jax"], data["torch"], out)
    if (out / "unstated.json").is_file():
        data = json.loads((out / "unstated.json").read_text())
        groups = {_setting(k): v for k, v in data.items()}
        texts["unstated.md"] = unstated_md(groups, prov("unstated.md"))
        if figures:
            fig_unstated(groups, out)
    if (out / "findings.json").is_file():
        data = json.loads((out / "findings.json").read_text())
        texts["findings.md"] = findings_md.render(data)
        if figures:
            findings_md.figure(data, out)
    samples = gap_samples(out)
    if samples:
        texts["gap.md"] = gap_md(samples, prov("gap.md"))[0]
        if figures:
            fig_gap(samples, out)
    return texts


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m experiments.book.bundle", description=lead(__doc__))
    ap.add_argument("out", type=Path, nargs="?", default=Path("results/book"), help="the bundle (default results/book)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a committed table differs from its records")
    ap.add_argument("--figures", action="store_true", help="also redraw the figures drawn from the same records")
    args = ap.parse_args(argv)
    if not args.out.is_dir():
        print(f"error: {args.out} is not a directory", file=sys.stderr)
        return 2
    bad = 0
    for name, text in regenerate(args.out, figures=args.figures and not args.check).items():
        path = args.out / name
        if args.check:
            same = path.is_file() and path.read_text() == text
            bad += not same
            print(f"{path}: {'up to date' if same else 'differs from its records'}")
        else:
            write_text_atomic(path, text)
            print(f"wrote {path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
