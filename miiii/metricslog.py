"""The live metrics log of a run: metrics.jsonl and tb/, written from the run's per-step arrays as chunks end.

Which metrics it carries and under which names comes from the table in metrics.py (`Metric.logged`); which steps,
from cadence.py (the evaluated steps). Its file format is described in rundir.py, whose `read_metrics_log` reads it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from miiii.cadence import evaluated_steps, last_evaluated_step
from miiii.files import io_fault, write_text_atomic
from miiii.metrics import METRICS, log_columns, log_values
from miiii.rundir import METRICS_LOG, TB

TB_POINTS = 1000  # TensorBoard shows 1,000 points per scalar tag by default; tb/ gets about that many steps


class MetricsLog:
    """metrics.jsonl and tb/ of one run directory, written from the run's per-step arrays as chunks end.

    `hist`: metric name -> array with time first (metrics.METRICS), filled by the caller; opening the log rewrites
    metrics.jsonl (atomically) from the evaluated steps below `upto`, the steps the run has already taken (0: an
    empty file), then `append(start, stop)` adds steps [start, stop) and flushes. `tensorboard`: also write tb/
    when tensorboardX imports.
    """

    def __init__(self, run_dir: Path, hist: dict, task_names, param_names, upto: int, eval_every: int, steps: int,
                 tensorboard: bool = True, metrics=METRICS):
        self.path = Path(run_dir) / METRICS_LOG
        self.hist, self.eval_every, self.metrics = hist, eval_every, metrics
        self.columns = log_columns(task_names, param_names, metrics)
        self._fmt = '{"step": %d, ' + ", ".join(f"{json.dumps(c)}: %.9g" for c in self.columns) + "}\n"
        # float32 has at most 9 significant digits: %.9g reads back (through float64) to the same float32
        self.tb_every = eval_every * -(-steps // (eval_every * TB_POINTS))
        self.tb_last = last_evaluated_step(steps, eval_every)
        try:
            write_text_atomic(self.path, self._lines(0, upto)[0])
            self.f = open(self.path, "a")  # noqa: SIM115 - appended to for the run's lifetime
        except OSError as e:
            raise io_fault(self.path, e) from None
        try:
            self.tb = _tensorboard(Path(run_dir) / TB, upto) if tensorboard else None
        except OSError as e:  # tb/ cannot be made (a file in its place, a read-only disk)
            self.f.close()
            raise io_fault(Path(e.filename or Path(run_dir) / TB), e) from None

    def _lines(self, start: int, stop: int):
        """The lines of the evaluated steps in [start, stop), those steps and their values (float64, one column
        per `self.columns`)."""
        steps = evaluated_steps(start, stop, self.eval_every)
        values = log_values(self.hist, steps, self.metrics)
        out = []
        for t, row, finite in zip(steps.tolist(), values.tolist(), np.isfinite(values).all(1).tolist(), strict=True):
            if finite:
                out.append(self._fmt % (t, *row))
            else:  # a diverged step: JSON has no NaN or inf, so null (read back as NaN)
                cells = {c: v if math.isfinite(v) else None for c, v in zip(self.columns, row, strict=True)}
                out.append(json.dumps({"step": t} | cells) + "\n")
        return "".join(out), steps, values

    def append(self, start: int, stop: int) -> None:
        """Steps [start, stop) of `hist`: to metrics.jsonl (flushed, whole lines) and, at a stride, to tb/."""
        text, steps, values = self._lines(start, stop)
        try:
            self.f.write(text)
            self.f.flush()
        except OSError as e:
            raise io_fault(self.path, e) from None
        if self.tb is not None:
            writer, Summary = self.tb
            for t, row in zip(steps.tolist(), values.tolist(), strict=True):
                if t % self.tb_every == 0 or t == self.tb_last:  # one event per step with every tag: add_scalar
                    writer.file_writer.add_summary(Summary(value=[  # per tag costs ~100x as much
                        Summary.Value(tag=c, simple_value=v) for c, v in zip(self.columns, row, strict=True)
                        if math.isfinite(v)]), t)
            writer.flush()

    def close(self) -> None:
        self.f.close()
        if self.tb is not None:
            self.tb[0].close()


def _tensorboard(path: Path, purge_step: int):
    """(tensorboardX SummaryWriter on `path`, its Summary proto), or None when tensorboardX is not installed.
    TensorBoard hides the events of earlier writers from `purge_step` on (a resumed run's replayed steps)."""
    try:
        from tensorboardX import SummaryWriter
        from tensorboardX.proto.summary_pb2 import Summary
    except ImportError:
        return None
    return SummaryWriter(str(path), purge_step=purge_step or None), Summary
