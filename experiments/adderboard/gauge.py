r"""The 41's exact symmetries fixed: 35 parameters that compute the 41's logits, 32 that decode as it (model.pins).

    python -m experiments.adderboard.gauge runs/adder/41a1-m7-b17 --out runs/adder/41a1-m7-b17-35p
    python -m experiments.adderboard.gauge runs/adder/41a1-m7-b17 --out runs/adder/41a1-m7-b17-32p \
        --head-free --temperature

Six directions of the 41's 41 parameters change none of its logits, for any input (each below is exact algebra,
the first up to the norms' eps; tests/test_pins.py checks each):
  1. one global scale c: the arc's amplitude and every matrix / c, the RMSNorm scale * c: every residual vector is
     c times smaller, which each RMSNorm undoes, and ln_final's scale * c meets the tied head's amplitude / c;
  2, 3. SwiGLU's unit j: its up column * c_j, its down row / c_j (the product up * down is what the unit writes);
  4. residual dim 2: the arc writes 0 there, so ln1's scale there meets 0 and ln_final's meets the head's 0; only
     ln2's counts, through the gate's and up's row 2: that scale * c, those rows / c;
  5, 6. Q's row 2 (O = Q^T writes it; V = K = Q read dim 2, which is 0 before attention): the attended values lie in
     the span of Q's rows 0 and 1, so only row 2's projection onto that span counts.
Each is fixed by pinning one entry per direction (PINS: the amplitude 40, the scale's dim 2 at 50, up's row 2 at 10,
two entries of Q's row 2 at 0), at values near the trained 41's in size so that an optimizer's steps mean what they
meant (up's row 2 at +10 for both units turns the sign of unit 0's up column and down row, whose product it writes).
Three more change every logit of a position by one positive factor, so no argmax (greedy decoding is all the board
runs), though they change the loss:
  7, 8. the MLP's write to residual dim 2 (HEAD_FREE, `--head-free`, pinned at 0): in one block the MLP's output is
     read by ln_final alone, and there dim 2 (where the tied head's arc is 0) enters only the RMS;
  9. the head's temperature (temperature_at, `--temperature`, the scale's dim 0 pinned at 7, or --at's S0): the
     scale's dims 0 and 1 * c, Q / sqrt(c), the gate's and up's rows 0 and 1 / c: q and k grow by sqrt(c), which the
     QK-norm undoes, V and O (both Q) meet c / sqrt(c)^2 = 1, the MLP reads what it read, and ln_final's logits (the
     arc is 0 in dim 2) are c times the 41's.
Directions 1 and 9 need c > 0 (an RMSNorm is odd): the trained amplitude and the scale's dim 0 must be positive.
With both, 32 parameters decode as the 41.
The result is written as a run folder (its config the source's with model.pins, its parameters the free entries),
checked to give the source's logits (times a positive factor per position with the last three), so that `train
--init-from` and `export-adder` take it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from miiii.errors import ConfigError, OneLineParser, RunError, one_line_errors

if TYPE_CHECKING:
    from experiments.adderboard.recipes import Derived

AMPLITUDE, SCALE_2, UP_2, SCALE_0 = 40.0, 50.0, 10.0, 7.0  # the pins' values
AT_41 = (AMPLITUDE, SCALE_2, UP_2, SCALE_0)  # their values as one: the trained 41's sizes (gauge.py --at)
ZERO_Q = (0, 3)  # the entries of Q's row 2 pinned at 0: a pair whose 2 x 2 solve is well conditioned on the trained 41


def pins_at(amplitude: float, scale_2: float, up_2: float) -> tuple[str, ...]:
    """The six exact directions' pins (one entry each) at the given values; PINS at the trained 41's."""
    return (f"W_E_arc[0]={amplitude:g}", f"shared_norm_0.scale[2]={scale_2:g}", f"mlp.W_in[2]={up_2:g}",
            *(f"attn.W_Q[0,2,{i}]=0" for i in ZERO_Q))


PINS = pins_at(AMPLITUDE, SCALE_2, UP_2)
HEAD_FREE = ("mlp.W_out[:,2]=0",)  # the MLP's write to residual dim 2: argmax-free (the 33)


def temperature_at(scale_0: float) -> tuple[str, ...]:
    """The head's temperature pin (the RMSNorm scale's dim 0) at the given value: argmax-free."""
    return (f"shared_norm_0.scale[0]={scale_0:g}",)


GAUGED = "gauged.json"
CHAIN = "its chain of study settings"  # how a derived folder's source was trained, unless its Derived says
# the 41's structure, which the directions need: V = Q and O = Q^T (5, 6, 9), K a turn of Q, the three RMSNorms one
# scale (1, 4, 9), the arc on d_model 3 (its dim 2 is 0), SwiGLU of width 2, one head, one pre-norm block
TIES_41 = ("attn.W_K=rot(attn.W_Q)", "attn.W_V=attn.W_Q", "attn.W_O=T(attn.W_Q)")
NORMS_41 = ("ln1+ln2+ln_final", "q_norm+k_norm")
# the largest logit gap the check allows, as a share of the largest logit: room for float32 rounding, which the
# trained 41's large cancellations amplify
GAP = 1e-3


def model_pins(head_free: bool = False, temperature: bool = False, at: tuple[float, ...] = AT_41) -> str:
    """The --set of the derived model's pins: PINS' entries, and HEAD_FREE's and temperature_at's when asked, at
    the values `at` (amplitude, the scale's dim 2, up's row 2, the scale's dim 0; the trained 41's by default)."""
    amplitude, scale_2, up_2, scale_0 = at
    return "model.pins=" + ",".join(pins_at(amplitude, scale_2, up_2) + HEAD_FREE * head_free
                                    + temperature_at(scale_0) * temperature)


def start_pins(amplitude: float, up: float, head_free: bool = True, temperature: bool = True) -> str:
    """A derived model's pins (model_pins' entries, the 32's by default) at a fresh start's scale instead of the
    trained 41's: the arc's amplitude at its initial one, the RMSNorm scale's dim 2 (and dim 0, with temperature) at
    their initial 1, up's row 2 at `up` (positive, both units), Q's two entries (and the write to dim 2, with
    head_free) at 0. Any positive amplitude and scale and nonzero up give the same functions (the module's
    directions); only where an optimizer starts differs."""
    return model_pins(head_free, temperature, at=(amplitude, 1.0, up, 1.0))


MODEL_PINS = model_pins()


def check_source(m) -> None:
    """ConfigError unless the model is the 41's structure (TIES_41, NORMS_41, the arc, SwiGLU 2, d 3, one head)."""
    ok = (tuple(m.ties) == TIES_41 and tuple(m.norm_groups) == NORMS_41 and m.embed == "arc" and m.d_model == 3
          and m.mlp_act == "swiglu" and m.mlp_dim == 2 and m.n_heads == 1 and m.d_head == 4 and m.n_layers == 1
          and m.norm == "rms" and m.qk_norm and m.layer_norm and not m.pos_embed and not m.pins and m.tie_head
          and not m.mlp_bias and m.ln_position == "pre" and m.readout == "all")
    if not ok:
        raise ConfigError("the gauge is the 41's: model.ties " + ",".join(TIES_41) + ", model.norm_groups "
                          + ",".join(NORMS_41) + ", the arc on d_model 3, SwiGLU of width 2 without biases, one head "
                          "of size 4, one pre-norm block, every position read out, no pins")


