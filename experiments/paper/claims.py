"""The paper's claims judged as written, over seeds, from each run's measures (measures.run_measures: the JSON a
bundle commits), so results.md regenerates from a bundle's files alone (report.py).

Each `Claim` quotes the paper (verbatim, or marked as a paraphrase where the copy read holds no sentence), names its
location, and judges every seed with one pure rule function (`rules.py`). The printed rule *is* that function's
docstring (`rule_text`), so the rule a reader sees is the rule applied. A verdict errs toward *does not hold*:

- it holds only when it holds in every seed; one seed against it makes it *does not hold*;
- a claim with a control (λ = 0 against λ > 0, the shuffled-label run in miiii's place, ...) applies the same rule to
  the control run: where the control passes too, the rule cannot tell the effect from its absence and the seed is
  *not testable at this scale* (the printed rule says so);
- a claim about what a model learned is *not testable* in a seed whose run did not generalise every task (`learned`);
  a claim about when two runs grok is judged over what each groks, and a sentence about numbers, equations or tables
  (facts.py) by computing it;
- a pooled claim (Table 3's spike) is judged once over all seeds against their spread;
- where the text, the original code or a figure define a number differently, each definition is its own row, named.

`claims(measures)` takes {role: [measures dict per seed, the recorded run first]} for the roles nanda, miiii,
masked, basis, nogrokfast, nodropout (any may be missing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from experiments.paper import facts as F
from experiments.paper.readings import (  # noqa: F401 - Reading and the readers, reached as claims.* too
    NON_COMMUTATIVE_ROLES,
    Reading,
    _around,
    _attention,
    _basis,
    _diffuse,
    _faster,
    _fft,
    _masked_all,
    _masked_first,
    _nanda_attention,
    _no_zero,
    _nodropout,
    _nogf,
    _not_delayed,
    _order,
    _order_matters,
    _perfect,
    _pos,
    _prime_count,
    _primes_below,
    _slower,
    _spike,
    _steps,
    _succession,
    _task_count,
    by_q,
    fmt,
    grok,
    n_grok,
)
from miiii.analysis import GROK_THRESHOLD
from miiii.rules import (  # the rules and their constants; tests reach them as claims.rule_*
    ALPHA,  # noqa: F401 - the permutation test's level, beside the rules that use it
    MIN_LEARNED,
    MIN_ORDER_TASKS,  # noqa: F401 - the rules' constants, reached as claims.* by the tests
    MIN_SHARED_TASKS,  # noqa: F401
    PAPER_STEPS,  # noqa: F401
    SMALL,  # noqa: F401
    printed_rule,
    rule_about,
    rule_all_grok,
    rule_band,
    rule_basis,
    rule_both_digits_per_head,
    rule_did_not_converge,
    rule_first_grok,
    rule_grokfast_faster,
    rule_in_succession,
    rule_more,
    rule_more_diffuse,
    rule_no_particular_order,
    rule_not_delayed,
    rule_one_digit_per_head,
    rule_only_primes,
    rule_order_matters,
    rule_overfits_all_but,
    rule_perfect,
    rule_remaining_later_around,
    rule_slower,
    rule_spike,
    seeds_counted,
)
from miiii.rules import verdict as rules_verdict

VERDICTS = ("holds", "does not hold", "not testable")


@dataclass(frozen=True)
class Claim:
    key: str
    text: str  # the paper's words (verbatim unless `paraphrase`)
    source: str  # where: section, figure or table of the paper, or the original code's file
    paper: str  # the paper's number, as printed
    rule: Callable  # pure; its docstring's first paragraph is the printed rule
    roles: tuple[str, ...]
    read: Callable  # {role: measures} -> Reading (pooled: [{role: measures}, ...] -> Reading)
    control: Callable | None = None  # {role: measures} -> the rule's arguments on the control run
    control_roles: tuple[str, ...] = ()
    control_name: str = ""
    pooled: bool = False
    definition: str = ""  # the named definition a row uses, where the paper's numbers have several
    paraphrase: bool = False  # the copy of the paper read has no sentence: the project's summary, marked as such
    # the runs that must have generalised every task for the claim to be testable in a seed: a claim about what the
    # model learned says nothing where the control run did not learn (() for a claim about p alone)
    learned: tuple[str, ...] = ("miiii",)


def rule_text(claim: Claim) -> str:
    """The printed rule: the named definition, the rule function's docstring and the control, in one sentence."""
    doc = printed_rule(claim.rule)
    text = (f"{claim.definition}: " if claim.definition else "") + doc
    if claim.control:
        text += (f" Control: the same rule on {claim.control_name}; where it passes too, the seed is not testable at "
                 "this scale.")
    return text


