"""The book's training loop in plain PyTorch, over seeds: the reference for "this project trains the book's model
the book's way" (experiments/book.py --seeds compares its jump-epoch distribution with this one).

    python experiments/torch_book.py --seeds 5 [--task addition|reversal] [--epochs 150] [--out DIR]

Written from the book's description, not translated from miiii: `AdditionTransformer` (pre-LN, one causal head
with bias-free Q/K/V/O, ReLU FFN with biases, final LN, head tied to the token embedding, 13 positions: 17,760
parameters) with PyTorch's default initialisation, `torch.manual_seed(seed)`, a `DataLoader(shuffle=True,
batch_size=512)` over the 50,000 training pairs (98 batches an epoch, the last one of 336: miiii's trainer draws
97 full batches), `torch.optim.AdamW(lr=0.01)` with its defaults (betas 0.9 / 0.999, eps 1e-8, weight decay
0.01: the book states none of these), 200 warm-up steps then cosine decay to 0 (`LambdaLR`), gradient clipping at
norm 1.0, cross-entropy over all positions. The data are miiii's (the same pairs and held-out set), so only the
loop differs. After every epoch: the mean minibatch loss (the book's "Loss") and teacher-forced exact match of
the answer on the held-out set (the book's "Test accuracy"); at the end, autoregressive exact match.

PyTorch is an optional extra (`pip install -e .[bench]`); nothing in miiii imports it.
Expected runtime on 2 CPU cores: about 4 minutes a seed for addition (150 epochs), 2 for reversal (80).
Writes OUT/torch_book_TASK.json: per seed the curves, the jump epochs (>= 50 % and >= 99 %), the final loss,
autoregressive accuracy and wall time. Prints 'done' last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from miiii import get_preset
from miiii.tasks import loss_floor, make_task

JUMP_THRESHOLDS = (0.5, 0.99)


class Block(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d))

    def forward(self, x):  # x (b, t, d)
        h = self.ln1(x)
        t = x.shape[1]
        scores = self.q(h) @ self.k(h).transpose(1, 2) / math.sqrt(x.shape[-1])  # (b, t, t)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        x = x + self.o(torch.softmax(scores, -1) @ self.v(h))
        return x + self.ffn(self.ln2(x))


class AdditionTransformer(nn.Module):
    def __init__(self, vocab: int = 14, d: int = 32, d_ff: int = 64, n_layers: int = 2, max_seq_len: int = 13):
        super().__init__()
        self.token_emb, self.pos_emb = nn.Embedding(vocab, d), nn.Embedding(max_seq_len, d)
        self.blocks = nn.ModuleList(Block(d, d_ff) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):  # idx (b, t) -> logits (b, t, vocab)
        x = self.token_emb(idx) + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.token_emb.weight.T  # the head is tied to the token embedding


def warmup_cosine(warmup: int, total: int):
    return lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) /
                                                                               max(total - warmup, 1)))


@torch.no_grad()
def exact_match(model, x, y, answer_start: int) -> float:
    model.eval()
    pred = model(x).argmax(-1)
    model.train()
    return (pred[:, answer_start:] == y[:, answer_start:]).all(1).float().mean().item()


@torch.no_grad()
def autoregressive(model, x, y, answer_start: int) -> float:
    model.eval()
    seq = x[:, : answer_start + 1]
    for _ in range(y.shape[1] - answer_start):
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    model.train()
    return (seq[:, answer_start + 1:] == y[:, answer_start:]).all(1).float().mean().item()


def train_seed(task, seed: int, epochs: int, batch: int = 512, lr: float = 0.01, warmup: int = 200,
               clip: float = 1.0, max_seq_len: int = 13) -> dict:
    torch.manual_seed(seed)
    model = AdditionTransformer(max_seq_len=max_seq_len)
    xt, yt = (torch.as_tensor(a, dtype=torch.long) for a in (task.train.x, task.train.y))
    xv, yv = (torch.as_tensor(a, dtype=torch.long) for a in (task.valid.x, task.valid.y))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xt, yt), batch_size=batch, shuffle=True)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)  # PyTorch's defaults for everything else
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(warmup, epochs * len(loader)))
    loss_fn = nn.CrossEntropyLoss()
    losses, accs, t0 = [], [], time.perf_counter()
    for _ in range(epochs):
        total = 0.0
        for xb, yb in loader:
            loss = loss_fn(model(xb).reshape(-1, 14), yb.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            sched.step()
            total += loss.item()
        losses.append(total / len(loader))
        accs.append(exact_match(model, xv, yv, task.answer_start))
    acc = np.asarray(accs)
    jump = {f"{t:g}": (int(np.argmax(acc >= t)) + 1 if (acc >= t).any() else None) for t in JUMP_THRESHOLDS}
    return dict(seed=seed, epochs=epochs, batches_per_epoch=len(loader), epoch_loss=losses, valid_acc=accs,
                jump_epoch=jump, final_epoch_loss=losses[-1], valid_teacher_forced_acc=accs[-1],
                valid_autoregressive_acc=autoregressive(model, xv, yv, task.answer_start),
                wall_s=round(time.perf_counter() - t0, 1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["addition", "reversal"], default="addition")
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (torch.manual_seed)")
    ap.add_argument("--epochs", type=int, default=None, help="default: the book's 150 (addition) / 80 (reversal)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    ap.add_argument("--out", type=Path, default=Path("results") / "book")
    args = ap.parse_args(argv)
    if args.seeds < 1 or (args.epochs is not None and args.epochs < 1):
        ap.error("--seeds and --epochs must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = get_preset(args.task)
    task = make_task(cfg.task)
    epochs = args.epochs or (150 if args.task == "addition" else 80)
    runs = []
    for seed in range(args.seeds):
        r = train_seed(task, seed, epochs, max_seq_len=cfg.model.n_ctx or task.n_ctx)
        runs.append(r)
        print(f"seed {seed}: jump {r['jump_epoch']}, final loss {r['final_epoch_loss']:.4f}, autoregressive "
              f"{r['valid_autoregressive_acc']:.2%}, {r['wall_s']:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"torch_book_{args.task}.json"
    out.write_text(json.dumps(dict(task=args.task, torch=torch.__version__, threads=torch.get_num_threads(),
                                   loss_floor=loss_floor(args.task, cfg.task.n_digits), runs=runs), indent=1))
    print(f"wrote {out}\ndone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
