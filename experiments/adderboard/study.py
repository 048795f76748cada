"""The AdderBoard search: the smallest decoder of this project's one model family that adds two 10-digit numbers at
>= 99 % on the board's verifier (its 10 edge cases and 10,000 pairs of random.Random(2025)), trained by the generic
trainer from a seed.

    python -m experiments.adderboard.study                 # train the settings not trained yet (runs/adder/), then
                                                           # write the bundle (default runs/adderboard, scratch)
    python -m experiments.adderboard.study --no-train --only NAME --out results/adderboard   # NAME's records in
                                                           # the committed bundle, the others kept (a rewrite without
                                                           # --only needs every setting's runs)
    python -m experiments.adderboard.study --bundle results/adderboard [--check]  # results.md from its summaries
    python -m experiments.adderboard.study --only 32p-b36 --with-deps --runs R  # and every setting it needs, the
                                                           # folders already under R kept (make adder-32); a
                                                           # run a stopped study left unfinished is resumed

Each setting is a vmapped sweep over seeds (one compile per shape) or one solo run (a phase: `--init-from` another
setting's run), on the preset adder-146 with the changes it names. A run's exact match is the share of the 2,000
held-out pairs whose 11 sum digits it decodes autoregressively (summary.json); a run at >= 0.99 there is exported
(`python -m miiii export-adder`) and scored as the board scores (experiments/adderboard/score.py); the submission
files and their scores join the bundle. results.md is regenerated from summaries/search.json alone.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from experiments.adderboard.gauge import derived_record, score_derived
from experiments.adderboard.hard import carry_shaped, error_profile, off_by_one
from experiments.adderboard.launch import command, derive, find_hard, hard_command, resume_command, unfinished
from experiments.adderboard.recipes import Setting, phase_dirs
from experiments.adderboard.settings import DERIVED, SEARCH, needs
from experiments.generated import same_or_say
from miiii.errors import ConfigError, OneLineParser, lead, one_line_errors, out_folder
from miiii.files import write_json_atomic, write_text_atomic
from miiii.hard import round_file
from miiii.phases import finished_file, phase_summary, started_file

# the training loss (nats per answer digit, 10-digit operands) of a uniform guess at every digit, and of each digit's
# marginal: the ten sum digits uniform, the eleventh (the carry out) 0 or 1 about evenly
UNIFORM = math.log(10)
MARGINALS = (10 * math.log(10) + math.log(2)) / 11
QUALIFY = 0.99  # the board's bar, on its verifier's 10,010 cases
# a targeted round's error profile (hard.error_profile): its pairs, and a seed no round draws its hard pairs with
PROFILE_PAIRS, PROFILE_SEED = 20_000, 1000
EXPORT_AT = 0.99  # a run is exported and scored when its held-out autoregressive exact match reaches this


def setting_steps(s: Setting) -> int:
    """A setting's own steps: a phased preset's last phase's, else the setting's."""
    from miiii.presets import phase_configs

    return phase_configs(s.phased)[-1].train.steps if s.phased else s.steps


def model_shapes(cfg) -> dict:
    """The parameter tree (shapes) of a config's model, built without its data sets (a replay file of millions of
    rows, named by a path that holds only where the run trained)."""
    from dataclasses import replace

    from miiii.model import abstract_params, build_model
    from miiii.tasks import make_task

    task = make_task(replace(cfg.task, n_train=8, n_valid=8, replay=""))
    return abstract_params(build_model(cfg.model, task), task.n_ctx)


def unique_params(run_dir: Path) -> int:
    """The unique count of a run's model (model.count_params: ties and the tied head counted once)."""
    from miiii.model import count_params
    from miiii.rundir import read_config

    return count_params(model_shapes(read_config(run_dir)))


