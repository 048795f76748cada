"""miiii: grokking and mechanistic interpretability of modular-arithmetic transformers in JAX/Flax."""

from miiii.config import PRESETS, ConfigError, RunConfig, apply_overrides, get_preset, validate
from miiii.rundir import Run, load_run
from miiii.tasks import make_task

__all__ = [
    "PRESETS", "ConfigError", "Run", "RunConfig", "apply_overrides", "get_preset", "load_run", "make_task", "validate",
]
