"""Every TransformerLens hook point of this model family, and the two functions researchers use on them.

    model = HookedModel.of(run_config, task)          # or run.model of a loaded run
    logits, cache = model.run_with_cache(params, tokens, names=("blocks.0.mlp.hook_post",))
    logits = model.run_with_hooks(params, tokens, hooks={"blocks.0.mlp.hook_post": fn})   # fn(value, name)
    cache["blocks.0.mlp.hook_post"], cache.axes("blocks.0.mlp.hook_post")   # (b, t, d_mlp), ("batch", "pos", "d_mlp")

Both run the textbook forward pass written out here over the model's own parameter tree: every position of
every block, no Q/K/V tables, no last-position readout, no bucketed unembedding (the training path,
`model.Transformer`, keeps those exact shortcuts; tests/test_hooks.py checks that the logits agree on every
input). Each hook point passes its value through `hook(name, value)`, which may return a replacement: that is
ablation, patching and steering (interventions.py). Both functions are pure: they work under `jit` and `vmap`,
and an activation nobody caches or replaces is dead code that XLA removes.

Names, shapes and axis order are TransformerLens's (b = batch, t = position, H = heads; the cache (cache.py) names
each axis, and docs/extending.md's table maps every point to TransformerLens's):

    hook_embed, hook_pos_embed                              (b, t, d_model)
    blocks.{i}.hook_resid_pre / hook_resid_mid / hook_resid_post   (b, t, d_model)
    blocks.{i}.ln1.hook_scale (b, t, 1), .hook_normalized (b, t, d_model)   (and ln2; LayerNorm models only;
             hook_normalized is (x - mean) / scale, before LN's weight and bias, as in TransformerLens 3)
    blocks.{i}.attn.hook_q / hook_k / hook_v / hook_z       (b, t, H, d_head)
    blocks.{i}.attn.hook_attn_scores / hook_pattern         (b, H, query t, key t)  (masked scores are -inf)
    blocks.{i}.hook_attn_out, blocks.{i}.hook_mlp_out       (b, t, d_model)
    blocks.{i}.mlp.hook_pre / hook_post                     (b, t, d_mlp)
    ln_final.hook_scale, ln_final.hook_normalized           (LayerNorm models only)
    logits   readout "last" (paper): (b, n_slots, d_out), one row per task read at the last position, classes
             beyond a task's bucket 0 as in training; readout "all" (book): (b, t, d_out)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from miiii.cache import Cache, full_cache
from miiii.config import ModelConfig, RunConfig
from miiii.model import build_model, refuse_small_decoder

HookFn = Callable[[jax.Array, str], jax.Array]  # (value, hook name) -> the value the forward pass goes on with
LN_EPS = 1e-5  # flax's and TransformerLens's LayerNorm epsilon

# a Cache passes through jit and vmap as a dict would: its arrays are the leaves, its axes and coords static
jax.tree_util.register_pytree_with_keys(
    Cache,
    lambda c: ([(jax.tree_util.DictKey(k), v) for k, v in c.arrays.items()],
               (tuple(c.arrays), tuple(c.axes_of.items()), tuple((k, tuple(v.items())) for k, v in c.coords_of.items()),
                c.step)),
    lambda aux, leaves: Cache(dict(zip(aux[0], leaves, strict=True)), dict(aux[1]),
                              {k: dict(v) for k, v in aux[2]}, aux[3]))


@dataclass(frozen=True)
class HookedModel:
    """A model of this family by its shapes (hashable: its methods can be jitted as they are)."""

    cfg: ModelConfig
    d_vocab: int
    n_ctx: int
    n_out: int  # readout "last": logit rows (tasks); "all": 1
    d_out: int  # classes (the widest task) or the vocabulary (book)
    buckets: tuple = ()  # readout "last": (start, stop, width) slot ranges; logits past a range's width are 0
    precision: str = "highest"  # the run's train.precision: on a GPU, JAX's default (TF32) is not what it trained at

    @classmethod
    def of(cls, cfg: RunConfig, task) -> HookedModel:
        refuse_small_decoder(cfg.model, "hook points")
        m = build_model(cfg.model, task)
        return cls(cfg.model, m.d_vocab, m.n_ctx, m.n_out, m.d_out, tuple(m.unembed_buckets or ()), cfg.train.precision)

    # ------------------------------------------------------------ names

    def hook_names(self) -> tuple[str, ...]:
        """Every hook point, in the order the forward pass reaches them."""
        c = self.cfg
        ln = lambda pre: (f"{pre}.hook_scale", f"{pre}.hook_normalized") if c.layer_norm else ()  # noqa: E731
        names = ["hook_embed", *(["hook_pos_embed"] if c.pos_embed else [])]
        for i in range(c.n_layers):
            b = f"blocks.{i}"
            names += [f"{b}.hook_resid_pre", *ln(f"{b}.ln1"),
                      *(f"{b}.attn.{h}" for h in ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern",
                                                 "hook_z")),
                      f"{b}.hook_attn_out", f"{b}.hook_resid_mid", *ln(f"{b}.ln2"), f"{b}.mlp.hook_pre",
                      f"{b}.mlp.hook_post", f"{b}.hook_mlp_out", f"{b}.hook_resid_post"]
        return (*names, *ln("ln_final"), "logits")

    def check_names(self, names: Iterable[str]) -> None:
        known = set(self.hook_names())
        bad = [n for n in names if n not in known]
        if bad:
            raise KeyError(f"unknown hook point(s) {bad}; this model has: {', '.join(self.hook_names())}")

    # ------------------------------------------------------------ the forward pass

    def forward(self, params, tokens, hook: Callable[[str, jax.Array], jax.Array] | None = None) -> jax.Array:
        """The textbook forward pass (eval mode): tokens (b, t) int -> logits; `hook(name, value)` at every point.
        Its matmuls at the run's precision, as the trainer's (train.with_precision)."""
        with jax.default_matmul_precision(self.precision):
            return self._forward(params, tokens, hook)

    def _forward(self, params, tokens, hook) -> jax.Array:
        c = self.cfg
        h_ = hook or (lambda name, v: v)
        tokens = jnp.asarray(tokens)
        b, t = tokens.shape
        W_E = params["W_E"]
        resid = h_("hook_embed", W_E[tokens])  # (b, t, d)
        if c.pos_embed:
            resid = resid + h_("hook_pos_embed", jnp.broadcast_to(params["W_pos"][:t], resid.shape))
        for i in range(c.n_layers):
            name, p = f"blocks.{i}", params[f"blocks_{i}"]
            resid = h_(f"{name}.hook_resid_pre", resid)
            resid = h_(f"{name}.hook_resid_mid", resid + h_(f"{name}.hook_attn_out",
                                                            self._attention(p, self._ln(p, "ln1", name, resid, h_),
                                                                            f"{name}.attn", h_)))
            x = self._ln(p, "ln2", name, resid, h_)
            m = p["mlp"]
            pre = h_(f"{name}.mlp.hook_pre", x @ m["W_in"] + m.get("b_in", 0.0))  # (b, t, d_mlp)
            post = h_(f"{name}.mlp.hook_post", jax.nn.relu(pre))
            resid = h_(f"{name}.hook_resid_post", resid + h_(f"{name}.hook_mlp_out", post @ m["W_out"]
                                                             + m.get("b_out", 0.0)))
        if c.layer_norm:
            resid = self._layer_norm(params["ln_final"], "ln_final", resid, h_)
        return h_("logits", self._unembed(params, resid))

    def _ln(self, p, which: str, block: str, x, h_):
        return self._layer_norm(p[which], f"{block}.{which}", x, h_) if self.cfg.layer_norm else x

    @staticmethod
    def _layer_norm(p, name: str, x, h_):
        """TransformerLens's LayerNorm: the centred input over its root mean square, then scale and bias.
        hook_normalized is before the scale and bias, as in TransformerLens 3 (2.x hooked after them)."""
        x = x - x.mean(-1, keepdims=True)
        scale = h_(f"{name}.hook_scale", jnp.sqrt(jnp.square(x).mean(-1, keepdims=True) + LN_EPS))  # (b, t, 1)
        return h_(f"{name}.hook_normalized", x / scale) * p["scale"] + p["bias"]

    def _attention(self, p, x, name: str, h_):
        a = p["attn"]
        q = h_(f"{name}.hook_q", jnp.einsum("btd,hde->bthe", x, a["W_Q"]))  # (b, t, H, e)
        k = h_(f"{name}.hook_k", jnp.einsum("btd,hde->bthe", x, a["W_K"]))
        v = h_(f"{name}.hook_v", jnp.einsum("btd,hde->bthe", x, a["W_V"]))
        scores = jnp.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(q.shape[-1])
        if self.cfg.causal:
            t = x.shape[1]
            scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
        pattern = h_(f"{name}.hook_pattern", jax.nn.softmax(h_(f"{name}.hook_attn_scores", scores), axis=-1))
        z = h_(f"{name}.hook_z", jnp.einsum("bhqk,bkhe->bqhe", pattern, v))  # (b, t, H, e)
        return jnp.einsum("bthe,hed->btd", z, a["W_O"])  # heads summed

    def _unembed(self, params, resid):
        c = self.cfg
        if c.tie_head:
            return resid @ params["W_E"].T  # (b, t, d_vocab)
        if c.readout == "all":
            return resid @ params["W_U"]  # (b, t, d_out)
        logits = jnp.einsum("bd,sdc->bsc", resid[:, -1], params["W_U"])  # (b, S, d_out)
        return jnp.where(self.class_mask(), logits, 0.0)

    def class_mask(self) -> np.ndarray:
        """(S, d_out) bool: the classes each logit row computes in training (its bucket's width)."""
        mask = np.ones((self.n_out, self.d_out), bool)
        for s0, s1, w in self.buckets:
            mask[s0:s1, w:] = False
        return mask

    # ------------------------------------------------------------ the two functions

    def run_with_cache(self, params, tokens, names: Iterable[str] | None = None) -> tuple[jax.Array, Cache]:
        """(logits, cache) for `names` (default: every hook point): `cache[name]` the full activation, in the pass's
        order, `cache.axes(name)` its axes (cache.py). Under jit, pass names as a tuple and mark it static
        (`jax.jit(model.run_with_cache, static_argnames="names")`)."""
        names = self.hook_names() if names is None else tuple(names)
        self.check_names(names)
        cache = {}

        def keep(name, v):
            if name in names:
                cache[name] = v
            return v

        logits = self.forward(params, tokens, keep)
        return logits, full_cache({n: cache[n] for n in names}, self.cfg.readout)

    def run_with_hooks(self, params, tokens, hooks: Mapping[str, HookFn | Iterable[HookFn]],
                       names: Iterable[str] = ()) -> jax.Array | tuple[jax.Array, Cache]:
        """Logits with `hooks[name](value, name)` replacing each named activation (a list of functions runs in
        order). With `names`, also the cache of those activations as the hooked pass saw them (after its hooks):
        (logits, cache)."""
        hooks = {k: (tuple(v) if isinstance(v, (list, tuple)) else (v,)) for k, v in hooks.items()}
        names = tuple(names)
        self.check_names([*hooks, *names])
        cache = {}

        def apply(name, v):
            for fn in hooks.get(name, ()):
                v = fn(v, name)
            if name in names:
                cache[name] = v
            return v

        logits = self.forward(params, tokens, apply)
        return (logits, full_cache({n: cache[n] for n in names}, self.cfg.readout)) if names else logits
