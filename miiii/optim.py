"""The optimizer chain from a config: [clip] -> [grokfast] -> [orthograd] -> AdamW (or Muon on the hidden matrices
and AdamW on the rest) with an optax schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from optax.contrib import MuonDimensionNumbers, muon

from miiii.config import OptimConfig, sweepable
from miiii.grokfast import grokfast_ema, grokfast_ma
from miiii.orthograd import orthograd


def make_schedule(cfg: OptimConfig, total_steps: int, lr=None) -> optax.Schedule:
    """Linear warm-up from 0 (or from lr / warmup_steps with `warmup_first` = 1), then constant or cosine decay
    to 0 at `total_steps` (book).

    Written as lr * (an optax schedule peaking at 1), so that a traced lr (a sweep) and a Python lr
    (a single run) take the same arithmetic.
    """
    lr = cfg.lr if lr is None else lr
    warm = max(cfg.warmup_steps, 0)
    if cfg.schedule == "cosine":
        unit = optax.warmup_cosine_decay_schedule(0.0, 1.0, warm, max(total_steps, warm + 1), end_value=0.0)
    elif warm == 0:
        unit = optax.constant_schedule(1.0)
    else:
        unit = optax.join_schedules([optax.linear_schedule(0.0, 1.0, warm), optax.constant_schedule(1.0)], [warm])
    if cfg.warmup_first and warm:  # PyTorch's LambdaLR warm-up, (t + 1) / warm: one step ahead of optax's
        after = unit
        unit = lambda count: jnp.where(count < warm, (count + cfg.warmup_first) / warm, after(count))  # noqa: E731
    return lambda count: lr * unit(count)


# optim.optimizer = muon: which parameter arrays Muon takes, and how each is a matrix (reduction axes: the input's,
# output axes: the output's; any other axis is a batch of matrices). The model's attention weights are per head,
# W_Q/W_K/W_V (heads, d_model, d_head) and W_O (heads, d_head, d_model): each is taken whole, as the d_model x
# (heads * d_head) (or (heads * d_head) x d_model) matrix of a fused projection, the nn.Linear a PyTorch Muon sees.
# Everything else (W_E, W_pos, W_U, biases, LayerNorm scales and biases) is AdamW's, as in the Muon grokking studies.
MUON_DIMS = {
    ("attn", "W_Q"): MuonDimensionNumbers(reduction_axis=1, output_axis=(0, 2)),
    ("attn", "W_K"): MuonDimensionNumbers(reduction_axis=1, output_axis=(0, 2)),
    ("attn", "W_V"): MuonDimensionNumbers(reduction_axis=1, output_axis=(0, 2)),
    ("attn", "W_O"): MuonDimensionNumbers(reduction_axis=(0, 1), output_axis=2),
    ("mlp", "W_in"): MuonDimensionNumbers(reduction_axis=0, output_axis=1),
    ("mlp", "W_out"): MuonDimensionNumbers(reduction_axis=0, output_axis=1),
}
# Muon's updates scaled to AdamW's typical RMS (0.2 * sqrt(max(fan_in, fan_out)); Liu et al. 2025, "Muon is scalable
# for LLM training"), so a preset's lr and weight decay carry over to the Muon side
MUON_RMS = 0.2


def _muon_rule(path, leaf):
    keys = tuple(getattr(k, "key", str(k)) for k in path)
    return MUON_DIMS.get(keys[-2:]) if len(keys) >= 2 else None


def muon_dims(params):
    """Per parameter array: its MuonDimensionNumbers if Muon takes it (MUON_DIMS), else None (AdamW)."""
    return jax.tree_util.tree_map_with_path(_muon_rule, params)


def muon_labels(params):
    """Per parameter array: "muon" or "adamw" (optax.partition's labels)."""
    return jax.tree_util.tree_map_with_path(lambda p, x: "adamw" if _muon_rule(p, x) is None else "muon", params)


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
    if cfg.optimizer == "muon":  # optax's Muon (momentum 0.95, Nesterov, 5 Newton-Schulz steps) on MUON_DIMS' arrays;
        # its own AdamW fallback (Nesterov) gets none: the rest goes to the same AdamW as optimizer=adamw
        hidden = muon(schedule, weight_decay=v["weight_decay"], consistent_rms=MUON_RMS,
                      muon_weight_dimension_numbers=muon_dims)
        parts.append(optax.partition({"muon": hidden, "adamw": adamw}, muon_labels))
    else:
        parts.append(adamw)
    return optax.chain(*parts)
