"""The tasks as data plus a loss and metrics, one representation for all of them, and the registry (`TASKS`) that
holds everything else about each task.

A task yields integer inputs `x (N, n_ctx)` and integer targets `y (N, S)` over S output *slots*
(miiii: one slot per prime q; nanda: one slot; addition/reversal: one slot per position), and three
small arrays that say how slots become a loss and per-task metrics:

    n_classes   (S,)    classes of each slot; logits at index >= n_classes are masked out
    loss_weight (S,)    loss = sum_s loss_weight[s] * mean_b CE[b, s]
    groups      (K, S)  task k is correct on a sample when every slot in its group is (exact match)
    group_loss  (K, S)  task k's reported loss = sum_s group_loss[k, s] * mean_b CE[b, s]

so the trainer and model never branch on the task's name. Nor does any other module: what differs between tasks
(family, valid sizes, labels, probes, the book's edge cases, figures, export) is a field of its `TaskSpec` in
`TASKS`, and `task_spec(name)` is how the rest of the package asks. A new task is one entry there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from miiii.errors import ConfigError, shown
from miiii.taskdata import Split, Task, class_buckets  # noqa: F401 (the built task, imported from here too)
from miiii.tokens import (
    BOOK_VOCAB,
    addition_cases,
    addition_probe,
    board_cases,
    board_probe,
    digit_positions,
    digits,
    draw_distinct,
    encode_addition,
    encode_board,
    encode_reversal,
    grid_inputs,
    primes_below,
    reversal_cases,
    reversal_probe,
)


def _unchanged(cfg, y, on, moduli):
    """task.variant = none: the task as it is."""
    return y, on


@dataclass(frozen=True)
class TaskConfig:
    name: str = "nanda"  # a key of the registry tasks.TASKS: nanda | miiii | addition | reversal | ...
    p: int = 113  # grid tasks: the prime base; inputs are [x0, x1, p]
    variant: str = "none"  # miiii: none | masked (q in {2,3,5,7} out of the loss) | basis (shuffled labels)
    train_frac: float = 0.3  # grid tasks: share of the samples (all p^2 inputs, most tasks) used for training (paper
    # text: 0.3)
    valid_size: int = 1000  # grid tasks: validation samples after the train split; the rest is test
    split_seed: int = 0  # grid tasks: seed of the one permutation that makes the split
    n_digits: int = 3  # addition: digits per operand; reversal: digits to reverse
    n_train: int = 50_000  # addition/reversal: training sequences (book: 50,000, seed 42)
    n_valid: int = 10_000  # addition/reversal: held-out sequences (book's test set: 10,000, seed 123)
    train_seed: int = 42  # addition/reversal: data seed of the training set (book)
    valid_seed: int = 123  # addition/reversal: data seed of the held-out set (book)
    mixed_lengths: bool = False  # addition/reversal: training operands of 0..n_digits digits (held-out: n)
    # addition/reversal: training operands below 10**train_digits, zero-padded to n_digits (held-out: n digits);
    # 0 = n_digits. A length curriculum is phases (train --init-from) that raise it: AdderBoard's 3 -> 6 -> 10
    train_digits: int = 0
    # addition/reversal: hard-example replay. A .npy of operand rows (N, operands), e.g. the pairs a run gets wrong
    # (python -m experiments.adderboard.hard RUN), added `replay_copies` times to the training set (held-out
    # pairs among them are dropped); "" = none
    replay: str = ""
    replay_copies: int = 1
    # a later phase of a recipe in phases (presets.PHASED): "PAIRS@SEED" finds the pairs the phase before decodes
    # wrong among PAIRS uniform ones drawn with SEED (united with that phase's own, if it replayed any: a chain of
    # rounds accumulates them) and replays them, repeated to about `replay_share` of the rows (miiii.hard). The
    # phase's config.json records the file (replay) and the count (replay_copies) it resolved to
    replay_hard: str = ""
    replay_share: float = 0.5
    basis_seed: int = 1  # miiii basis: seed of the label shuffle
    # grid tasks: token order of an input. low: [x0, x1, p], x0 the low digit of n = x0 + x1*p (this codebase);
    # high: [x1, x0, p], the high digit first, as the original code's (n // p, n % p). Labels and the grid order
    # of recordings (row i = n) are the same either way; only which position holds which digit changes.
    digit_order: str = "low"
    # miiii: how the tasks' CE_q / ln q combine into the loss. mean: over the tasks switched on (the original
    # code); sum: Eq. 12 as the paper writes it (the mean times the number of tasks switched on)
    loss_over_tasks: str = "mean"

    @property
    def digit_positions(self) -> tuple[int, int]:
        return digit_positions(self.digit_order)

    @property
    def is_sequence(self) -> bool:
        """A sequence task (addition, reversal: tokens, a prediction at every position) rather than a grid task
        (nanda, miiii, ...: one answer per input [x0, x1, p]): the registry's `TaskSpec.family`."""
        return self.name in SEQUENCE_TASKS

    @property
    def seq_len(self) -> int:
        """Input tokens of one sample: 3 for a grid task, `sequence_length` for a sequence task."""
        return sequence_length(self.name, self.n_digits) if self.is_sequence else 3