def gauge_fixed(p: dict[str, np.ndarray], at: tuple[float, ...] = AT_41) -> dict[str, np.ndarray]:
    """The 41's flat parameters {path: array} moved along the six directions (float64) until the pinned entries hold
    the values `at` (PINS' by default): the same function, to the norms' eps."""
    amplitude, scale_2, up_2, _ = at
    p = {k: np.array(v, np.float64) for k, v in p.items()}
    arc, g, q = p["W_E_arc"], p["shared_norm_0/scale"], p["blocks_0/attn/W_Q"][0]
    gate, up, down = (p[f"blocks_0/mlp/{k}"] for k in ("W_gate", "W_in", "W_out"))
    if not arc[0] > 0:
        raise ConfigError(f"the arc's amplitude is {arc[0]:g}: the global scale (1) needs it positive")
    c = arc[0] / amplitude  # 1: the global scale
    arc[0] /= c
    g *= c
    for w in (q, gate, up, down):
        w /= c
    c2 = scale_2 / g[2]  # 4: residual dim 2's scale against the gate's and up's row 2
    g[2] *= c2
    gate[2] /= c2
    up[2] /= c2
    cj = up_2 / up[2]  # 2, 3: each unit's up column against its down row
    up *= cj[None]
    down /= cj[:, None]
    basis = q[:2].T  # 5, 6: row 2's part outside span(row 0, row 1) moved until its ZERO_Q entries are 0
    inside = basis @ np.linalg.lstsq(basis, q[2], rcond=None)[0]
    outside = np.linalg.svd(basis.T)[2][2:].T  # (4, 2): an orthonormal basis of the span's complement
    try:
        q[2] = inside + outside @ np.linalg.solve(outside[list(ZERO_Q)], -inside[list(ZERO_Q)])
    except np.linalg.LinAlgError:
        raise ConfigError(f"Q's rows 0 and 1 leave entries {ZERO_Q} of row 2 no room to be 0 (a singular solve); "
                          "pin another pair") from None
    q[2, list(ZERO_Q)] = 0.0
    return p


