"""Soft ties: a penalty that pulls a free weight toward its master (or its master's transpose) while the model
trains, so that a trained model can then be tied for good (train.init_from drops a weight the new model ties).

A hard tie imposed on a trained model at once (the weight replaced by its master) throws away what that weight had
learned; a soft tie lets training move the pair together first, where it can keep the function (e.g. along SwiGLU's
symmetry: unit j's up column times a, its down row over a). Whether it can is the model's: the AdderBoard study's 41
lost its sums as its gate closed on its up. Only the ties that need no new scalar are soft: equal and transpose.
"""

from __future__ import annotations

from miiii.config import ConfigError, parse_ties

SOFT = ("", "T")  # the transforms a soft tie may use: equal, transpose


def parse_soft(rules: tuple[str, ...]) -> dict[tuple[str, str], tuple[str, str]]:
    """{(module, follower): (transform, master)} of train.soft_ties (model.ties' syntax), ConfigError otherwise."""
    try:
        parsed = parse_ties(rules)
    except ValueError as e:
        raise ConfigError(f"train.soft_ties: {e}; a soft tie is FOLLOWER=MASTER or FOLLOWER=T(MASTER)") from None
    bad = [f"{m}.{f}" for (m, f), (t, _) in parsed.items() if t not in SOFT]
    if bad:
        raise ConfigError(f"train.soft_ties: {', '.join(bad)}: a soft tie is FOLLOWER=MASTER or FOLLOWER=T(MASTER) "
                          "(a turned or scaled tie would need a scalar the untied model does not have)")
    return parsed


def _pairs(tree: dict, rules: tuple[str, ...]):
    """(a block's module dict, its name, follower, master, F) for each soft tie in each block of `tree` (F: "" equal,
    "T" transpose)."""
    for (module, follower), (transform, master) in parse_soft(rules).items():
        for block in sorted(k for k in tree if k.startswith("blocks_")):
            yield tree[block].get(module, {}), module, follower, master, transform


def _f(x, transform: str):
    import jax.numpy as jnp  # here: reading a config (validate, `miiii presets`) imports no jax

    return jnp.swapaxes(x, -1, -2) if transform == "T" else x


def tie_gap(params: dict, rules: tuple[str, ...]):
    """sum over the rules and the blocks of ||follower - F(master)||^2 (float32 scalar; 0 with no rules)."""
    import jax.numpy as jnp

    total = jnp.zeros((), jnp.float32)
    for w, _, follower, master, transform in _pairs(params, rules):
        total = total + jnp.sum(jnp.square(w[follower] - _f(w[master], transform)))
    return total


def tied_now(params: dict, rules: tuple[str, ...]) -> dict:
    """`params` with each soft tie's follower set to F(master), in every block: the function the model computes once
    the ties are made (the tightened model's start, in the untied model's parameters)."""
    out = {k: ({m: dict(w) for m, w in v.items()} if k.startswith("blocks_") else v) for k, v in params.items()}
    for w, _, follower, master, transform in _pairs(out, rules):
        w[follower] = _f(w[master], transform)
    return out


def check_soft_ties(rules: tuple[str, ...], params_shape: dict) -> None:
    """Each soft tie's follower and master are parameters of the model (not tied already) of matching shapes."""
    for w, module, follower, master, transform in _pairs(params_shape, rules):
        missing = [n for n in (follower, master) if n not in w]
        if missing:
            raise ConfigError(f"train.soft_ties: {module}.{missing[0]} is not a parameter of this model (tied by "
                              "model.ties, or not built); a soft tie joins two free weights")
        shape = tuple(w[master].shape)
        want = (*shape[:-2], shape[-1], shape[-2]) if transform == "T" else shape
        if tuple(w[follower].shape) != want:
            raise ConfigError(f"train.soft_ties: {module}.{follower} {tuple(w[follower].shape)} cannot be "
                              f"{transform or 'equal'}({module}.{master} {shape})")


def tightened(have: dict, want: dict, ties: tuple[str, ...]) -> tuple[dict, list[str]] | None:
    """(`have` (another run's parameters, nested) less the weights that model.ties `ties` computes in this model,
    their '/'-joined names) when that leaves exactly the leaves of `want` (this model's, nested; shapes suffice);
    None otherwise."""
    from flax.traverse_util import flatten_dict, unflatten_dict

    have_flat, want_flat = flatten_dict(have), flatten_dict(want)
    tied = parse_ties(ties)  # {(module, follower): (transform, master)}

    def computed(k: tuple) -> bool:  # blocks_i/module/follower, its master a parameter of this model
        return (len(k) == 3 and k[0].startswith("blocks_") and (k[1], k[2]) in tied
                and (k[0], k[1], tied[(k[1], k[2])][1]) in want_flat)

    extra = set(have_flat) - set(want_flat)
    if set(want_flat) - set(have_flat) or not extra or not all(computed(k) for k in extra):
        return None
    return unflatten_dict({k: v for k, v in have_flat.items() if k in want_flat}), sorted("/".join(k) for k in extra)
