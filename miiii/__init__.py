"""miiii: grokking and mechanistic interpretability of modular-arithmetic transformers in JAX/Flax."""

from miiii.config import PRESETS, ConfigError, RunConfig, apply_overrides, get_preset, validate
from miiii.tasks import make_task

__all__ = ["PRESETS", "ConfigError", "RunConfig", "apply_overrides", "get_preset", "make_task", "validate"]