# ---------------------------------------------------------------- the claims

SEC_HP = "§Results and analysis › Hyper-parameter optimization"
SEC_PERF = "§Results and analysis › Model performance, Fig. 5"
SEC_EMB = "§Results and analysis › Embeddings"
SEC_TASK = "§Introduction (about the task itself: a function of p, no training)"
TABLE3 = ("project: dominance, mean + 2 std per step", "original: neuron 0, mean + 1 std",
          "original: neuron 0, mean + 2 std", "original: mean over neurons, mean + 1 std",
          "original: mean over neurons, mean + 2 std")
FFT = {"above_mean_2std": "figures' definition (Figs. 11–12: a frequency whose norm is above mean + 2 std of the "
                          "non-constant frequencies)",
       "energy_90": "energy definition (the fewest frequencies holding 90 % of W_E's Fourier energy)"}
# A comparison of miiii with nanda that the shuffled-label run passes as well says nothing about what miiii learned:
# where it does, the seed is not testable at this scale.
BASIS_CONTROL = "the shuffled-label run (basis) in miiii's place"
BOTH = ("nanda", "miiii")  # a comparison of the two tasks: both runs must have learned
CALC = "(a computation, no training)"


def _fact(key, text, source, paper, rule, read, definition=""):
    """A sentence about numbers, equations or tables (facts.py): judged by computing it, in every bundle."""
    return Claim(key, text, f"{source} {CALC}", paper, rule, ("miiii",), read, definition=definition, learned=())


