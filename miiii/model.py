"""One transformer family, pure-functional Flax linen: `apply(params, x) -> (logits, acts)`.

Settings cover the paper's model (one block, no biases, no LayerNorm, heads summed, ReLU d -> 4d -> d,
dropout on the residual stream, He-normal init, one unembedding head per task read from the last
position) and the book's AdditionTransformer (pre-LN, causal single head, FFN with bias, final LN,
head tied to the token embedding). Weight and activation names follow TransformerLens.

`acts` is returned explicitly (no `sow`): under jit whatever the caller ignores is dead code.
With `readout="last"` the final block computes queries, attention output, MLP and unembedding at
the last position only (keys and values at every position); the logits are exactly those of the
full computation, and that block's activations are those of the last position. Two more exact
shortcuts (tests/test_model.py checks logits and gradients against a textbook forward): the first block
gathers Q, K, V from tables over the vocabulary (`EmbedTables`, `PairTable`), and the per-slot unembedding
runs in buckets of slots, each only as wide as its widest task (classes beyond that are never labels; their
logits are 0).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from miiii.config import TURNED, ConfigError, ModelConfig, parse_ties, pin_mask, pinnable


def _normal(std: float):
    return nn.initializers.normal(stddev=std)


def _uniform(bound: float):
    return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)


class Init:
    """Initialisers by weight role, per scheme: he (paper), original (the paper's original code), torch (book:
    PyTorch defaults), nanda.

    `original` is jax's he_normal on each array as it is shaped: a normal truncated at 2 std whose fan-in is the
    axis before the last times every axis but the last two. This model's arrays have the original's shapes (W_E
    (V, d), W_pos (3, d), W_Q/K/V (H, d, d/H), W_O (H, d/H, d), W_in (d, 4d), W_out (4d, d), miiii's W_U
    (tasks, d, classes)), so the fan-ins are the original's: W_pos std 0.82, W_E 0.13, W_Q 0.044, miiii W_U 0.016
    at p = 113, d 256. (The original also drew W_in and W_out from one key; here each has its own.)"""

    def __init__(self, scheme: str, d_model: int):
        self.scheme, self.d = scheme, d_model

    def embed(self):
        return {"he": _normal(math.sqrt(2 / self.d)), "original": nn.initializers.he_normal(), "torch": _normal(1.0),
                "nanda": _normal(1 / math.sqrt(self.d)), "qwen": _normal(0.02)}[self.scheme]

    def matrix(self, fan_in: int):
        return {
            "he": _normal(math.sqrt(2 / fan_in)),
            "original": nn.initializers.he_normal(),
            "torch": _uniform(1 / math.sqrt(fan_in)),  # nn.Linear: kaiming_uniform(a=sqrt 5)
            "nanda": _normal(1 / math.sqrt(self.d)),
            "qwen": _normal(0.02),
        }[self.scheme]

    def bias(self, fan_in: int):
        return _uniform(1 / math.sqrt(fan_in)) if self.scheme == "torch" else nn.initializers.zeros


class EmbedTables(NamedTuple):
    """Block 0 without LayerNorm reads W_E[tokens] + W_pos, so its projection x @ W is (W_E @ W)[tokens] + W_pos @ W:
    |vocab| + t rows through the matmul instead of b * t (the same sums, only associated differently)."""

    tokens: jax.Array  # (b, t) int
    W_E: jax.Array  # (V, d)
    W_pos: jax.Array  # (t, d)

    def project(self, W, pos: slice):  # -> (b, positions, n)
        return (self.W_E @ W)[self.tokens[:, pos]] + (self.W_pos[pos] @ W)[None]


class PairTable(NamedTuple):
    """Block 0 with LayerNorm reads one of |vocab| * t rows LN(W_E[v] + W_pos[i]): row v * t + i of table @ W is
    token v at position i."""

    tokens: jax.Array  # (b, t) int
    table: jax.Array  # (V, t, d)

    def project(self, W, pos: slice):  # -> (b, positions, n)
        _, t, d = self.table.shape
        rows = self.tokens[:, pos] * t + jnp.arange(t)[pos][None]
        return (self.table.reshape(-1, d) @ W)[rows]


def rotary(x, pos, theta: float):
    """Rotary position embedding as Qwen and Llama apply it: the head's first half and second half are the two
    coordinates of e/2 planes, plane i turned by pos * theta^(-2i/e). x: (b, t, heads, e); pos: (t,)."""
    half = x.shape[-1] // 2
    angle = pos[:, None] * theta ** (-2.0 * jnp.arange(half) / x.shape[-1])[None]  # (t, e/2)
    return turn_halves(x, jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None])


def turn_halves(x, cos, sin):
    """The last axis' first and second halves as the two coordinates of planes, each turned by (cos, sin): rotary
    positions and the `rot` tie share it."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def make_norm(c: ModelConfig, name: str, shared: dict | None = None, qk: bool = False):
    """The norm called `name` (model.layer_norm's blocks and head, model.norm saying which; or, `qk`, a head's q_norm
    or k_norm, always RMSNorm), or the identity: its own module, or its group's scale and bias (model.norm_groups)."""
    if name in (shared or {}):
        scale, bias = shared[name]
        return lambda x: normalise(x, scale, bias, c.norm_eps)
    if not (qk or c.layer_norm):
        return lambda x: x
    rms = qk or c.norm == "rms"
    return nn.RMSNorm(epsilon=c.norm_eps, name=name) if rms else nn.LayerNorm(epsilon=c.norm_eps, name=name)


