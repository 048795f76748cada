"""What the book study reads from runs and files (python -m experiments.book), and how it compares them: a seed's
record, the distribution of jump epochs, agreement, the book's curve, the sweeps' and the PyTorch loop's records, the
loop-gap samples and their exact tests. Nothing here trains.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

from experiments.book.curve_rules import fits_without_transfer  # noqa: E402
from miiii.analysis import fisher_exact_p, rank_sum_p  # noqa: E402
from miiii.bookeval import Evaluator  # noqa: E402
from miiii.config import ConfigError, apply_overrides  # noqa: E402
from miiii.presets import get_preset  # noqa: E402
from miiii.provenance import git_commit, provenance, to_jsonable  # noqa: E402
from miiii.run import load_run  # noqa: E402
from miiii.rundir import read_config  # noqa: E402
from miiii.sweep import member_dir  # noqa: E402
from miiii.train import steps_per_epoch  # noqa: E402

ABLATIONS = {  # name: (config switches, what the book says breaks)
    "no_pos_embed": (["model.pos_embed=false", "record.params=W_E"], "cannot tell columns apart"),  # no W_pos
    "no_causal_mask": (["model.causal=false"], "train/test mismatch"),
    "one_layer": (["model.n_layers=1",  # and a recording of the one block there is
                   "record.acts=blocks.0.attn.hook_pattern,blocks.0.mlp.hook_post,blocks.0.hook_resid_post,logits"],
                  "weaker carry propagation"),
}


# ---------------------------------------------------------------- over seeds, beside the book's own loop in PyTorch

BUDGET = {"addition": 150, "reversal": 80}  # the book's epochs
AGREE_EPOCHS = 20  # the jump-epoch medians of two implementations that agree lie this close


def seed_record(run_dir: Path, seed: int) -> dict:
    """One finished addition or reversal run as the seed tables read it: jump epochs, final loss, accuracies,
    edge cases and the held-out exact match per epoch."""
    ev = Evaluator(run_dir)
    r, c = ev.report(), ev.curves()
    return dict(seed=seed, jump_epoch=r["jump_epoch"], final_epoch_loss=r["final_epoch_loss"],
                loss_floor=r["loss_floor"], valid_autoregressive_acc=r["valid_autoregressive_acc"],
                valid_teacher_forced_acc=r["valid_teacher_forced_acc"], epochs=r["epochs"],
                edge_cases=sum(e["correct"] for e in r["edge_cases"]), n_edge_cases=len(r["edge_cases"]),
                valid_acc=c["valid_acc"].tolist(), wall_s=r["wall_s"],
                batches_per_epoch=steps_per_epoch(ev.cfg.train, ev.cfg.task.n_train),
                weight_decay=ev.cfg.optim.weight_decay, clip_norm=ev.cfg.optim.clip_norm)


def distribution(runs: list[dict], budget: int) -> dict:
    """How many seeds reach >= 99 % autoregressive exact match within the budget; the jump epoch's spread."""
    done = [r for r in runs if r["valid_autoregressive_acc"] >= 0.99]
    jumps = [r["jump_epoch"]["0.99"] for r in runs if r["jump_epoch"]["0.99"] is not None]
    censored = [r["jump_epoch"]["0.99"] or budget + 1 for r in runs]  # never: after the budget
    loss = [r["final_epoch_loss"] for r in runs]
    return dict(n=len(runs), grokked=len(done), jump_median=float(np.median(censored)), censored=censored,
                jump_min=min(jumps) if jumps else None, jump_max=max(jumps) if jumps else None,
                jumps=[r["jump_epoch"]["0.99"] for r in runs], loss_mean=float(np.mean(loss)),
                loss_std=float(np.std(loss)), autoregressive=[r["valid_autoregressive_acc"] for r in runs],
                edge_cases=[f"{r.get('edge_cases', '–')}/{r.get('n_edge_cases', '–')}" for r in runs])