def member_record(run_dir: Path) -> dict | None:
    if not (run_dir / "summary.json").is_file():
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    cfg = json.loads((run_dir / "config.json").read_text())
    info = json.loads((run_dir / "member.json").read_text()) if (run_dir / "member.json").is_file() else {}
    rec = dict(run=run_dir.name, seed=cfg["train"]["seed"], lr=cfg["optim"]["lr"], values=info.get("values", {}),
               steps=summary["steps"], exact=summary.get("valid_autoregressive_acc"),
               train_loss=round(float(summary["final"]["train"]["loss"]), 4))
    if cfg["train"].get("soft_ties"):  # how far its soft ties are from holding, at its start and its end
        rec["soft"] = soft_gaps(run_dir)
    return rec


def soft_gaps(run_dir: Path) -> dict:
    """A soft-tie run's ties, weight, summed squared gap (soft_ties.tie_gap) at step 0 and at its end, and its
    held-out exact match with its final parameters tied (soft_ties.tied_now): where a tied round would start."""
    from dataclasses import replace

    from miiii.bookeval import Evaluator
    from miiii.run import load_run
    from miiii.soft_ties import tie_gap, tied_now

    run = load_run(run_dir)
    ties = run.config.train.soft_ties
    ev = Evaluator(run, replace(run.config.task, replay="", n_train=8))  # the run's held-out set, no training set
    ev.params = tied_now(ev.params, ties)
    return dict(ties=list(ties), weight=run.config.train.soft_tie_weight,
                start=round(float(tie_gap(run.params_at(0), ties)), 6), end=round(float(tie_gap(run.params, ties)), 9),
                tied_exact=float(ev.autoregressive(ev.task.valid.x, ev.task.valid.y).mean()))


def setting_record(s: Setting, runs: Path) -> dict | None:
    from miiii.presets import PHASED, phase_configs

    d = runs / s.name
    if s.phased:  # only a recipe whose every phase finished: its run is the last phase
        phases = phase_dirs(d)
        if len(phases) != len(PHASED[s.phased][1]) or not all(finished_file(p).is_file() for p in phases):
            return None
    members = [phases[-1]] if s.phased else [d] if s.init_from else sorted(d.glob("member_*"))
    recs = [r for m in members if (r := member_record(m)) is not None]
    if not recs:
        return None
    files = [p for m in members for p in (m / "metrics.jsonl", m / "config.json") if p.is_file()]
    wall = max(p.stat().st_mtime for p in files) - min(p.stat().st_mtime for p in files)
    earlier = f"{s.phased}'s earlier phases" if s.phased and len(PHASED[s.phased][1]) > 1 else ""
    rec = dict(name=s.name, why=s.why, params=unique_params(members[0]), steps=setting_steps(s),
               init_from=s.init_from or earlier,
               command=(hard_command(s, runs) + " && " if s.hard else "") + "python -m miiii "
               + " ".join(command(s, runs)),
               wall_s=round(wall, 1), members=recs)
    if not s.phased and not s.init_from and (sweep := d / "sweep.json").is_file():  # a sweep stopped and resumed:
        if json.loads(sweep.read_text()).get("resumed_from") is not None:  # its span of files holds the pause
            rec["resumed"] = True
    if s.hard or (s.phased and phase_configs(s.phased)[-1].task.replay_hard):
        # a targeted round (a recipe's last phase too): where its run still goes wrong
        rec["profile"] = dict(error_profile(members[0], PROFILE_PAIRS, PROFILE_SEED), run=s.name)
    if s.phased:  # every phase's own record: how far each got, and how long it took (its summary's wall time)
        done = [phase_summary(p) for p in phases]  # a screen's: its chosen member's, the sweep's wall time
        rec["phases"] = [dict(steps=x["steps"], exact=x.get("valid_autoregressive_acc"), wall_s=round(x["wall_s"], 1),
                              resumed=x.get("resumed_from") is not None) | ({"screen": x["screen"]} if "screen" in x
                                                                            else {}) for x in done]
        for k, x in enumerate(rec["phases"][1:], 2):  # a round's hard pairs: found between the phase before and it
            if (hard := round_file(d, k)).is_file():
                x["hard"] = dict(pairs=len(np.load(hard)), find_s=round(
                    hard.stat().st_mtime - finished_file(phases[k - 2]).stat().st_mtime, 1))
        rec["wall_s"] = round(sum(x["wall_s"] + x.get("hard", {}).get("find_s", 0) for x in rec["phases"]), 1)
        for x, p in zip(rec["phases"], phases, strict=True):  # start-up and the final evaluations too
            x["elapsed_s"] = round(finished_file(p).stat().st_mtime - started_file(p).stat().st_mtime, 1)
        # a recipe stopped between phases waited there: its phases' own spans, each round's search for its pairs
        rec["elapsed_s"] = round(sum(x["elapsed_s"] + x.get("hard", {}).get("find_s", 0) for x in rec["phases"]), 1)
    return rec