GRID, SEQUENCE = "grid", "sequence"
GRID_LOSS_UNIT = "cross-entropy / ln p"  # one answer of p classes (nanda, sub, mul, div); miiii names its own q
SEQUENCE_LOSS_UNIT = "cross-entropy (nats)"  # the mean over target positions (the book)


@dataclass(frozen=True)
class TaskSpec:
    """Everything about one task, its entry `TASKS[name]`: the rest of the package asks this, never the name.

    The callables take and return numpy arrays (operands as int64, or Python ints in object arrays beyond int64).
    """

    name: str
    # GRID: one answer per input [x0, x1, p] (x0, x1 < p, vocabulary p + 1), read at the last position; SEQUENCE:
    # token sequences in the book's vocabulary, a prediction at every position
    family: str
    about: str  # what is learned, in one line
    metric_names: Callable[[TaskConfig, np.ndarray], tuple[str, ...]]  # (config, classes per slot) -> metric columns
    # task.variant -> what it changes: (config, labels y (N, S), slots in the loss `on` (S,), classes (S,)) ->
    # (y, on); "none" changes nothing and every task takes it
    variants: Mapping[str, Callable] = field(default_factory=lambda: {"none": _unchanged}, hash=False)
    loss_unit: str = ""  # the unit of its reported losses; "": its family's (`unit`)
    nanda_progress: bool = False  # Nanda et al.'s progress measures read its logits (plots_neurons.over_training)
    exports_adder: bool = False  # export-adder accepts its runs
    # grid tasks
    min_p: int = 3  # the smallest prime p it accepts
    answer: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None = None  # (x0, x1, p), each (N,) -> (N, S)
    moduli: Callable[[int], np.ndarray] | None = None  # p -> (S,) int32 classes of each output slot
    sample: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None = None  # (x0, x1, p) -> (N,) bool: the
    # inputs that are samples (div: x1 != 0); None: all p^2
    # sequence tasks: `operands` numbers of n_digits digits each
    max_digits: int = 0  # task.n_digits from 1 to this
    operands: int = 0
    encode: Callable[[np.ndarray, int], np.ndarray] | None = None  # (N, operands), n -> (N, length(n) + 1) tokens
    length: Callable[[int], int] | None = None  # n -> input tokens, which are also the target positions
    answer_at: Callable[[int], int] | None = None  # n -> target index of the first answer token
    unpredictable: Callable[[int], int] | None = None  # n -> target positions no model predicts (the loss floor)
    commutative: bool = False  # (a, b) and (b, a) are one fact: a held-out pair keeps both out of training
    probe: Callable[[str], np.ndarray] | None = None  # record.probes text -> its sequence; ValueError if not its form
    probe_form: str = ""  # an example probe, for messages
    edge_cases: Callable[[int], tuple[list[str], np.ndarray]] | None = None  # n -> the book's checks: names, sequences
    # n -> for each answer digit j (0 = the first written), the input positions it is a function of (addition: column
    # j of a and of b, ones first; reversal: position n-1-j), the positions an attention that computes it reads
    reads: Callable[[int], list[list[int]]] | None = None
    vocab: int = BOOK_VOCAB  # tokens (the book's digits and + = <EOS> <PAD>; AdderBoard's format: the digits alone)
    answer_loss: bool = False  # the loss is the mean over the answer positions alone (else over every target)

    def __post_init__(self):
        """An entry is whole for its family: a missing rule fails here, at import, not deep inside a run."""
        need = {GRID: ("answer", "moduli"), SEQUENCE: ("encode", "length", "answer_at", "unpredictable", "probe",
                                                     "edge_cases")}.get(self.family)
        if need is None:
            raise ValueError(f"task {self.name}: family {self.family!r} is neither {GRID!r} nor {SEQUENCE!r}")
        missing = [k for k in need if getattr(self, k) is None]
        if missing or "none" not in self.variants or (self.family == SEQUENCE and not self.operands):
            raise ValueError(f"task {self.name}: its {self.family} entry lacks {missing or 'operands or variant none'}")

    @property
    def is_sequence(self) -> bool:
        return self.family == SEQUENCE

    @property
    def unit(self) -> str:
        """The one unit of every loss its runs report (metrics, summary.json, members.csv, figures, page): a grid
        task's cross-entropy is divided by ln of its classes (paper Eq. 12: chance scores 1), a sequence task's not."""
        return self.loss_unit or (SEQUENCE_LOSS_UNIT if self.is_sequence else GRID_LOSS_UNIT)

    @property
    def whole_grid(self) -> bool:
        """A grid task whose samples are all p^2 inputs (not div's): the figures over the grid need every input."""
        return self.family == GRID and self.sample is None

    def seq_len(self, n_digits: int) -> int:
        """Input tokens of one sample: 3 for a grid task."""
        return self.length(n_digits) if self.is_sequence else 3

    def grid_mask(self, p: int) -> np.ndarray | None:
        """(p^2,) bool over the grid in grid order (row i: n = x0 + x1*p = i): which inputs are samples; None: all."""
        if self.sample is None:
            return None
        x1, x0 = np.divmod(np.arange(p * p, dtype=np.int64), p)
        return self.sample(x0, x1, p)

    def n_samples(self, t: TaskConfig) -> int:
        """Distinct samples there are: grid inputs with a label, or sequences of `t.n_digits`-digit operands."""
        if self.is_sequence:
            return 10 ** (self.operands * t.n_digits)
        mask = self.grid_mask(t.p)
        return t.p * t.p if mask is None else int(mask.sum())

    def held_out(self, n_valid: int) -> int:
        """Sequences that `n_valid` held-out ones keep out of training (addition: a+b and b+a)."""
        return 2 * n_valid if self.commutative else n_valid

    def loss_floor(self, n_digits: int) -> float:
        """Population loss of a model that predicts every deterministic token exactly: the unpredictable positions
        (operand digits after the first, uniform over 10) over all target positions."""
        return self.unpredictable(n_digits) * math.log(10) / self.length(n_digits)


