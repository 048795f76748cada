"""The book's findings about what its model learns, judged over seeds: the attention of each layer, the token
embeddings and the chapter-5 ablations, each trained as one vmapped sweep of the book's loop (presets `addition`
and `reversal`), then measured member by member into a small JSON-able dict (`member_measures`) that the bundle
keeps (results/book/findings.json); findings.md regenerates from that file alone (experiments/book/bundle.py).

    python -m experiments.book.findings [--seeds 3] [--runs runs/book-findings] [--out results/book]

Trains six sweeps (addition, reversal, and addition without positional embeddings, without the causal mask, with
one layer, at lr 1e-3), reused when finished (findings.md's provenance table gives each sweep's wall time); measuring
takes minutes.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from miiii.config import ConfigError, apply_overrides
from miiii.errors import OneLineParser, lead, one_line_errors
from miiii.presets import get_preset
from miiii.provenance import git_commit

QUIET = ("record.acts=", "record.params=", "ckpt.keep_log=0")  # the measures read the final parameters only
# name: (preset, --set overrides): the two trained models, then the ablations of chapter 5 and ch. 3's lr, each one
# switch on `addition`
CONFIGS = {
    "addition": ("addition", ()),
    "reversal": ("reversal", ()),
    "no_pos_embed": ("addition", ("model.pos_embed=false",)),
    "no_causal_mask": ("addition", ("model.causal=false",)),
    "one_layer": ("addition", ("model.n_layers=1",)),
    "lr_1e-3": ("addition", ("optim.lr=0.001",)),  # ch. 3: "1e-3 doesn't work"
}
FILE = "findings.json"  # the bundle's record: every member's measures; findings.md is rendered from it alone
TRAINED_BY = "trained_by.json"  # in each sweep directory: the commit and date that trained it
ATTN_SAMPLES = 1000  # held-out samples whose attention patterns are averaged (the mean pattern: masses are linear)


def probes(task: str, n: int) -> dict[str, str]:
    """Ch. 4's two inputs, for n digits: no carry (123+456) and carries cascading through every column (999+001)."""
    if task != "addition":
        return {}
    return {"no_carry": "".join(str(1 + i % 3) for i in range(n)) + "+" + "".join(str(4 + i % 3) for i in range(n)),
            "cascade": "9" * n + "+" + "0" * (n - 1) + "1"}


def _patterns(ev, params, x) -> list:
    """Per layer, the attention pattern (heads averaged) averaged over the rows of x: (L, T, T), 3 decimals."""
    import numpy as np

    _, acts = ev.apply(params, x)
    return [np.round(np.asarray(acts[f"blocks.{i}.attn.hook_pattern"], np.float64).mean((0, 1)), 3).tolist()
            for i in range(ev.cfg.model.n_layers)]


def _cosines(rows) -> list:
    """(r, r) cosine similarity of the rows, 3 decimals."""
    import numpy as np

    e = np.asarray(rows, np.float64)
    e = e / np.linalg.norm(e, axis=1, keepdims=True)
    return np.round(e @ e.T, 3).tolist()


def carries(x, n: int):
    """(N,) how many carries the sum of each addition input makes (operands at positions 0..n-1 and n+1..2n, most
    significant digit first)."""
    import numpy as np

    a, b = np.asarray(x[:, :n])[:, ::-1], np.asarray(x[:, n + 1:2 * n + 1])[:, ::-1]  # ones first
    carry, count = np.zeros(len(x), int), np.zeros(len(x), int)
    for j in range(n):
        carry = (a[:, j] + b[:, j] + carry) >= 10
        count += carry
    return count


def member_measures(run_dir: Path) -> dict:
    """One trained member, measured: held-out exact match teacher-forced and autoregressive (all 10,000 pairs), the
    mean attention pattern per layer over ATTN_SAMPLES held-out inputs and on the probes, and the cosines of the digit
    embeddings and of the positional embeddings; the attention and cosines also of the same seed's untrained
    parameters (the control: what the initialisation already shows)."""
    import jax
    import numpy as np

    from miiii.bookeval import Evaluator
    from miiii.runner import prepare
    from miiii.tasks import task_spec
    from miiii.train import make_trainer

    ev = Evaluator(run_dir)
    cfg, task = ev.cfg, ev.task
    init = make_trainer(cfg, prepare(cfg)).init(cfg.train.seed).params
    vx, vy = task.valid.x, task.valid.y
    ce, tf = ev.teacher_forced(vx, vy)
    ok = ev.autoregressive(vx, vy)  # (N,) the whole answer generated correctly
    spec = task_spec(task.name)
    width = vx.shape[1]
    x = jax.numpy.asarray(vx[:ATTN_SAMPLES])
    texts = probes(task.name, ev.n)
    inputs = {k: jax.numpy.asarray(spec.probe(s)[None, :width]) for k, s in texts.items()}
    out = {"seed": cfg.train.seed, "task": task.name, "n_layers": cfg.model.n_layers, "answer_start": task.answer_start,
           "reads": spec.reads(ev.n), "probe_text": texts, "valid_loss": round(ce, 4), "teacher_forced": round(tf, 4),
           "autoregressive": round(float(ok.mean()), 4)}
    if task.name == "addition":  # exact match by the number of carries the sum makes (0 .. n)
        c = carries(vx, ev.n)
        out["by_carries"] = {int(k): [int((c == k).sum()), round(float(ok[c == k].mean()), 4)]
                             for k in np.unique(c)}
    for name, params in (("trained", ev.params), ("init", init)):
        out[name] = {"attention": _patterns(ev, params, x),
                     "digit_cos": _cosines(params["W_E"][:10]),  # the digit tokens (the book's figure)
                     "pos_cos": _cosines(params["W_pos"][:width]) if "W_pos" in params else None,  # ch. 4 §4.3
                     "probes": {k: _patterns(ev, params, px) for k, px in inputs.items()}}
    return out


