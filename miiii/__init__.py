"""miiii: grokking and mechanistic interpretability of modular-arithmetic transformers in JAX/Flax."""

from miiii.config import ConfigError, RunConfig, apply_overrides, validate
from miiii.presets import PRESETS, get_preset
from miiii.run import Run, load_run
from miiii.tasks import make_task

__all__ = [
    "PRESETS", "ConfigError", "Run", "RunConfig", "apply_overrides", "get_preset", "load_run", "make_task", "validate",
]
