"""The optimizer chain from a config: [clip] -> [grokfast] -> AdamW with an optax schedule."""

from __future__ import annotations

import optax

from miiii.config import OptimConfig
from miiii.grokfast import grokfast_ema, grokfast_ma


def make_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Linear warm-up from 0, then constant or cosine decay to 0 at `total_steps` (book)."""
    warm = max(cfg.warmup_steps, 0)
    if cfg.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warm, max(total_steps, warm + 1), end_value=0.0)
    if warm == 0:
        return optax.constant_schedule(cfg.lr)
    return optax.join_schedules([optax.linear_schedule(0.0, cfg.lr, warm), optax.constant_schedule(cfg.lr)], [warm])


def make_optimizer(cfg: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    parts = []
    if cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(cfg.clip_norm))
    if cfg.grokfast == "ema":
        parts.append(grokfast_ema(cfg.alpha, cfg.lamb, init=cfg.ema_init))
    elif cfg.grokfast == "ma":
        parts.append(grokfast_ma(cfg.window, cfg.lamb))
    parts.append(
        optax.adamw(make_schedule(cfg, total_steps), b1=cfg.b1, b2=cfg.b2, weight_decay=cfg.weight_decay)
    )
    return optax.chain(*parts)
