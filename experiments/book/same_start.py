"""Both loops from one start: this project's trainer from the book's loop's own initial parameters and batches.

    python -m experiments.book.torch_loop --export-start runs/starts --seeds 8   (needs torch: each seed's start)
    python -m experiments.book.same_start --starts runs/starts [--only 0 1] [--out results/book]

Why. The gap study (gap.md) compares samples of seeds whose draws differ: this project draws its initial
parameters and data order with jax.random, the book's loop with torch's generator, from the same distributions.
Here this project's trainer (preset addition-98: the DataLoader's 98 batches an epoch, weight decay 0.01) starts
from the parameters PyTorch drew for a seed and reads, epoch by epoch, the batches PyTorch's DataLoader drew for
it (each epoch's training set is laid out so that the trainer's own permutation reads PyTorch's order; the step
is miiii's jitted chunk, unchanged). What is left between the loops is the arithmetic of a step: XLA's float
order against PyTorch's, optax's AdamW and clipping against PyTorch's, and the warm-up (optax's first step has
lr 0, the book's loop as torch_loop.py writes it lr / 200).

Two questions, each with its rule:
  1. Step by step: does the training loss of the first steps agree between the loops, with the same warm-up (the
     start files hold PyTorch's step losses with optax's warm-up too) and with each loop's own? The loops part at
     the first step where the losses differ by more than PART_TOL.
  2. To the end: do as many seeds grok (>= 99 % autoregressive exact match in 150 epochs) from PyTorch's starts in
     this project's loop as in PyTorch's loop from the same starts (Fisher's exact test; the jump epochs by the
     rank-sum test; *differ* at p < 0.05, as gap.md)?

Writes OUT/same_start.md, same_start.json, same_start.png; each seed's record is kept in
OUT/runs/same-start/sSEED.json and reused, so seeds can be trained by separate processes (--only) and the report
written by a last call. About 9 minutes a seed on 2 CPU cores.
"""

from __future__ import annotations

import json
import re
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from experiments.book.records import GAP_ALPHA, compare, seed_record, torch_book_runs  # noqa: E402
from miiii.compile_cache import setup_compile_cache  # noqa: E402
from miiii.config import ConfigError  # noqa: E402
from miiii.errors import OneLineParser, lead, one_line_errors, out_folder, shown  # noqa: E402
from miiii.presets import get_preset  # noqa: E402
from miiii.provenance import git_commit, provenance_table, to_jsonable  # noqa: E402
from miiii.run import Run  # noqa: E402
from miiii.rundir import regular_file, unflatten  # noqa: E402
from miiii.tasks import make_task  # noqa: E402
from miiii.train import TrainState, epoch_order, make_trainer, numerics, steps_per_epoch, task_data  # noqa: E402

PART_TOL = 1e-3  # |loss difference| at which the two loops have parted: its median over PART_WINDOW steps
PART_WINDOW = 25
PRESET = "addition-98"


def read_start(f: Path) -> dict:
    """A start file of torch_loop.py --export-start: parameters as miiii's tree, orders, PyTorch's step losses. A
    file that is not one (damaged, another kind of .npz, missing arrays) is a ConfigError that names it."""
    try:
        regular_file(f)
        with np.load(f) as z:
            params = unflatten({k.removeprefix("params/"): z[k] for k in z.files if k.startswith("params/")})
            start = dict(seed=int(z["seed"]), params=params, orders=z["orders"].astype(np.int64),
                         step_loss=np.asarray(z["step_loss"]), step_loss_warmup0=np.asarray(z["step_loss_warmup0"]),
                         torch_version=str(z["torch_version"]))
    except ConfigError as e:
        raise ConfigError(f"{e} (a start file of python -m experiments.book.torch_loop --export-start)") from None
    except (OSError, ValueError, TypeError, KeyError, EOFError, AttributeError, zipfile.BadZipFile) as e:
        raise ConfigError(f"{f} is not a start file of python -m experiments.book.torch_loop --export-start "
                          f"({type(e).__name__}: {shown(e, 200)})") from None
    if start["orders"].ndim != 2 or start["seed"] != int(f.stem[7:]):
        raise ConfigError(f"{f} is damaged: its orders are not (epochs, samples) or its seed is not {f.stem[7:]}")
    return start


