"""PyTorch timing reference for the paper's one-layer transformer (the nanda or the miiii task): what the bench
(`python -m experiments.bench`) times miiii against. Plain PyTorch, written to be timed, not to reproduce results;
miiii never imports it (PyTorch is the optional `bench` extra: `pip install -e .[bench]`).

    python -m experiments.bench.torch_paper --task nanda|miiii [--p 113] [--d 128|256] [--heads 4] [--train-frac 0.3]
                                            [--dropout 0|0.1] [--steps 50] [--threads N] [--device cpu|cuda] [--compile]

The model: inputs [x0, x1, p] (x0 the low digit, n = x0 + x1 * p), learned token and position embeddings, one
block of multi-head attention (heads summed through W_O) and a ReLU MLP d -> 4d -> d, each added to the residual
stream and followed by dropout; no LayerNorm, no biases. The last position is unembedded: nanda one head of p
classes, miiii one head per prime q < p (29 for p = 113) with the classes >= q masked out; the loss is each
task's mean cross-entropy divided by ln q, averaged over the tasks (docs/definitions.md).

One iteration is one full-batch AdamW step over the training split (`--train-frac` of the p^2 pairs, 30 % by
default), with attention and MLP computed at every position as a textbook implementation does. There is no
validation pass and no grokfast filter: the reference times the training step alone. `--compile` compiles
the step with `torch.compile` (PyTorch's recipe: the forward and loss, whose backward AOTAutograd compiles too,
and the optimizer step); warm-up steps (3 eager, 5 compiled) run before the clock starts, so the compile is
not timed. `--device cuda` synchronises before reading the clock. The last line printed is `steps_per_s X`.
"""

from __future__ import annotations

import argparse
import math
import time

try:
    import torch
    import torch.nn.functional as F
except ModuleNotFoundError as err:  # an optional extra: one line, exit 2
    from experiments.optional_torch import missing

    missing(err)

from miiii.errors import OneLineParser


def primes_below(p: int) -> list[int]:
    return [q for q in range(2, p) if all(q % r for r in range(2, math.isqrt(q) + 1))]


def make_data(task: str, p: int, train_frac: float, generator: torch.Generator):
    """Training inputs (n, 3), labels (n, T) and the moduli (T,) of one seeded split of the p x p grid."""
    n = torch.arange(p * p)
    x0, x1 = n % p, n // p
    x = torch.stack([x0, x1, torch.full_like(x0, p)], dim=1)
    moduli = torch.tensor([p] if task == "nanda" else primes_below(p))
    y = ((x0 + x1) % p)[:, None] if task == "nanda" else n[:, None] % moduli[None, :]
    order = torch.randperm(p * p, generator=generator)[: int(train_frac * p * p)]
    return x[order], y[order], moduli


class PaperModel(torch.nn.Module):
    def __init__(self, p: int, d: int, heads: int, n_tasks: int, dropout: float):
        super().__init__()
        dh, dm = d // heads, 4 * d

        def he(*shape, fan_in):
            return torch.nn.Parameter(torch.randn(*shape) * math.sqrt(2 / fan_in))

        self.W_E, self.W_pos = he(p + 1, d, fan_in=d), he(3, d, fan_in=d)
        self.W_Q, self.W_K, self.W_V = (he(heads, d, dh, fan_in=d) for _ in range(3))
        self.W_O = he(heads, dh, d, fan_in=d)
        self.W_in, self.W_out = he(d, dm, fan_in=d), he(dm, d, fan_in=dm)
        self.W_U = he(n_tasks, d, p, fan_in=d)
        self.scale, self.dropout = 1 / math.sqrt(dh), dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (b, 3) -> logits (b, T, p)."""
        h = self.W_E[x] + self.W_pos  # (b, 3, d)
        q, k, v = (torch.einsum("bsd,hde->bhse", h, W) for W in (self.W_Q, self.W_K, self.W_V))
        pattern = torch.softmax(q @ k.transpose(-1, -2) * self.scale, dim=-1)  # (b, h, 3, 3)
        h = h + torch.einsum("bhse,hed->bsd", pattern @ v, self.W_O)
        h = F.dropout(h, self.dropout, self.training)
        h = h + F.relu(h @ self.W_in) @ self.W_out
        h = F.dropout(h, self.dropout, self.training)
        return torch.einsum("bd,tdc->btc", h[:, -1], self.W_U)


def parse_args(argv=None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["nanda", "miiii"], default="nanda")
    ap.add_argument("--p", type=int, default=113, help="the prime base (default 113)")
    ap.add_argument("--d", type=int, default=None, help="d_model (default: 128 for nanda, 256 for miiii)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--train-frac", type=float, default=0.3, help="share of the p^2 pairs trained on (default 0.3)")
    ap.add_argument("--dropout", type=float, default=None, help="default: 0 for nanda, 0.1 for miiii")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's own choice)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the training step")
    a = ap.parse_args(argv)
    a.d = a.d or (128 if a.task == "nanda" else 256)
    a.dropout = a.dropout if a.dropout is not None else (0.0 if a.task == "nanda" else 0.1)
    if a.p < 3 or primes_below(a.p + 1)[-1] != a.p:
        ap.error(f"--p must be a prime >= 3, got {a.p}")
    if a.d % a.heads:
        ap.error(f"--d ({a.d}) must be a multiple of --heads ({a.heads})")
    if not 0 < a.train_frac < 1 or a.steps < 1:
        ap.error("--train-frac must lie in (0, 1) and --steps be at least 1")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    d, dropout = a.d, a.dropout
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)

    x, y, moduli = make_data(a.task, a.p, a.train_frac, torch.Generator().manual_seed(0))
    x, y = x.to(dev), y.to(dev)
    n_tasks = len(moduli)
    invalid = (torch.arange(a.p)[None, :] >= moduli[:, None]).to(dev)  # (T, p): classes a task does not have
    inv_ln = (1 / torch.log(moduli.double())).float().to(dev)  # chance scores 1.0 on every task
    model = PaperModel(a.p, d, a.heads, n_tasks, dropout).to(dev).train()
    lr, wd = (1e-3, 1.0) if a.task == "nanda" else (3e-4, 1 / 3)  # the presets' recipes (timing-neutral)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=wd, betas=(0.9, 0.98))

    def loss_fn():
        logits = model(x).masked_fill(invalid, -1e9)
        ce = F.cross_entropy(logits.reshape(-1, a.p), y.reshape(-1), reduction="none").view(-1, n_tasks)
        return (ce.mean(0) * inv_ln).mean()

    update = opt.step
    if a.compile:  # PyTorch's recipe: the forward and loss (AOTAutograd compiles their backward) and the optimizer
        loss_fn, update = torch.compile(loss_fn), torch.compile(opt.step)

    def step():
        loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        update()
        return loss.detach()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(5 if a.compile else 3):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.item()
    sync()
    seconds = time.perf_counter() - t0
    print(f"task {a.task} p {a.p} d {d} heads {a.heads} dropout {dropout:g} train_samples {len(x)} tasks {n_tasks} "
          f"threads {torch.get_num_threads()} device {dev} compile {a.compile} loss {loss.item():.4f}")
    print(f"steps_per_s {a.steps / seconds:.3f}")


if __name__ == "__main__":
    main()