FACTS = (
    _fact("tasks-113", "For p = 113, this yields 29 parallel tasks, one for each prime less than p", "§Methods › Tasks",
          "29", F.rule_equal, F.tasks_113),
    _fact("largest-113", "the largest prime less than p, 109, requires predictions across 109 classes",
          "§Methods › Tasks", "109", F.rule_equal, F.largest_113),
    _fact("p11-samples", "with p = 11, the input space consists of all pairs (x0, x1) where x0, x1 < 11, representing "
          "numbers up to 11² − 1 = 120. This yields a dataset of 121 samples.", "§Methods › Data", "120; 121",
          F.rule_equal, F.p11_samples),
    _fact("p11-tasks", "For p = 11, this means predicting the remainder when dividing by 2, 3, 5, and 7",
          "§Methods › Data", "2, 3, 5, 7", F.rule_equal, F.p11_tasks),
    _fact("samples-113", "The training uses full batch gradient descent with the entire dataset of p² samples (12769 "
          "when p = 113)", "§Methods › Training", "12,769", F.rule_equal, F.samples_113(12769)),
    _fact("vector-113", "Inspecting a specific activation thus yields a 1 × 12796 vector v, which can be reshaped as a "
          "113 × 113 matrix", "§Methods › Visualization", "12,796", F.rule_equal, F.samples_113(12796)),
    *(_fact(f"sqrt-test-{k}", "to test if a given natural number is prime, it suffices to test that it is not a "
            "multiple of any prime less than its square root", "§Introduction", "q < √n", F.rule_primality_test,
            F.sqrt_test(k == "lt"), definition=d) for k, d in
      (("lt", "as written: every natural number 1 ≤ n < p², the primes q < √n"),
       ("le", "a reading: 2 ≤ n < p², the primes q ≤ √n (the textbook test)"))),
    _fact("tasks-sqrt", "The choice of using every prime less than the square root of the largest number of the "
          "dataset", "§Introduction", "q < √(p² − 1)", F.rule_equal, F.tasks_sqrt),
    *(_fact(f"uniform-{t}", "modular arithmetic on primes is a particularly useful task for MI as it ensures "
            "uniformity among the output classes", "§Introduction", "uniform classes", F.rule_uniform,
            F.uniform_classes(t), definition=d) for t, d in
      (("nanda", "T_nanda: (x0 + x1) mod p over the p² pairs"),
       ("miiii", "T_miiii: n mod q over the p² samples, every prime q < p"))),
    _fact("ce-ln-n", "the expected cross entropy for an n-class problem is ln(n)", "§Methods › Tasks", "ln n",
          F.rule_close, F.ce_ln_n),
    _fact("ce-ln-inverse", "Note that E[L_MCE] = ln(1/q), where q is the number of classes within the task in "
          "question", "§Methods › Training", "ln(1/q)", F.rule_close, F.ce_ln_inverse),
    _fact("eq-4.1", "sin(w(x0 + x1)) = sin(w x0) cos(w x0) + cos(w x0) sin(w x1)", "§Background › Case study: "
          "modular addition, Eq. 4.1 (as printed)", "Eq. 4.1", F.rule_close, F.equation("4.1")),
    _fact("eq-4.2", "cos(w(x0 + x1)) = cos(w x1) cos(w x1) − sin(w x0) sin(w x1)", "§Background › Case study: "
          "modular addition, Eq. 4.2 (as printed)", "Eq. 4.2", F.rule_close, F.equation("4.2")),
    _fact("eq-5", "cos(w(x0 + x1 − c)) = cos(w(x0 + x1)) cos(w c) + sin(w(x0 + x1)) sin(w c)", "§Background › Case "
          "study: modular addition, Eq. 5.1–5.2 (the identity; Logit(c) ∝ its left side is Nanda et al.'s finding)",
          "Eq. 5", F.rule_close, F.equation("5")),
    _fact("table2-in-table1", "Hyper parameter optimization was conducted using Optuna, searching over Table 1 […] "
          "The best-performing hyper-parameters for training the model on T_miiii are listed in Table 2",
          "§Methods › Training, §Results and analysis › Hyper-parameter optimization, Tables 1–2", "wd 1/3",
          F.rule_in_space, F.table2_in_table1),
)
CLAIMS = (
    Claim("pos-nanda", "For T_nanda, which involves a commutative task, the positional embeddings are virtually "
          "identical, with a Pearson correlation of 0.95", f"{SEC_EMB}, Fig. 7", "r = 0.95", rule_band, ("nanda",),
          _pos("nanda", 0.95), learned=("nanda",)),
    Claim("pos-miiii", "for T_miiii, the positional embeddings have a Pearson correlation of −0.64, indicating that "
          "the embeddings for the two positions are different", f"{SEC_EMB}, Fig. 7", "r = −0.64", rule_band,
          ("miiii",), _pos("miiii", -0.64)),
    Claim("pos-cause", "This difference is expected due to the non-commutative nature of the task, where the order of "
          "x0 and x1 matters", f"{SEC_EMB}, Fig. 7", "nanda +0.95, miiii −0.64", rule_order_matters,
          ("nanda", "miiii", "nodropout"), _order_matters, learned=BOTH),
    Claim("perfect", "The model achieves a perfect accuracy of 1 on the validation set across all 29 tasks", SEC_PERF,
          "29/29 at 1.0", rule_perfect, ("miiii",), _perfect),
    Claim("succession", "tasks corresponding to modulo 2, 3, 5, and 7 generalized in succession", SEC_PERF,
          "2, 3, 5, 7", rule_in_succession, ("miiii",), _succession),
    Claim("around-40k", "the remaining 25 tasks generalized around epoch 40000", SEC_PERF, "≈ 40,000 of 65,536",
          rule_remaining_later_around, ("miiii",), _around),
    Claim("no-order", "the remaining 25 tasks generalized around epoch 40000 in no particular order", SEC_PERF,
          "no order", rule_no_particular_order, ("miiii",), _order),
    Claim("harder-slower", "as T_miiii is harder than T_nanda the model can be expected to generalize slower when "
          "trained on the former", "§Introduction", "slower", rule_slower, ("nanda", "miiii"), _slower,
          control=lambda r: _slower({"nanda": r["nanda"], "miiii": r["basis"]}).args, control_roles=("nanda", "basis"),
          control_name=BASIS_CONTROL, learned=BOTH),
    Claim("lambda-0", "Notably, the model did not converge when λ = 0", SEC_HP, "does not converge",
          rule_did_not_converge, ("nogrokfast",), _nogf, control=lambda r: (grok(r["miiii"]),),
          control_roles=("miiii",), control_name="the λ > 0 run that should converge"),
    Claim("grokfast-faster", "confirming the utility of the gradient amplification method proposed by Lee et al. "
          "(2024) in the context of T_miiii", SEC_HP, "–", rule_grokfast_faster, ("miiii", "nogrokfast"), _faster),
    Claim("svd", "The singular values for T_miiii are more diffuse, indicating that a larger number of components "
          "are needed to capture the variance in the embeddings compared to T_nanda", f"{SEC_EMB}, Fig. 8",
          "ticks nanda 5 / 49, miiii 35 / 73 (original, Σσ)", rule_more_diffuse, ("nanda", "miiii"), _diffuse,
          definition="counts of Σσ (the original code's normalisation; its ticks are count − 2)",
          control=lambda r: _diffuse({"nanda": r["nanda"], "miiii": r["basis"]}).args, control_roles=("nanda", "basis"),
          control_name=BASIS_CONTROL, learned=BOTH),
    *(Claim(f"fft-{key}", "Only a few frequencies are active for T_nanda […] For the T_miiii model, we observe a "
            "broader spectrum of active frequencies", f"{SEC_EMB}, Figs. 11–12", "few vs broader", rule_more,
            ("nanda", "miiii"), _fft(key), definition=FFT[key],
            control=lambda r, key=key: _fft(key)({"nanda": r["nanda"], "miiii": r["basis"]}).args,
            control_roles=("nanda", "basis"), control_name=BASIS_CONTROL, learned=BOTH) for key in FFT),
    Claim("basis", "Comparing with T_basis in figure Figure 13, the periodicity is understood to be a structure "
          "inherent to the data picked up by the model", f"{SEC_EMB}, Fig. 13", "no periodicity", rule_basis,
          ("basis",), _basis),
    Claim("attention", "miiii's heads each attend to one digit", "Fig. 18 (the figure's reading; no sentence)",
          "one digit per head", rule_one_digit_per_head, ("miiii",), _attention, paraphrase=True),
    Claim("attention-nanda", "nanda's heads attend to both digits (the contrast Fig. 18 draws with miiii's)",
          "Fig. 18 (the figure's reading; no sentence)", "both digits per head", rule_both_digits_per_head, ("nanda",),
          _nanda_attention, paraphrase=True, learned=("nanda",)),
    *(Claim(f"table3-{i}", "the number of active frequencies |ω| over training: a transient spike while the last "
            "tasks are learned", "Table 3, Fig. 16", "0, 0, 10, 18, 10 at epochs 256 … 65,536", rule_spike,
            ("miiii",), _spike(d), pooled=True, definition=d, paraphrase=True) for i, d in enumerate(TABLE3)),
    Claim("masked-spike", "[in the masked run] the active-frequency curve: a transient spike while the last tasks are "
          "learned", "Appendix (masked run's active-frequency curve)", "as Table 3", rule_spike, ("masked",),
          _spike(TABLE3[0], "masked"), pooled=True, definition=TABLE3[0], paraphrase=True),
    Claim("masked-first", "in the masked run the tasks 11, 13, 17, 19 grok first", "Appendix (masked run)",
          "11, 13, 17, 19 first", rule_first_grok, ("masked",), _masked_first, paraphrase=True),
    Claim("masked-all", "[in the masked run, 11, 13, 17, 19 first,] then all tasks", "Appendix (masked run)",
          "all tasks", rule_all_grok, ("masked",), _masked_all, paraphrase=True),
    # a comparison of when the two runs grok, judged over what each run groks: it needs neither run to finish
    Claim("masked-not-delayed", "[in the masked run] the rest are not notably delayed", "Appendix (masked run)",
          "not notably delayed", rule_not_delayed, ("masked", "miiii"), _not_delayed, paraphrase=True, learned=()),
    Claim("no-dropout", "with dropout off the model overfits every task but q ∈ {2, 3}", "Appendix (no dropout)",
          "overfits all but 2, 3", rule_overfits_all_but, ("nodropout",), _nodropout, paraphrase=True),
    *(Claim(f"no-zeros-{lower}", "primes are the only samples whose target vector contains no zeros, since it is not a "
            "multiple of any of the factors q", SEC_TASK, "no zeros ⇔ prime", rule_only_primes, ("miiii",),
            _no_zero(lower), definition=what, learned=()) for lower, what in
      (("0", "as written: every sample, 0 ≤ n < p²"), ("p", "a reading: the samples past one digit, p ≤ n < p²"))),
    Claim("prime-count", "There are about n ln(n) primes less than n", SEC_TASK, "n ln n", rule_about, ("miiii",),
          _prime_count, learned=()),
    Claim("task-count", "two splits (train/valid) about p ln(p) tasks", "§Methods › Visualization (a "
          "function of p, no training)", "p ln p", rule_about, ("miiii",), _task_count, learned=()),
    *FACTS,
)


