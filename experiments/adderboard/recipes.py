"""The AdderBoard search's vocabulary: the models and starts its settings share (as `--set` overrides of the preset
adder-146), what a setting and a derived folder are, and the functions that build its stages and targeted rounds
(experiments/adderboard/settings.py lists the search itself)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from experiments.adderboard.gauge import AT_41, CHAIN, model_pins, start_pins
from miiii.presets import SHARED_NORMS, TIES_41

# Taghadouini's recipe (adder-146) with PyTorch's / MLX's initialisation and 300k training pairs
BASE = ("model.init=torch", "task.n_train=300000")
SMALL = ("model.n_heads=1", "model.d_mlp=2", "model.embed=arc")  # one head of size 4 on d 3, SwiGLU 2, the arc
TIES_62 = "model.ties=attn.W_V=attn.W_K,attn.W_O=T(attn.W_Q)"  # V = K, O = Q^T
TIED_62 = (*SMALL, TIES_62, "optim.weight_decay=0")


FROM_ARC = ("model.init=qwen", "model.arc_init=2.5,-1.2,0.29")  # every matrix N(0, 0.02), the open arc
DATA = ("task.n_train=2000000", "train.chunk=5000", "train.eval_every=5000")
START_62 = (*SMALL, TIES_62, *FROM_ARC, "optim.lr=1e-2", *DATA)
# The later sub-50 ties on that start (tbukic/M10S-Transformer, experiments/sub50_sweep.py, its 36's): V = Q, K = Q
# with every plane turned (rot: the head's halves, the entry's interleaved pairs in its RoPE layout), O = Q^T, the
# RMSNorms one scale and the QK-norms another: 41 parameters; down = up turned, then transposed: 36. (The board's 41
# itself turned one plane of Q: T41R below.)
T41 = TIES_41  # the preset adder-41-phases' ties, spelled once in miiii/presets.py
T36 = T41 + ",mlp.W_out=Trot(mlp.W_in)"
SHARED = SHARED_NORMS
START_41 = (*SMALL, T41, SHARED, *FROM_ARC, "optim.lr=1e-2", *DATA)
# 36 parameters, every turned tie starting at 0.1 as the entry's; the lr a grid
MODEL_36 = (*SMALL, T36, SHARED, "model.tie_angle=0.1", *FROM_ARC)
START_36 = (*MODEL_36, *DATA)
# 41 parameters from every initial parameter times 3 (model.init_scale), the arc's start and stride given as a third
# so that they start where the open arc does (its amplitude 7.5). Its continuations repeat this arc_init, which their
# loaded parameters override (as every init setting)
MODEL_S3 = (*SMALL, T41, SHARED, "model.init=qwen", "model.arc_init=2.5,-0.4,0.096667")
SCALE3_41 = (*MODEL_S3, "optim.lr=1e-2", *DATA, "model.init_scale=3")
# The board's 41 as its entry builds it (experiments/sub50_sweep_obsolete.py's apply_k_rot_q): K = V = its q_proj, Q
# that turned in its first plane alone (its interleaved dims 0 and 1, RoPE's fastest plane) from -0.5; T41 above is
# the later sub50_sweep's "rotation" (every plane of K turned, from 0.1), which its 36 uses
T41R = "model.ties=attn.W_Q=rot1(attn.W_K),attn.W_V=attn.W_K,attn.W_O=T(attn.W_K)"
MODEL_41R = (*SMALL, T41R, SHARED, "model.tie_angle=-0.5", *FROM_ARC)
MODEL_35R = (*SMALL, T41R + ",mlp.W_out=T(mlp.W_in)", SHARED, "model.tie_angle=-0.5", *FROM_ARC)  # down = up^T
# the 41 and the 36 with every turned tie starting at the angle 1 (0 is K = Q at the start; the entry's is 0.1)
MODEL_41A1 = (*SMALL, T41, SHARED, "model.tie_angle=1.0", *FROM_ARC)
MODEL_36A1 = (*SMALL, T36, SHARED, "model.tie_angle=1.0", *FROM_ARC)
# 35 parameters: the 41 with SwiGLU's gate = its up projection (silu(x u) (x u); a gate = a * up is the same model
# with up times a and down over a, so no scalar is needed), reached from the trained 41 by a soft tie (SOFT_GATE)
SOFT_GATE = "mlp.W_gate=mlp.W_in"
MODEL_35G = (*SMALL, T41 + "," + SOFT_GATE, SHARED, "model.tie_angle=1.0", *FROM_ARC)
# 35 parameters: the board's 41 tie (T41R; two of its screen's 8 members ended below a loss of 1) with the gate = up
MODEL_35GR = (*SMALL, T41R + "," + SOFT_GATE, SHARED, "model.tie_angle=-0.5", *FROM_ARC)
# 35 parameters: the 41 with a ReLU MLP of width 2 in place of SwiGLU's (relu(x W_in) W_out: no gate)
MODEL_35U = (*MODEL_41A1, "model.mlp_act=relu")
# 35 parameters: the 41 with its six exact symmetries fixed by pinned entries (gauge.py: the same function class)
MODEL_35P = (*MODEL_41A1, model_pins())
GAUGED_41 = "41a1-m7-b17-35p"  # gauge.py's folder of the trained 41 as the 35 (its logits the 41's)
# 33 parameters: the 35 with the MLP's write to residual dim 2 pinned at 0 too (gauge.py --head-free: the same argmax)
MODEL_33P = (*MODEL_41A1, model_pins(head_free=True))
HEAD_FREE_41 = "41a1-m7-b17-33p"  # gauge.py --head-free's folder: the trained 41 as the 33 (its argmax the 41's)
# 32 parameters: the 33 with the head's temperature pinned too (gauge.py --head-free --temperature)
MODEL_32P = (*MODEL_41A1, model_pins(head_free=True, temperature=True))
# the 32 from a seed: its pins at the start's scale (the arc's amplitude 2.5 of FROM_ARC, up's row 2 at the init's std)
MODEL_32S = (*MODEL_41A1, start_pins(2.5, 0.02))
# the 35 from a seed: its six exact pins alone at the start's scale (the head's temperature and write to dim 2 free)
MODEL_35S = (*MODEL_41A1, start_pins(2.5, 0.02, head_free=False, temperature=False))
# the preset adder-41-screened's screen member 4 (its stage's start) as the 35 and the 32 with the pins at its own
# sizes (amplitude 6.92, the scale's dims 2 and 0 at 17.1 and 6.56, up's row 2 at 4.5 and 5.7), rounded
AT_M4 = (7.0, 17.0, 5.0, 6.5)
MODEL_35M = (*MODEL_41A1, model_pins(at=AT_M4))
MODEL_32M = (*MODEL_41A1, model_pins(head_free=True, temperature=True, at=AT_M4))


@dataclass(frozen=True)
class Setting:
    name: str
    why: str
    sets: tuple[str, ...]
    grid: tuple[str, ...] = ()
    steps: int = 12_000
    seeds: int = 4
    init_from: str = ""  # a solo phase: "SETTING/member_k" (a run of another setting, under the same runs folder)
    seed: int | None = None  # a solo phase's seed (0 if None); a phased preset's (its own if None)
    phased: str = ""  # a phased preset (presets.PHASED) trained whole: its last phase is the setting's run
    hard: tuple[str, ...] = ()  # a solo phase's hard pairs: "SETTING@SEED", the pairs that run decodes wrong among
    # HARD_PAIRS of that seed, united over the sources and replayed (task.replay) beside REPLAY_N training pairs
    hard_share: float = 0.5  # the replayed rows' share of the training set (the hard pairs repeated to about it)


@dataclass(frozen=True)
class Derived:
    """A trained run written again without its exact symmetries (gauge.py): no training step; its held-out exact
    match measured and its export scored as a run's."""
    name: str
    why: str
    source: str  # the trained run: a setting's, under the same runs folder (a phased setting's: its last phase; or
    # SETTING/phase-K/member_k, a screen's member)
    head_free: bool = False  # gauge.py --head-free: the MLP's write to residual dim 2 pinned at 0 too
    temperature: bool = False  # gauge.py --temperature: the head's temperature pinned too
    trained: str = CHAIN  # how the source was trained, as the export's metadata says
    at: tuple[float, ...] = AT_41  # gauge.py --at: the pins' values (the trained 41's sizes unless said)

    @property
    def flags(self) -> str:
        """gauge.py's options for this folder, as its command line gives them."""
        at = "" if self.at == AT_41 else " --at " + ",".join(f"{v:g}" for v in self.at)
        return " --head-free" * self.head_free + " --temperature" * self.temperature + at

    def source_run(self, runs: Path) -> Path:
        """The source's run folder: RUNS/SOURCE, or its last phase when SOURCE is a recipe in phases."""
        phases = phase_dirs(runs / self.source)
        return phases[-1] if phases else runs / self.source