def free_entries(p: dict[str, np.ndarray], m) -> dict[str, np.ndarray]:
    """The pinned model's flat parameters: each pinned weight's free entries as NAME_free (float32); ConfigError when
    a pinned entry does not hold its pin."""
    from miiii.model import FREE, pinned_weights

    out = dict(p)
    for path, free, values in pinned_weights(m, list(p)):
        if not np.allclose(p[path][~free], values[~free], rtol=1e-6, atol=1e-9):
            raise ConfigError(f"{path}'s pinned entries are {p[path][~free]}, not the pins' {values[~free]}")
        out[path + FREE] = out.pop(path)[free]
    return {k: v.astype(np.float32) for k, v in out.items()}


def logits(cfg, flat: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The model's logits (float32) on token rows x."""
    import jax
    import jax.numpy as jnp

    from miiii.model import build_model
    from miiii.rundir import unflatten
    from miiii.tasks import make_task

    task = make_task(replace(cfg.task, n_train=8, n_valid=8, replay=""))
    model = build_model(cfg.model, task)
    params = jax.tree.map(jnp.asarray, unflatten(flat))
    return np.asarray(model.apply({"params": params}, jnp.asarray(x))[0])


def temperature_fixed(p: dict[str, np.ndarray], scale_0: float = SCALE_0) -> dict[str, np.ndarray]:
    """gauge_fixed's parameters moved along the head's temperature (9) until the RMSNorm scale's dim 0 is `scale_0`:
    every logit of a position times one positive factor."""
    p = {k: v.copy() for k, v in p.items()}
    g, q = p["shared_norm_0/scale"], p["blocks_0/attn/W_Q"]
    if not g[0] > 0:
        raise ConfigError(f"the RMSNorm scale's dim 0 is {g[0]:g}: the head's temperature (9) needs it positive")
    c = scale_0 / g[0]
    g[:2] *= c
    q /= np.sqrt(c)
    p["blocks_0/mlp/W_gate"][:2] /= c
    p["blocks_0/mlp/W_in"][:2] /= c
    g[0] = scale_0
    return p


def gauge(run_dir: Path, out: Path, rows: int = 512, head_free: bool = False, temperature: bool = False,
          at: tuple[float, ...] = AT_41) -> dict:
    """OUT written: the run folder of the 35 that computes RUN_DIR's 41 (`head_free`, `temperature`: with those
    pins too, decoding as it does), its pins at the values `at`; returns what the check measured."""
    from experiments.adderboard.restore import write_source
    from miiii.config import apply_overrides
    from miiii.run import load_run
    from miiii.rundir import flatten_params
    from miiii.tasks import make_task

    if out.exists() or out.is_symlink():
        raise ConfigError(f"{out} exists; name a new folder")
    run = load_run(run_dir)
    if not run.params:
        raise ConfigError(f"{run_dir} has no params.npz (the run has not finished)")
    check_source(run.config.model)
    cfg = apply_overrides(run.config, [model_pins(head_free, temperature, at), f"train.init_from={run_dir}"])
    before = {k: np.asarray(v) for k, v in flatten_params(run.params).items()}
    moved = gauge_fixed(before, at)
    if head_free:
        moved["blocks_0/mlp/W_out"][:, 2] = 0.0
    if temperature:
        moved = temperature_fixed(moved, at[3])
    after = free_entries(moved, cfg.model)
    x = make_task(replace(run.config.task, n_train=8, n_valid=rows, replay="")).valid.x[:rows]
    a, b = logits(run.config, before, x), logits(cfg, after, x)
    # each position's logits times a positive factor (1 but for the head-free pin), fitted by least squares
    factor = (a * b).sum(-1, keepdims=True) / (a * a).sum(-1, keepdims=True)
    answer = slice(-run.config.task.n_digits - 2, -1)  # the positions that predict the sum's digits
    gap = float(np.abs(factor * a - b).max() / np.abs(a).max())
    same = bool((a[:, answer].argmax(-1) == b[:, answer].argmax(-1)).all())
    kept = head_free or temperature or np.abs(factor - 1).max() <= GAP  # the six directions keep the logits
    if gap > GAP or not same or factor.min() <= 0 or not kept:
        allowed = "a positive factor" if head_free or temperature else "rounding"
        raise RunError(f"the gauge changed {run_dir}'s logits beyond {allowed} per position (largest gap "
                       f"{gap:.2e} of the largest logit; every answer digit's argmax the same: {same}); nothing "
                       "written")
    report = dict(source=str(run_dir), pins=list(cfg.model.pins), rows=rows, logit_gap=gap, same_argmax=same,
                  factor=[float(factor.min()), float(factor.max())], params=int(sum(v.size for v in after.values())))
    write_source(out, cfg, after, GAUGED, report)
    return report


def derived_record(d: Derived, runs: Path) -> dict | None:
    """A derived folder's record: its count, gauge.py's check against the source, its held-out exact match."""
    from miiii.bookeval import Evaluator
    from miiii.model import count_params
    from miiii.run import load_run

    folder = runs / d.name
    if not (folder / GAUGED).is_file():
        return None
    check = json.loads((folder / GAUGED).read_text())
    run = load_run(folder)
    ev = Evaluator(run, replace(run.config.task, replay="", n_train=8))  # the run's held-out set, no training set
    return dict(name=d.name, why=d.why, source=d.source, params=count_params(run.params), pins=check["pins"],
                logit_gap=check["logit_gap"], factor=check["factor"], same_argmax=check["same_argmax"],
                rows=check["rows"], exact=float(ev.autoregressive(ev.task.valid.x, ev.task.valid.y).mean()),
                trained=d.trained,
                command=f"python -m experiments.adderboard.gauge {d.source_run(runs)} --out {folder}{d.flags}")


def score_derived(records: list[dict], runs: Path, out: Path) -> list[dict]:
    """Export and score every derived folder (its metadata saying how its parameters were reached)."""
    from experiments.adderboard.score import export_scored

    return [dict(setting=r["name"], run=r["name"], **export_scored(
        runs / r["name"], out, f"adder-{r['params']}p-{r['name']}",
        history=f"trained as {r['source']} ({r.get('trained', CHAIN)}), then written again "
        f"with entries pinned, no training step: {', '.join(r['pins'])} (experiments/adderboard/gauge.py)"))
        for r in records]


def pin_values(text: str) -> tuple[float, ...]:
    """--at's four positive numbers (argparse's type: its error is the one-line usage error)."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4 or not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"'{text}' is not four positive numbers A,S2,U2,S0")
    return values


def main(argv=None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a finished run of the 41 (41a1-m7-b17; restore.py rebuilds it from its "
                    "submission)")
    ap.add_argument("--out", type=Path, required=True, help="the derived run folder to write (must not exist): the "
                    "35, or with the flags below the 33 or the 32")
    ap.add_argument("--head-free", action="store_true", help="pin the MLP's write to residual dim 2 at 0 too: the "
                    "33, decoding as the 41 (every logit of a position times one positive factor)")
    ap.add_argument("--temperature", action="store_true", help="pin the head's temperature too (the RMSNorm scale's "
                    "dim 0 at 7, or --at's S0): every logit of a position times one factor; with --head-free, the 32")
    ap.add_argument("--at", type=pin_values, default=AT_41, metavar="A,S2,U2,S0",
                    help="the pins' values: the arc's amplitude, the RMSNorm scale's dim 2, up's row 2 (both units), "
                    "with --temperature the scale's dim 0 (default 40,50,10,7: the trained 41's sizes; a run to train "
                    "on from its own sizes, e.g. a screen's member, takes its own, which move its entries least)")
    ap.add_argument("--rows", type=int, default=512, help="held-out rows the logits are compared on (default 512)")
    args = ap.parse_args(argv)

    def run() -> int:
        r = gauge(args.run, args.out, args.rows, args.head_free, args.temperature, args.at)
        print(f"wrote {args.out}: {r['params']} parameters; on {r['rows']} held-out rows the logits are "
              f"{args.run}'s times a factor per position in [{r['factor'][0]:.4f}, {r['factor'][1]:.4f}], to "
              f"{r['logit_gap']:.1e} of the largest; every answer digit's argmax the same")
        return 0

    return one_line_errors(run)


if __name__ == "__main__":
    sys.exit(main())
