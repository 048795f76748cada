"""miiii: grokking and mechanistic interpretability of modular-arithmetic transformers in JAX/Flax.

The names below are imported when first used (PEP 562), so `python -m miiii` starts at once and can take a Ctrl-C
from its first moment (see __main__.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_WHERE = {"ConfigError": "config", "RunConfig": "config", "apply_overrides": "config", "validate": "validate",
          "PRESETS": "presets", "get_preset": "presets", "Run": "run", "load_run": "run", "make_task": "tasks"}

__all__ = [
    "PRESETS", "ConfigError", "Run", "RunConfig", "apply_overrides", "get_preset", "load_run", "make_task", "validate",
]

if TYPE_CHECKING:
    from miiii.config import ConfigError, RunConfig, apply_overrides
    from miiii.presets import PRESETS, get_preset
    from miiii.run import Run, load_run
    from miiii.tasks import make_task
    from miiii.validate import validate


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'miiii' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"miiii.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *__all__])
