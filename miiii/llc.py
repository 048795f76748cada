"""The local learning coefficient (LLC) of singular learning theory at a run's checkpoints, estimated as `devinterp`
estimates it (Lau et al. 2023; devinterp's `SGLD` and `LLCEstimator`), in JAX: vmapped over chains and over the
checkpoints, each chain one `lax.scan`.

Around parameters w0, SGLD samples the tempered, localised posterior exp(-nβ L(w) - γ/2 |w - w0|²):

    w <- w + ε/2 (-nβ ∇L_batch(w) + γ (w0 - w)) + N(0, ε)          (devinterp's update, noise level 1)
    λ̂(w0) = nβ (mean over draws of L_batch(w) - L(w0))               (per chain; mean and std over chains)

L is the run's training loss (the mean over the training split, eval mode: no dropout), nβ defaults to devinterp's
`default_nbeta`, m / ln m for batches of m. For a multi-task run each task's λ̂ reads that task's loss along the same
chains (its CE / ln q for miiii): how much of the local volume each task's loss sees. A regular model's λ̂ is half
its parameter count (tests/test_llc.py checks a linear model against that).

Choosing ε, γ and nβ (devinterp's calibration advice): the chains' loss traces (`loss_trace` in llc.json, drawn by
the figure) should rise from L(w0) and level off within the draws; a trace that keeps climbing or turns negative
means ε is too large or γ too small; λ̂ should be stable against doubling the draws.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class LLCConfig:
    lr: float = 1e-4  # SGLD step size ε
    gamma: float = 100.0  # localisation strength γ
    nbeta: float = 0.0  # inverse temperature nβ; 0 = devinterp's default_nbeta: m / ln m for batches of m
    chains: int = 4
    draws: int = 200  # SGLD steps whose losses are averaged, after `burnin`
    burnin: int = 0
    batch: int = 512  # samples per SGLD step; 0 or more than the training split: the whole split
    seed: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def batch_size(cfg: LLCConfig, n: int) -> int:
    return n if cfg.batch <= 0 else min(cfg.batch, n)


def nbeta(cfg: LLCConfig, n: int) -> float:
    m = batch_size(cfg, n)
    return cfg.nbeta or (m / math.log(m) if m > 1 else 1.0)


def make_estimator(loss_fn, cfg: LLCConfig, n: int):
    """`estimate(w0, x, y, key) -> dict` for `loss_fn(params, x, y) -> (loss, per-task losses (K,))`; jit it, vmap it
    over stacked w0 (checkpoints). x, y: the whole training split (n rows)."""
    m, nb = batch_size(cfg, n), nbeta(cfg, n)
    grad = jax.value_and_grad(loss_fn, has_aux=True)

    def chain(w0, x, y, key):
        def step(w, k):
            kb, kn = jax.random.split(k)
            rows = jax.random.choice(kb, n, (m,), replace=False) if m < n else jnp.arange(n)
            (loss, tasks), g = grad(w, x[rows], y[rows])
            leaves, tree = jax.tree.flatten(w)
            noise = jax.tree.unflatten(tree, [jax.random.normal(k_, v.shape, v.dtype) for k_, v in
                                              zip(jax.random.split(kn, len(leaves)), leaves, strict=True)])
            w = jax.tree.map(lambda w_, g_, w0_, z: w_ + cfg.lr / 2 * (-nb * g_ + cfg.gamma * (w0_ - w_))
                             + math.sqrt(cfg.lr) * z, w, g, w0, noise)
            return w, (loss, tasks)

        _, (losses, tasks) = jax.lax.scan(step, w0, jax.random.split(key, cfg.burnin + cfg.draws))
        return losses[cfg.burnin:], tasks[cfg.burnin:]

    def estimate(w0, x, y, key):
        init, init_tasks = loss_fn(w0, x, y)
        losses, tasks = jax.vmap(chain, in_axes=(None, None, None, 0))(w0, x, y, jax.random.split(key, cfg.chains))
        per_chain = nb * (losses.mean(1) - init)  # (chains,)
        per_task = nb * (tasks.mean(1) - init_tasks[None])  # (chains, K)
        return dict(llc=per_chain.mean(), llc_std=per_chain.std(), llc_chains=per_chain,
                    llc_tasks=per_task.mean(0), init_loss=init, loss_trace=losses.mean(0))

    return estimate


def llc_over_run(run, steps: list[int] | None, cfg: LLCConfig) -> dict:
    """λ̂ at each kept step of a run (all of them, or `steps`), one jitted program vmapped over the checkpoints."""
    from miiii.config import ConfigError
    from miiii.tasks import make_task
    from miiii.train import make_trainer

    kept = run.kept_steps
    steps = kept if steps is None else steps
    missing = [s for s in steps if s not in kept]
    if missing or not steps:
        raise ConfigError(f"llc: {run.path} kept no checkpoint at step(s) {missing or 'any'} (kept: "
                          f"{', '.join(map(str, kept)) or 'none'}); keep more with --set ckpt.keep_log=K")
    task = make_task(run.config.task)
    trainer = make_trainer(run.config, task)
    spec = task.arrays()
    x, y = jnp.asarray(task.train.x), jnp.asarray(task.train.y)

    def loss_fn(p, xb, yb):
        loss, task_loss, _ = trainer.evaluate(p, xb, yb, spec)
        return loss, task_loss

    estimate = jax.jit(jax.vmap(make_estimator(loss_fn, cfg, len(x)), in_axes=(0, None, None, None)))
    w0 = jax.tree.map(lambda *a: jnp.stack([jnp.asarray(v, jnp.float32) for v in a]),
                      *[run.params_at(s) for s in steps])
    out = jax.tree.map(np.asarray, estimate(w0, x, y, jax.random.key(cfg.seed)))
    return dict(steps=list(steps), config=cfg.to_dict(), nbeta=nbeta(cfg, len(x)), batch=batch_size(cfg, len(x)),
                n_train=int(len(x)), task_names=list(task.task_names), loss_unit=run.summary.get("loss_unit", ""),
                llc=out["llc"].tolist(), llc_std=out["llc_std"].tolist(), llc_chains=out["llc_chains"].tolist(),
                llc_tasks=out["llc_tasks"].tolist(), init_loss=out["init_loss"].tolist(),
                loss_trace=out["loss_trace"].tolist())