def normalise(x, scale, bias, eps: float):
    """RMSNorm (bias None) or LayerNorm over the last axis with the given scale and bias, its statistics in float32
    as Flax's norms take them: a shared norm."""
    z = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    if bias is None:
        return (z * jax.lax.rsqrt(jnp.mean(jnp.square(z), -1, keepdims=True) + eps) * scale).astype(x.dtype)
    z = z - z.mean(-1, keepdims=True)
    return (z * jax.lax.rsqrt(jnp.mean(jnp.square(z), -1, keepdims=True) + eps) * scale + bias).astype(x.dtype)


FREE = "_free"  # a pinned weight's parameter is NAME_free: its free entries, flat, row-major (model.pins)


def pinned_weights(m: ModelConfig, paths) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(path, free mask, constants) of each of `paths` (flat parameter names of full weights, "blocks_0/attn/W_Q") that
    model.pins holds entries of: the export and experiments/adderboard/gauge.py read the pins through this."""
    out = []
    for weight, shape in pinnable(m).items():
        if (mask := pin_mask(weight, shape, m.pins)) is not None:
            tail = weight.replace(".", "/")
            out += [(path, *mask) for path in paths if path == tail or path.endswith("/" + tail)]
    return out


def pinned_param(module: nn.Module, name: str, weight: str, init, shape: tuple, pins: tuple[str, ...]):
    """module.param(name, init, shape), or, with entries of `weight` pinned, the array built from the parameter
    NAME_free (its free entries, flat, drawn as the full init draws them) and the pins' constants."""
    mask = pin_mask(weight, tuple(shape), pins)
    if mask is None:
        return module.param(name, init, shape)
    free, values = mask
    where = np.nonzero(free)
    draw = lambda key, _, dtype=jnp.float32: init(key, shape, dtype)[where]  # noqa: E731
    return jnp.asarray(values).at[where].set(module.param(name + FREE, draw, (int(free.sum()),)))


class SharedNorm(nn.Module):
    """One group of model.norm_groups: the scale (and LayerNorm's bias) its norms use."""

    size: int
    rms: bool
    pins: tuple[str, ...] = ()

    @nn.compact
    def __call__(self):
        scale = pinned_param(self, "scale", f"{self.name}.scale", nn.initializers.ones, (self.size,), self.pins)
        return scale, None if self.rms else self.param("bias", nn.initializers.zeros, (self.size,))