# ---------------------------------------------------------------- grid tasks (nanda, miiii, sub, mul, div)


def grid_labels(name: str, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Targets of the task's samples in grid order (all p^2 inputs, row i: n = i = x0 + x1*p, but for a task that
    leaves some out: div has no x1 = 0) and the classes of each slot. miiii: one slot per prime q < p."""
    spec = task_spec(name)
    x1, x0 = np.divmod(np.arange(p * p, dtype=np.int64), p)
    mask = spec.grid_mask(p)
    if mask is not None:
        x0, x1 = x0[mask], x1[mask]
    return spec.answer(x0, x1, p).astype(np.int32), spec.moduli(p)


def split_sizes(cfg: TaskConfig) -> tuple[int, int, int]:
    n = task_spec(cfg.name).n_samples(cfg)
    n_train = int(math.floor(cfg.train_frac * n))
    return n_train, cfg.valid_size, n - n_train - cfg.valid_size


def make_grid_task(cfg: TaskConfig) -> Task:
    spec = task_spec(cfg.name)
    x = grid_inputs(cfg.p, cfg.digit_order)
    mask = spec.grid_mask(cfg.p)
    x = x if mask is None else x[mask]
    y, moduli = grid_labels(cfg.name, cfg.p)
    on = np.ones(len(moduli), bool)  # the slots in the loss (all are measured)
    y, on = spec.variants[cfg.variant](cfg, y, on, moduli)
    perm = np.random.default_rng(cfg.split_seed).permutation(len(x))
    n_train, n_valid, _ = split_sizes(cfg)
    parts = np.split(perm, [n_train, n_train + n_valid])
    train, valid, test = (Split(x[i], y[i]) for i in parts)
    n_slots = len(moduli)
    # Paper Eq. 12: each task's CE divided by ln q so chance scores 1.0; the mean over the tasks switched on (the
    # original code) or, with loss_over_tasks "sum", their sum (the text)
    inv_ln = (1.0 / np.log(moduli)).astype(np.float32)
    loss_weight = np.where(on, inv_ln, 0.0).astype(np.float32) / (1 if cfg.loss_over_tasks == "sum" else on.sum())
    return Task(
        name=cfg.name,
        train=train,
        valid=valid,
        test=test if len(test.x) else None,
        d_vocab=cfg.p + 1,
        n_classes=moduli.astype(np.int32),
        loss_weight=loss_weight,
        groups=np.eye(n_slots, dtype=bool),
        group_loss=np.diag(inv_ln).astype(np.float32),
        task_names=spec.metric_names(cfg, moduli),
    )


# ---------------------------------------------------------------- sequence tasks (addition, reversal)


def make_sequence_task(cfg: TaskConfig) -> Task:
    spec = task_spec(cfg.name)
    n = cfg.n_digits
    answer_start = spec.answer_at(n)
    # Held-out set first (book seed 123), then the training set (seed 42) drawn without those operands,
    # an improvement over the book, whose test pairs can also appear in training.
    valid_ops = draw_distinct(np.random.default_rng(cfg.valid_seed), spec.operands, n, cfg.n_valid, set())
    held_out = {tuple(int(v) for v in r) for r in valid_ops}
    if spec.commutative:  # a+b and b+a are different sequences but the same fact: keep both out
        held_out |= {k[::-1] for k in held_out}
    train_ops = draw_distinct(np.random.default_rng(cfg.train_seed), spec.operands, cfg.train_digits or n,
                              cfg.n_train, held_out, mixed=cfg.mixed_lengths)
    if cfg.replay:
        hard = np.load(cfg.replay).astype(train_ops.dtype)
        hard = hard[[tuple(int(v) for v in r) not in held_out for r in hard]]
        train_ops = np.concatenate([train_ops] + [hard] * cfg.replay_copies)
    train_seq, valid_seq = spec.encode(train_ops, n), spec.encode(valid_ops, n)
    s = train_seq.shape[1] - 1
    groups = np.zeros((1, s), bool)
    groups[0, answer_start:] = True  # exact match over the answer digits and <EOS>
    # mean CE over every target position (book), or over the answer span alone (AdderBoard's trainers)
    weight = groups[0] / groups[0].sum() if spec.answer_loss else np.full(s, 1.0 / s)
    return Task(
        name=cfg.name,
        train=Split(train_seq[:, :-1], train_seq[:, 1:]),
        valid=Split(valid_seq[:, :-1], valid_seq[:, 1:]),
        test=None,
        d_vocab=spec.vocab,
        n_classes=np.full(s, spec.vocab, np.int32),
        loss_weight=weight.astype(np.float32),
        groups=groups,
        group_loss=weight[None].astype(np.float32),
        task_names=spec.metric_names(cfg, np.full(s, spec.vocab, np.int32)),
        answer_start=answer_start,
    )


def make_task(cfg: TaskConfig) -> Task:
    return make_sequence_task(cfg) if task_spec(cfg.name).is_sequence else make_grid_task(cfg)


def loss_floor(name: str, n_digits: int) -> float:
    """Population loss of a model that predicts every deterministic token exactly (`TaskSpec.loss_floor`).

    Only the operand digits after the first are unpredictable (uniform over 10): addition has 2n-1 of
    them over 3n+3 target positions, reversal n-1 over 2n+1 (`sequence_length`).
    """
    return task_spec(name).loss_floor(n_digits)


def sequence_length(name: str, n_digits: int) -> int:
    """Input tokens of a task's sample, which are also its target positions: `a+b=` and the sum ones-first on
    n + 1 digits (3n + 3), or the digits, `=` and the digits reversed (2n + 1); the closing <EOS> is only a target.
    3 for a grid task."""
    return task_spec(name).seq_len(n_digits)


def read_probe(name: str, text: str) -> np.ndarray:
    """A `record.probes` text -> its whole sequence (answer and <EOS> included), read in the form of task `name`,
    else of another sequence task (so a probe of the wrong task is read, and then found not to fit the run)."""
    s = text.replace(" ", "")
    own = task_spec(name)
    readers = [own] + [spec for spec in TASKS.values() if spec is not own]
    for spec in readers:
        if spec.probe is not None:
            try:
                return spec.probe(s)
            except ValueError:
                pass
    forms = " or ".join(spec.probe_form for spec in TASKS.values() if spec.probe is not None)
    raise ConfigError(f"record.probes: cannot read '{shown(text)}' (write {forms})")


# ---------------------------------------------------------------- the registry


def _masked(cfg: TaskConfig, y: np.ndarray, on: np.ndarray, moduli: np.ndarray):
    """miiii masked: q in {2, 3, 5, 7} out of the loss (still measured)."""
    return y, on & ~np.isin(moduli, [2, 3, 5, 7])


def _basis(cfg: TaskConfig, y: np.ndarray, on: np.ndarray, moduli: np.ndarray):
    """miiii basis: the labels of every task shuffled across samples with task.basis_seed: nothing to learn."""
    return y[np.random.default_rng(cfg.basis_seed).permutation(len(y))], on


def _mod_p(cfg: TaskConfig, moduli: np.ndarray) -> tuple[str, ...]:
    return (f"mod {cfg.p}",)


def _inverses(p: int) -> np.ndarray:
    """(p,) x^-1 mod p by Fermat (x^(p-2)), 0 at x = 0 (which has none)."""
    return np.array([pow(v, p - 2, p) if v else 0 for v in range(p)], np.int64)


_ONE_SLOT = lambda p: np.array([p], dtype=np.int32)  # one output slot of p classes

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    TaskSpec("nanda", GRID, "(x0 + x1) mod p (Nanda et al. 2023)", metric_names=_mod_p, nanda_progress=True,
             answer=lambda x0, x1, p: ((x0 + x1) % p)[:, None], moduli=_ONE_SLOT),
    TaskSpec("miiii", GRID, "n = x0 + x1*p mod every prime q < p, one task each (the paper)",
             metric_names=lambda cfg, moduli: tuple(f"q={q}" for q in moduli),
             variants={"none": _unchanged, "masked": _masked, "basis": _basis},
             loss_unit="cross-entropy / ln q", min_p=5,
             answer=lambda x0, x1, p: (x0 + x1 * p)[:, None] % primes_below(p), moduli=primes_below),
    TaskSpec("addition", SEQUENCE, "a + b = the sum written ones-first (the book)",
             metric_names=lambda cfg, _: (cfg.name,), exports_adder=True, max_digits=30, operands=2,
             encode=lambda r, n: encode_addition(r[:, 0], r[:, 1], n), length=lambda n: 3 * n + 3,
             answer_at=lambda n: 2 * n + 1, unpredictable=lambda n: 2 * n - 1, commutative=True,
             probe=addition_probe, probe_form="123+456", edge_cases=addition_cases,
             reads=lambda n: [[n - 1 - j, 2 * n - j] for j in range(n)]),
    # AdderBoard's format (the 62- to 200-parameter Qwen3-style entries): `0 a 0 0 b 0`, every number ones-first,
    # then the n + 1 sum digits; the loss reads the answer digits alone. n = 10: 24 prompt tokens, 11 answers.
    TaskSpec("board", SEQUENCE, "a + b in AdderBoard's format: digits only, 0 as separator, ones first",
             metric_names=lambda cfg, _: (cfg.name,), exports_adder=True, max_digits=30, operands=2,
             encode=lambda r, n: encode_board(r[:, 0], r[:, 1], n), length=lambda n: 3 * n + 4,
             answer_at=lambda n: 2 * n + 3, unpredictable=lambda n: 0, commutative=True,
             probe=board_probe, probe_form="123+456", edge_cases=board_cases,
             reads=lambda n: [[1 + j, n + 3 + j] for j in range(n)], vocab=10, answer_loss=True),
    TaskSpec("reversal", SEQUENCE, "the digits reversed (the book)",
             metric_names=lambda cfg, _: (cfg.name,), max_digits=30, operands=1,
             encode=lambda r, n: encode_reversal(digits(r[:, 0], n)), length=lambda n: 2 * n + 1,
             answer_at=lambda n: n, unpredictable=lambda n: n - 1,
             probe=reversal_probe, probe_form="12345", edge_cases=reversal_cases,
             reads=lambda n: [[n - 1 - j] for j in range(n)]),
    # Power et al. 2022's modular tasks on nanda's layout [x0, x1, p]
    TaskSpec("sub", GRID, "(x0 - x1) mod p (Power et al. 2022)", metric_names=_mod_p,
             answer=lambda x0, x1, p: ((x0 - x1) % p)[:, None], moduli=_ONE_SLOT),
    TaskSpec("mul", GRID, "(x0 * x1) mod p (Power et al. 2022)", metric_names=_mod_p,
             answer=lambda x0, x1, p: ((x0 * x1) % p)[:, None], moduli=_ONE_SLOT),
    TaskSpec("div", GRID, "x0 / x1 = x0 * x1^-1 mod p over x1 != 0: p(p - 1) samples (Power et al. 2022)",
             metric_names=_mod_p, answer=lambda x0, x1, p: ((x0 * _inverses(p)[x1]) % p)[:, None],
             moduli=_ONE_SLOT, sample=lambda x0, x1, p: x1 != 0),
)}
SEQUENCE_TASKS = tuple(name for name, spec in TASKS.items() if spec.is_sequence)
TASK_VARIANTS = tuple(dict.fromkeys(v for spec in TASKS.values() for v in spec.variants))  # none, masked, basis


MSE_LOSS_UNIT = "squared error on one-hot targets (mean over classes)"


def loss_unit(name: str, loss: str = "softmax") -> str:
    """The unit of every loss a run of task `name` with train.loss `loss` reports: the task's (TaskSpec.unit), or
    the squared error's for train.loss = mse."""
    return MSE_LOSS_UNIT if loss == "mse" else task_spec(name).unit


def task_spec(name: str) -> TaskSpec:
    """The registry's entry of task `name`; ConfigError naming the known tasks for any other name."""
    spec = TASKS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise ConfigError(f"unknown task '{shown(name)}'; choose one of: {', '.join(TASKS)}")
    return spec
