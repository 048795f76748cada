"""The optimizer chain from a config: [clip] -> [grokfast] -> [orthograd] -> the optimizer `optim.optimizer` names
(an entry of optimizers.OPTIMIZERS: AdamW, or Muon on the hidden matrices and AdamW on the rest) with an optax
schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from miiii.config import OptimConfig, sweepable
from miiii.grokfast import grokfast_ema, grokfast_ma
from miiii.optimizers import OPTIMIZERS
from miiii.orthograd import orthograd


def make_schedule(cfg: OptimConfig, total_steps: int, lr=None) -> optax.Schedule:
    """Linear warm-up from 0 (or from lr / warmup_steps with `warmup_first` = 1), then constant or cosine decay
    to `final_lr_frac` of the peak at `total_steps` (0: the book's decay to 0).

    Written as lr * (an optax schedule peaking at 1), so that a traced lr (a sweep) and a Python lr
    (a single run) take the same arithmetic.
    """
    lr = cfg.lr if lr is None else lr
    warm = max(cfg.warmup_steps, 0)
    if cfg.schedule == "cosine":
        unit = optax.warmup_cosine_decay_schedule(0.0, 1.0, warm, max(total_steps, warm + 1),
                                                   end_value=cfg.final_lr_frac)
    elif warm == 0:
        unit = optax.constant_schedule(1.0)
    else:
        unit = optax.join_schedules([optax.linear_schedule(0.0, 1.0, warm), optax.constant_schedule(1.0)], [warm])
    if cfg.warmup_first and warm:  # PyTorch's LambdaLR warm-up, (t + 1) / warm: one step ahead of optax's
        after = unit
        unit = lambda count: jnp.where(count < warm, (count + cfg.warmup_first) / warm, after(count))  # noqa: E731
    return lambda count: lr * unit(count)


def make_optimizer(cfg: OptimConfig, total_steps: int, hp: dict | None = None) -> optax.GradientTransformation:
    """`hp` overrides any sweepable optim field (config.SWEEPABLE) with (possibly traced) values; the state's
    structure never changes."""
    v = {k: getattr(cfg, k) for k in sweepable("optim")} | (hp or {})
    parts = []
    if cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(v["clip_norm"]))
    if cfg.grokfast == "ema":
        parts.append(grokfast_ema(v["alpha"], v["lamb"], init=cfg.ema_init))
    elif cfg.grokfast == "ma":
        parts.append(grokfast_ma(cfg.window, v["lamb"]))
    # ⊥Grad after grokfast, last before the optimizer: what the optimizer is given is orthogonal to the current weights
    # exactly (the point of ⊥Grad; grokfast after it would add back its EMA of past gradients, orthogonal to past
    # weights only, and the radial direction is a slow, consistent one, what grokfast amplifies), and grokfast
    # filters the same gradients as without it (the reference's gradfilter_ema). Clipping and ⊥Grad commute: ⊥Grad
    # keeps each array's norm, so the global norm the clip reads, and scaling by a positive factor passes through it.
    if cfg.orthograd:
        parts.append(orthograd())
    schedule = make_schedule(cfg, total_steps, v["lr"])
    adamw = optax.adamw(schedule, b1=v["b1"], b2=v["b2"], weight_decay=v["weight_decay"])
    parts.append(OPTIMIZERS[cfg.optimizer].build(schedule, adamw, v))  # the registry's last stage
    if cfg.fixed_norm > 0:
        parts.append(project_to_norm(cfg.fixed_norm))
    return optax.chain(*parts)


def project_to_norm(norm: float) -> optax.GradientTransformation:
    """The last stage: the update u becomes c (p + u) / |p + u| - p, so the parameters after it have global L2 norm
    c (Liu et al.'s Omnigrok: training on the sphere of a fixed weight norm)."""

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("project_to_norm needs the parameters (optax's update(grads, state, params))")
        new = jax.tree.map(lambda p, u: p + u, params, updates)
        scale = norm / optax.global_norm(new)
        return jax.tree.map(lambda n, p: n * scale - p, new, params), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