def phase_dirs(d: Path) -> list[Path]:
    """RUN/phase-1, phase-2, ... in their order (by number, not by name); a round's phase-K.hard.npy beside them is
    not one."""
    return sorted((p for p in d.glob("phase-*") if p.is_dir()), key=lambda p: int(p.name.rpartition("-")[2]))


HARD_PAIRS = 100_000
# a targeted round's pairs of the training draw (seed 42: the first of the 2M the earlier stages trained on)
REPLAY_N = 500_000


def continued(model: tuple[str, ...], member: str, seed: int, stem: str, why: str) -> tuple[Setting, ...]:
    """A screen's member continued as three solo phases: 150k cosine steps 1e-2 -> 1e-3, 50k at 1e-3 (batch 256),
    50k cosine 1e-3 -> 0 without weight decay (batch 256): adder-62-phases' stages after its first, without its 30k
    at 3e-4."""
    run = (*model, *DATA)
    return (Setting(f"{stem}-cosine", f"{why}, continued 150k cosine steps from lr 1e-2 to 1e-3",
                    (*run, "optim.lr=1e-2", "optim.schedule=cosine", "optim.final_lr_frac=0.1"), steps=150_000,
                    init_from=member, seed=seed),
            Setting(f"{stem}-1e-3", f"{stem}-cosine, 50k steps at lr 1e-3 (batch 256)",
                    (*run, "optim.lr=1e-3", "train.batch_size=256"), steps=50_000, init_from=f"{stem}-cosine",
                    seed=seed),
            Setting(f"{stem}-nowd", f"{stem}-1e-3, 50k cosine steps from 1e-3 to 0 without weight decay (batch 256)",
                    (*run, "optim.lr=1e-3", "optim.weight_decay=0", "optim.schedule=cosine", "optim.final_lr_frac=0",
                     "train.batch_size=256"), steps=50_000, init_from=f"{stem}-1e-3", seed=seed))