MUCH_FASTER = 2.0  # "much faster": at most half the epochs


def rule_reversal_much_faster(addition: dict, reversal: dict) -> bool:
    """holds if, seed by seed (the same seed index), reversal's jump epoch (teacher-forced held-out exact match
    ≥ 99 %) is at most half of addition's, a seed that never jumps counted just after its budget."""
    return all(r * MUCH_FASTER <= a for a, r in zip(addition["censored"], reversal["censored"], strict=True))


MEMORIZING = 0.5  # held-out exact match below this: the book's memorization phase (ch. 3's log: 0-1 %, loss ≈ 1.34)


def rule_stays_memorizing(no_wd: list[dict], control: list[dict]) -> bool | None:
    """holds if at weight decay 0 every seed ends the budget in the memorization regime as the book's chapter 3 log
    shows it (held-out autoregressive exact match below 50 %: the plateau at 0-1 %, not a grokked model), while at
    the book's weight decay 0.01 (the control) at least one seed groks (≥ 99 %); not testable when the control does
    not grok either. "Indefinitely" is judged within the budget only. (The training loss is no test: generalising
    runs end on both sides of the population floor.)"""
    if not no_wd or not any(r["valid_autoregressive_acc"] >= 0.99 for r in control):
        return None
    return all(r["valid_autoregressive_acc"] < MEMORIZING for r in no_wd)


def rule_fits_without_transfer(no_wd: list[dict]) -> bool:
    """holds if at weight decay 0 some seed fits its training data (the last epoch's mean training loss within 0.05
    of the loss floor, or below it) while its held-out exact match (autoregressive) stays below 50 % (the fit does
    not transfer); does not hold if no seed does. "Can" is judged on these seeds within the budget only."""
    return any(map(fits_without_transfer, no_wd))


def agree(a: dict, b: dict) -> bool:
    """Two jump-epoch distributions agree: as many seeds (±1) grok, and the medians (a seed that never jumps
    counted just past the budget) lie within AGREE_EPOCHS epochs."""
    return abs(a["grokked"] - b["grokked"]) <= 1 and abs(a["jump_median"] - b["jump_median"]) <= AGREE_EPOCHS


def seed_provenance(out: Path, jax_runs: dict, torch_meta: dict) -> dict:
    """The code, machine and numerics behind seeds.md (the JAX runs' summaries; the PyTorch side's own record)."""
    s = load_run(out / "runs" / "addition").summary
    torch_side = {name: f"torch {t.get('torch', '?')}, {t.get('threads', '?')} thread(s)" for name, t in
                  torch_meta.items()}
    return provenance(s, s.get("precision", "?")) | {
            "seeds": "; ".join(f"{n}: {', '.join(str(r['seed']) for r in rs)}" for n, rs in jax_runs.items()),
            "JAX training wall time": "; ".join(f"{n}: {sum(r['wall_s'] for r in rs) / 60:.1f} min" for n, rs in
                                                jax_runs.items()),
            "PyTorch loop": "; ".join(f"{n}: {v}" for n, v in torch_side.items()) or "not run"}


# ---------------------------------------------------------------- the settings the book does not state

# The book's seeds give AdamW's lr and the schedule but not the weight decay or the clipping norm (the presets use
# PyTorch's AdamW default 0.01 and clip 1.0). A vmapped sweep (miiii.sweep) over seeds x those settings asks at
# which values "150 epochs ensure grokking completes" holds, and which reproduce the book's curve in most seeds.
CURVE_PLATEAU = 10  # epochs the book's curve sits below 50 % held-out exact match before its jump (ch. 4: ~60-70)


def book_curve(run: dict) -> bool:
    """The book's curve: a plateau (teacher-forced held-out exact match below 50 % in each of the first
    CURVE_PLATEAU epochs), then the jump (>= 99 % autoregressive exact match at the end of the budget)."""
    acc = run["valid_acc"][:CURVE_PLATEAU]
    return run["valid_autoregressive_acc"] >= 0.99 and len(acc) == CURVE_PLATEAU and all(a < 0.5 for a in acc)