# ---------------------------------------------------------------- judging over seeds


def _holds(result) -> bool | None:
    return result[0] if isinstance(result, tuple) else result


class Outcome(NamedTuple):
    measured: str
    numbers: dict
    holds: bool | None
    why: str = ""


def not_learned(claim: Claim, seed: dict) -> str:
    """Why the seed cannot test the claim because a run it reads did not generalise every task ("" when all did)."""
    for role in claim.learned:
        m = seed.get(role)
        if m is None:
            continue
        steps = m["grok_step"]
        done = sum(s is not None for s in steps)
        if done < len(steps):
            return (f"the {role} run of seed {m['run']['seed']} did not generalise: {done}/{len(steps)} tasks reached "
                    f"{GROK_THRESHOLD} validation accuracy")
    return ""


def judge_seed(claim: Claim, reading: Reading, seed: dict | None) -> Outcome:
    """One seed (or the pooled seeds): the rule on the reading, then on the control where the claim has one. A seed
    whose run did not learn (`not_learned`) is not testable, whatever the rule says."""
    if seed is not None and (why := not_learned(claim, seed)):
        return Outcome(reading.measured, reading.numbers, None, why)
    if reading.args is None:
        return Outcome(reading.measured, reading.numbers, None, reading.why)
    holds = _holds(claim.rule(*reading.args))
    if holds is None:
        return Outcome(reading.measured, reading.numbers, None, reading.why or "the rule cannot be applied")
    if holds and claim.control is not None:
        if seed is None or any(role not in seed for role in claim.control_roles):
            return Outcome(reading.measured, reading.numbers, None, "the control run is missing")
        if _holds(claim.rule(*claim.control(seed))):
            return Outcome(reading.measured + "; the control passes the same rule", reading.numbers, None,
                           f"at this scale the control, {claim.control_name}, passes the same rule")
    return Outcome(reading.measured, reading.numbers, bool(holds))


