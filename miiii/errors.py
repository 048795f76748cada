"""The bottom of the package: the error a configuration raises and how a message echoes a user's value (no imports
from miiii, so every module, tasks.py and config.py included, can use them)."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path


class ConfigError(ValueError):
    """A configuration a run cannot start from; the CLI prints it and exits with status 2."""


class RunError(RuntimeError):
    """A run that stopped on a fault it cannot fix (disk full, write error); the message says what is left."""


def one_line_errors(fn, *args) -> int:
    """`fn(*args)`'s exit status, with the CLI's standard for a study script: bad input (ConfigError) is one
    `error:` line and status 2, a failed write (RunError) one line and status 1."""
    try:
        return fn(*args)
    except (ConfigError, RunError) as e:
        print(f"error: {shown(e, 4000)}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1


def shown(value, limit: int = 80) -> str:
    """A user's value as a message echoes it: control characters escaped (the message stays one line), at most
    `limit` characters (a 100,000-character value is not printed back whole)."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(value, known) -> str:
    """' (did you mean X?)' for the known name closest to a mistyped one (difflib), '' when none is close."""
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


class OneLineParser(argparse.ArgumentParser):
    """argparse for the study scripts (experiments/*.py), held to the CLI's standard: its own errors are one line,
    `error: ...`, exit status 2."""

    def error(self, message):
        self.exit(2, f"error: {shown(message, 300)} (see `python {self.prog} --help`)\n")


def out_folder(out: Path, flag: str = "--out") -> Path:
    """`out` when it is a folder or can be made one (nothing in its way is a file), else a ConfigError; nothing is
    made here."""
    blocker = next((p for p in (out, *out.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError(f"{flag} {shown(out, 200)}: {shown(blocker, 200)} exists and is not a directory; choose "
                          f"another {flag}")
    return out