def score_runs(summary: dict, runs: Path, out: Path) -> list[dict]:
    """Export and score (the verifier's 10,010 cases) every run at EXPORT_AT or above; the files join out/."""
    from experiments.adderboard.score import export_scored

    scores = []
    for rec in summary["settings"]:
        for m in rec["members"]:
            if m["exact"] is None or m["exact"] < EXPORT_AT:
                continue
            run_dir = runs / rec["name"]  # a solo phase's run, or the folder of members (a sweep) or phases (a preset)
            run_dir = run_dir if (run_dir / "summary.json").is_file() else run_dir / m["run"]
            name = f"adder-{rec['params']}p-{rec['name']}" + ("" if rec["init_from"] else f"-{m['run']}")
            scores.append(dict(setting=rec["name"], run=m["run"], **export_scored(run_dir, out, name)))
    return scores


def merged(path: Path, new: dict) -> dict:
    """`new`'s settings and scores in place of their namesakes in the summary at `path` (if any), in SEARCH's order."""
    if not path.is_file():
        return new
    old = json.loads(path.read_text())
    names = {r["name"] for r in new["settings"] + new.get("derived", [])}
    order = {n: k for k, n in enumerate([s.name for s in SEARCH] + [d.name for d in DERIVED])}

    def renewed(part: str, key: str) -> list[dict]:  # a record of a setting no longer searched stays, last
        kept = [r for r in old.get(part, []) if r[key] not in names]
        return sorted(kept + new.get(part, []), key=lambda r: order.get(r[key], len(order)))

    derived = renewed("derived", "name")
    return ({"qualify": QUALIFY, "settings": renewed("settings", "name"), "scores": renewed("scores", "setting")}
            | ({"derived": derived} if derived else {}))


def minutes(seconds: float | None, resumed: bool = False) -> str:
    """A span of seconds in minutes for a table; – unknown, * a stopped and resumed span (its pause counts)."""
    return "–" if seconds is None else f"{seconds / 60:.1f}{'*' if resumed else ''}"


