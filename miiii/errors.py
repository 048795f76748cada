"""The bottom of the package: the error a configuration raises and how a message echoes a user's value (no imports
from miiii, so every module, tasks.py and config.py included, can use them)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration a run cannot start from; the CLI prints it and exits with status 2."""


def shown(value, limit: int = 80) -> str:
    """A user's value as a message echoes it: control characters escaped (the message stays one line), at most
    `limit` characters (a 100,000-character value is not printed back whole)."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"