def shared_norms(c: ModelConfig) -> dict:
    """{norm name: (scale, bias)} of model.norm_groups' groups, each a SharedNorm module named shared_norm_K."""
    out = {}
    for k, group in enumerate(c.norm_groups):
        names = group.split("+")
        qk = names[0] in ("q_norm", "k_norm")
        out |= dict.fromkeys(names, SharedNorm(c.d_head if qk else c.d_model, qk or c.norm == "rms", c.pins,
                                               name=f"shared_norm_{k}")())
    return out


def arc_init(d_vocab: int, start: tuple[float, ...] = ()):
    """`start` (model.arc_init), or amplitude 1, start 0, stride 2 pi / vocab: the tokens evenly round the circle.
    A choice, not a default, because the board's small adders start from an open arc (experiments/adderboard)."""
    values = start or (1.0, 0.0, 2 * math.pi / d_vocab)
    return lambda key, shape, dtype=jnp.float32: jnp.array(values, dtype)


def arc_embedding(arc, d_vocab: int, d_model: int):
    """(3,) amplitude, start, stride -> (vocab, d) rows [A cos(s + k v), A sin(s + k v), 0, ...]."""
    angle = arc[1] + arc[2] * jnp.arange(d_vocab)
    circle = arc[0] * jnp.stack([jnp.cos(angle), jnp.sin(angle)], axis=1)
    return jnp.pad(circle, ((0, 0), (0, d_model - 2)))