def results_md(summary: dict) -> str:
    lines = ["# AdderBoard: the smallest trained 10-digit adder of the model family", "",
             "Generated by `python -m experiments.adderboard.study` from `summaries/search.json`; do not edit.", "",
             f"The board's bar: >= {QUALIFY:.0%} of its verifier's 10,010 cases (10 edge cases, then 10,000 pairs of "
             "random.Random(2025)). *Exact match* below is the share of this project's 2,000 held-out pairs decoded "
             "whole (autoregressive, 11 digits); a run at >= "
             f"{EXPORT_AT:.2f} there is exported and scored on the verifier's cases. *Loss* is the final training "
             "loss in nats per answer digit. On 10-digit operands a uniform guess at every digit costs "
             f"{UNIFORM:.2f} and each digit's marginal (the eleventh, the carry out, is 0 or 1) {MARGINALS:.2f}; "
             "runs that learned nothing of the sum stop near 2.27, between the two. *Wall* is the minutes from a "
             "setting's first file to its last, on a machine shared with whatever else ran; a sweep stopped and "
             "resumed (marked *) counts its pause too.", "",
             "| setting | unique params | steps | seed: exact match (lr, loss) | runs at >= 0.99 "
             "| wall (min, shared) |",
             "|---|---|---|---|---|---|"]
    for r in summary["settings"]:
        per = ", ".join(f"{m['seed']}: {m['exact']:.3f} ({m['lr']:g}, {m['train_loss']:.2f})" for m in r["members"])
        hit = sum(m["exact"] is not None and m["exact"] >= 0.99 for m in r["members"])
        after = f" after {r['init_from']}" if r["init_from"] else ""
        lines.append(f"| {r['name']} | {r['params']} | {r['steps']:,}{after} | {per} | {hit} of {len(r['members'])} | "
                     f"{minutes(r['wall_s'], r.get('resumed'))} |")
    phased = [r for r in summary["settings"] if len(r.get("phases") or ()) > 1]  # one phase: the main table says it
    if phased:
        lines += ["", "## Phased presets, phase by phase", "",
                  "Each phase's held-out exact match at its end and its own wall time (its summary.json; a resumed "
                  "phase's, marked *, is its last session's only; a screen's, its sweep's, its exact match the "
                  "member the next phase continues (the lowest final training loss); a round's, + the minutes from "
                  "the phase before's "
                  "end to its hard pairs' file, and how many pairs it replays). The main table's wall time for these "
                  "is the sum. A wall time is the training loop's alone; *elapsed* is the minutes from the phase's "
                  "first file to its last: the task's draw, the compile and the evaluation of the final parameters "
                  "(in a screen every member's, on the whole training set) too, and in the row *all* the phases' sum "
                  "with the rounds' searches for their hard pairs; – where the bundle's record predates it.",
                  "", "| setting | phase | steps | exact match | wall (min) | elapsed (min) |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {k} | {x['steps']:,} | {'–' if x['exact'] is None else format(x['exact'], '.4f')}"
                  + (f" (member {c['member']} of {c['members']}, seed {c['seed']})" if (c := x.get("screen")) else "")
                  + f" | {minutes(x['wall_s'], x.get('resumed'))}"
                  + (f" + {minutes(h['find_s'])} ({h['pairs']:,} hard pairs)" if (h := x.get("hard")) else "")
                  + f" | {minutes(x.get('elapsed_s'), x.get('resumed'))} |"
                  for r in phased for k, x in enumerate(r["phases"], 1)]
        lines += [f"| {r['name']} | all | {sum(x['steps'] for x in r['phases']):,} | | {minutes(r['wall_s'])} "
                  f"| {minutes(r.get('elapsed_s'), any(x.get('resumed') for x in r['phases']))} |" for r in phased]
    profiled = [r for r in summary["settings"] if r.get("profile")]
    if profiled:
        lines += ["", "## Where the targeted rounds' runs go wrong", "",
                  f"Each round's run decoding {PROFILE_PAIRS:,} uniform pairs of seed {PROFILE_SEED} "
                  "(`experiments/adderboard/hard.py --profile`): at each wrong sum's first wrong digit, the predicted "
                  "minus the true digit (mod 10), and the column value there (a_k + b_k + the carry into k, 0..19) "
                  "with the first errors per such column among all the pairs' columns.", "",
                  "*Carry-shaped*: of the first wrong digits off by one, those one low after a carry in or one high "
                  "without one, what a lost or an invented carry gives.", "",
                  "| setting | exact match | first errors | off by ±1 | carry-shaped | column values first wrong "
                  "(share of such columns) |", "|---|---|---|---|---|---|"]
        for r in profiled:
            p = r["profile"]
            n = sum(p["first_offset"])
            first, base = p["first_column_value"], p["column_value_base"]
            top = ", ".join(f"{v}: {first[v]:,} ({first[v] / base[v]:.1%})"
                            for v in sorted(range(20), key=lambda v: -first[v])[:5] if first[v])
            lines.append(f"| {r['name']} | {p['exact']:.4f} | {n:,} | {off_by_one(p):,} | {carry_shaped(p):,} "
                         f"| {top} |")
    chained = [r["profile"] | dict(name=r["name"]) for r in profiled if "first_chain" in r["profile"]]
    if chained:
        lines += ["", "## The carry chain into the first wrong digit", "",
                  "The same profiles (those written since it was added): at each wrong sum's first wrong digit, the "
                  "length of the carry chain into it (0: no carry in; 1: made by the column just below, a + b >= 10; "
                  "L: made L columns below and passed on by the L - 1 columns between, a + b = 9 each; "
                  "`hard.carry_chains`), with the first errors per such digit among all the pairs' answer digits. A "
                  "model that reads only the d columns below a digit gets every chain longer than d wrong.", "",
                  "| setting | exact match | chain 0 | chain 1 | chain 2 | chain 3 or longer |",
                  "|---|---|---|---|---|---|"]
        for p in chained:
            first, base = p["first_chain"], p["chain_base"]
            cells = [(first[c], base[c]) for c in (0, 1, 2)] + [(sum(first[3:]), sum(base[3:]))]
            lines.append(f"| {p['name']} | {p['exact']:.4f} | "
                         + " | ".join(f"{f:,} ({f / b:.2%})" if b else "–" for f, b in cells) + " |")
    soft = [(r, m) for r in summary["settings"] for m in r["members"] if m.get("soft")]
    if soft:
        lines += ["", "## Soft ties: how far each soft round's ties are from holding", "",
                  "A soft round trains with its loss plus the weight times the summed squared gap between each soft "
                  "tie's follower and its master (`train.soft_ties`, `miiii/soft_ties.py`); a later round ties them "
                  "for good, leaving the follower out. The gap at the round's first step and at its end, the held-out "
                  "exact match at its end, and the same with its ties made there (each follower set to its master: "
                  "where a tied round from it starts):", "",
                  "| setting | soft ties | weight | gap at start | gap at end | exact match | tied |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {', '.join(g['ties'])} | {g['weight']:g} | {g['start']:.4g} | {g['end']:.4g} "
                  f"| {m['exact']:.3f} | {g['tied_exact']:.3f} |" for r, m in soft if (g := m["soft"])]
    if summary.get("derived"):
        lines += ["", "## Trained runs without their symmetries (gauge.py)", "",
                  "A trained run's parameters moved along directions that change no argmax, then entries pinned "
                  "(`model.pins`: constants, no parameters), with no training step. *Logits*: on the source's "
                  "first held-out rows, the derived logits are the source's times a positive factor per position "
                  "(its range; 1 where the directions keep the logits themselves), to the largest gap shown, as a "
                  "share of the largest logit (float32). *Exact match* as above.", "",
                  "| folder | from | unique params | pins | logits: factor, gap (rows) | same argmax | exact match |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['source']} | {r['params']} | {', '.join(f'`{p}`' for p in r['pins'])} | "
                  f"{r['factor'][0]:.4f} – {r['factor'][1]:.4f}, {r['logit_gap']:.1e} ({r['rows']}) | "
                  f"{'yes' if r['same_argmax'] else 'no'} | {r['exact']:.4f} |" for r in summary["derived"]]
    lines += ["", "## Scored on the verifier's cases", ""]
    if summary["scores"]:
        lines += ["| file | unique params | cases passed | accuracy | qualifies |", "|---|---|---|---|---|"]
        lines += [f"| `{s['file']}` | {s['params']} | {s['passed']:,} of {s['cases']:,} | {s['accuracy']:.2%} | "
                  f"{'yes' if s['accuracy'] >= QUALIFY else 'no'} |" for s in summary["scores"]]
    else:
        lines.append(f"No run has reached {EXPORT_AT:.2f} exact match on the held-out pairs yet: nothing qualifies.")
    lines += ["", "## What each setting asks", ""]
    lines += [f"- **{r['name']}**: {r['why']}{'' if r['why'].endswith(('?', '.')) else '.'} `{r['command']}`"
              for r in summary["settings"] + summary.get("derived", [])]
    return "\n".join(lines) + "\n"


