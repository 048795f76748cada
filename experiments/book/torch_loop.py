"""The book's training loop in plain PyTorch, over seeds: the reference for "this project trains the book's model
the book's way" (python -m experiments.book --seeds compares its jump-epoch distribution with this one).

    python -m experiments.book.torch_loop --seeds 5 [--task addition|reversal] [--epochs 150] [--out DIR]
    python -m experiments.book.torch_loop --seeds 3 --first-seed 5          # seeds 5-7, added to the file of 0-4
    python -m experiments.book.torch_loop --seeds 8 --drop-last             # 97 full batches an epoch, as miiii
    python -m experiments.book.torch_loop --seeds 8 --weight-decay 0.1      # a setting the book does not state
    python -m experiments.book.torch_loop --seeds 8 --warmup-first 0        # the first step at lr 0, as optax's warm-up
    python -m experiments.book.torch_loop --export-start DIR --seeds 8      # starts for same_start.py

Written from the book's description, not translated from miiii: the book's model (torch_model.py: pre-LN, one
causal head with bias-free Q/K/V/O, ReLU FFN with biases, final LN, head tied to the token embedding, 13 positions:
17,760 parameters) with PyTorch's default initialisation, `torch.manual_seed(seed)`, a `DataLoader(shuffle=True,
batch_size=512)` over the 50,000 training pairs (98 batches an epoch, the last one of 336: miiii's trainer draws
97 full batches), `torch.optim.AdamW(lr=0.01)` with its defaults (betas 0.9 / 0.999, eps 1e-8, weight decay
0.01: the book states none of these), 200 warm-up steps then cosine decay to 0 (`LambdaLR`), gradient clipping at
norm 1.0, cross-entropy over all positions. The data are miiii's (the same pairs and held-out set), so only the
loop differs. After every epoch: the mean minibatch loss (the book's "Loss") and teacher-forced exact match of
the answer on the held-out set (the book's "Test accuracy"); at the end, autoregressive exact match.

PyTorch is an optional extra (`pip install -e .[bench]`); nothing in miiii imports it.
Expected runtime on 2 CPU cores: about 4 minutes a seed for addition (150 epochs), 2 for reversal (80).
The two variants exist to find where this loop and miiii's trainer part (the book study's gap table): `--drop-last`
drops the 336-pair batch (miiii's 97 batches; the schedule counts 97 an epoch too), `--weight-decay` changes AdamW's.
Writes OUT/torch_book_TASK.json (OUT/torch_book_TASK_VARIANT.json for a variant, e.g. _wd=0.1_drop_last): per
seed the curves, the jump epochs (>= 50 % and >= 99 %), the final loss, autoregressive accuracy and wall time.
Prints 'done' last.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

# PyTorch is an optional extra: without it, say how to install it (one line, exit status 2), not a traceback; --help
# still shows what the module does. `python -m experiments.book --torch` checks for it before it trains anything.
NEEDS_TORCH = ("PyTorch, the optional extra: pip install -e '.[bench]', or the CPU build `make bench` installs: "
               "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu")
try:
    import torch
    from torch import nn

    from experiments.book.torch_model import AdditionTransformer, miiii_params, torch_state
except ModuleNotFoundError as e:
    if e.name != "torch" or __name__ != "__main__":
        raise
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__ + f"\nIt needs {NEEDS_TORCH}")
        sys.exit(0)
    print(f"error: python -m experiments.book.torch_loop needs {NEEDS_TORCH}", file=sys.stderr)
    sys.exit(2)

from miiii import get_preset  # noqa: E402
from miiii.errors import OneLineParser, lead  # noqa: E402
from miiii.rundir import flatten_params  # noqa: E402
from miiii.tasks import loss_floor, make_task  # noqa: E402

JUMP_THRESHOLDS = (0.5, 0.99)


def warmup_cosine(warmup: int, total: int, first: int = 1):
    """LambdaLR's factor at step s: (s + first) / warmup, then cosine to 0. `first` = 1 (this loop: the first step
    at lr / warmup) or 0 (optax's warm-up, miiii's: the first step at lr 0)."""
    return lambda s: (s + first) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) /
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


def seeded_model(seed: int, max_seq_len: int = 13) -> AdditionTransformer:
    """torch.manual_seed(seed), then the model: its initial parameters, and the global generator where the
    DataLoader's draws start."""
    torch.manual_seed(seed)
    return AdditionTransformer(max_seq_len=max_seq_len)


