"""Does Muon grok faster? Tveit, Remseth & Skogvold, "Muon Optimizer Accelerates Grokking" (arXiv 2504.16041)
against Essential AI, "Muon Doesn't Clearly Grok Faster" (blog, 20 June 2025), judged side by side on the same
runs: nanda-tiny trained with AdamW and with Muon (optim.optimizer=muon: Muon on the hidden matrices, AdamW on the
embeddings, unembedding and biases, as both sources train it) at the preset's own setting and at three variations
Essential AI names (a smaller batch, a wider embedding, a deeper model), every seed of a setting one vmapped sweep.

The time a member takes is Tveit et al.'s grokking epoch: the first step at which validation accuracy reaches
0.95 (`reach95`), in optimizer steps (at full batch a step is an epoch; at batch 128 an epoch is several steps). A
member that never reaches it counts at the budget's end, a lower bound on its time. "Highly sensitive" compares
epochs (steps / steps_per_epoch), so a smaller batch does not move the onset by its extra steps alone.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from experiments.disputes import Claim, Setting, Study

ALPHA = 0.05  # a difference is significant at this two-sided Welch t-test level
SENSITIVE = 1.5  # "highly sensitive": the median time moves by at least this factor
VARIATIONS = {"batch 128": ("train.batch_size=128",), "d 128": ("model.d_model=128", "model.d_mlp=512"),
              "2 layers": ("model.n_layers=2",)}
BASE = "preset"
TVEIT = "Tveit et al. (2025)"
ESSENTIAL = "Essential AI (2025)"
TVEIT_SRC = "arXiv 2504.16041, abstract"
ESSENTIAL_SRC = "\"Muon Doesn't Clearly Grok Faster\", Essential AI blog, 20 June 2025, opening section"
STEPS = 4000


def name(opt: str, variation: str) -> str:
    return f"{opt}, {variation}"


SETTINGS = tuple(Setting(name(opt, v), sets + (("optim.optimizer=muon",) if opt == "Muon" else ()))
                 for v, sets in (("preset", ()), *VARIATIONS.items()) for opt in ("AdamW", "Muon"))


def times(members: list[dict]) -> list[float]:
    """Each member's first step at validation accuracy 0.95 (every task), the budget for one that never does."""
    out = []
    for m in members:
        steps = list(m["reach95"].values())
        out.append(float(m["steps"]) if any(s is None for s in steps) else float(max(steps)))
    return out


def epochs(members: list[dict]) -> list[float]:
    """times() in epochs: a member's steps divided by its steps per epoch (1 at full batch; summaries written before
    it was recorded were all full batch but batch 128's)."""
    return [t / m.get("steps_per_epoch", 1) for t, m in zip(times(members), members, strict=True)]


def welch(a: list[float], m: list[float]) -> tuple[float, float]:
    """(t, two-sided p) of AdamW's times against Muon's; (0, 1) where both are constant and equal."""
    if np.ptp(a) == 0 and np.ptp(m) == 0:
        return (0.0, 1.0) if a[0] == m[0] else (np.inf * np.sign(a[0] - m[0]), 0.0)
    t, p = stats.ttest_ind(a, m, equal_var=False)
    return float(t), float(p)


def compare(runs: dict, variation: str, alpha: float = ALPHA) -> tuple[bool, str]:
    """(Muon faster: its mean time lower, a two-sided Welch t-test p < alpha, every Muon seed reaching 0.95), and
    what was measured."""
    a, m = times(runs[name("AdamW", variation)]), times(runs[name("Muon", variation)])
    t, p = welch(a, m)
    reached = all(x < runs[name("Muon", variation)][0]["steps"] for x in m)
    faster = bool(np.mean(m) < np.mean(a) and p < alpha and reached)
    return faster, (f"{variation}: AdamW {np.mean(a):,.0f} ± {np.std(a):,.0f}, Muon {np.mean(m):,.0f} ± "
                    f"{np.std(m):,.0f} (t = {t:.2f}, p = {p:.2g})")


def variations(runs: dict) -> list[str]:
    return [v for v in (BASE, *VARIATIONS) if name("AdamW", v) in runs]


def rule_faster_here(runs: dict) -> tuple[bool | None, str]:
    """holds if, at the preset's own setting, Muon's mean step to validation accuracy 0.95 is lower than AdamW's
    and a two-sided Welch t-test over the seeds gives p < 0.05, every Muon seed reaching 0.95 (a member that never
    does counts at the budget's end)."""
    return compare(runs, BASE)