def write_bundle(summary: dict, out: Path, check: bool = False) -> int:
    text = results_md(summary)
    if check:
        return same_or_say(out / "results.md", text, f"python -m experiments.adderboard.study --bundle {out}")
    write_text_atomic(out / "results.md", text)
    return 0


def study(args) -> int:
    if args.bundle is not None:
        summary = json.loads((args.bundle / "summaries" / "search.json").read_text())
        return write_bundle(summary, args.bundle, args.check)
    if args.with_deps:
        if not args.only:
            raise ConfigError("--with-deps adds what --only's settings need: name them with --only")
        present = {p.name for p in args.runs.iterdir()} if args.runs.is_dir() else set()
        args.only = list(needs(args.only, present))
    out_folder(args.out)
    if not args.no_train:
        from miiii.cli import main as miiii

        for s in SEARCH:
            if args.only and s.name not in args.only:
                continue
            if unfinished(s, args.runs):  # stopped part way (a study interrupted): continued where it stopped
                argv = resume_command(s, args.runs)
            elif (args.runs / s.name).exists() and not s.phased:
                continue  # trained already, or restored from its submission
            else:
                derive(s.init_from, args.runs)  # a derived folder it starts from, written first
                for h in s.hard:  # a targeted round: a derived folder it draws hard pairs from likewise, then its pairs
                    derive(h.partition("@")[0], args.runs)
                if s.hard:
                    find_hard(s, args.runs)
                argv = command(s, args.runs)
            if (rc := miiii(argv)) != 0:
                return 130 if rc == 130 else 1  # stopped (its one line said so) or failed
        for d in DERIVED:
            if not args.only or d.name in args.only:
                derive(d.name, args.runs)
    settings = [r for s in SEARCH if not args.only or s.name in args.only
                if (r := setting_record(s, args.runs)) is not None]
    derived = [r for d in DERIVED if not args.only or d.name in args.only
               if (r := derived_record(d, args.runs)) is not None]
    if not settings and not derived:
        raise ConfigError(f"no setting of the search has finished runs under {args.runs}")
    summary = {"qualify": QUALIFY, "settings": settings} | ({"derived": derived} if derived else {})
    summary["scores"] = (score_runs(summary, args.runs, args.out)  # derived folders, as runs, at EXPORT_AT or above
                         + score_derived([r for r in derived if r["exact"] >= EXPORT_AT], args.runs, args.out))
    if args.only:  # the other settings' records stay as the bundle has them (their runs may be gone)
        summary = merged(args.out / "summaries" / "search.json", summary)
    (args.out / "summaries").mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out / "summaries" / "search.json", summary)
    return write_bundle(summary, args.out)


