"""Generated blocks of committed documents: the text between a START and an END marker is written by code from
committed files (the README's headline table, docs/benchmark.md's measures table), and a test fails when it drifts.
"""

from __future__ import annotations

import sys
from pathlib import Path


def replace_block(text: str, start: str, end: str, block: str) -> str:
    """`text` with its START ... END block (markers included) replaced by `block`, which begins with START and ends
    with END; a text without the block gets it appended."""
    if start not in text:
        return text.rstrip("\n") + "\n\n" + block + "\n"
    i, j = text.index(start), text.index(end) + len(end)
    return text[:i] + block + text[j:]


def write_or_check(doc: Path, start: str, end: str, block: str, source: str, command: str, check: bool) -> int:
    """Write `block` into `doc`, or with `check` only compare: 1 (and one line naming `command`) when the committed
    document differs from what `source` gives, else 0."""
    text = doc.read_text()
    want = replace_block(text, start, end, block)
    if check:
        if want != text:
            print(f"error: {doc.name}'s generated block differs from {source}: run {command}", file=sys.stderr)
            return 1
        print(f"{doc.name}: up to date with {source}")
        return 0
    doc.write_text(want)
    print(f"wrote the generated block of {doc.name} from {source}")
    return 0


def same_or_say(path: Path, text: str, command: str) -> int:
    """`--check` of a generated file: 0 when `path` holds exactly `text`, else 1 and one line naming `command`."""
    if path.is_file() and path.read_text() == text:
        return 0
    print(f"error: {path} differs from what it is generated from: run {command}", file=sys.stderr)
    return 1
