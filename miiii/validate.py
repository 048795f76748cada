"""Validation: every config a run cannot start from is refused here, before anything is built or written, with one
message that names the fix (the CLI prints it and exits with status 2). A task's own rules come from its registry
entry (tasks.py); the recording's, once the model's shapes are known, from record.plan.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields, replace

from miiii.config import (
    INITS,
    LOSS_DTYPES,
    LOSSES,
    PRECISIONS,
    SECTIONS,
    TURNED,
    RunConfig,
    parse_norm_groups,
    parse_pins,
    parse_ties,
    pin_mask,
    pinnable,
)
from miiii.errors import ConfigError, did_you_mean, shown
from miiii.optimizers import OPTIMIZERS
from miiii.soft_ties import parse_soft
from miiii.tasks import SEQUENCE_TASKS, TASK_VARIANTS, TASKS, task_spec
from miiii.tokens import is_prime

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


RESERVED_SEEDS = (2025,)  # verify.py draws its 10,000 random pairs with this seed: no hard pairs come from it


def parse_hard(spec: str) -> tuple[int, int]:
    """task.replay_hard's "PAIRS@SEED" -> (pairs, seed), or a ConfigError that says the form."""
    n, at, seed = spec.partition("@")
    try:
        pairs, s = int(n), int(seed)
    except ValueError:
        pairs = s = None
    if not at or pairs is None or pairs < 1:
        raise ConfigError(f"task.replay_hard = '{spec}': want PAIRS@SEED, e.g. 100000@1 (the pairs the phase before "
                          "decodes wrong among 100,000 drawn with seed 1)")
    return pairs, s


def check_replay_hard(t) -> None:
    """task.replay_hard: PAIRS@SEED with a seed of the trainer's and a share in (0, 1), resolved into task.replay by the
    recipe in phases that runs it (train_phases writes the file before the phase trains)."""
    _, seed = parse_hard(t.replay_hard)
    if seed in (*RESERVED_SEEDS, t.valid_seed):
        raise ConfigError(f"task.replay_hard = '{t.replay_hard}': seed {seed} is the verifier's or the held-out set's; "
                          "hard examples come from other seeds")
    if not 0 < t.replay_share < 1:
        raise ConfigError(f"task.replay_share = {t.replay_share} must lie strictly between 0 and 1")
    if not t.replay:
        raise ConfigError(f"task.replay_hard = '{t.replay_hard}' is a later phase of a recipe in phases (presets.PHASED"
                          "), which finds the pairs before it trains; for one run, find them with python -m "
                          "experiments.adderboard.hard and give task.replay and task.replay_copies")


def check_replay(t, spec) -> None:
    """task.replay: a readable .npy of (N, operands) non-negative integers below 10**n_digits."""
    import numpy as np

    try:
        rows = np.load(t.replay, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"task.replay = {t.replay}: not a readable .npy file ({e})") from None
    if (rows.ndim != 2 or rows.shape[1] != spec.operands or rows.dtype.kind not in "iu" or len(rows) == 0
            or rows.min() < 0 or rows.max() >= 10**t.n_digits):
        raise ConfigError(f"task.replay = {t.replay}: want (N, {spec.operands}) integers in [0, 10**{t.n_digits}), "
                          f"got {rows.dtype} {rows.shape}")
    if t.replay_copies < 1:
        raise ConfigError(f"task.replay_copies = {t.replay_copies} must be at least 1")


