"""The optimizer registry: `optim.optimizer` names an entry of `OPTIMIZERS`, and the entry builds the last stage of
the chain (optim.make_optimizer puts clipping, grokfast and ⊥Grad before it). A new optimizer is one entry here:
validation, the CLI's error text and the chain all read this table.

This module imports no optax at the top (config.py, which a run's readers import, takes its names from here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Optimizer:
    name: str  # the value of optim.optimizer
    # (schedule, adamw, v) -> optax.GradientTransformation: v the sweepable optim values (possibly traced), adamw the
    # AdamW the plain chain ends with (an optimizer may hand it the arrays it does not take)
    build: Callable
    moments: int  # optimizer moments kept per hidden-matrix parameter (validate.memory_floor's estimate)
    doc: str


# optim.optimizer = muon: which parameter arrays Muon takes, and how each is a matrix (reduction axes: the input's,
# output axes: the output's; any other axis is a batch of matrices). The model's attention weights are per head,
# W_Q/W_K/W_V (heads, d_model, d_head) and W_O (heads, d_head, d_model): each is taken whole, as the d_model x
# (heads * d_head) (or (heads * d_head) x d_model) matrix of a fused projection, the nn.Linear a PyTorch Muon sees.
# Everything else (W_E, W_pos, W_U, biases, LayerNorm scales and biases) is AdamW's, as in the Muon grokking studies.
# Values are (reduction_axis, output_axis) of optax.contrib.MuonDimensionNumbers.
MUON_DIMS = {
    ("attn", "W_Q"): (1, (0, 2)),
    ("attn", "W_K"): (1, (0, 2)),
    ("attn", "W_V"): (1, (0, 2)),
    ("attn", "W_O"): ((0, 1), 2),
    ("mlp", "W_in"): (0, 1),
    ("mlp", "W_out"): (0, 1),
}
# Muon's updates scaled to AdamW's typical RMS (0.2 * sqrt(max(fan_in, fan_out)); Liu et al. 2025, "Muon is scalable
# for LLM training"), so a preset's lr and weight decay carry over to the Muon side
MUON_RMS = 0.2


def _muon_key(path):
    keys = tuple(getattr(k, "key", str(k)) for k in path)
    return keys[-2:] if len(keys) >= 2 and keys[-2:] in MUON_DIMS else None


def muon_dims(params):
    """Per parameter array: its MuonDimensionNumbers if Muon takes it (MUON_DIMS), else None (AdamW)."""
    import jax
    from optax.contrib import MuonDimensionNumbers

    def rule(path, _):
        key = _muon_key(path)
        return None if key is None else MuonDimensionNumbers(*MUON_DIMS[key])

    return jax.tree_util.tree_map_with_path(rule, params)


def muon_labels(params):
    """Per parameter array: "muon" or "adamw" (optax.partition's labels)."""
    import jax

    return jax.tree_util.tree_map_with_path(lambda p, _: "adamw" if _muon_key(p) is None else "muon", params)


def _muon(schedule, adamw, v):
    """optax's Muon (momentum 0.95, Nesterov, 5 Newton-Schulz steps) on MUON_DIMS' arrays; its own AdamW fallback
    (Nesterov) gets none: the rest goes to the same AdamW as optimizer=adamw."""
    import optax
    from optax.contrib import muon

    hidden = muon(schedule, weight_decay=v["weight_decay"], consistent_rms=MUON_RMS,
                  muon_weight_dimension_numbers=muon_dims)
    return optax.partition({"muon": hidden, "adamw": adamw}, muon_labels)


OPTIMIZERS: dict[str, Optimizer] = {o.name: o for o in (
    Optimizer("adamw", lambda schedule, adamw, v: adamw, 2, "AdamW (Loshchilov & Hutter 2019) on every array"),
    Optimizer("muon", _muon, 1, "Muon on the hidden matrices (MUON_DIMS), AdamW on the rest"),
)}
