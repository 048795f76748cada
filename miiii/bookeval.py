"""The book's evaluation of a sequence run (addition, reversal): what its chapters print and measure.

Edge cases with the ones-first output and a verdict, autoregressive exact match decoded the book's way
(the sequence grows by one predicted token per step, nothing padded after it), the epoch of the jump,
and the final loss beside the loss floor. `python -m miiii book RUN_DIR` prints it and writes
`RUN_DIR/book.json` (`evaluate_to_file`).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from miiii.config import ConfigError
from miiii.model import build_model, count_params
from miiii.provenance import to_jsonable
from miiii.run import Run, load_run
from miiii.rundir import write_book_report
from miiii.tasks import TaskConfig, loss_floor, make_task, task_spec
from miiii.tokens import decode
from miiii.train import greedy_decode, steps_per_epoch

JUMP_THRESHOLDS = (0.5, 0.99)


class Evaluator:
    """A trained sequence model and its task, with the book's probes."""

    def __init__(self, run_dir: str | Path | Run, task_cfg: TaskConfig | None = None):
        """A run directory, or a Run built in memory (a loop driven by hand: experiments/book/same_start.py);
        `task_cfg` in place of the run's task config, for a decoder that needs none of its data sets (its held-out
        set then is task_cfg's: `report` and `curves` want the run's own)."""
        run = run_dir if isinstance(run_dir, Run) else load_run(run_dir)
        if not run.config.task.is_sequence or not run.params:
            raise ConfigError(f"{run.path} is not a finished addition or reversal run")
        self.run, self.cfg = run, run.config
        self.task = make_task(task_cfg or self.cfg.task)
        self.model = build_model(self.cfg.model, self.task)
        self.params = jax.tree.map(jnp.asarray, run.params)
        self.apply = jax.jit(lambda p, x: self.model.apply({"params": p}, x))
        self.n = self.cfg.task.n_digits
        self.prompt_len = self.task.answer_start + 1  # tokens up to and including `=`

    def decode(self, x: np.ndarray, n_new: int, batch: int = 5000) -> np.ndarray:
        """(N, n_new) the tokens generated greedily after each prompt of `x`, in batches."""
        return np.concatenate([np.asarray(greedy_decode(self.apply, self.params, x[i:i + batch, : self.prompt_len],
                                                        n_new)) for i in range(0, len(x), batch)])

    def autoregressive(self, x: np.ndarray, y: np.ndarray, batch: int = 5000) -> np.ndarray:
        """(N,) bool: the whole answer span (digits and <EOS>) generated correctly."""
        answer = y[:, self.task.answer_start:]
        return (self.decode(x, answer.shape[1], batch) == answer).all(1)

    def teacher_forced(self, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """(mean CE over all target positions, exact match of the answer span), eval mode."""
        logits = np.asarray(self.apply(self.params, jnp.asarray(x))[0], np.float64)
        m = logits.max(-1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
        ce = -np.take_along_axis(logp, y[..., None], -1)[..., 0]
        exact = (logits.argmax(-1)[:, self.task.answer_start:] == y[:, self.task.answer_start:]).all(1)
        return float(ce.mean()), float(exact.mean())

    def edge_cases(self) -> list[dict]:
        """The book's check: each case (the task's `TaskSpec.edge_cases`) decoded autoregressively, ones-first
        output, verdict."""
        names, seq = task_spec(self.task.name).edge_cases(self.n)
        out = greedy_decode(self.apply, self.params, seq[:, : self.prompt_len], seq.shape[1] - self.prompt_len)
        rows = []
        for name, s, o in zip(names, seq, out, strict=True):
            want = s[self.prompt_len:]
            rows.append(dict(case=name, output=decode(o), expected=decode(want), correct=bool((o == want).all())))
        return rows

    def curves(self) -> dict:
        """Per epoch: mean minibatch training loss (the book's 'Loss') and held-out exact match after it."""
        spe = steps_per_epoch(self.cfg.train, self.cfg.task.n_train)
        loss = np.asarray(self.run.metrics["loss"], np.float64)
        n_ep = len(loss) // spe
        epoch_loss = loss[: n_ep * spe].reshape(n_ep, spe).mean(1)
        acc = np.asarray(self.run.metrics["valid_acc"], np.float64)[:, 0]
        # Metrics at step t describe the parameters before update t: epoch e ends at step e * spe. Where
        # evaluation does not fall on epoch ends, the latest evaluation before it stands in.
        seen = np.nonzero(~np.isnan(acc))[0]
        ep = np.arange(1, n_ep + 1)
        last = [seen[seen <= e * spe] for e in ep]
        after = np.array([acc[i[-1]] if len(i) and e * spe < len(acc) else np.nan
                          for i, e in zip(last, ep, strict=True)])
        if len(after) and np.isnan(after[-1]):  # the last epoch ends with the run: the summary's final value
            after[-1] = self.run.summary.get("final", {}).get("valid", {}).get("task_acc", [np.nan])[0]
        return dict(epoch=ep, loss=epoch_loss, valid_acc=after)

    def report(self, curves: dict | None = None) -> dict:
        """Everything the book states about a run, measured: the numbers of book_results.md and book.json."""
        curves = curves or self.curves()
        acc = np.where(np.isnan(curves["valid_acc"]), -1, curves["valid_acc"])
        jump = {f"{t:g}": (int(curves["epoch"][np.argmax(acc >= t)]) if (acc >= t).any() else None)
                for t in JUMP_THRESHOLDS}
        train_loss, train_tf = self.teacher_forced(self.task.train.x[:10_000], self.task.train.y[:10_000])
        valid_loss, valid_tf = self.teacher_forced(self.task.valid.x, self.task.valid.y)
        ar = self.autoregressive(self.task.valid.x, self.task.valid.y)
        return dict(
            task=self.task.name, n_digits=self.n, params=count_params(self.params), epochs=len(curves["epoch"]),
            steps=int(self.cfg.train.steps), wall_s=self.run.summary.get("wall_s"),
            loss_floor=loss_floor(self.task.name, self.n),
            final_epoch_loss=float(curves["loss"][-1]),  # mean minibatch loss of the last epoch (book)
            final_train_loss=train_loss,  # eval mode, 10,000 training sequences
            valid_loss=valid_loss, valid_teacher_forced_acc=valid_tf, train_teacher_forced_acc=train_tf,
            valid_autoregressive_acc=float(ar.mean()), n_valid=len(ar),
            jump_epoch=jump, edge_cases=self.edge_cases(),
            plateau_loss=float(np.min(curves["loss"][: jump["0.5"] - 1])) if (jump["0.5"] or 0) > 2 else None,
            # median held-out exact match from epoch 5 until the jump (the book's "sits near 0-1 %")
            plateau_acc=float(np.median(acc[4: jump["0.5"] - 1])) if (jump["0.5"] or 0) > 6 else None,
        )


def print_report(r: dict) -> None:
    print(f"{r['task']} (n = {r['n_digits']}), {r['params']:,} parameters, {r['epochs']} epochs")
    print(f"  final loss {r['final_epoch_loss']:.4f} (last epoch's minibatches), {r['final_train_loss']:.4f} "
          f"(eval mode, training data); loss floor {r['loss_floor']:.4f}")
    print(f"  held-out exact match: teacher-forced {r['valid_teacher_forced_acc']:.2%}, "
          f"autoregressive {r['valid_autoregressive_acc']:.2%} of {r['n_valid']:,}")
    print(f"  epoch of the jump: {r['jump_epoch']}")
    print("  edge cases (autoregressive; sums are written ones-first):")
    for c in r["edge_cases"]:
        print(f"    {c['case']:>25} | output '{c['output']}' | expected '{c['expected']}' | "
              f"{'CORRECT' if c['correct'] else 'WRONG'}")


def evaluate_to_file(run_dir: str | Path) -> dict:
    """`python -m miiii book RUN_DIR`: the report of a finished sequence run, printed and written to book.json."""
    r = Evaluator(run_dir).report()
    print_report(r)
    write_book_report(Path(run_dir), to_jsonable(r))
    return r
