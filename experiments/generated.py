"""Generated blocks of committed documents: the text between a START and an END marker is written by code from
committed files (the README's headline table, docs/benchmark.md's measures table), and a test fails when it drifts.
"""

from __future__ import annotations


def replace_block(text: str, start: str, end: str, block: str) -> str:
    """`text` with its START ... END block (markers included) replaced by `block`, which begins with START and ends
    with END; a text without the block gets it appended."""
    if start not in text:
        return text.rstrip("\n") + "\n\n" + block + "\n"
    i, j = text.index(start), text.index(end) + len(end)
    return text[:i] + block + text[j:]
