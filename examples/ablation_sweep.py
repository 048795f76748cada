"""An ablation study over a sweep's members: what each member's model needs, side by side.

    python -m miiii sweep --preset nanda-cpu --seeds 4 --out runs/sweep
    python examples/ablation_sweep.py [SWEEP_OR_RUN] [--neurons 16] [--top 3]

For every member (a sweep directory stands for its members; a run directory for itself) the loss over the whole
(x0, x1) grid, per task then averaged, of its final parameters: as trained, with each attention head zeroed
(`interventions.zero_ablate` on `attn.hook_z`), with its --neurons most active MLP neurons zeroed, and the --top
frequencies whose removal from the neurons raises the loss most (`interventions.frequency_ablation`). Members
are named by what differs between them (`compare.labels`: "seed 1, optim.weight_decay=0.3"). Seconds per member
at p = 59; grokked members need a few frequencies, and the same ones whichever head is zeroed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import miiii
from miiii.compare import labels
from miiii.errors import ConfigError, one_line_errors
from miiii.interventions import frequency_ablation, slot_losses, zero_ablate

NEURONS, HEADS = "blocks.0.mlp.hook_post", "blocks.0.attn.hook_z"


def members(path: Path) -> list[Path]:
    """A sweep directory's member runs, in order; any other directory is one run. An interrupted sweep (its plan,
    sweep-plan.json, without the sweep.json it writes last) has no final parameters yet: it is refused in one line."""
    if (path / "sweep-plan.json").exists() and not (path / "sweep.json").exists():
        raise ConfigError(f"{path} is an unfinished sweep: finish it first with python -m miiii sweep --resume {path}")
    if (path / "sweep.json").exists():
        found = sorted(d for d in path.glob("member_*") if d.is_dir())
        if not found:
            raise ConfigError(f"{path} is a sweep without member directories")
        return found
    return [path]


def ablations(run, n_neurons: int, top: int) -> dict:
    """One member's losses over the grid: as trained, each head zeroed, its busiest neurons zeroed, and the `top`
    frequencies whose removal hurts most with the loss each leaves."""
    x, y, params, model = run.inputs("grid"), run.labels("grid"), run.params, run.model

    def loss(hooks) -> float:
        return float(np.mean(slot_losses(model.run_with_hooks(params, x, hooks), y, run.task.n_classes)))

    acts = run.cache((NEURONS,), "grid")[NEURONS][:, -1]  # (p^2, d_mlp) at the answer position
    busiest = np.argsort(-np.abs(acts).mean(0))[:n_neurons]
    freq = frequency_ablation(run, NEURONS)
    hurt = freq["loss"].mean(1)  # (p // 2,): each frequency's loss, averaged over tasks
    worst = np.argsort(-hurt)[:top]
    return {"loss": loss({}),
            "heads": [loss({HEADS: zero_ablate([h], axis=2)}) for h in range(run.config.model.n_heads)],
            "neurons": loss({NEURONS: zero_ablate(busiest)}),
            "needs": [(int(freq["k"][i]), float(hurt[i])) for i in worst]}


def study(args) -> int:
    runs = [miiii.load_run(p) for p in members(args.path)]
    if any(r.config.task.is_sequence for r in runs):
        raise ConfigError(f"{args.path}: this study ablates over the (x0, x1) grid; a sequence task has none")
    names = labels(runs) if len(runs) > 1 else [runs[0].path.name]
    width = max(len(n) for n in names)
    print(f"loss over the whole grid (p = {runs[0].config.task.p}); heads: each zeroed alone; neurons: the "
          f"{args.neurons} most active zeroed; needs: frequency k (loss without it)")
    print(f"{'member':<{width}}  {'loss':>7}  {'heads':<28}  {'neurons':>7}  needs")
    for name, run in zip(names, runs, strict=True):
        a = ablations(run, args.neurons, args.top)
        heads = " ".join(f"{v:.3g}" for v in a["heads"])
        needs = ", ".join(f"{k} ({v:.3g})" for k, v in a["needs"])
        print(f"{name:<{width}}  {a['loss']:>7.3g}  {heads:<28}  {a['neurons']:>7.3g}  {needs}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Reads the runs only (load_run, run_with_hooks, frequency_ablation).")
    ap.add_argument("path", nargs="?", type=Path, default=Path("runs/latest"), metavar="SWEEP_OR_RUN",
                    help="a sweep directory (python -m miiii sweep --out) or one grid run (default: runs/latest)")
    ap.add_argument("--neurons", type=int, default=16, help="how many of the most active neurons to zero (16)")
    ap.add_argument("--top", type=int, default=3, help="how many of the frequencies it needs most to list (3)")
    return one_line_errors(study, ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
