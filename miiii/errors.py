"""The bottom of the package: the error a configuration raises, how a message echoes a user's value, and a Ctrl-C
remembered until it can be raised (no imports from miiii, so every module, tasks.py and config.py included, can use
them)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import signal
import sys
import threading
from pathlib import Path


class ConfigError(ValueError):
    """A configuration a run cannot start from; the CLI prints it and exits with status 2."""


class RunError(RuntimeError):
    """A run that stopped on a fault it cannot fix (disk full, write error); the message says what is left."""


def one_line_errors(fn, *args) -> int:
    """`fn(*args)`'s exit status, with the CLI's standard for a study script: bad input (ConfigError) is one
    `error:` line and status 2, a failed write (RunError) one line and status 1, a run stopped by Ctrl-C or, while
    it trains, SIGTERM (at a checkpoint: its message says where) one line and status 130, as `python -m miiii train`
    ends; so does one that returns 0 while a stop waits (its work under way was done: DONE_THEN_STOPPED)."""
    try:
        with carrying_stops():
            rc = fn(*args)
    except (ConfigError, RunError) as e:
        print(f"error: {shown(e, 4000)}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
    except KeyboardInterrupt as e:
        print(shown(e, 4000) or "interrupted", file=sys.stderr)
        return 130
    if rc == 0 and take_interrupt():  # a stop after the last safe point (as the CLI's commands)
        print(DONE_THEN_STOPPED, file=sys.stderr)
        return 130
    return rc


def shown(value, limit: int = 80) -> str:
    """A user's value as a message echoes it: control characters escaped (the message stays one line), at most
    `limit` characters (a 100,000-character value is not printed back whole)."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def did_you_mean(value, known) -> str:
    """' (did you mean X?)' for the known name closest to a mistyped one (difflib), '' when none is close."""
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def module_prog() -> str | None:
    """`python -m NAME` when the program was started as `python -m NAME` (argparse names it so from Python 3.12; 3.11
    says `__main__.py`), else None: argparse's own choice, the script's name."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = spec.name.removesuffix(".__main__") if spec is not None else ""
    return f"python -m {name}" if name and name != "__main__" else None


def lead(doc: str) -> str:
    """A docstring's first paragraph on one line: a `--help` description that ends where its sentence ends, not where
    the docstring's first line happens to wrap (and the rule a results.md prints, rules.printed_rule)."""
    return " ".join(doc.split("\n\n")[0].split())


MAX_CHOICES_SHOWN = 16  # an option's choices its --help lists (more: the option's help says where they are)


class OneLineParser(argparse.ArgumentParser):
    """argparse for the studies (`python -m experiments.NAME`), held to the CLI's standard: its own errors are one
    line, `error: ...`, exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("prog", module_prog())
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        """An option of several names from a list reads `--only NAME [NAME ...]`, its names listed once in its help,
        not twice on one unwrapped line; a list too long to read there names itself in the option's own help."""
        choices = kwargs.get("choices")
        if choices is not None and kwargs.get("nargs") in ("+", "*") and "metavar" not in kwargs:
            kwargs["metavar"] = "NAME"
            if len(choices) <= MAX_CHOICES_SHOWN:
                kwargs["help"] = f"{kwargs.get('help') or 'these'}; NAME: {', '.join(map(str, choices))}"
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        prog = self.prog if self.prog.startswith("python ") else f"python {self.prog}"
        self.exit(2, f"error: {shown(message, 300)} (see `{prog} --help`)\n")


def out_folder(out: Path, flag: str = "--out") -> Path:
    """`out` when it is a folder or can be made one (nothing in its way is a file), else a ConfigError; nothing is
    made here."""
    blocker = next((p for p in (out, *out.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError(f"{flag} {shown(out, 200)}: {shown(blocker, 200)} exists and is not a directory; choose "
                          f"another {flag}")
    return out


# ---------------------------------------------------------------- Ctrl-C that cannot be raised where it lands

_pending = [False]


def remember_interrupt(*_) -> None:
    """Note a Ctrl-C that could not stop the program where it landed: a KeyboardInterrupt raised inside a garbage-
    collection callback (jax has one) is swallowed (cli's unraisable hook calls this), one raised inside an extension
    module's initialisation becomes `ImportError: initialization failed`. Also a SIGINT handler (see
    `deferred_interrupts`), and a stop asked in the chunk that ended a run (session.StopFlag, inside
    `carrying_stops`). The next safe point (`raise_interrupt`, a start-up stage, a chunk boundary) raises it."""
    _pending[0] = True


_carrying = [0]


@contextlib.contextmanager
def carrying_stops():
    """Inside (a command, a study): a stop asked in the chunk that ended a run is kept for what comes next. Outside
    (a notebook calling train_run) it ends with that run: the run is complete and nothing else was asked to stop."""
    _carrying[0] += 1
    try:
        yield
    finally:
        _carrying[0] -= 1


def stops_carry() -> bool:
    return _carrying[0] > 0


def interrupt_pending() -> bool:
    return _pending[0]


def take_interrupt() -> bool:
    """Whether a stop was remembered, forgetting it: one remembered stop stops one thing (a StopFlag takes it)."""
    pending, _pending[0] = _pending[0], False
    return pending


DONE_THEN_STOPPED = "interrupted once the work under way was done (nothing of it is left to resume)"


def raise_interrupt(message: str = "interrupted") -> None:
    """A safe point: a remembered Ctrl-C is raised here (KeyboardInterrupt)."""
    if _pending[0]:
        _pending[0] = False
        raise KeyboardInterrupt(message)


def sigint(signum, frame) -> None:
    """The command line's SIGINT handler: Python's own (a KeyboardInterrupt where the program is), but remembered
    first, so that a KeyboardInterrupt something swallows still stops the command at its next safe point."""
    remember_interrupt()
    raise KeyboardInterrupt


@contextlib.contextmanager
def deferred_interrupts():
    """Inside (imports): a Ctrl-C is only remembered, so no import is left half done; it is raised on the way out.
    Outside the main thread (which Python's signals never reach) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prev = signal.signal(signal.SIGINT, remember_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, prev if prev is not None else signal.SIG_DFL)
    raise_interrupt()