def long_stage(name: str, why: str, init_from: str, lr: str = "1e-3") -> Setting:
    """41a1-m7's later stages, each another run of its no-decay stage: 100k cosine steps from `lr` to 0 without
    weight decay (batch 256), from `init_from`'s final state."""
    return Setting(name, f"{why}: 100k cosine steps from {lr} to 0 without weight decay (batch 256)",
                   (*MODEL_41A1, *DATA, f"optim.lr={lr}", "optim.weight_decay=0", "optim.schedule=cosine",
                    "optim.final_lr_frac=0", "train.batch_size=256"), steps=100_000, init_from=init_from, seed=7)


def curriculum(k: int) -> tuple[Setting, ...]:
    """41a1-cur3's member k through the curriculum's later phases, 10k steps each at lr 1e-2 as its first: on 6-digit
    operands, then on 10 (41-start-angle1's member k, the same start, trained 30k steps on 10 digits alone)."""
    model = (*START_41, "model.tie_angle=1.0")
    return (Setting(f"41a1-cur6-m{k}", f"41a1-cur3's member {k} on 6-digit operands (task.train_digits=6), 10k steps",
                    (*model, "task.train_digits=6"), steps=10_000, init_from=f"41a1-cur3/member_{k:03d}", seed=k),
            Setting(f"41a1-cur10-m{k}", f"41a1-cur6-m{k} on 10-digit operands, 10k steps: 30k in all, as "
                    f"41-start-angle1's member {k} from the same start", model, steps=10_000,
                    init_from=f"41a1-cur6-m{k}", seed=k))


def small_batch_stage(k: int, name: str = "", init_from: str = "", what: str = "",
                      model: tuple[str, ...] = MODEL_41A1, lr: str = "1e-3") -> Setting:
    """41-start-angle1-b16-cos's member k (or `init_from`, the run `what` names), alone, on through a stage at batch
    16: 800k cosine steps from `lr` to 0 without weight decay, seed k (41a1-m7's long stages at batch 256 took 100k
    each; alone, not one of eight vmapped members, a step at batch 16 costs a fraction of one at 256)."""
    what = what or f"41-start-angle1-b16-cos's member {k} alone"
    return Setting(name or f"41a1-b16c-m{k}-long", f"{what}: 800k cosine steps from lr {lr} to 0 without weight "
                   "decay, batch 16",
                   (*model, *DATA, "train.batch_size=16", "train.eval_every=20000", f"optim.lr={lr}",
                    "optim.weight_decay=0", "optim.schedule=cosine", "optim.final_lr_frac=0"), steps=800_000,
                   init_from=init_from or f"41-start-angle1-b16-cos/member_{k:03d}", seed=k)