def finished_sweeps(out: Path, pattern: str = "unstated-*") -> dict[str, dict]:
    """Every OUT/runs/PATTERN sweep that finished, by directory name: its sweep.json."""
    return {d.name: json.loads((d / "sweep.json").read_text()) for d in sorted((out / "runs").glob(pattern))
            if (d / "sweep.json").is_file()}


def sweep_records(out: Path, sweeps: dict[str, dict]) -> list[dict]:
    """Every member of `sweeps` (`finished_sweeps`) evaluated like a seed of `seed_runs`, with its sweep's name."""
    return [seed_record(member_dir(out / "runs" / name, m["member"]), m["seed"]) | dict(sweep=name)
            for name, result in sweeps.items() for m in result["members"]]


def sweeps_provenance(out: Path, sweeps: dict[str, dict]) -> dict:
    """The code, machine and numerics behind a table of sweep members (the first member's summary), and each
    sweep's seeds, size and wall time."""
    s = load_run(member_dir(out / "runs" / next(iter(sweeps)), 0)).summary
    return provenance(s, s.get("precision", "?")) | {"sweeps": "; ".join(
        f"{name} (seeds {min(m['seed'] for m in r['members'])}–{max(m['seed'] for m in r['members'])}, "
        f"{r['n_members']} members, {r['wall_s'] / 60:.1f} min)" for name, r in sweeps.items())}


def unstated_groups(out: Path, sweeps: dict[str, dict]) -> dict[tuple, list[dict]]:
    """The members of `sweeps` by (weight decay, clip norm), sorted by seed; a setting and seed in two sweeps counts
    once (the first sweep by name)."""
    groups: dict[tuple, dict[int, dict]] = {}
    for r in sweep_records(out, sweeps):
        groups.setdefault((r["weight_decay"], r["clip_norm"]), {}).setdefault(r["seed"], r)
    return {k: [v[seed] for seed in sorted(v)] for k, v in sorted(groups.items())}


# ---------------------------------------------------------------- where the two loops part

# seeds.json and unstated.json hold this project's addition seeds at the book's settings, batches98.json its runs
# with the DataLoader's 98 batches an epoch, torch_book_addition*.json the book's loop in PyTorch as written and in
# variants (torch_loop.py --drop-last / --weight-decay). Side by side they ask whether the loops differ
# and whether the last, partial batch (98 batches an epoch against miiii's 97) is why. Two samples *differ* when
# either exact test gives p < GAP_ALPHA; no correction for the two tests or the comparisons, so the rule leans
# toward finding a difference and never concludes that two loops are the same.
GAP_ALPHA = 0.05


def torch_book_runs(f: Path) -> list[dict]:
    """The runs of a torch_loop.py JSON (torch_book_TASK*.json), each with its file's loss floor and settings."""
    data = json.loads(f.read_text())
    return [dict(weight_decay=data.get("weight_decay", 0.01)) | r | {"loss_floor": data["loss_floor"]}
            for r in data["runs"]]


WARMUP1 = ["optim.warmup_first=1"]  # the book's loop's warm-up: the first step at lr / 200, not at 0 as optax's


