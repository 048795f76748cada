"""Run configuration: frozen dataclasses, `--set key=value` overrides, and validation (the presets: presets.py).

One `RunConfig` says everything needed to rerun a run; it is written to `config.json`.
Task-dependent model sizes (vocabulary, context, heads, classes) are derived from the task,
never stored as class-level defaults (Nanda's `d_vocab = p + 1` default is the bug this avoids).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field, fields, replace

from miiii.errors import ConfigError, did_you_mean, shown
from miiii.tasks import TaskConfig

INITS = ("he", "original", "torch", "nanda", "qwen")  # model.init
PRECISIONS = ("highest", "high", "default")  # jax.default_matmul_precision names (train.precision)
LOSSES = ("softmax", "stablemax", "mse")  # train.loss
LOSS_DTYPES = ("float16", "float32", "float64")  # train.loss_dtype


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
    # array) | torch (PyTorch defaults, the book) | nanda (randn / sqrt(d_model)) | qwen (N(0, 0.02) for every matrix
    # and table, norms at 1: HF's initializer_range, the AdderBoard Qwen3 entries' nn.init.normal_(std=0.02))
    init: str = "he"
    n_ctx: int = 0  # rows of W_pos; 0 = the task's input length. Book: max_seq_len 13, one more than it feeds
    # The small-decoder options (AdderBoard's Qwen3-style adders; every one off by default, the paper's and the
    # book's models untouched): a head size independent of d_model, grouped key/value heads, rotary positions
    # (no parameters), RMSNorm in place of LayerNorm, RMSNorm of each head's queries and keys, a SwiGLU MLP, and a
    # 3-parameter circular-arc token embedding [A cos(s + k v), A sin(s + k v), 0, ...].
    head_dim: int = 0  # 0 = d_model // n_heads
    n_kv_heads: int = 0  # key/value heads, each shared by n_heads / n_kv_heads query heads; 0 = n_heads
    rope_theta: float = 0.0  # rotary position embedding of queries and keys with this base (Qwen's halves); 0 = off
    norm: str = "layer"  # layer | rms: the norm model.layer_norm puts in the blocks and before the head
    qk_norm: bool = False  # RMSNorm over each head's queries and keys (Qwen3), before the rotation
    mlp_act: str = "relu"  # relu | swiglu: (silu(x W_gate) * x W_in) W_out, no biases
    embed: str = "table"  # table: a learned (vocab, d) W_E | arc: W_E from 3 parameters (amplitude, start, stride)
    # embed=arc: the (amplitude, start, stride) it starts from; () = 1, 0, 2 pi / vocab (evenly round the circle).
    # tbukic's 62-parameter entry starts at 2.5, -1.2, 0.29: an open arc, 0 and 9 at its two ends
    arc_init: tuple[float, ...] = ()
    norm_eps: float = 1e-5  # of every norm (the book's LayerNorm: 1e-5; Qwen3's RMSNorm: 1e-6)
    # Weight tying inside a block, each "FOLLOWER=MASTER" or "FOLLOWER=F(MASTER)" with F one of T (transpose),
    # scale (a learned scalar times), rot (the last axis' halves turned by a learned angle), rot1 (the first plane
    # of the halves alone turned, in every head: with rotary positions, their fastest plane; tbukic's 41-parameter K = Q
    # with Q turned there, one head), rotT (rot of T), Trot (T of rot: the master's last axis turned, then
    # transposed; tbukic's rotated transpose of up, as down): e.g.
    # ("attn.W_V=attn.W_K", "attn.W_O=T(attn.W_Q)"). A follower is no parameter: it is computed in the forward pass
    # and the unique count (count_params) holds the master once and each transform's one scalar.
    ties: tuple[str, ...] = ()
    # every turned tie's initial angle (tbukic's entries start theirs at 0.1, his 41's at -0.5); model.init_scale
    # multiplies it too, as every initial parameter
    tie_angle: float = 0.0
    # Norms shared by name: each group "ln1+ln2+ln_final" (names in NORM_NAMES; every block's) is one learned scale
    # (and LayerNorm's bias) that all its norms use, counted once; the norms of a group must have one size and kind
    norm_groups: tuple[str, ...] = ()
    # Pinned entries: each "WEIGHT[INDEX]=VALUE" holds those entries of a parameter at a constant, learned by no step
    # and counted by no count: the array's other entries are its parameter (WEIGHT_free, flat). WEIGHT is W_E_arc (the
    # arc's amplitude, start, stride), shared_norm_K.scale (model.norm_groups' K-th group) or attn.W_* / mlp.W_* (a
    # master of model.ties, in every block); INDEX is integers or ':' per axis (missing axes: all), e.g.
    # ("W_E_arc[0]=40", "mlp.W_in[2]=10"). A model with a continuous symmetry fixes its gauge this way, losing no
    # function (experiments/adderboard: the 41's six)
    pins: tuple[str, ...] = ()
    # The grokking disputes' knobs (off at their defaults): a fixed output scale multiplying the logits (Kumar et al.'s
    # alpha; a fixed temperature 1 / T), and a factor on every initial parameter (Omnigrok's initial weight norm)
    logit_scale: float = 1.0
    init_scale: float = 1.0
    ln_position: str = "pre"  # pre | post: where model.layer_norm's norms sit (post: after each residual sum, no final)

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def mlp_dim(self) -> int:
        return self.d_mlp or 4 * self.d_model


NORM_NAMES = ("ln1", "ln2", "ln_final", "q_norm", "k_norm")  # every norm the family has, by its module's name


def parse_norm_groups(groups: tuple[str, ...]) -> dict[str, int]:
    """{norm name: its group's index}; ValueError naming the first group that is not two or more of NORM_NAMES, or a
    name given twice."""
    out: dict[str, int] = {}
    for k, group in enumerate(groups):
        names = group.split("+")
        if len(names) < 2 or any(n not in NORM_NAMES or n in out for n in names) or len(set(names)) < len(names):
            raise ValueError(f"model.norm_groups entry '{group}': join two or more of {', '.join(NORM_NAMES)} with "
                             "'+', each name in one group")
        out |= dict.fromkeys(names, k)
    return out


TURNED = ("rot", "rot1", "rotT", "Trot")  # the ties that turn by a learned angle (model.tie_angle starts it)
TRANSFORMS = ("T", "scale", *TURNED)  # every F of FOLLOWER=F(MASTER); the model, the export and the errors read these
TIE = re.compile(rf"^(attn|mlp)\.(\w+)=(?:({'|'.join(TRANSFORMS)})\((attn|mlp)\.(\w+)\)|(attn|mlp)\.(\w+))$")
TIED_WEIGHTS = {"attn": ("W_Q", "W_K", "W_V", "W_O"), "mlp": ("W_in", "W_out", "W_gate")}


def parse_ties(ties: tuple[str, ...]) -> dict[tuple[str, str], tuple[str, str]]:
    """{(module, follower): (transform, master)}; ValueError naming the first entry that is not a tie within one
    block module between two of its weights (no chains, each follower once)."""
    out = {}
    for entry in ties:
        m = TIE.match(entry)
        module, follower = (m.group(1), m.group(2)) if m else (None, None)
        transform, master_module, master = ((m.group(3), m.group(4), m.group(5)) if m and m.group(3) else
                                            ("", m.group(6), m.group(7)) if m else (None, None, None))
        known = TIED_WEIGHTS.get(module, ())
        if (not m or master_module != module or follower not in known or master not in known
                or follower == master or (module, follower) in out):
            raise ValueError(f"model.ties entry '{entry}': write FOLLOWER=MASTER or FOLLOWER=F(MASTER) with F in "
                             f"{', '.join(TRANSFORMS)}, both weights of one module "
                             f"(attn: {', '.join(TIED_WEIGHTS['attn'])}; mlp: {', '.join(TIED_WEIGHTS['mlp'])}), "
                             "each follower once")
        out[(module, follower)] = (transform, master)
    if any((mod, master) in out for (mod, _), (_, master) in out.items()):
        raise ValueError("model.ties: a master is itself a follower; tie each follower to an untied weight")
    return out


PIN = re.compile(r"^(W_E_arc|shared_norm_\d+\.scale|(?:attn|mlp)\.W_\w+)\[([0-9:, ]+)\]=(\S+)$")


def parse_pins(pins: tuple[str, ...]) -> dict[str, list[tuple[tuple, float]]]:
    """{weight: [(index, value)]} of model.pins, each index a tuple of ints and slice(None); ValueError naming the
    first entry that does not read."""
    out: dict[str, list] = {}
    for entry in pins:
        m = PIN.match(entry)
        try:
            index = tuple(slice(None) if i.strip() == ":" else int(i) for i in m.group(2).split(","))
            value = float(m.group(3))
            if not math.isfinite(value):
                raise ValueError
        except (AttributeError, ValueError):
            raise ValueError(f"model.pins entry '{entry}': write WEIGHT[INDEX]=VALUE, WEIGHT one of W_E_arc, "
                             "shared_norm_K.scale, attn.W_*, mlp.W_*, INDEX integers or ':' by commas, VALUE a "
                             "finite number") from None
        out.setdefault(m.group(1), []).append((index, value))
    return out


def pin_mask(weight: str, shape: tuple, pins: tuple[str, ...]):
    """(free, values) of `weight`'s model.pins: free the bool mask of its learned entries, values its constants (0 at
    the free entries); None when no pin names it. ValueError when an index does not fit the shape."""
    import numpy as np  # here: reading a config imports numpy only when it pins

    rules = parse_pins(pins).get(weight)
    if not rules:
        return None
    free, values = np.ones(shape, bool), np.zeros(shape, np.float32)
    for index, value in rules:
        try:
            taken = not free[index].all()
        except IndexError:
            shown_index = ", ".join(":" if isinstance(i, slice) else str(i) for i in index)
            raise ValueError(f"model.pins: {weight}[{shown_index}] is not an entry of its shape "
                             f"{tuple(shape)}") from None
        if taken:
            raise ValueError(f"model.pins: an entry of {weight} is pinned twice; pin each entry once")
        free[index], values[index] = False, value
    if not free.any():
        raise ValueError(f"model.pins: every entry of {weight} is pinned; leave one free, or tie it")
    return free, values


def pinnable(m) -> dict[str, tuple]:
    """{weight: shape} of every weight model.pins may name in this model: its arc, shared norm scales and the block
    weights it learns (a follower of model.ties is computed, not learned)."""
    H, G, d, e, k = m.n_heads, m.kv_heads, m.d_model, m.d_head, m.mlp_dim
    shapes = {"attn.W_Q": (H, d, e), "attn.W_K": (G, d, e), "attn.W_V": (G, d, e), "attn.W_O": (H, e, d),
              "mlp.W_in": (d, k), "mlp.W_out": (k, d)} | ({"mlp.W_gate": (d, k)} if m.mlp_act == "swiglu" else {})
    shapes |= {"W_E_arc": (3,)} if m.embed == "arc" else {}
    for i, group in enumerate(m.norm_groups):
        shapes[f"shared_norm_{i}.scale"] = (e if group.split("+")[0] in ("q_norm", "k_norm") else d,)
    for (module, follower) in parse_ties(m.ties):
        shapes.pop(f"{module}.{follower}", None)
    return shapes


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-3
    weight_decay: float = 1.0
    b1: float = 0.9
    b2: float = 0.98  # Nanda et al. 2023; paper Table 2
    warmup_steps: int = 10  # linear warm-up from 0 (Nanda: 10 steps)
    schedule: str = "constant"  # constant (after warm-up) | cosine (decay to 0 at the last step; book)
    final_lr_frac: float = 0.0  # cosine: where the decay ends, as a fraction of lr (AdderBoard's 1e-2 -> 1e-3: 0.1)
    # the warm-up's factor at step t is (t + warmup_first) / warmup_steps: 0 = optax's (the first step at lr 0),
    # 1 = PyTorch's LambdaLR as the book's loop is written (s + 1) / warmup (the first step at lr / warmup_steps)
    warmup_first: int = 0
    clip_norm: float = 0.0  # global-norm clipping before the optimizer; 0 = off (book: 1.0)
    grokfast: str = "none"  # none | ema | ma (Lee et al. 2024)
    alpha: float = 0.98  # grokfast EMA momentum
    lamb: float = 2.0  # grokfast amplification; the miiii paper uses 0.5
    window: int = 100  # grokfast MA window
    ema_init: str = "first"  # first: EMA starts at the first gradient (reference) | zeros (original miiii code)
    # adamw | muon: Muon (optax.contrib.muon) on the hidden matrices (attention W_Q, W_K, W_V, W_O; MLP W_in, W_out),
    # AdamW on the embeddings, the unembedding, biases and LayerNorms (optimizers.muon_dims)
    optimizer: str = "adamw"
    # Omnigrok's constrained norm: after every update the parameters are rescaled to this global L2 norm (all arrays
    # together); 0 = off
    fixed_norm: float = 0.0
    # Prieto et al. 2025's perpendicular gradient: each parameter array's update loses its component along the array,
    # then is rescaled to its own norm (miiii/orthograd.py); in the chain after grokfast, before the optimizer
    orthograd: bool = False


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 40_000
    # a phase of training: start from another run's final parameters ("RUN_DIR") or a kept step's ("RUN_DIR@STEP")
    # with this config's optimizer, schedule and data (its optimizer state starts fresh); "" = a fresh init. The
    # source's shapes must be this model's; --resume continues from this run's own checkpoints.
    init_from: str = ""
    # a recipe's first phase only (presets.PHASED, miiii/phases.py): > 0 = a screen, this phase's config trained for
    # `screen` seeds from train.seed at once (one vmapped sweep), the next phase continuing the member with the lowest
    # final training loss, with its seed; 0 = one run
    screen: int = 0
    # soft ties (miiii/soft_ties.py): model.ties' syntax, equal or T only, between two free weights, e.g.
    # ("mlp.W_gate=mlp.W_in",); the loss gains soft_tie_weight times the summed squared gap between each follower and
    # its master (transposed), so that a later phase can tie them for good (its train.init_from drops the follower)
    soft_ties: tuple[str, ...] = ()
    soft_tie_weight: float = 0.0
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
    # softmax | stablemax: cross-entropy over StableMax (Prieto et al. 2025): s(x) = x + 1 (x >= 0), 1 / (1 - x)
    # (x < 0) in place of exp (train.loss_and_metrics). Accuracy (argmax) is the same either way
    loss: str = "softmax"
    # float16 | float32 | float64: the dtype of the log-softmax / log-stablemax and the loss, and of the softmax the
    # softmax_collapse metric reads (Prieto et al.'s softmax_precision). float64 where the backend has it (a CPU or
    # GPU, not a TPU; scoped to the loss with jax.enable_x64); the model and the optimizer stay float32
    loss_dtype: str = "float32"


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


# Data a sweep may vary within one program: fields that change which samples a member trains and validates on but not
# the arrays' shapes, so the members' data stacks along the member axis (task.split_seed: the train/validation split).
DATA_SWEEPABLE = ("task.split_seed",)


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
    """Comma-separated values (a comma inside [...] is a value's: model.pins' indices); for ints also `a:b` ranges
    (`0:4,9` -> 0, 1, 2, 3, 9). Empty text -> ()."""
    out: list = []
    for part in (p.strip() for p in re.split(r",(?![^\[]*\])", text)):
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