def rule_faster_pooled(runs: dict) -> tuple[bool | None, str]:
    """holds if, pooling every setting's seeds (the preset's and each variation: "across all configurations"),
    Muon's mean step to 0.95 is lower than AdamW's with a two-sided Welch t-test p < 0.05, every Muon seed reaching
    0.95."""
    a = [x for v in variations(runs) for x in times(runs[name("AdamW", v)])]
    m = [x for v in variations(runs) for x in times(runs[name("Muon", v)])]
    t, p = welch(a, m)
    reached = all(x < runs[name("Muon", v)][0]["steps"] for v in variations(runs) for x in
                  times(runs[name("Muon", v)]))
    return bool(np.mean(m) < np.mean(a) and p < ALPHA and reached), (
        f"pooled over {len(variations(runs))} settings: AdamW {np.mean(a):,.0f}, Muon {np.mean(m):,.0f} "
        f"(t = {t:.2f}, p = {p:.2g})")


def rule_faster_somewhere(runs: dict) -> tuple[bool | None, str]:
    """holds if Muon is faster by the same test in at least one setting, each test at 0.05 divided by the number of
    settings (Bonferroni: a win somewhere among several tries is not a win by chance)."""
    vs = variations(runs)
    out = [compare(runs, v, ALPHA / len(vs)) for v in vs]
    return any(f for f, _ in out), "faster in: " + (", ".join(v for v, (f, _) in zip(vs, out, strict=True) if f)
                                                    or "none")


def rule_disappears(runs: dict) -> tuple[bool | None, str]:
    """holds if Muon is faster at the preset's setting (the test above) and, in at least one of the variations
    (batch, width, depth), its mean step to 0.95 is no lower than AdamW's (the advantage gone, not merely not
    significant with 5 seeds); does not hold otherwise; not testable when Muon is not faster at the preset's setting
    (there is no advantage to disappear). A variation where no seed of either optimizer reaches 0.95 is not read
    (both means are the budget: nothing measured), and with none read the row is not testable."""
    base, _ = compare(runs, BASE)
    vs = [v for v in VARIATIONS if name("AdamW", v) in runs]
    reached = lambda ms: any(t < m["steps"] for t, m in zip(times(ms), ms, strict=True))  # noqa: E731
    read = [v for v in vs if reached(runs[name("AdamW", v)]) or reached(runs[name("Muon", v)])]
    gone = {v: np.mean(times(runs[name("Muon", v)])) >= np.mean(times(runs[name("AdamW", v)])) for v in read}
    said = "faster at the preset: " + ("yes" if base else "no") + "; the advantage gone in: " + (
        ", ".join(v for v, g in gone.items() if g) or "none")
    if len(read) < len(vs):
        said += "; no seed reaches 0.95 in: " + ", ".join(v for v in vs if v not in read)
    if not base or not read:
        return None, said
    return any(gone.values()), said


def rule_sensitive(runs: dict) -> tuple[bool | None, str]:
    """holds if, for each optimizer, the median epoch of reaching 0.95 at batch 128 and at d 128 each differ from the
    preset's by a factor of at least 1.5, either way (in epochs: at batch 128 a step is a fraction of an epoch, and
    counting steps would move the onset by the batch's extra steps alone)."""
    ok, said = True, []
    for opt in ("AdamW", "Muon"):
        base = np.median(epochs(runs[name(opt, BASE)]))
        for v in ("batch 128", "d 128"):
            f = np.median(epochs(runs[name(opt, v)])) / base
            ok &= max(f, 1 / f) >= SENSITIVE
            said.append(f"{opt} {v}: x{f:.2f}")
    return bool(ok), ", ".join(said)


STUDY = Study(
    name="muon",
    title="Does Muon grok faster? Tveit et al. (2025) against Essential AI (2025), at CPU scale",
    preset="nanda-tiny", steps=STEPS,
    scale="nanda-tiny ((x0 + x1) mod 37, d 64, one layer, grokfast, lr 3e-3, weight decay 1), "
          f"{STEPS:,} steps, full batch unless the setting says",
    settings=SETTINGS,
    claims=(
        Claim(TVEIT, "\"Muon reduced the mean grokking epoch from 153.09 to 102.89 across all configurations, a "
                     "statistically significant difference (t = 5.0175, p = 6.33e-08)\" (at the preset's setting)",
              TVEIT_SRC, rule_faster_here),
        Claim(TVEIT, "the same sentence, \"across all configurations\" (every setting here, pooled)", TVEIT_SRC,
              rule_faster_pooled),
        Claim(ESSENTIAL, "\"Muon indeed groks faster than AdamW under certain conditions\"", ESSENTIAL_SRC,
              rule_faster_somewhere),
        Claim(ESSENTIAL, "\"when exploring a wider range of hyperparameters and model sizes, this advantage "
                         "disappears\"", ESSENTIAL_SRC, rule_disappears),
        Claim(ESSENTIAL, "\"The onset and duration of grokking were highly sensitive to factors such as batch size "
                         "and embedding dimension\" (the onset)", ESSENTIAL_SRC, rule_sensitive),
    ),
)
