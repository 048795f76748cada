"""Where a results bundle came from, and its numbers as JSON: shared by the studies (experiments/paper,
experiments/book, experiments/book/same_start.py), experiments/paper/report.py's results.md and bookeval.py's book.json.

Every bundle's markdown opens with a provenance table (`provenance_table`) whose first rows say which code made it
(`git_commit`: a clean commit, or '-dirty'), when, on what machine and with which numerics (`provenance`).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np


def git_commit() -> str:
    """HEAD of the repository this code runs from, with '-dirty' when tracked files differ from it: a bundle is
    reproducible only from a clean commit."""
    root = Path(__file__).resolve().parents[1]
    try:
        return subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=40"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def short_commit(commit: str) -> str:
    """A `git_commit()` for a reader: seven hex digits, and the '-dirty' said in words rather than cut off."""
    return commit[:7] + (" with uncommitted changes" if commit.endswith("-dirty") else "")


def provenance(summary: dict, precision: str) -> dict:
    """The first rows of every bundle's provenance table: the code (a clean commit or '-dirty'), when, the machine
    and the numerics, read from a run's summary.json."""
    return {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "device": f"{summary.get('device', '?')} ({summary.get('backend', '?')})",
            "jax": summary.get("jax_version", "?"), "precision": precision}


def provenance_table(provenance: dict) -> list[str]:
    """A markdown table of the provenance's rows, then a blank line."""
    return ["| provenance | |", "| --- | --- |"] + [f"| {k} | {cell(v)} |" for k, v in provenance.items()] + [""]


def cell(v) -> str:
    """A value as one markdown table cell."""
    return str(v).replace("|", "/").replace("\n", " ")  # a '|' would split the markdown cell


def to_jsonable(obj):
    """Dicts, lists and tuples with numpy scalars in them -> the same with Python numbers (json.dumps takes it)."""
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def read_provenance_table(text: str) -> dict:
    """The rows of the first provenance table in a markdown text (`provenance_table`'s inverse, for a bundle whose
    provenance lives only in its generated file)."""
    lines = text.splitlines()
    try:
        i = lines.index("| provenance | |")
    except ValueError:
        return {}
    out = {}
    for line in lines[i + 2:]:
        if not line.startswith("| "):
            break
        key, value = line[2:-2].split(" | ", 1)
        out[key] = value
    return out