def round_sets(model: tuple[str, ...], lr: str) -> tuple[str, ...]:
    """A round's settings: `model` on REPLAY_N pairs of the training draw, cosine from `lr` to 0 without weight decay,
    batch 256."""
    return (*model, *DATA, f"task.n_train={REPLAY_N}", f"optim.lr={lr}", "optim.weight_decay=0",
            "optim.schedule=cosine", "optim.final_lr_frac=0", "train.batch_size=256")


def targeted(name: str, why: str, init_from: str, hard: tuple[str, ...], share: float = 0.5,
             steps: int = 20_000, lr: str = "1e-3", model: tuple[str, ...] = MODEL_41A1) -> Setting:
    """A round of targeted fine-tuning (the board's sub-50 entries' last stage, as hard-example replay): `steps`
    cosine steps from `lr` to 0 without weight decay (batch 256) from `init_from`'s final state, on REPLAY_N pairs
    of the training draw and the pairs the `hard` runs decode wrong, repeated to about `share` of the training set."""
    if not all("@" in h for h in hard):
        raise ValueError(f"{name}: every hard source is SETTING@SEED (the seed its pairs are drawn with)")
    if not 0 < share < 1:
        raise ValueError(f"{name}: share = {share} must lie strictly between 0 and 1")
    return Setting(name, f"{why}: {steps // 1000}k cosine steps from {lr} to 0 without weight decay (batch 256) on "
                   f"{REPLAY_N // 1000}k pairs of the training draw and the pairs {' and '.join(hard)} decode wrong "
                   f"among {HARD_PAIRS // 1000}k of its seed, repeated to about {share:.0%} of the rows",
                   round_sets(model, lr), steps=steps,
                   init_from=init_from, seed=7, hard=hard, hard_share=share)


def chain(stem: str, start: str, rounds: range, why: str, keep: tuple[str, ...] | None = None,
          **kw) -> tuple[Setting, ...]:
    """Targeted rounds STEM{k} for k in `rounds`, each from the run before it (the first from `start`), its hard
    pairs that run's wrong pairs among those of seed k; with `keep` (earlier sources) every round's are united with
    all the chain's earlier ones, as the entries' iterated fine-tuning accumulates its error pairs."""
    out, before, hard = [], start, keep
    for k in rounds:
        hard = (*hard, f"{before}@{k}") if keep is not None else (f"{before}@{k}",)
        out.append(targeted(f"{stem}{k}", f"{before} given {why}", before, hard, **kw))
        before = f"{stem}{k}"
    return tuple(out)


def plain(name: str, what: str, model: tuple[str, ...], init_from: str) -> Setting:
    """`init_from` given 20k cosine steps from lr 1e-5 to 0 without weight decay (batch 256) on REPLAY_N pairs of
    the training draw, no hard pairs: does a qualifying model keep its sums while its own parameters train?"""
    return Setting(name, f"{what} given 20k cosine steps from lr 1e-5 to 0 without weight decay (batch 256) on "
                   f"{REPLAY_N // 1000}k pairs of the training draw, no hard pairs: does it keep its sums while its "
                   "own parameters train?", round_sets(model, "1e-5"), steps=20_000, init_from=init_from, seed=7)


def soft(name: str, why: str, init_from: str, hard: tuple[str, ...], weight: float, **kw) -> Setting:
    """A targeted round of the 41 that also pulls SwiGLU's gate toward its up projection (train.soft_ties, at
    `weight` times the summed squared gap), so that a later round can tie them (MODEL_35G) from its parameters."""
    s = targeted(name, why, init_from, hard, **kw)
    return replace(s, why=f"{s.why}; the gate pulled toward up (soft tie, weight {weight:g})",
                   sets=(*s.sets, f"train.soft_ties={SOFT_GATE}", f"train.soft_tie_weight={weight:g}"))