def judge(claim: Claim, runs: dict[str, list[dict]]) -> dict | None:
    """The claim over every seed that has all its runs; None when a role it needs is missing."""
    if any(role not in runs for role in claim.roles):
        return None
    n = min(len(runs[role]) for role in claim.roles)
    seeds = [{role: ms[i] for role, ms in runs.items() if i < len(ms)} for i in range(n)]
    if claim.pooled:  # judged over the seeds whose runs learned; none: not testable, with the first seed's reason
        learned = [s for s in seeds if not not_learned(claim, s)]
        outs = [judge_seed(claim, claim.read(learned), None) if learned else
                Outcome("–", {}, None, not_learned(claim, seeds[0]))]
    else:
        outs = [judge_seed(claim, claim.read(s), s) for s in seeds]
    tested = [o for o in outs if o.holds is not None]
    k = sum(o.holds for o in tested)
    # a seed whose run did not learn is set aside (rules.verdict), not counted against or for the claim
    learned = None if claim.pooled or not claim.learned else [not not_learned(claim, s) for s in seeds]
    verdict = rules_verdict([o.holds for o in outs], learned)
    why = next((o.why for o in outs if o.holds is None), "")
    if verdict == "not testable" and learned is not None and sum(learned) < MIN_LEARNED and all(
            o.holds is not None for o, ok in zip(outs, learned, strict=True) if ok):
        why = f"{sum(learned)} of {len(learned)} seeds learned (at least {MIN_LEARNED} needed); " + why
    numbers = {}
    for name in outs[0].numbers:
        vals = [o.numbers.get(name) for o in outs if o.numbers.get(name) is not None]
        if vals:
            numbers[name] = (float(np.mean(vals)), float(np.std(vals)), len(vals))
    return dict(key=claim.key, claim=claim.text, paraphrase=claim.paraphrase, source=claim.source, paper=claim.paper,
                rule=rule_text(claim), measured=outs[0].measured, seeds=n, pooled=claim.pooled, tested=len(tested),
                holds_in=k, verdict=verdict, counted=None if learned is None else seeds_counted(
                    [o.holds for o in outs], learned), why=why, numbers=numbers, per_seed=[o.measured for o in outs])


def claims(runs: dict[str, list[dict]]) -> list[dict]:
    """One row per claim whose runs are present (see `judge`)."""
    return [row for c in CLAIMS if (row := judge(c, runs)) is not None]