def memory_floor(cfg: RunConfig) -> tuple[int, dict[str, int]]:
    """Bytes one run needs at the least, by what needs them, from the config alone: the parameters with AdamW's two
    moments (Muon's one on the hidden matrices), the gradient and grokfast's state; the per-step metrics the host
    keeps for the whole run; the datasets; one MLP activation of a training batch. A floor, to refuse sizes no machine
    holds before anything is built (recordings are checked exactly against --record-budget once the model's shapes
    are known)."""
    t, m, o, tr = cfg.task, cfg.model, cfg.optim, cfg.train
    if t.is_sequence:
        vocab = out = task_spec(t.name).vocab
        n_ctx, tasks, samples = m.n_ctx or t.seq_len, 1, t.n_train + t.n_valid
        n_train, slots = t.n_train, t.seq_len
    else:
        spec = task_spec(t.name)
        qs = [int(q) for q in spec.moduli(t.p)]
        vocab, n_ctx, out, tasks, samples = t.p + 1, 3, sum(qs), len(qs), spec.n_samples(t)
        n_train, slots = int(t.train_frac * samples), len(qs)
    d = m.d_model
    hidden = m.n_layers * (4 * d * d + 2 * d * m.mlp_dim)
    params = (vocab + n_ctx) * d + hidden + d * out
    extra = {"none": 0, "ema": 1, "ma": o.window}.get(o.grokfast, 0)
    batch = min(tr.batch_size or n_train, n_train)
    # AdamW keeps two moments per parameter; an optimizer with fewer on the hidden matrices (Muon: one) saves the rest
    saved = hidden * (2 - OPTIMIZERS[o.optimizer].moments) if o.optimizer in OPTIMIZERS else 0
    return (params * (4 + extra) - saved) * 4, {
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


def check_norm_groups(m) -> None:
    """model.norm_groups: each name a norm this model has, each group's norms of one size and kind (ValueError)."""
    have = {"ln1": m.layer_norm, "ln2": m.layer_norm, "ln_final": m.layer_norm and m.ln_position != "post",
            "q_norm": m.qk_norm, "k_norm": m.qk_norm}
    size = {n: m.d_head if n in ("q_norm", "k_norm") else m.d_model for n in have}
    kind = {n: "rms" if n in ("q_norm", "k_norm") else m.norm for n in have}
    groups = parse_norm_groups(m.norm_groups)
    for k, group in enumerate(m.norm_groups):
        names = [n for n, g in groups.items() if g == k]
        if not all(have[n] for n in names) or len({size[n] for n in names}) > 1 or len({kind[n] for n in names}) > 1:
            raise ValueError(f"model.norm_groups entry '{group}': every norm must be in this model (ln1, ln2, "
                             "ln_final with model.layer_norm, ln_final not with ln_position post, q_norm and k_norm "
                             "with model.qk_norm) and of one size and kind (ln*: model.d_model, model.norm; q_norm, "
                             "k_norm: the head size, RMSNorm)")


def check_pins(m) -> None:
    """model.pins: each names a weight this model learns and entries of its shape (ValueError)."""
    shapes = pinnable(m)
    for weight in parse_pins(m.pins):
        if weight not in shapes:
            raise ValueError(f"model.pins: this model learns no {weight}; pin one of {', '.join(shapes)}")
        pin_mask(weight, shapes[weight], m.pins)


def validate(cfg: RunConfig, host: bool = True) -> RunConfig:
    """Reject configs that cannot run, with a message that names the fix. `host` False leaves out the checks that
    depend on this machine (its memory, and the replay file a config names by its path), so a run written on a larger
    machine or in another folder still reads back (rundir.read_config)."""
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
        if not 0 <= t.train_digits <= t.n_digits:
            raise ConfigError(f"task.train_digits = {t.train_digits} must lie in 0 .. task.n_digits = {t.n_digits} "
                              "(0 = n_digits)")
        if t.replay and host:
            check_replay(t, spec)
        if t.replay_hard:
            check_replay_hard(t)
        space = spec.n_samples(replace(t, n_digits=t.train_digits or t.n_digits))
        if t.n_train < 1 or t.n_valid < 1:
            raise ConfigError("task.n_train and task.n_valid must be at least 1")
        held_out = spec.held_out(t.n_valid)  # addition: a+b and b+a both stay out of training
        if t.n_train + held_out > space:
            raise ConfigError(
                f"split impossible: {t.n_train} training + {held_out} held-out sequences exceed the {space} that "
                "exist "
                f"for {t.train_digits or t.n_digits}-digit operands; lower task.n_train / task.n_valid"
            )
    if m.d_model < 1 or m.n_heads < 1 or (m.d_model % m.n_heads and not m.head_dim):
        raise ConfigError(f"model.d_model = {m.d_model} must be a positive multiple of model.n_heads = {m.n_heads} "
                          "(or set model.head_dim)")
    if m.head_dim < 0 or m.n_kv_heads < 0 or m.n_heads % m.kv_heads:
        raise ConfigError(f"model.n_heads = {m.n_heads} must be a multiple of model.n_kv_heads = {m.n_kv_heads} "
                          f"(0 = n_heads), and model.head_dim = {m.head_dim} >= 0")
    if m.rope_theta < 0 or math.isnan(m.rope_theta) or (m.rope_theta and m.d_head % 2):
        raise ConfigError(f"model.rope_theta = {m.rope_theta} must be >= 0 (0 = off), and rotary positions need an "
                          f"even head size (model.head_dim; now {m.d_head})")
    for key, value, allowed in (("norm", m.norm, ("layer", "rms")), ("mlp_act", m.mlp_act, ("relu", "swiglu")),
                                ("embed", m.embed, ("table", "arc")),
                                ("ln_position", m.ln_position, ("pre", "post"))):
        if value not in allowed:
            raise ConfigError(f"model.{key} = '{shown(value)}': choose one of {', '.join(allowed)}")
    if m.embed == "arc" and m.d_model < 2:
        raise ConfigError("model.embed = arc draws each token on a circle: it needs model.d_model >= 2")
    if m.arc_init and (m.embed != "arc" or len(m.arc_init) != 3):
        raise ConfigError(f"model.arc_init = {m.arc_init} is the arc's (amplitude, start, stride) at the start: three "
                          "numbers, with model.embed = arc")
    try:
        turned = [t for t, _ in parse_ties(m.ties).values() if t in TURNED]
        check_norm_groups(m)
        check_pins(m)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if tr.soft_ties:
        parse_soft(tr.soft_ties)
    if not 0 <= tr.soft_tie_weight < math.inf or bool(tr.soft_ties) != (tr.soft_tie_weight > 0):
        raise ConfigError(f"train.soft_tie_weight = {tr.soft_tie_weight}: a positive weight with train.soft_ties "
                          "(which ties it pulls together), 0 without")
    gated = [f"{mod}.{w}" for (mod, f), (_, master) in {**parse_ties(m.ties), **parse_soft(tr.soft_ties)}.items()
             for w in (f, master) if w == "W_gate"]
    if gated and m.mlp_act != "swiglu":
        raise ConfigError(f"{gated[0]} is SwiGLU's gate: model.mlp_act = {m.mlp_act} builds none (tie it with "
                          "model.mlp_act=swiglu)")
    if m.tie_angle and not turned:
        raise ConfigError(f"model.tie_angle = {m.tie_angle} starts the {', '.join(TURNED)} ties' angles; "
                          "model.ties has none")
    if not (m.logit_scale > 0 and m.init_scale > 0) or cfg.optim.fixed_norm < 0:
        raise ConfigError(f"model.logit_scale = {m.logit_scale} and model.init_scale = {m.init_scale} must be "
                          f"positive, optim.fixed_norm = {cfg.optim.fixed_norm} >= 0 (0 = off)")
    if not m.norm_eps > 0:
        raise ConfigError(f"model.norm_eps = {m.norm_eps} must be positive")
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
    if not 0 <= o.final_lr_frac <= 1:
        raise ConfigError(f"optim.final_lr_frac = {o.final_lr_frac} must lie in [0, 1] (where cosine ends, as a "
                          "fraction of optim.lr)")
    if o.grokfast not in ("none", "ema", "ma"):
        raise ConfigError(f"optim.grokfast = '{shown(o.grokfast)}': choose none, ema or ma")
    if o.ema_init not in ("first", "zeros"):
        raise ConfigError(f"optim.ema_init = '{shown(o.ema_init)}': choose first or zeros")
    if o.warmup_first not in (0, 1):
        raise ConfigError(f"optim.warmup_first = {o.warmup_first}: choose 0 (optax's warm-up) or 1 (LambdaLR's)")
    if o.window < 1 or o.warmup_steps < 0:
        raise ConfigError("optim.window must be >= 1 and optim.warmup_steps >= 0")
    for key, value, choices in (("optim.optimizer", o.optimizer, OPTIMIZERS), ("train.loss", tr.loss, LOSSES),
                                ("train.loss_dtype", tr.loss_dtype, LOSS_DTYPES)):
        if value not in choices:
            raise ConfigError(f"{key} = '{shown(value)}'{did_you_mean(value, choices)}: choose one of "
                              f"{', '.join(choices)}")
    if tr.last_batch not in ("drop", "keep"):
        raise ConfigError(f"train.last_batch = '{shown(tr.last_batch)}': choose drop or keep")
    if tr.precision not in PRECISIONS:
        raise ConfigError(f"train.precision = '{shown(tr.precision)}': choose {', '.join(PRECISIONS)}")
    if tr.steps < 1:
        raise ConfigError(f"train.steps = {tr.steps} must be at least 1")
    if tr.screen:  # miiii/phases.py trains a screen as a sweep of its config with screen = 0
        raise ConfigError(f"train.screen = {tr.screen} is a recipe's first phase (presets.PHASED), which screens the "
                          "seeds and continues the best; one sweep of N seeds is python -m miiii sweep --seeds N")
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
