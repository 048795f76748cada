"""The LLC estimator (miiii/llc.py) against devinterp's own SGLD sampler, on the same model and data: nanda-tiny's
parameters after 300 steps, exported to a PyTorch forward written here, its loss checked equal to the trainer's at
w0. devinterp's `SGMCMC.sgld` (ε, localisation γ, nβ) then draws the chains; λ̂ = nβ (mean draw loss - L(w0)), as
devinterp's `compute_llc` reduces them. The two estimates agree within the spread over chains, and a changed setting
(γ x 30) lands outside it. Optional: `make test-llc` builds .venv-llc with CPU torch and devinterp."""

import math

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("devinterp")
from devinterp.optim.sgmcmc import SGMCMC  # noqa: E402

from miiii import apply_overrides, get_preset  # noqa: E402
from miiii.llc import LLCConfig, make_estimator, nbeta  # noqa: E402
from miiii.runner import prepare  # noqa: E402
from miiii.train import make_trainer, task_data  # noqa: E402

CFG = LLCConfig(lr=1e-4, gamma=100.0, chains=8, draws=300, batch=128)


@pytest.fixture(scope="module")
def trained():
    cfg = apply_overrides(get_preset("nanda-tiny"), ["steps=300", "chunk=300"])
    task = prepare(cfg)
    trainer = make_trainer(cfg, task)
    state, _ = trainer.chunk(trainer.init(cfg.train.seed), task_data(task), 300)
    return cfg, task, trainer, jax.device_get(state.params)


def torch_loss(w: dict, x, y, p: int, heads: int):
    """nanda's one-layer model (no LayerNorm, MLP biases, the last position unembedded) and its loss, CE / ln p."""
    h = w["W_E"][x] + w["W_pos"]  # (b, 3, d)
    q = torch.einsum("bd,hde->bhe", h[:, -1], w["W_Q"])
    k, v = (torch.einsum("btd,hde->bhte", h, w[n]) for n in ("W_K", "W_V"))
    pattern = torch.softmax(torch.einsum("bhe,bhte->bht", q, k) / math.sqrt(q.shape[-1]), -1)
    h = h[:, -1] + torch.einsum("bht,bhte,hed->bd", pattern, v, w["W_O"])
    h = h + torch.relu(h @ w["W_in"] + w["b_in"]) @ w["W_out"] + w["b_out"]
    return torch.nn.functional.cross_entropy(h @ w["W_U"][0], y[:, 0]) / math.log(p)


def devinterp_llc(params, task, cfg, llc: LLCConfig) -> tuple[float, float]:
    """λ̂ by devinterp's SGLD, one chain a torch generator seed; (mean, std) over chains."""
    flat = {"W_E": params["W_E"], "W_pos": params["W_pos"], "W_U": params["W_U"],
            **params["blocks_0"]["attn"], **params["blocks_0"]["mlp"]}
    x, y = torch.as_tensor(np.array(task.train.x, np.int64)), torch.as_tensor(np.array(task.train.y, np.int64))
    n, p, heads = len(x), cfg.task.p, cfg.model.n_heads
    nb = nbeta(llc, n)
    with torch.no_grad():
        init = float(torch_loss({k: torch.as_tensor(np.array(v)) for k, v in flat.items()}, x, y, p, heads))
    chains = []
    for c in range(llc.chains):
        w = {k: torch.nn.Parameter(torch.as_tensor(np.array(v))) for k, v in flat.items()}
        opt = SGMCMC.sgld(list(w.values()), lr=llc.lr, localization=llc.gamma, nbeta=nb)
        gen = torch.Generator().manual_seed(c)
        losses = []
        for _ in range(llc.draws):
            rows = torch.randperm(n, generator=gen)[: llc.batch]
            opt.zero_grad()
            loss = torch_loss(w, x[rows], y[rows], p, heads)
            loss.backward()
            opt.step(noise_generator=gen)
            losses.append(float(loss.detach()))
        chains.append(nb * (np.mean(losses) - init))
    return float(np.mean(chains)), float(np.std(chains)), init


def jax_llc(params, task, trainer, llc: LLCConfig):
    spec = task.arrays()

    def loss_fn(w, xb, yb):
        loss, task_loss, _ = trainer.evaluate(w, xb, yb, spec)
        return loss, task_loss

    x, y = jax.numpy.asarray(task.train.x), jax.numpy.asarray(task.train.y)
    out = jax.jit(make_estimator(loss_fn, llc, len(x)))(params, x, y, jax.random.key(0))
    return float(out["llc"]), float(out["llc_std"]), float(out["init_loss"])


def test_the_jax_llc_is_devinterps_within_the_spread_over_chains(trained):
    cfg, task, trainer, params = trained
    mine, mine_sd, mine_init = jax_llc(params, task, trainer, CFG)
    theirs, theirs_sd, theirs_init = devinterp_llc(params, task, cfg, CFG)
    assert theirs_init == pytest.approx(mine_init, rel=1e-5)  # the same model and loss, exported
    print(f"λ̂ jax {mine:.2f} ± {mine_sd:.2f}, devinterp {theirs:.2f} ± {theirs_sd:.2f}")
    assert mine > 0 and abs(mine - theirs) <= mine_sd + theirs_sd
    other = LLCConfig(**{**CFG.to_dict(), "gamma": CFG.gamma * 30})  # a changed setting is told apart
    theirs_other, other_sd, _ = devinterp_llc(params, task, cfg, other)
    print(f"devinterp at γ x 30: {theirs_other:.2f} ± {other_sd:.2f}")
    assert abs(mine - theirs_other) > mine_sd + other_sd
