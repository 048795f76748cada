"""PyTorch timing reference for the book's adder (a tutorial book on building a transformer adder): its
AdditionTransformer, 17,760 parameters, trained on 3-digit addition with minibatches of 512. What the bench
(`python -m experiments.bench`) times miiii's `addition` preset against; plain PyTorch, written to be timed, not to
reproduce results. miiii never imports it (PyTorch is the optional `bench` extra: `pip install -e .[bench]`).

    python -m experiments.bench.torch_adder [STEPS] [--steps N] [--threads N] [--device cpu|cuda] [--compile]

The model is the book study's, its one definition here (experiments/book/torch_model.py, which the book's loop in
PyTorch trains too): token (vocabulary 14) and learned position (13 rows) embeddings of width 32, two pre-LN blocks
[LayerNorm -> causal single-head attention, Q, K, V, O without bias -> residual] [LayerNorm -> FFN 32 -> 64 -> 32
with biases, ReLU -> residual], a final LayerNorm and a head tied to the token embedding. The data: 50,000
sequences `a+b=` then the sum reversed, zero-padded to 4 digits, then <EOS> (13 tokens; input seq[:-1], target
seq[1:]). One iteration: a random minibatch of 512, mean cross-entropy over every target position, gradient
clipping at norm 1.0, AdamW (PyTorch defaults, lr 0.01; the book's warm-up and cosine schedule change no
timing and are left out). `--compile` compiles the step with `torch.compile` (the forward and loss, whose backward
AOTAutograd compiles too, and the clipped optimizer step); 10 warm-up steps run before the clock starts, so
the compile is not timed. Prints `params 17760` first and `steps_per_s X` last.
"""

from __future__ import annotations

import argparse
import time

try:
    import torch
    import torch.nn.functional as F
except ModuleNotFoundError as err:  # an optional extra: one line, exit 2
    from experiments.optional_torch import missing

    missing(err)

from experiments.book.torch_model import AdditionTransformer
from miiii.errors import OneLineParser

VOCAB = 14  # the book's vocabulary: digits, +, =, <EOS>, <PAD>
PLUS, EQUALS, EOS = 10, 11, 12  # 13 is <PAD>, never needed at a fixed width


def addition_data(n: int, n_digits: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n sequences a+b=<sum reversed><EOS> with operands uniform in [0, 10^n_digits): inputs and targets."""
    a, b = (torch.randint(0, 10**n_digits, (n,), generator=generator) for _ in range(2))

    def digits(v, width, reverse=False):
        pos = torch.arange(width) if reverse else torch.arange(width - 1, -1, -1)
        return v[:, None] // 10 ** pos[None, :] % 10

    col = lambda token: torch.full((n, 1), token)  # noqa: E731
    seq = torch.cat([digits(a, n_digits), col(PLUS), digits(b, n_digits), col(EQUALS),
                     digits(a + b, n_digits + 1, reverse=True), col(EOS)], dim=1)
    return seq[:, :-1], seq[:, 1:]


def parse_args(argv=None) -> argparse.Namespace:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps", nargs="?", type=int, default=300, help="timed steps (default 300)")
    ap.add_argument("--steps", dest="steps_opt", type=int, default=None, help="the same, as an option")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's own choice)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--compile", action="store_true", help="torch.compile the training step")
    a = ap.parse_args(argv)
    a.steps = a.steps_opt or a.steps
    if a.steps < 1:
        ap.error("steps must be at least 1")
    return a


def main(argv=None) -> None:
    a = parse_args(argv)
    steps = a.steps
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    X, Y = (t.to(dev) for t in addition_data(50_000, 3, torch.Generator().manual_seed(42)))
    model = AdditionTransformer().to(dev).train()
    print("params", sum(p.numel() for p in model.parameters()))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)

    def loss_fn(idx):
        return F.cross_entropy(model(X[idx]).reshape(-1, VOCAB), Y[idx].reshape(-1))

    def update():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    if a.compile:  # PyTorch's recipe: the forward and loss (AOTAutograd compiles their backward) and the update
        loss_fn, update = torch.compile(loss_fn), torch.compile(update)

    def step():
        loss = loss_fn(torch.randint(0, len(X), (512,), device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        update()
        return loss.detach()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(10):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    loss.item()
    sync()
    seconds = time.perf_counter() - t0
    print(f"threads {torch.get_num_threads()} device {dev} compile {a.compile} loss {loss.item():.4f}")
    print(f"steps_per_s {steps / seconds:.3f}")


if __name__ == "__main__":
    main()
