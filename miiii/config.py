"""Run configuration: frozen dataclasses, `--set key=value` overrides, and validation (the presets: presets.py).

One `RunConfig` says everything needed to rerun a run; it is written to `config.json`.
Task-dependent model sizes (vocabulary, context, heads, classes) are derived from the task,
never stored as class-level defaults (Nanda's `d_vocab = p + 1` default is the bug this avoids).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field, fields, replace

from miiii.errors import ConfigError, did_you_mean, shown
from miiii.tasks import SEQUENCE_TASKS, TASK_VARIANTS, TASKS, digit_positions, is_prime, sequence_length, task_spec

INITS = ("he", "original", "torch", "nanda")  # model.init
PRECISIONS = ("highest", "high", "default")  # jax.default_matmul_precision names (train.precision)


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


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 128
    n_heads: int = 4
    d_mlp: int = 0  # 0 means 4 * d_model
    n_layers: int = 1
    dropout: float = 0.0  # applied to the residual stream after attention and after the MLP (paper)
    layer_norm: bool = False  # pre-LN blocks and a final LN (book); the paper model has none
    causal: bool = False  # causal attention mask (book)
    mlp_bias: bool = False  # FFN biases (book: yes; paper: no; Nanda: yes)
    pos_embed: bool = True  # learned positional embedding (book ablation: off)
    tie_head: bool = False  # unembedding = token embedding transposed (book)
    readout: str = "last"  # last: logits of the last position, one head per task (paper); all: every position (book)
    # he (paper: N(0, 2 / fan_in)) | original (the original code: jax's truncated he_normal with its fan-in per
    # array) | torch (PyTorch defaults, the book) | nanda (randn / sqrt(d_model))
    init: str = "he"
    n_ctx: int = 0  # rows of W_pos; 0 = the task's input length. Book: max_seq_len 13, one more than it feeds

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def mlp_dim(self) -> int:
        return self.d_mlp or 4 * self.d_model


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    weight_decay: float = 1.0
    b1: float = 0.9
    b2: float = 0.98  # Nanda et al. 2023; paper Table 2
    warmup_steps: int = 10  # linear warm-up from 0 (Nanda: 10 steps)
    schedule: str = "constant"  # constant (after warm-up) | cosine (decay to 0 at the last step; book)
    # the warm-up's factor at step t is (t + warmup_first) / warmup_steps: 0 = optax's (the first step at lr 0),
    # 1 = PyTorch's LambdaLR as the book's loop is written (s + 1) / warmup (the first step at lr / warmup_steps)
    warmup_first: int = 0
    clip_norm: float = 0.0  # global-norm clipping before the optimizer; 0 = off (book: 1.0)
    grokfast: str = "none"  # none | ema | ma (Lee et al. 2024)
    alpha: float = 0.98  # grokfast EMA momentum
    lamb: float = 2.0  # grokfast amplification; the miiii paper uses 0.5
    window: int = 100  # grokfast MA window
    ema_init: str = "first"  # first: EMA starts at the first gradient (reference) | zeros (original miiii code)


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 40_000
    batch_size: int = 0  # 0 = full batch (paper); otherwise minibatches drawn per epoch without replacement
    eval_every: int = 1  # validation metrics every k steps (NaN in between)
    chunk: int = 500  # steps per jitted lax.scan call; the progress bar moves once a chunk
    seed: int = 0  # parameter init, dropout and minibatch order
    # the n_train % batch_size samples an epoch's full batches leave: drop = they wait for a later epoch (97 batches
    # of 512 on the book's 50,000 pairs); keep = one last, smaller batch, as PyTorch's DataLoader (98 batches)
    last_batch: str = "drop"
    # float32 matmul precision inside every jitted function: highest = true float32 (the paper and book presets);
    # high = TF32 / 3-pass bf16, default = the backend's fastest (TF32 on recent NVIDIA GPUs, bf16 on TPUs).
    # CPUs compute float32 whatever is asked, so this changes nothing there.
    precision: str = "highest"


@dataclass(frozen=True)
class RecordConfig:
    """What is recorded every `every` steps, in eval mode, into run_dir/acts/ (see miiii/record.py).

    Names follow TransformerLens; `--set record.acts=a,b` takes a comma-separated list, neurons also `a:b`.
    """

    acts: tuple[str, ...] = ()  # activations by name, e.g. blocks.0.mlp.hook_post, blocks.0.attn.hook_pattern
    params: tuple[str, ...] = ()  # parameters by name, e.g. W_E, W_pos, blocks.0.attn.W_Q
    inputs: str = "grid"  # grid (all p^2, row i = n) | grid:K (x0, x1 < K) | probes | valid:N (first N valid)
    probes: tuple[str, ...] = ()  # inputs="probes": e.g. 123+456 (addition), 12345 (reversal)
    positions: str = "last"  # last | all (sequence positions of activations that have them)
    neurons: tuple[int, ...] = ()  # MLP neuron indices kept (empty = all)
    every: int = 1  # activations every k steps (steps 0, k, 2k, ... and the last step if a multiple of k)
    # > 0: activations at step 0 and ~log steps spread log-uniformly over the run instead (cadence.log_steps: every
    # step early on, sparser later, for curves read on a log step axis); replaces `every`
    log: int = 0
    params_every: int = 1  # parameters every k steps
    dtype: str = "float16"  # on disk: float16 | float32


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 1000  # a checkpoint at the first chunk end at or after each multiple of this step count
    keep: int = 3  # newest checkpoints kept (older ones are deleted); >= 2 so a damaged one has a fallback
    # about this many more kept for good at log-spaced steps (checkpoint.log_steps: step 0, then 1 ... steps spread
    # log-uniformly), so `run.params_at(step)` is exact before, during and after grokking; 0 = off
    keep_log: int = 0


@dataclass(frozen=True)
class RunConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    ckpt: CheckpointConfig = field(default_factory=CheckpointConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        sections = {f.name: f.type for f in fields(cls)}
        unknown = set(d) - set(sections)
        if unknown:
            raise ConfigError(f"unknown config section(s) {shown(sorted(unknown))}; known: {sorted(sections)}")
        kw = {}
        for f in fields(cls):
            sub = SECTIONS[f.name]
            vals = d.get(f.name, {})
            known = {g.name for g in fields(sub)}
            bad = set(vals) - known
            if bad:
                raise ConfigError(f"unknown key(s) {shown(sorted(bad))} in section '{f.name}'")
            vals = {k: tuple(v) if isinstance(v, list) else v for k, v in vals.items()}  # JSON lists -> tuples
            kw[f.name] = sub(**vals)
        return cls(**kw)


SECTIONS = {"task": TaskConfig, "model": ModelConfig, "optim": OptimConfig, "train": TrainConfig,
            "record": RecordConfig, "ckpt": CheckpointConfig}
ALIASES = {"wd": "optim.weight_decay", "lambda": "optim.lamb", "p": "task.p", "steps": "train.steps"}
# The hyper-parameters a sweep may vary within one program: scalars that travel as traced data, one value per vmapped
# member (the optim ones through optim.make_optimizer's `hp`, model.dropout as the model's dropout_rate).
SWEEPABLE = ("optim.lr", "optim.weight_decay", "optim.b1", "optim.b2", "optim.clip_norm", "optim.alpha", "optim.lamb",
             "model.dropout")


def sweepable(section: str) -> tuple[str, ...]:
    """The field names of `section` in SWEEPABLE."""
    return tuple(name for sec, _, name in (k.partition(".") for k in SWEEPABLE) if sec == section)


# ---------------------------------------------------------------- overrides


def set_fields(cfg: RunConfig, **sections) -> RunConfig:
    """`cfg` with fields of its sections replaced: `set_fields(cfg, task=dict(p=71), train=dict(steps=5000))`."""
    return replace(cfg, **{k: replace(getattr(cfg, k), **v) for k, v in sections.items()})


def _leaf_index() -> dict[str, list[str]]:
    index: dict[str, list[str]] = {}
    for sec, typ in SECTIONS.items():
        for f in fields(typ):
            index.setdefault(f.name, []).append(f"{sec}.{f.name}")
    return index


def _all_keys() -> list[str]:
    """Every key `--set` takes: section.field, each field name, and the aliases."""
    return [*(p for paths in _leaf_index().values() for p in paths), *_leaf_index(), *ALIASES]


def resolve_key(key: str) -> tuple[str, str]:
    """`model.d_model`, or a field name that is unique across sections (`d_model`, `lr`), or an alias."""
    key = ALIASES.get(key, key)
    if "." in key:
        sec, _, name = key.partition(".")
        if sec not in SECTIONS or name not in {f.name for f in fields(SECTIONS[sec])}:
            raise ConfigError(f"unknown config key '{shown(key)}'{did_you_mean(key, _all_keys())}; see "
                              "`python -m miiii presets --keys` for all keys")
        return sec, name
    paths = _leaf_index().get(key, [])
    if not paths:
        raise ConfigError(f"unknown config key '{shown(key)}'{did_you_mean(key, _all_keys())}; see "
                          "`python -m miiii presets --keys` for all keys")
    if len(paths) > 1:
        raise ConfigError(f"config key '{shown(key)}' is ambiguous: write one of {', '.join(paths)}")
    sec, _, name = paths[0].partition(".")
    return sec, name


def parse_value(sec: str, name: str, text: str):
    typ = {f.name: f.type for f in fields(SECTIONS[sec])}[name]
    typ = typing.get_type_hints(SECTIONS[sec])[name] if isinstance(typ, str) else typ
    if isinstance(typ, types.UnionType):
        typ = next(t for t in typ.__args__ if t is not type(None))
    if typing.get_origin(typ) is tuple:
        return _parse_tuple(f"{sec}.{name}", typing.get_args(typ)[0], text)
    try:
        if typ is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if typ is int:
            return int(text)
        if typ is float:
            return float(text)
        return str(text)
    except ValueError:
        raise ConfigError(f"{sec}.{name} takes a {typ.__name__}, not '{shown(text)}'") from None


MAX_RANGE = 2**20  # values an a:b range of --set may hold (MLP neurons: this model's widths are far below)


def _parse_tuple(key: str, elem: type, text: str) -> tuple:
    """Comma-separated values; for ints also `a:b` ranges (`0:4,9` -> 0, 1, 2, 3, 9). Empty text -> ()."""
    out: list = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            lo, colon, hi = part.partition(":")
            span = range(int(lo), int(hi)) if elem is int and colon else None
            value = None if span is not None else elem(part)
        except ValueError:
            raise ConfigError(f"{key} takes comma-separated {elem.__name__}s, not '{shown(text)}'") from None
        if span is None:
            out.append(value)
        elif len(span) > MAX_RANGE:  # checked before a list of them is built
            raise ConfigError(f"{key}: the range {shown(part)} holds {len(span):,} values, more than {MAX_RANGE:,}")
        else:
            out.extend(span)
    return tuple(out)


def apply_overrides(cfg: RunConfig, assignments: list[str]) -> RunConfig:
    """Apply `key=value` strings (the CLI's `--set`), each checked against the field's type."""
    for a in assignments:
        key, eq, text = a.partition("=")
        if not eq or not key:
            raise ConfigError(f"--set takes key=value, got '{shown(a)}'")
        sec, name = resolve_key(key.strip())
        cfg = set_fields(cfg, **{sec: {name: parse_value(sec, name, text.strip())}})
    return cfg


# ---------------------------------------------------------------- validation


INT32 = 2**31  # the step counter, scan lengths and XLA's indices are int32
SEED_FIELDS = ("task.split_seed", "task.train_seed", "task.valid_seed", "task.basis_seed", "train.seed")


def check_ranges(cfg: RunConfig) -> None:
    """Every integer within int32 (a larger one passes the checks below, then overflows inside a jitted step after
    the run directory is written); seeds in [0, 2**32), where jax and numpy take them (jax.random.key wraps 2**32
    silently to seed 0, numpy refuses negative seeds)."""
    for sec, typ in SECTIONS.items():
        for f in fields(typ):
            v, key = getattr(getattr(cfg, sec), f.name), f"{sec}.{f.name}"
            if not isinstance(v, int) or isinstance(v, bool):
                continue
            if key in SEED_FIELDS and not 0 <= v < 2**32:
                raise ConfigError(f"{key} = {shown(v)} must lie in [0, 2**32)")
            if key not in SEED_FIELDS and not -INT32 < v < INT32:
                raise ConfigError(f"{key} = {shown(v)} is too large: it must be below 2**31 = {INT32:,}")


GiB = 1 << 30


def host_memory() -> int:
    """Bytes of memory on this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_floor(cfg: RunConfig) -> tuple[int, dict[str, int]]:
    """Bytes one run needs at the least, by what needs them, from the config alone: the parameters with AdamW's two
    moments, the gradient and grokfast's state; the per-step metrics the host keeps for the whole run; the datasets;
    one MLP activation of a training batch. A floor, to refuse sizes no machine holds before anything is built
    (recordings are checked exactly against --record-budget once the model's shapes are known)."""
    t, m, o, tr = cfg.task, cfg.model, cfg.optim, cfg.train
    if t.is_sequence:
        vocab = out = 14  # tasks.BOOK_VOCAB
        n_ctx, tasks, samples = m.n_ctx or t.seq_len, 1, t.n_train + t.n_valid
        n_train, slots = t.n_train, t.seq_len
    else:
        spec = task_spec(t.name)
        qs = [int(q) for q in spec.moduli(t.p)]
        vocab, n_ctx, out, tasks, samples = t.p + 1, 3, sum(qs), len(qs), spec.n_samples(t)
        n_train, slots = int(t.train_frac * samples), len(qs)
    d = m.d_model
    params = (vocab + n_ctx) * d + m.n_layers * (4 * d * d + 2 * d * m.mlp_dim) + d * out
    extra = {"none": 0, "ema": 1, "ma": o.window}.get(o.grokfast, 0)
    batch = min(tr.batch_size or n_train, n_train)
    return params * 4 * (4 + extra), {
        "metrics": tr.steps * (3 + 4 * tasks) * 4, "data": samples * (n_ctx + slots) * 4,
        "activations": batch * n_ctx * m.mlp_dim * 4}


def check_memory(cfg: RunConfig, members: int = 1) -> None:
    """Refuse a run (or `members` runs of a sweep, which share the data) that cannot fit in this machine's memory."""
    state, rest = memory_floor(cfg)
    need = {"parameters and optimizer state": state * members, "per-step metrics": rest["metrics"] * members,
            "datasets": rest["data"], "activations": rest["activations"] * members}
    total, have = sum(need.values()), host_memory()
    if total > have:
        parts = ", ".join(f"{k} {v / GiB:,.1f} GiB" for k, v in need.items() if v > 0.01 * total)
        raise ConfigError(
            f"{'this run needs' if members == 1 else f'these {members:,} runs need'} at least {total / GiB:,.1f} GiB "
            f"of memory ({parts}), more than this machine's {have / GiB:,.1f} GiB; lower model.d_model, "
            "model.d_mlp, model.n_layers, optim.window (grokfast ma), train.steps, train.batch_size, the task's "
            "size" + (" or the number of seeds and grid points" if members > 1 else ""))


def validate(cfg: RunConfig, host: bool = True) -> RunConfig:
    """Reject configs that cannot run, with a message that names the fix. `host` False leaves out the one check that
    depends on this machine (its memory), so a run written on a larger one still reads back (rundir.read_config)."""
    t, m, o, tr = cfg.task, cfg.model, cfg.optim, cfg.train
    check_ranges(cfg)
    spec = task_spec(t.name)  # ConfigError for a name the registry does not know
    if t.variant not in TASK_VARIANTS:
        raise ConfigError(f"unknown task variant '{shown(t.variant)}'; choose one of: {', '.join(TASK_VARIANTS)}")
    if t.variant not in spec.variants:
        having = [name for name, s in TASKS.items() if t.variant in s.variants]
        raise ConfigError(f"variant '{shown(t.variant)}' exists only for the {' and '.join(having)} task"
                          + "s" * (len(having) > 1))
    if t.digit_order not in ("low", "high"):
        raise ConfigError(f"task.digit_order = '{shown(t.digit_order)}': choose low ([x0, x1, p]) or high "
                          "([x1, x0, p])")
    if t.loss_over_tasks not in ("mean", "sum"):
        raise ConfigError(f"task.loss_over_tasks = '{shown(t.loss_over_tasks)}': choose mean or sum")
    if not spec.is_sequence:
        least = spec.min_p
        if t.p > 1000:  # before the primality test, whose trial division would take years at p = 2**61 - 1
            raise ConfigError(f"task.p = {t.p} gives {t.p**2:,} samples; p above 1000 is not supported")
        if t.p < least or not is_prime(t.p):
            raise ConfigError(f"task.p = {t.p}: {t.name} needs a prime p >= {least} (e.g. 113, 59, 37, 17)")
        if not (0 < t.train_frac < 1) or math.isnan(t.train_frac):
            raise ConfigError(f"task.train_frac = {t.train_frac} must lie strictly between 0 and 1")
        n = spec.n_samples(t)
        n_train = int(t.train_frac * n)
        if n_train < 1:
            raise ConfigError(f"task.train_frac = {t.train_frac} leaves no training sample out of {n}")
        if t.valid_size < 1 or n_train + t.valid_size > n:
            raise ConfigError(
                f"split impossible: {n_train} train + {t.valid_size} validation > {n} samples for p = {t.p}; "
                f"lower task.valid_size (at most {n - n_train}) or task.train_frac"
            )
    else:
        if t.n_digits < 1 or t.n_digits > spec.max_digits:
            raise ConfigError(f"task.n_digits = {t.n_digits} must be between 1 and {spec.max_digits}")
        space = spec.n_samples(t)
        if t.n_train < 1 or t.n_valid < 1:
            raise ConfigError("task.n_train and task.n_valid must be at least 1")
        held_out = spec.held_out(t.n_valid)  # addition: a+b and b+a both stay out of training
        if t.n_train + held_out > space:
            raise ConfigError(
                f"split impossible: {t.n_train} training + {held_out} held-out sequences exceed the {space} that "
                "exist "
                f"for n_digits = {t.n_digits}; lower task.n_train / task.n_valid"
            )
    if m.d_model < 1 or m.n_heads < 1 or m.d_model % m.n_heads:
        raise ConfigError(f"model.d_model = {m.d_model} must be a positive multiple of model.n_heads = {m.n_heads}")
    if m.n_layers < 1 or m.d_mlp < 0:
        raise ConfigError("model.n_layers must be >= 1 and model.d_mlp >= 0")
    if not (0 <= m.dropout < 1) or math.isnan(m.dropout):
        raise ConfigError(f"model.dropout = {m.dropout} must lie in [0, 1)")
    if m.readout not in ("last", "all"):
        raise ConfigError(f"model.readout = '{shown(m.readout)}': choose last or all")
    if m.init not in INITS:
        raise ConfigError(f"model.init = '{shown(m.init)}': choose one of {', '.join(INITS)}")
    seq_task = t.is_sequence
    if seq_task and m.n_ctx:
        fed = t.seq_len
        if m.n_ctx < fed:
            raise ConfigError(f"model.n_ctx = {m.n_ctx} is shorter than the {fed} input tokens; set 0 or >= {fed}")
    elif m.n_ctx:
        raise ConfigError(f"model.n_ctx is a setting of the sequence tasks ({', '.join(SEQUENCE_TASKS)}); leave it 0")
    if seq_task != (m.readout == "all"):
        want = "all" if seq_task else "last"
        raise ConfigError(f"task {t.name} reads its answer from {want} position(s): set model.readout={want}")
    if m.tie_head and not seq_task:
        raise ConfigError(f"model.tie_head needs a task whose outputs are tokens ({', '.join(SEQUENCE_TASKS)})")
    for k in ("lr", "weight_decay", "clip_norm", "lamb"):
        v = getattr(o, k)
        if math.isnan(v) or v < 0:
            raise ConfigError(f"optim.{k} = {v} must be a non-negative number")
    if not (0 <= o.b1 < 1 and 0 <= o.b2 < 1 and 0 <= o.alpha < 1):
        raise ConfigError("optim.b1, optim.b2 and optim.alpha must lie in [0, 1)")
    if o.schedule not in ("constant", "cosine"):
        raise ConfigError(f"optim.schedule = '{shown(o.schedule)}': choose constant or cosine")
    if o.grokfast not in ("none", "ema", "ma"):
        raise ConfigError(f"optim.grokfast = '{shown(o.grokfast)}': choose none, ema or ma")
    if o.ema_init not in ("first", "zeros"):
        raise ConfigError(f"optim.ema_init = '{shown(o.ema_init)}': choose first or zeros")
    if o.warmup_first not in (0, 1):
        raise ConfigError(f"optim.warmup_first = {o.warmup_first}: choose 0 (optax's warm-up) or 1 (LambdaLR's)")
    if o.window < 1 or o.warmup_steps < 0:
        raise ConfigError("optim.window must be >= 1 and optim.warmup_steps >= 0")
    if tr.last_batch not in ("drop", "keep"):
        raise ConfigError(f"train.last_batch = '{shown(tr.last_batch)}': choose drop or keep")
    if tr.precision not in PRECISIONS:
        raise ConfigError(f"train.precision = '{shown(tr.precision)}': choose {', '.join(PRECISIONS)}")
    if tr.steps < 1:
        raise ConfigError(f"train.steps = {tr.steps} must be at least 1")
    if tr.chunk < 1 or tr.eval_every < 1 or tr.batch_size < 0:
        raise ConfigError("train.chunk and train.eval_every must be >= 1, train.batch_size >= 0")
    validate_record(cfg)
    if host:
        check_memory(cfg)
    return cfg


def validate_record(cfg: RunConfig) -> None:
    """The recording and checkpoint settings that can be checked without building the model (see record.py)."""
    r, c = cfg.record, cfg.ckpt
    for k in ("every", "params_every"):
        v = getattr(r, k)
        if v < 1:
            raise ConfigError(f"record.{k} = {v} must be >= 1")
    if not 0 <= r.log <= 1_000_000:
        raise ConfigError(f"record.log = {r.log} must lie in [0, 1000000]")
    if r.positions not in ("last", "all"):
        raise ConfigError(f"record.positions = '{shown(r.positions)}': choose last or all")
    if r.dtype not in ("float16", "float32"):
        raise ConfigError(f"record.dtype = '{shown(r.dtype)}': choose float16 or float32")
    if any(n < 0 for n in r.neurons) or len(set(r.neurons)) != len(r.neurons):
        raise ConfigError(f"record.neurons must be distinct non-negative indices, got {shown(list(r.neurons)[:8])}")
    if c.every < 1 or c.keep < 2:
        raise ConfigError(f"ckpt.every = {c.every} must be >= 1 and ckpt.keep = {c.keep} >= 2")
    if not 0 <= c.keep_log <= 1000:
        raise ConfigError(f"ckpt.keep_log = {c.keep_log} must lie in [0, 1000]")