def warmup1_runs(out: Path) -> list[dict]:
    """This project's addition-98 with the book's loop's warm-up (optim.warmup_first = 1), solo runs in
    OUT/runs/warmup1-sSEED, each trained by `python -m miiii train --preset addition-98 --seed SEED --set
    optim.warmup_first=1 --run-dir OUT/runs/warmup1-sSEED`: the finished ones' records, kept in OUT/warmup1.json
    (which --gap reads when the runs are gone). A directory whose config is not that one is refused."""
    f, done = out / "warmup1.json", sorted(out.glob("runs/warmup1-s*/summary.json"))
    if not done:
        return json.loads(f.read_text())["runs"] if f.is_file() else []
    records, numerics = [], set()
    for summary in done:
        run_dir, seed = summary.parent, int(summary.parent.name.removeprefix("warmup1-s"))
        want = apply_overrides(get_preset("addition-98"), WARMUP1 + [f"seed={seed}"])
        if read_config(run_dir) != want:
            raise ConfigError(f"{run_dir}'s config is not addition-98 with {WARMUP1[0]} at seed {seed}")
        s = json.loads(summary.read_text())
        numerics.add(f"{s['backend']} ({s['device']}), jax {s['jax_version']}, precision {s['precision']}")
        records.append(seed_record(run_dir, seed))
    records.sort(key=lambda r: r["seed"])
    prov = dict(collected_at=git_commit(), numerics=sorted(numerics), seeds=[r["seed"] for r in records],
                command=f"python -m miiii train --preset addition-98 --set {WARMUP1[0]} --seed SEED")
    f.write_text(json.dumps(to_jsonable(dict(provenance=prov, runs=records)), indent=1))
    return records


def _sample(key: str, loop: str, runs: list[dict], source: str) -> dict:
    """A sample of seeds of one loop; its weight decay, batches an epoch and budget read from its records."""
    return dict(key=key, loop=loop, runs=runs, source=source, wd=runs[0].get("weight_decay", 0.01),
                batches=runs[0]["batches_per_epoch"], budget=max(r["epochs"] for r in runs))


def gap_samples(out: Path) -> list[dict]:
    """Every addition sample OUT's JSONs hold, one per loop (a seed appears at most once in a sample)."""
    read = lambda name: json.loads((out / name).read_text()) if (out / name).is_file() else {}  # noqa: E731
    seeds, unstated, b98 = read("seeds.json"), read("unstated.json"), read("batches98.json")
    found = [("miiii solo", "miiii, solo runs", seeds.get("jax", {}).get("addition"), "seeds.json"),
             ("miiii swept", "miiii, vmapped sweep", unstated.get("wd=0.01 clip=1"), "unstated.json"),
             ("miiii 98", "miiii, vmapped sweep", b98.get("runs"), "batches98.json")]
    how = {"": "", "_drop_last": ", last batch dropped", "_wd=0.1": "", "_warmup0": ", first step at lr 0 (optax's)"}
    for tag, label in how.items():
        f = out / f"torch_book_addition{tag}.json"
        found.append(("PyTorch" + tag, "PyTorch, the book's loop" + label, torch_book_runs(f) if f.is_file() else None,
                      f.name))
    found.append(("miiii wd=0.1", "miiii, vmapped sweep", unstated.get("wd=0.1 clip=1"), "unstated.json"))
    found.append(("miiii PyTorch starts", "miiii, solo, from PyTorch's starts", read("same_start.json").get("runs"),
                  "same_start.json"))
    found.append(("miiii warmup1", "miiii, solo, the book's warm-up (first step at lr / 200)", warmup1_runs(out),
                  "warmup1.json"))
    return [_sample(*x) for x in found if x[2]]


GAP_COMPARISONS = (  # (question, sample a, sample b)
    ("at the book's settings, do this project's solo runs differ from the book's loop?", "miiii solo", "PyTorch"),
    ("at the book's settings, do this project's vmapped sweep members differ from the book's loop?", "miiii swept",
     "PyTorch"),
    ("does the book's loop change when its last, partial batch is dropped (98 -> 97 batches an epoch)?",
     "PyTorch", "PyTorch_drop_last"),
    ("does this project's loop change when it keeps the last, partial batch (97 -> 98 batches an epoch)?",
     "miiii swept", "miiii 98"),
    ("with 98 batches an epoch in both, does this project's loop differ from the book's?", "miiii 98", "PyTorch"),
    ("at weight decay 0.1, does this project's loop differ from the book's?", "miiii wd=0.1", "PyTorch_wd=0.1"),
    ("does the book's loop change when its warm-up starts at lr 0, as optax's (this project's) does?", "PyTorch",
     "PyTorch_warmup0"),
    ("with the same warm-up and 98 batches an epoch, does this project's loop differ from the book's?", "miiii 98",
     "PyTorch_warmup0"),
    ("from the same starts (PyTorch's initial parameters and batches), does this project's loop differ from the "
     "book's?", "miiii PyTorch starts", "PyTorch"),
    ("does this project's loop change when its warm-up's first step is at lr / 200, as the book's loop's?", "miiii 98",
     "miiii warmup1"),
    ("with the book's warm-up and 98 batches an epoch, does this project's loop differ from the book's?",
     "miiii warmup1", "PyTorch"),
)