def laid_out(train: np.ndarray, own: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The training array arranged so that reading it in the trainer's order `own` yields it in `wanted`:
    out[own[j]] = train[wanted[j]]."""
    out = np.empty_like(train)
    out[own] = train[wanted]
    return out


def train_from(start: dict, epochs: int | None = None) -> tuple[Run, np.ndarray]:
    """This project's trainer (preset addition-98) from a start: every epoch one jitted chunk over the epoch's
    batches, in PyTorch's order. -> (the run in memory, with the trainer's metrics layout; per-step losses)."""
    cfg = get_preset(PRESET)
    task = make_task(cfg.task)
    n = len(task.train.x)
    spe = steps_per_epoch(cfg.train, n)
    epochs = epochs or cfg.train.steps // spe
    if len(start["orders"]) < epochs:
        raise ConfigError(f"the start of seed {start['seed']} holds {len(start['orders'])} epochs' orders, "
                          f"not {epochs}")
    trainer = make_trainer(cfg, task)
    data = task_data(task)
    key = jax.random.key(cfg.train.seed)
    params = jax.tree.map(jnp.asarray, start["params"])
    if jax.tree.structure(params) != jax.tree.structure(jax.eval_shape(trainer.init, 0).params):
        raise ConfigError(f"the start of seed {start['seed']} is not this model's parameter tree")
    state = TrainState(params, trainer.tx.init(params), jnp.zeros((), jnp.int32), key)
    losses, accs, t0 = [], [], time.perf_counter()
    for e in range(epochs):
        own = np.asarray(epoch_order(state.key, e, n))  # the chunk donates the state, its key included
        batch_data = data | dict(train_x=jnp.asarray(laid_out(task.train.x, own, start["orders"][e])),
                                 train_y=jnp.asarray(laid_out(task.train.y, own, start["orders"][e])))
        state, m = trainer.chunk(state, batch_data, spe)
        losses.append(np.asarray(m.metrics["loss"]))
        accs.append(float(trainer.evaluate(state.params, data["valid_x"], data["valid_y"], data["spec"])[2][0]))
    loss = np.concatenate(losses)
    valid_acc = np.full((len(loss), 1), np.nan)
    valid_acc[np.arange(1, epochs) * spe, 0] = accs[:-1]  # index t: the parameters after t updates
    run = Run(path=Path(f"same-start/s{start['seed']}"), config=replace(cfg, train=replace(cfg.train,
                                                                                           steps=len(loss))),
              metrics=dict(loss=loss, valid_acc=valid_acc),
              summary=dict(wall_s=round(time.perf_counter() - t0, 1), final=dict(valid=dict(task_acc=[accs[-1]]))),
              params=jax.tree.map(np.asarray, state.params))
    return run, loss


def agreement(diff) -> dict:
    """|loss difference| per step of the two loops from one start -> the largest over the first 10 and 100 steps
    and over all compared, and the step (1-based) from which they have parted: the first above PART_TOL whose next
    PART_WINDOW differences have a median above it too (a lasting gap, not one batch's spike; None: not within the
    steps)."""
    diff = np.asarray(diff, np.float64)
    k = len(diff)
    med = [np.median(diff[t:t + PART_WINDOW]) for t in range(max(k - PART_WINDOW + 1, 0))]
    part = np.nonzero((np.asarray(med) > PART_TOL) & (diff[:len(med)] > PART_TOL))[0]
    return dict(steps=k, max_10=float(diff[:10].max()), max_100=float(diff[:100].max()), max_all=float(diff.max()),
                part_step=int(part[0]) + 1 if len(part) else None, diff=diff.tolist())


def loss_diff(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    k = min(len(ours), len(theirs))
    return np.abs(np.asarray(ours[:k], np.float64) - np.asarray(theirs[:k], np.float64))


def seed_result(start: dict, cache: Path) -> dict:
    """One seed: trained from its start (or read from `cache`), with the step agreement against both warm-ups.
    The cache keeps the per-step differences only; the statistics are derived from them on every read."""
    if not cache.is_file():
        run, loss = train_from(start)
        rec = seed_record(run, start["seed"]) | dict(
            same_warmup=dict(diff=loss_diff(loss, start["step_loss_warmup0"])),
            own_warmup=dict(diff=loss_diff(loss, start["step_loss"])),
            numerics=numerics(run.config), torch=start["torch_version"], commit=git_commit())
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(to_jsonable(rec)))
    rec = json.loads(cache.read_text())
    return rec | {w: agreement(rec[w]["diff"]) for w in ("same_warmup", "own_warmup")}


def _jump(r: dict | None) -> str:
    if r is None:
        return "not run"
    j = r["jump_epoch"]["0.99"]
    return (str(j) if j is not None else "–") + ("" if r["valid_autoregressive_acc"] >= 0.99 else " (stuck)")


def _part(a: dict) -> str:
    return str(a["part_step"]) if a["part_step"] is not None else f"> {a['steps']}"


def same_start_md(ours: list[dict], theirs: dict[int, dict], own_draws: dict[int, dict], prov: dict) -> tuple[
        str, dict]:
    paired = [r for r in ours if r["seed"] in theirs]
    cmp = compare(paired, [theirs[r["seed"]] for r in paired], 150) if paired else None
    lines = ["# Both loops from one start", "", *provenance_table(prov), "",
             f"This project's trainer (preset `{PRESET}`: 98 batches an epoch, weight decay 0.01, clip 1) started "
             "from the parameters PyTorch drew for each seed and fed, epoch by epoch, the batches PyTorch's "
             "DataLoader drew for it (`python -m experiments.book.same_start`). The book's loop from the same start is "
             "`torch_book_addition.json` (`python -m experiments.book.torch_loop`, seeds as `torch.manual_seed`). "
             "The third "
             "column is this project's loop from its own draws for the same seed number (`batches98.json`): "
             "another start altogether.", "",
             "## 1. Step by step", "",
             f"Rule: the loops compute the same steps while their training losses differ by at most {PART_TOL:g}; "
             f"they have *parted* from the first step beyond it whose next {PART_WINDOW} differences have a median "
             "above it too "
             "(a lasting gap, not one batch's spike). *Same warm-up*: PyTorch with optax's warm-up (first step at "
             "lr 0, as here); *own warm-up*: the book's loop as written (first step at lr / 200).", "",
             "| seed | max abs difference, steps 1–10 | steps 1–100 | parted at step (same warm-up) | "
             "max abs difference, steps 1–10 (own warm-up) | parted at step (own warm-up) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in ours:
        s, o = r["same_warmup"], r["own_warmup"]
        lines.append(f"| {r['seed']} | {s['max_10']:.1e} | {s['max_100']:.1e} | {_part(s)} | {o['max_10']:.1e} | "
                     f"{_part(o)} |")
    lines += ["", "## 2. To the end of the budget (150 epochs)", "",
              "| seed | PyTorch's loop, its start | this project's loop, PyTorch's start | this project's loop, "
              "its own draws |", "| --- | --- | --- | --- |"]
    for r in ours:
        cells = (_jump(theirs.get(r["seed"])), _jump(r), _jump(own_draws.get(r["seed"])))
        lines.append(f"| {r['seed']} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: the epoch at which held-out exact match first reaches 99 %; *(stuck)*: under 99 % "
              "autoregressive exact match at the end; – never.", ""]
    if cmp:
        verdict = "**differ**" if cmp["differ"] else "**no difference detected**"
        lines += [f"From the same {cmp['a']['n']} starts: this project's loop grokked {cmp['a']['grokked']}/"
                  f"{cmp['a']['n']}, PyTorch's {cmp['b']['grokked']}/{cmp['b']['n']}; Fisher's exact p = "
                  f"{cmp['p_grokked']:.3g}, rank-sum p on the jump epochs = {cmp['p_jump']:.3g}: {verdict} (rule: "
                  f"either p < {GAP_ALPHA:g}, no correction).", ""]
    return "\n".join(lines), dict(outcomes=cmp)


def fig_same_start(ours: list[dict], theirs: dict[int, dict], out: Path) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for i, r in enumerate(ours):
        c = plt.cm.tab10(i % 10)
        a.semilogy(np.arange(1, r["same_warmup"]["steps"] + 1), np.maximum(r["same_warmup"]["diff"], 1e-9), color=c,
                   lw=1, label=f"seed {r['seed']}")
        a.semilogy(np.arange(1, r["own_warmup"]["steps"] + 1), np.maximum(r["own_warmup"]["diff"], 1e-9), color=c,
                   lw=0.8, ls=":")
        ep = np.arange(1, len(r["valid_acc"]) + 1)
        b.plot(ep, 100 * np.asarray(r["valid_acc"]), color=c, lw=1.2, label=f"seed {r['seed']}")
        if r["seed"] in theirs:
            t = theirs[r["seed"]]["valid_acc"]
            b.plot(np.arange(1, len(t) + 1), 100 * np.asarray(t), color=c, lw=1, ls="--")
    a.axhline(PART_TOL, color="k", lw=0.6)
    a.set(xlabel="step", ylabel="|loss difference| (floored at 1e-9)",
          title="From one start: solid same warm-up, dotted each loop's own")
    a.legend(fontsize=7, ncol=2)
    b.set(xlabel="epoch", ylabel="held-out exact match (%)",
          title="solid: this project's loop, dashed: PyTorch's, same start")
    fig.tight_layout()
    fig.savefig(out / "same_start.png", dpi=90)
    plt.close(fig)


def main(argv=None) -> int:
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--starts", type=Path, required=True,
                    help="folder of start_sSEED.npz files (python -m experiments.book.torch_loop --export-start)")
    ap.add_argument("--only", type=int, nargs="+", default=None,
                    help="train these seeds' starts only and write no report (to share the work between processes)")
    ap.add_argument("--out", type=Path, default=Path("results") / "book",
                    help="report folder; reads torch_book_addition.json and batches98.json there")
    args = ap.parse_args(argv)
    return one_line_errors(study, args)


def study(args) -> int:
    """main's work: every start file read and checked (and --out) before the first seed trains."""
    found = [f for f in args.starts.glob("start_s*.npz") if re.fullmatch(r"start_s\d+\.npz", f.name)]
    files = sorted(found, key=lambda f: int(f.stem[7:]))
    if not files:
        raise ConfigError(f"{args.starts} holds no start_sSEED.npz (python -m experiments.book.torch_loop "
                          "--export-start)")
    out_folder(args.out)
    files = [f for f in files if args.only is None or int(f.stem[7:]) in args.only]
    for f in files:  # a damaged start refused before any seed trains (read again when its turn comes)
        read_start(f)
    setup_compile_cache()
    head = {"commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M %Z")}
    cache = args.out / "runs" / "same-start"
    ours = []
    for f in files:
        seed = int(f.stem[7:])
        r = seed_result(read_start(f), cache / f"s{seed}.json")
        print(f"seed {seed}: jump {r['jump_epoch']}, autoregressive {r['valid_autoregressive_acc']:.2%}, "
              f"parted at step {r['same_warmup']['part_step']} (same warm-up)", flush=True)
        ours.append(r)
    if args.only is not None:
        return 0
    tb = args.out / "torch_book_addition.json"
    theirs = {r["seed"]: r for r in torch_book_runs(tb)} if tb.is_file() else {}
    b98 = args.out / "batches98.json"
    own = {r["seed"]: r for r in json.loads(b98.read_text())["runs"]} if b98.is_file() else {}
    n = ours[0]["numerics"]
    prov = head | {"seed records made at": ", ".join(sorted({r["commit"][:12] for r in ours})),
                   "device": f"{n['backend']} ({n['device']})", "jax": n["jax_version"], "precision": n["precision"],
                   "torch (the starts)": ours[0]["torch"], "seeds": ", ".join(str(r["seed"]) for r in ours),
                   "wall time": f"{sum(r['wall_s'] or 0 for r in ours) / 60:.0f} min (training)"}
    text, res = same_start_md(ours, theirs, own, prov)
    fig_same_start(ours, theirs, args.out)
    (args.out / "same_start.md").write_text(text + "\nFigure: `same_start.png`.\n")
    (args.out / "same_start.json").write_text(json.dumps(to_jsonable(dict(provenance=prov, **res, runs=[
        {k: v for k, v in r.items() if k not in ("same_warmup", "own_warmup")} | {
            w: {k: v for k, v in r[w].items() if k != "diff"} for w in ("same_warmup", "own_warmup")}
        for r in ours])), indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