def train_seed(task, seed: int, epochs: int, batch: int = 512, lr: float = 0.01, warmup: int = 200,
               clip: float = 1.0, max_seq_len: int = 13, weight_decay: float = 0.01, drop_last: bool = False,
               warmup_first: int = 1, stop_after: int | None = None, start: dict | None = None) -> dict:
    """One seed of the book's loop. The DataLoader yields sample indices (the same draws as yielding the samples).
    For the same-start comparison (same_start.py): `stop_after` ends after that many steps and returns the step
    losses and the epochs' orders; `start` (a miiii parameter tree) replaces the initial parameters after they are
    drawn, so the data order is still this seed's; `warmup_first` as in warmup_cosine."""
    model = seeded_model(seed, max_seq_len)
    if start is not None:
        model.load_state_dict(torch_state(start))
    xt, yt = (torch.as_tensor(a, dtype=torch.long) for a in (task.train.x, task.train.y))
    xv, yv = (torch.as_tensor(a, dtype=torch.long) for a in (task.valid.x, task.valid.y))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(len(xt))), batch_size=batch,
                                         shuffle=True, drop_last=drop_last)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)  # defaults for the rest
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(warmup, epochs * len(loader), warmup_first))
    loss_fn = nn.CrossEntropyLoss()
    losses, accs, step_loss, orders, t0 = [], [], [], [], time.perf_counter()
    for _ in range(epochs):
        total, order = 0.0, []
        for (idx,) in loader:
            loss = loss_fn(model(xt[idx]).reshape(-1, 14), yt[idx].reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            sched.step()
            total += loss.item()
            if stop_after is not None:
                step_loss.append(loss.item())
                order.append(idx.numpy())
                if len(step_loss) == stop_after:
                    return dict(seed=seed, step_loss=step_loss, orders=orders + [np.concatenate(order)])
        if stop_after is not None:
            orders.append(np.concatenate(order))
        losses.append(total / len(loader))
        accs.append(exact_match(model, xv, yv, task.answer_start))
    acc = np.asarray(accs)
    jump = {f"{t:g}": (int(np.argmax(acc >= t)) + 1 if (acc >= t).any() else None) for t in JUMP_THRESHOLDS}
    return dict(seed=seed, epochs=epochs, batches_per_epoch=len(loader), epoch_loss=losses, valid_acc=accs,
                jump_epoch=jump, final_epoch_loss=losses[-1], valid_teacher_forced_acc=accs[-1],
                valid_autoregressive_acc=autoregressive(model, xv, yv, task.answer_start),
                wall_s=round(time.perf_counter() - t0, 1))


def initial_params(seed: int, max_seq_len: int = 13) -> dict:
    """Seed's initial parameters in this loop (torch.manual_seed, then PyTorch's default initialisation)."""
    return miiii_params(seeded_model(seed, max_seq_len))


def loader_orders(seed: int, n: int, epochs: int, batch: int = 512, max_seq_len: int = 13) -> np.ndarray:
    """(epochs, n) the sample order of each epoch of train_seed(seed): the DataLoader draws it from torch's global
    generator after the model's initialisation, and nothing in the loop draws between epochs."""
    seeded_model(seed, max_seq_len)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(n)), batch_size=batch,
                                         shuffle=True)
    return np.stack([torch.cat([idx for (idx,) in loader]).numpy() for _ in range(epochs)])


def export_start(out: Path, task, seed: int, epochs: int, n_steps: int, max_seq_len: int = 13) -> Path:
    """OUT/start_s{seed}.npz: this loop's start for `seed` (initial parameters as miiii's tree, flattened to
    'params/…' keys; every epoch's sample order) and its first `n_steps` step losses, with its own warm-up
    (`step_loss`) and with optax's (`step_loss_warmup0`), for same_start.py."""
    n = len(task.train.x)
    short = {f: train_seed(task, seed, epochs, max_seq_len=max_seq_len, warmup_first=f, stop_after=n_steps)
             for f in (1, 0)}
    orders = loader_orders(seed, n, epochs, max_seq_len=max_seq_len)
    seen = np.concatenate(short[1]["orders"])
    if not (seen == orders.reshape(-1)[: len(seen)]).all():
        raise RuntimeError("loader_orders does not reproduce the loop's order")
    flat = {f"params/{k}": v for k, v in flatten_params(initial_params(seed, max_seq_len)).items()}
    out.mkdir(parents=True, exist_ok=True)
    f = out / f"start_s{seed}.npz"
    np.savez_compressed(f, orders=orders.astype(np.uint16 if n < 2 ** 16 else np.int32), seed=seed,
                        step_loss=np.asarray(short[1]["step_loss"], np.float32),
                        step_loss_warmup0=np.asarray(short[0]["step_loss"], np.float32),
                        torch_version=torch.__version__, **flat)
    return f


def variant(weight_decay: float, drop_last: bool, warmup_first: int = 1) -> str:
    """The file-name tag of a loop that is not the book's as written ('' for it)."""
    return "".join([f"_wd={weight_decay:g}" if weight_decay != 0.01 else "", "_drop_last" if drop_last else "",
                    "_warmup0" if warmup_first == 0 else ""])