def compare(a: list[dict], b: list[dict], budget: int) -> dict:
    """Two samples of seeds: Fisher's exact p on how many grok, the exact rank-sum p on the jump epochs (a seed
    that never jumps counted at budget + 1), and whether they differ (either p < GAP_ALPHA)."""
    da, db = distribution(a, budget), distribution(b, budget)
    p_grok = fisher_exact_p(da["grokked"], da["n"], db["grokked"], db["n"])
    p_jump = rank_sum_p(da["censored"], db["censored"])
    return dict(a=da, b=db, p_grokked=p_grok, p_jump=p_jump, differ=min(p_grok, p_jump) < GAP_ALPHA)


def pooled_by_loop(samples: list[dict], budget: int) -> dict | None:
    """Every run at weight decay 0.01 pooled by loop (this project's vs PyTorch's) and Fisher's p on the counts;
    None unless both loops have such runs."""
    loops: dict[str, dict] = {}
    for smp in samples:
        if smp["wd"] != 0.01:
            continue
        name = "PyTorch, the book's loop" if smp["key"].startswith("PyTorch") else "miiii"
        d = distribution(smp["runs"], budget)
        cur = loops.setdefault(name, dict(n=0, grokked=0, samples=0))
        cur.update(n=cur["n"] + d["n"], grokked=cur["grokked"] + d["grokked"], samples=cur["samples"] + 1)
    if len(loops) < 2:
        return None
    a, b = loops["miiii"], loops["PyTorch, the book's loop"]
    return dict(loops=loops, p_grokked=fisher_exact_p(a["grokked"], a["n"], b["grokked"], b["n"]))


def sample_label(smp: dict) -> str:
    return f"{smp['loop']}, wd {smp['wd']:g}, {smp['batches']} batches"


def gap_provenance(out: Path, samples: list[dict], head: dict) -> dict:
    """The report's commit and date (`head`), then where each input came from (its own provenance where it has
    one)."""
    prov = dict(head)
    for source in dict.fromkeys(s["source"] for s in samples):
        if source == "batches98.json":
            p = json.loads((out / source).read_text())["provenance"]
            prov[source] = (f"recorded at {p['commit'][:12]}, {p['device']}, jax {p['jax']}, precision "
                            f"{p['precision']}; {p['sweeps']}")
        elif source == "warmup1.json":
            p = json.loads((out / source).read_text())["provenance"]
            prov[source] = f"`{p['command']}`, {'; '.join(p['numerics'])}; collected at {p['collected_at'][:12]}"
        elif source == "same_start.json":
            p = json.loads((out / source).read_text())["provenance"]
            prov[source] = (f"seed records made at {p['seed records made at']}, {p['device']}, jax {p['jax']}, "
                            f"precision {p['precision']}; starts from torch {p['torch (the starts)']}")
        elif source.startswith("torch_book"):
            data = json.loads((out / source).read_text())
            prov[source] = (f"torch {data.get('torch', '?')}, {data.get('threads', '?')} thread(s) at the last call, "
                            f"{sum(r['wall_s'] for r in data['runs']) / 60:.0f} min in all")
        else:
            prov[source] = f"see {source.replace('.json', '.md')}'s provenance (commit, device, jax, precision)"
    return prov