def block_weights(module: nn.Module, ties: tuple[str, ...], scope: str, specs: list[tuple[str, object, tuple]],
                  angle0: float = 0.0, pins: tuple[str, ...] = ()):
    """The module's weights {name: array}: each master a parameter (created in `specs` order, so with no ties the
    parameters and their random draws are the untied model's; model.pins' entries held), each follower its master
    transformed."""
    tied = {f: v for (mod, f), v in parse_ties(ties).items() if mod == scope}
    w = {name: pinned_param(module, name, f"{scope}.{name}", init, shape, pins) for name, init, shape in specs
         if name not in tied}
    for name, _, shape in specs:
        if name not in tied:
            continue
        transform, master = tied[name]
        x = w[master]
        if transform in ("T", "rotT"):
            x = jnp.swapaxes(x, -1, -2)
        if transform == "scale":
            x = module.param(f"{name}_scale", nn.initializers.ones, ()) * x
        if transform in TURNED:
            if x.shape[-1] % 2:
                raise ValueError(f"model.ties: {scope}.{name} = {transform}(...) turns pairs of the last axis, whose "
                                 f"size {x.shape[-1]} is odd")
            angle = module.param(f"{name}_angle", nn.initializers.constant(angle0), ())
            if transform == "rot1":  # the first plane alone: the others turn by 0
                angle = angle * (jnp.arange(x.shape[-1] // 2) == 0)
            x = turn_halves(x, jnp.cos(angle), jnp.sin(angle))
        if transform == "Trot":
            x = jnp.swapaxes(x, -1, -2)
        if x.shape != tuple(shape):
            raise ValueError(f"model.ties: {scope}.{name} {tuple(shape)} cannot be {transform or 'equal'}({scope}."
                             f"{master} {tuple(w[master].shape)})")
        w[name] = x
    return w


class Attention(nn.Module):
    cfg: ModelConfig
    last_only: bool  # queries at the last position only

    @nn.compact
    def __call__(self, h, fold: EmbedTables | PairTable | None = None, shared: dict | None = None):  # h: (b, t, d)
        """Block 0's input is a function of (token, position) alone: `fold` then projects it from tables."""
        c, init = self.cfg, Init(self.cfg.init, self.cfg.d_model)
        H, G, d, e = c.n_heads, c.kv_heads, c.d_model, c.d_head  # G key/value heads, each read by H / G queries
        w = block_weights(self, c.ties, "attn", [("W_Q", init.matrix(d), (H, d, e)), ("W_K", init.matrix(d), (G, d, e)),
                                                 ("W_V", init.matrix(d), (G, d, e)),
                                                 ("W_O", init.matrix(H * e), (H, e, d))], c.tie_angle, c.pins)
        W_Q, W_K, W_V, W_O = w["W_Q"], w["W_K"], w["W_V"], w["W_O"]
        b, t, _ = h.shape
        tq = 1 if self.last_only else t
        # 2-D matmuls on (rows, d) with weights reshaped to (d, H*e) (small): no activation transposes
        flat = lambda w: w.transpose(1, 0, 2).reshape(d, -1)  # noqa: E731

        def project(W, last: bool):  # -> (b, positions, n)
            if fold is None:
                x = h[:, -1:] if last else h
                return (x.reshape(-1, d) @ W).reshape(b, x.shape[1], -1)
            return fold.project(W, slice(t - 1, t) if last else slice(0, t))

        if self.last_only:
            q = project(flat(W_Q), last=True).reshape(b, tq, H, e)
            kv = project(jnp.concatenate([flat(W_K), flat(W_V)], axis=1), last=False)
            k, v = kv[..., : G * e].reshape(b, t, G, e), kv[..., G * e:].reshape(b, t, G, e)
        else:
            qkv = project(jnp.concatenate([flat(W_Q), flat(W_K), flat(W_V)], axis=1), last=False)
            q = qkv[..., : H * e].reshape(b, t, H, e)
            k, v = (qkv[..., H * e + i * G * e:H * e + (i + 1) * G * e].reshape(b, t, G, e) for i in range(2))
        if c.qk_norm:
            q = make_norm(c, "q_norm", shared, qk=True)(q)
            k = make_norm(c, "k_norm", shared, qk=True)(k)
        if c.rope_theta:
            q, k = rotary(q, jnp.arange(t)[t - tq:], c.rope_theta), rotary(k, jnp.arange(t), c.rope_theta)
        if G != H:  # query head j reads key/value head j // (H / G)
            k, v = jnp.repeat(k, H // G, axis=2), jnp.repeat(v, H // G, axis=2)
        scores = jnp.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(e)
        if c.causal:
            qpos = jnp.arange(t)[-tq:, None]
            scores = jnp.where(qpos >= jnp.arange(t)[None, :], scores, -jnp.inf)
        pattern = jax.nn.softmax(scores, axis=-1)  # (b, H, q, k)
        z = jnp.einsum("bhqk,bkhe->bqhe", pattern, v)
        out = (z.reshape(b * tq, H * e) @ W_O.reshape(H * e, d)).reshape(b, tq, d)  # heads summed
        return out, {"hook_pattern": pattern}


class MLP(nn.Module):
    cfg: ModelConfig

    @nn.compact
    def __call__(self, h):  # (b, t, d)
        c, init = self.cfg, Init(self.cfg.init, self.cfg.d_model)
        d, m = c.d_model, c.mlp_dim
        w = block_weights(self, c.ties, "mlp", [("W_in", init.matrix(d), (d, m)), ("W_out", init.matrix(m), (m, d))]
                          + ([("W_gate", init.matrix(d), (d, m))] if c.mlp_act == "swiglu" else []), c.tie_angle,
                          c.pins)
        W_in, W_out = w["W_in"], w["W_out"]
        pre = h @ W_in
        if c.mlp_bias:
            pre = pre + self.param("b_in", init.bias(c.d_model), (c.mlp_dim,))
        if c.mlp_act == "swiglu":
            post = jax.nn.silu(h @ w["W_gate"]) * pre
        else:
            post = jax.nn.relu(pre)  # (b, t, d_mlp)
        out = post @ W_out
        if c.mlp_bias:
            out = out + self.param("b_out", init.bias(c.mlp_dim), (c.d_model,))
        return out, {"hook_post": post}


def dropout(module: nn.Module, x, rate, train: bool):
    """Inverted dropout whose rate may be a traced scalar (a sweep over dropout); skipped when 0 or eval."""
    if not train or (isinstance(rate, (int, float)) and rate == 0):
        return x
    keep = jax.random.bernoulli(module.make_rng("dropout"), 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


class Block(nn.Module):
    cfg: ModelConfig
    last_only: bool

    @nn.compact
    def __call__(self, h, train: bool, rate, fold: EmbedTables | None = None, shared: dict | None = None):
        c = self.cfg
        norm = lambda name: make_norm(c, name, shared)  # noqa: E731
        drop = lambda x: dropout(self, x, rate, train)  # noqa: E731
        post = c.layer_norm and c.ln_position == "post"  # the norms after each residual sum (the original Transformer)
        pre = norm if not post else (lambda name: lambda x: x)
        after = norm if post else (lambda name: lambda x: x)
        if fold is not None and c.layer_norm and not post:  # LN of every (token, position) pair, read by attention
            fold = PairTable(fold.tokens, norm("ln1")(fold.W_E[:, None] + fold.W_pos[None]))  # table (V, t, d)
            attn_in = h  # unused: Q, K, V come from the table
        else:
            attn_in = pre("ln1")(h)
        attn_out, attn_acts = Attention(c, self.last_only, name="attn")(attn_in, fold, shared)
        h = h[:, -1:] if self.last_only else h
        h = after("ln1")(drop(h + attn_out))
        mid = h
        mlp_out, mlp_acts = MLP(c, name="mlp")(pre("ln2")(h))
        h = after("ln2")(drop(h + mlp_out))
        acts = {f"attn.{k}": v for k, v in attn_acts.items()} | {f"mlp.{k}": v for k, v in mlp_acts.items()}
        return h, acts | {"hook_resid_mid": mid, "hook_resid_post": h}


class Transformer(nn.Module):
    """Token (+ positional) embedding -> n_layers blocks -> [final LN] -> unembedding.

    logits: (b, S, d_out) with S = n_out heads at the last position (readout "last") or one slot per
    position (readout "all"). d_vocab, n_ctx, n_out, d_out come from the task.
    """

    cfg: ModelConfig
    d_vocab: int
    n_ctx: int
    n_out: int
    d_out: int
    buckets: tuple = ()  # readout "last": (start, stop, width) slot ranges of the unembedding (Task.class_buckets)

    @property
    def unembed_buckets(self) -> tuple | None:
        """readout "last": the slot ranges of the unembedding (`buckets`, or every slot at full width); else None."""
        if self.cfg.readout != "last":
            return None
        return self.buckets or ((0, self.n_out, self.d_out),)

    @nn.compact
    def __call__(self, x, train: bool = False, dropout_rate=None, bucketed: bool = False):
        """x: (b, t) int32; dropout_rate: overrides cfg.dropout (a sweep's traced value). bucketed (readout "last"):
        return the logits as the tuple of per-bucket (b, n, width) arrays the loss reads (no padding to d_out, no
        gradient through it)."""
        c, init = self.cfg, Init(self.cfg.init, self.cfg.d_model)
        if c.embed == "arc":
            arc = pinned_param(self, "W_E_arc", "W_E_arc", arc_init(self.d_vocab, c.arc_init), (3,), c.pins)
            W_E = arc_embedding(arc, self.d_vocab, c.d_model)
        else:
            W_E = self.param("W_E", init.embed(), (self.d_vocab, c.d_model))
        h = W_E[x]  # (b, t, d)
        acts = {"hook_embed": h}
        pos = jnp.zeros((x.shape[1], c.d_model), W_E.dtype)
        if c.pos_embed:
            pos = self.param("W_pos", init.embed(), (self.n_ctx, c.d_model))[: x.shape[1]]
            h = h + pos
            acts["hook_pos_embed"] = pos
        shared = shared_norms(c)
        for i in range(c.n_layers):
            last_only = c.readout == "last" and i == c.n_layers - 1
            rate = c.dropout if dropout_rate is None else dropout_rate
            fold = EmbedTables(x, W_E, pos) if i == 0 else None  # block 0 reads the embedding: Q, K, V from tables
            h, block_acts = Block(c, last_only, name=f"blocks_{i}")(h, train, rate, fold, shared)
            acts |= {f"blocks.{i}.{k}": v for k, v in block_acts.items()}
        if c.ln_position != "post":  # a post-LN stack ends normalised
            h = make_norm(c, "ln_final", shared)(h)
        if c.tie_head:
            logits = h @ W_E.T  # (b, t, d_vocab)
        elif c.readout == "all":
            W_U = self.param("W_U", init.matrix(c.d_model), (c.d_model, self.d_out))
            logits = h @ W_U  # (b, t, d_out)
        else:
            W_U = self.param("W_U", init.matrix(c.d_model), (self.n_out, c.d_model, self.d_out))
            # one (d, n*width) matmul per bucket of slots, each only as wide as its widest task (tasks.py);
            # classes beyond a bucket's width are never labels: their logits are 0 (the loss masks them)
            flat = lambda s0, s1, w: W_U[s0:s1, :, :w].transpose(1, 0, 2).reshape(c.d_model, (s1 - s0) * w)  # noqa: E731
            parts = tuple((h[:, -1] @ flat(s0, s1, w)).reshape(-1, s1 - s0, w) for s0, s1, w in self.unembed_buckets)
            logits = jnp.concatenate([jnp.pad(a, ((0, 0), (0, 0), (0, self.d_out - a.shape[2]))) for a in parts], 1)
            if c.logit_scale != 1.0:  # a fixed output scale (Kumar et al.'s alpha)
                parts = tuple(a * c.logit_scale for a in parts)
                logits = logits * c.logit_scale
            acts["logits"] = logits  # (b, S, d_out)
            return (parts if bucketed else logits), acts
        if c.logit_scale != 1.0:
            logits = logits * c.logit_scale
        acts["logits"] = logits
        return logits, acts


def small_decoder_options(cfg: ModelConfig) -> list[str]:
    """The small-decoder options a config turns on (ModelConfig's head_dim ... ties): the hook points (hooks.py) and
    the TransformerLens export read the paper's and the book's models and refuse these by name."""
    base = ModelConfig()
    return [k for k in ("head_dim", "n_kv_heads", "rope_theta", "norm", "qk_norm", "mlp_act", "embed", "ties",
                        "norm_groups", "pins", "ln_position")
            if getattr(cfg, k) != getattr(base, k)]


def refuse_small_decoder(cfg: ModelConfig, what: str) -> None:
    if opts := small_decoder_options(cfg):
        raise ConfigError(f"{what} reads the paper's and the book's models; this one sets "
                          f"{', '.join(f'model.{k}' for k in opts)} (train and export-adder take them)")


def build_model(cfg: ModelConfig, task) -> Transformer:
    n_out = task.n_slots if cfg.readout == "last" else 1
    buckets = task.class_buckets if cfg.readout == "last" else ()
    return Transformer(cfg, d_vocab=task.d_vocab, n_ctx=cfg.n_ctx or task.n_ctx, n_out=n_out, d_out=task.d_out,
                       buckets=buckets)


def abstract_params(model: Transformer, n_ctx: int):
    """The model's parameter tree as shapes and dtypes (`jax.eval_shape` of its init: nothing is computed)."""
    x = jnp.zeros((1, n_ctx), jnp.int32)
    return jax.eval_shape(lambda key: model.init({"params": key}, x)["params"], jax.random.key(0))


def param_names(params) -> list[str]:
    """TransformerLens names of the parameter leaves (blocks_0/attn/W_Q -> blocks.0.attn.W_Q), in leaf order."""
    paths = jax.tree_util.tree_flatten_with_path(params)[0]
    return [re.sub(r"blocks_(\d+)", r"blocks.\1", ".".join(k.key for k in path)) for path, _ in paths]


def count_params(params) -> int:
    """The unique parameter count, the one every printed count, summary.json and export-adder report: a tied weight
    (model.ties) or the tied head is no parameter, so it is not in the tree; its master and a transform's scalar are."""
    return sum(int(v.size) for v in jax.tree.leaves(params))