def sweep_measures(name: str, runs: Path) -> list[dict]:
    """`member_measures` of every member of the config's finished sweep."""
    from miiii.sweep import member_dir

    out = Path(runs) / name
    n = len([p for p in out.glob("member_*") if p.is_dir()])
    return [member_measures(member_dir(out, i)) for i in range(n)]


SMOKE = {"addition": "addition-tiny", "reversal": "reversal-tiny"}  # --smoke: the tiny presets for 60 steps


def config(name: str, smoke: bool = False):
    preset, sets = CONFIGS[name]
    if smoke:
        return apply_overrides(get_preset(SMOKE[preset]), [*QUIET, *(s for s in sets if "steps" not in s),
                                                          "train.steps=60", "train.chunk=20", "train.eval_every=20"])
    return apply_overrides(get_preset(preset), [*QUIET, *sets])


def train(name: str, seeds: int, runs: Path, progress: bool = True, smoke: bool = False,
          commit: str | None = None) -> Path:
    """The config's sweep of `seeds` seeds under runs/NAME: a finished one (sweep.json) is reused and an interrupted
    one resumed, each only when its plan (sweep-plan.json) is the one this code builds; otherwise one line says so.
    `commit`: the code's commit as the process started (a later commit does not change the code it runs)."""
    from miiii.config import RunConfig
    from miiii.sweep import resume_sweep, run_sweep
    from miiii.sweepmembers import PLAN, RESULT, plan_digest

    out, cfg = Path(runs) / name, config(name, smoke)
    done = (out / RESULT).is_file()
    if out.exists():
        try:
            plan = json.loads((out / PLAN).read_text())
            theirs = plan_digest(RunConfig.from_dict(plan["config"]), int(plan["seeds"]), plan["grid"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{out} is not a sweep of this study ({type(e).__name__}: {e}); remove it and run "
                              "again") from None
        if theirs != plan_digest(cfg, seeds, {}):
            raise ConfigError(f"{out} was trained with another config or seed count than {name!r} with --seeds "
                              f"{seeds} builds now; remove it (or pass --runs elsewhere) and run again")
    if not done:
        t = time.perf_counter()
        if out.exists():
            resume_sweep(out, progress=progress, tensorboard=False)
        else:
            run_sweep(cfg, seeds, {}, out, progress=progress, tensorboard=False)
        stamp = {"commit": commit or git_commit(), "date": time.strftime("%Y-%m-%d %H:%M %Z")}
        (out / TRAINED_BY).write_text(json.dumps(stamp))
        print(f"{name}: {seeds} seeds in {time.perf_counter() - t:.0f} s", flush=True)
    return out


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m experiments.book.findings", description=lead(__doc__))
    ap.add_argument("--seeds", type=int, default=3, help="seeds per config, one vmapped sweep each (default 3)")
    ap.add_argument("--runs", type=Path, default=Path("runs/book-findings"), help="where the sweeps go (reused)")
    ap.add_argument("--only", nargs="+", choices=list(CONFIGS), default=list(CONFIGS), help="train these configs")
    ap.add_argument("--smoke", action="store_true", help="tiny presets for 60 steps (the pipeline in CPU minutes; "
                    "nothing is meant to match)")
    ap.add_argument("--train-only", action="store_true", help="train the sweeps and stop")
    ap.add_argument("--out", type=Path, default=Path("results/book"),
                    help=f"the bundle: OUT/{'{'}FILE{'}'} (the measures) and findings.md (default results/book)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error(f"--seeds must be at least 1, got {args.seeds}")

    commit = git_commit()  # the code this process runs, whatever is committed while it trains

    def work(args):
        for name in args.only:
            train(name, args.seeds, args.runs, smoke=args.smoke, commit=commit)
        if args.train_only:
            return 0
        import jax

        data = {"configs": {k: {"preset": v[0], "sets": list(v[1])} for k, v in CONFIGS.items()},
                "measured_by": {"commit": commit, "device": jax.devices()[0].device_kind, "jax": jax.__version__},
                "smoke": args.smoke, "attn_samples": ATTN_SAMPLES, "trained_by": {}, "sweeps": {}}
        for name in CONFIGS:
            data["trained_by"][name] = {**json.loads((args.runs / name / TRAINED_BY).read_text()), "wall_s": round(
                json.loads((args.runs / name / "sweep.json").read_text())["wall_s"])}
            data["sweeps"][name] = sweep_measures(name, args.runs)
            print(f"{name}: measured", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / FILE).write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
        from experiments.book.findings_md import write

        print(write(args.out))
        return 0

    return one_line_errors(work, args)


if __name__ == "__main__":
    sys.exit(main())