def parser() -> OneLineParser:
    ap = OneLineParser(description=lead(__doc__))
    ap.add_argument("--runs", type=Path, default=Path("runs/adder"), help="where the settings train (runs/adder)")
    ap.add_argument("--out", type=Path, default=Path("runs/adderboard"),
                    help="the bundle (default runs/adderboard, scratch; --out results/adderboard rewrites the "
                         "committed one)")
    ap.add_argument("--only", nargs="+", action="extend", default=None,
                    choices=[s.name for s in SEARCH] + [d.name for d in DERIVED],
                    help="these settings only (repeatable: --only A B --only C); the bundle's records of the others "
                         "are kept as they are. NAME: a setting of experiments/adderboard/settings.py (SEARCH, "
                         "DERIVED), as results.md names it")
    ap.add_argument("--with-deps", action="store_true",
                    help="with --only: also every setting they start from or draw hard pairs from, transitively (their "
                         "seeds' whole lineage; a folder already under --runs, a restored one among them, is not "
                         "trained again)")
    ap.add_argument("--no-train", action="store_true", help="write the bundle from the finished runs as they are")
    ap.add_argument("--bundle", type=Path, default=None,
                    help="regenerate BUNDLE's results.md from its summaries/search.json alone")
    ap.add_argument("--check", action="store_true", help="with --bundle: exit 1 when results.md differs")
    return ap


def main(argv=None) -> int:
    return one_line_errors(study, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