def merged(out: Path, settings: dict, runs: list[dict]) -> dict:
    """The file's runs with `runs` added: the seeds extend those of an earlier call of the same loop (settings and
    epochs); each run keeps the torch version and threads it ran with."""
    if not out.is_file():
        return settings | dict(runs=runs)
    old = json.loads(out.read_text())
    book = dict(weight_decay=0.01, drop_last=False, warmup_first=1)  # what an older file without the key ran
    theirs = {k: old.get(k, book[k]) for k in book}
    if theirs != {k: settings[k] for k in theirs}:
        raise ValueError(f"{out} holds runs with {theirs}, not {settings}")
    epochs = {r["epochs"] for r in old["runs"]} | {r["epochs"] for r in runs if "epochs" in r}
    if len(epochs) > 1:
        raise ValueError(f"{out} holds runs of {sorted(epochs)[0]} epochs: add seeds with the same --epochs")
    seeds = {r["seed"] for r in old["runs"]}
    if seeds & {r["seed"] for r in runs}:
        raise ValueError(f"{out} already holds seeds {sorted(seeds)}: start after them with --first-seed")
    kept = [dict(torch=old.get("torch"), threads=old.get("threads")) | r for r in old["runs"]]  # older files
    return old | settings | dict(runs=sorted(kept + runs, key=lambda r: r["seed"]))


def main(argv=None) -> int:
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--task", choices=["addition", "reversal"], default="addition")
    ap.add_argument("--seeds", type=int, default=5, help="N seeds from --first-seed (torch.manual_seed)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="the first seed; runs are added to an existing file of the same loop (seeds must not repeat)")
    ap.add_argument("--weight-decay", type=float, default=0.01, help="AdamW's (0.01: PyTorch's default)")
    ap.add_argument("--drop-last", action="store_true",
                    help="drop the last, partial batch: 97 batches an epoch as miiii's trainer draws")
    ap.add_argument("--warmup-first", type=int, choices=(0, 1), default=1,
                    help="the warm-up's first step at lr * (0 + FIRST) / 200: 1 as this loop (LambdaLR (s + 1) / "
                         "warmup), 0 as optax's warm-up in miiii's trainer (the first step at lr 0)")
    ap.add_argument("--epochs", type=int, default=None, help="default: the book's 150 (addition) / 80 (reversal)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    ap.add_argument("--out", type=Path, default=Path("results") / "book")
    ap.add_argument("--export-start", type=Path, metavar="DIR",
                    help="train nothing: write each seed's start (initial parameters, every epoch's order) and its "
                         "first --compare-steps step losses to DIR/start_sSEED.npz, for python -m "
                         "experiments.book.same_start")
    ap.add_argument("--compare-steps", type=int, default=600, help="with --export-start: step losses kept")
    args = ap.parse_args(argv)
    if args.seeds < 1 or (args.epochs is not None and args.epochs < 1):
        ap.error("--seeds and --epochs must be at least 1")
    if args.first_seed < 0 or args.weight_decay < 0:
        ap.error("--first-seed and --weight-decay must not be negative")
    if args.export_start:
        if args.task != "addition" or variant(args.weight_decay, args.drop_last, args.warmup_first) or \
                args.compare_steps < 1:
            ap.error("--export-start is for the book's addition loop (no --drop-last, --weight-decay or "
                     "--warmup-first)")
        cfg = get_preset("addition")
        task = make_task(cfg.task)
        if args.threads:
            torch.set_num_threads(args.threads)
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            print(f"wrote {export_start(args.export_start, task, seed, args.epochs or 150, args.compare_steps)}",
                  flush=True)
        print("done")
        return 0
    settings = dict(weight_decay=args.weight_decay, drop_last=args.drop_last, warmup_first=args.warmup_first)
    out = args.out / f"torch_book_{args.task}{variant(**settings)}.json"
    epochs = args.epochs or (150 if args.task == "addition" else 80)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    try:  # refuse before training what could not be added
        merged(out, settings, [dict(seed=s, epochs=epochs) for s in seeds])
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = get_preset(args.task)
    task = make_task(cfg.task)
    runs = []
    for seed in seeds:
        r = train_seed(task, seed, epochs, max_seq_len=cfg.model.n_ctx or task.n_ctx, **settings) | dict(
            torch=torch.__version__, threads=torch.get_num_threads())
        runs.append(r)
        print(f"seed {seed}: jump {r['jump_epoch']}, final loss {r['final_epoch_loss']:.4f}, autoregressive "
              f"{r['valid_autoregressive_acc']:.2%}, {r['wall_s']:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = dict(task=args.task, torch=torch.__version__, threads=torch.get_num_threads(),
                loss_floor=loss_floor(args.task, cfg.task.n_digits))
    out.write_text(json.dumps(merged(out, meta | settings, runs), indent=1))
    print(f"wrote {out}\ndone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
