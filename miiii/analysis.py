"""Numpy analysis of trained (or training) models: Fourier, SVD, correlations, progress measures (scipy.stats tests).

Every function takes explicit arrays and returns arrays or numbers; nothing reads a run directory
(`miiii.plots` does that). Conventions:

- A grid of per-input values has the p^2 inputs in the order of `tasks.grid_inputs` (n = x0 + x1*p);
  `to_grid` turns it into an array indexed `[x0, x1, ...]`.
- The real Fourier basis for p (Nanda et al. 2023) has p orthonormal rows: the constant, then
  cos(2*pi*k*x/p) and sin(2*pi*k*x/p) for k = 1 .. p//2. Frequencies are integers k in 0 .. p//2.
- "Active" frequencies use the paper's threshold (Syrkis & Søgaard 2024, Fig. 16 / Table 3): a
  frequency is active when its strength exceeds mean + 2 std of the strengths of all non-constant
  frequencies (the constant k = 0 is never active).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

ACTIVE_STD = 2.0  # paper: active above mean + 2 std
GROK_THRESHOLD = 0.99  # paper/runner: a task has grokked at its first step with validation accuracy >= 0.99


# ---------------------------------------------------------------- Fourier


def fourier_basis(p: int) -> tuple[np.ndarray, list[str]]:
    """(p, p) orthonormal real Fourier basis (rows: const, cos 1, sin 1, ..., cos p//2, sin p//2) and row names.

    For even p the last sine row is zero and dropped, so the rows are always exactly p.
    """
    x = np.arange(p)
    rows, names = [np.ones(p)], ["const"]
    for k in range(1, p // 2 + 1):
        rows.append(np.cos(2 * np.pi * k * x / p))
        names.append(f"cos {k}")
        if 2 * k != p:
            rows.append(np.sin(2 * np.pi * k * x / p))
            names.append(f"sin {k}")
    basis = np.stack(rows)
    return basis / np.linalg.norm(basis, axis=1, keepdims=True), names


def basis_freqs(p: int) -> np.ndarray:
    """(p,) the integer frequency k of each row of `fourier_basis(p)`."""
    return np.array([0] + [k for k in range(1, p // 2 + 1) for _ in ((0, 1) if 2 * k != p else (0,))])


def embed_fourier(W: np.ndarray) -> np.ndarray:
    """Token embedding in the Fourier basis over tokens: W (p, d) -> (p, d), rows as in `fourier_basis`."""
    basis, _ = fourier_basis(W.shape[0])
    return basis @ W


def freq_norms(W: np.ndarray) -> np.ndarray:
    """Strength of each frequency in an embedding: W (..., p, d) -> (..., p//2 + 1), the L2 norm of the
    cos and sin coefficients of frequency k over all d dimensions (index 0: the constant).

    Leading axes (e.g. time) are kept, so a recorded W_E (T, p, d) gives (T, p//2 + 1) at once.
    """
    p = W.shape[-2]
    basis, _ = fourier_basis(p)
    coef = np.einsum("fp,...pd->...fd", basis, W)  # (..., p, d)
    sq = (coef**2).sum(-1)  # (..., p)
    onehot = basis_freqs(p)[:, None] == np.arange(p // 2 + 1)[None, :]  # (p, p//2 + 1)
    return np.sqrt(sq @ onehot)


def to_grid(values: np.ndarray, p: int) -> np.ndarray:
    """(p*p, ...) per-input values in the order n = x0 + x1*p -> (p, p, ...) indexed [x0, x1, ...]."""
    return np.swapaxes(values.reshape((p, p) + values.shape[1:]), 0, 1)


def fft2_grid(grid: np.ndarray) -> np.ndarray:
    """|2-D DFT| over the first two axes of a (p, p, ...) grid, zero frequency at the centre (fftshift).

    Index [i, j] of the result is frequency (i - p//2, j - p//2) along (x0, x1).
    """
    spec = np.abs(np.fft.fft2(grid, axes=(0, 1)))
    return np.fft.fftshift(spec, axes=(0, 1))


def fft_embed(W: np.ndarray) -> np.ndarray:
    """|1-D DFT| over tokens of an embedding: W (p, d) -> (p//2 + 1, d) (numpy.fft.rfft, index = frequency)."""
    return np.abs(np.fft.rfft(W, axis=0))


def fourier_2d(grid: np.ndarray) -> np.ndarray:
    """A (p, p, ...) grid in the 2-D real Fourier basis: B @ G @ B.T over the first two axes (Nanda et al.)."""
    basis, _ = fourier_basis(grid.shape[0])
    # two contractions of p^3 N each (a 3-operand np.einsum without a path loops p^4 N: minutes at p = 113)
    return np.einsum("ai,bj,ij...->ab...", basis, basis, grid, optimize=True)


def neuron_freq_fractions(acts_grid: np.ndarray) -> np.ndarray:
    """Fraction of each neuron's variance explained by each frequency (Nanda et al. 2023, App. C).

    acts_grid (p, p, N) -> (p//2, N): for k = 1 .. p//2, the squared 2-D Fourier coefficients of the
    centred activations on the 3x3 block {const, cos k, sin k} x {const, cos k, sin k}, over the total.
    The constant-constant term is zero after centring, so a neuron that depends on x0 alone at
    frequency k (like miiii's digit-wise neurons) still counts as frequency k.
    """
    p = acts_grid.shape[0]
    centred = acts_grid - acts_grid.mean(axis=(0, 1), keepdims=True)
    coef2 = fourier_2d(centred) ** 2  # (p, p, N)
    total = coef2.sum(axis=(0, 1)) + 1e-30  # (N,)
    fk = basis_freqs(p)
    out = np.zeros((p // 2,) + acts_grid.shape[2:])
    for k in range(1, p // 2 + 1):
        rows = (fk == k) | (fk == 0)
        out[k - 1] = coef2[np.ix_(rows, rows)].sum(axis=(0, 1))
    return out / total


def neuron_key_freqs(fractions: np.ndarray, min_frac: float = 0.85) -> tuple[np.ndarray, np.ndarray]:
    """Nanda et al.'s neuron clusters: fractions (p//2, N) -> (frequency of each neuron (N,), key frequencies).

    A neuron's frequency is the one explaining most of its variance, or -1 when none explains at
    least `min_frac` (Nanda: 0.85). Key frequencies are the distinct frequencies neurons take, sorted.
    """
    freq = fractions.argmax(0) + 1
    freq = np.where(fractions.max(0) >= min_frac, freq, -1)
    return freq, np.unique(freq[freq > 0])


def active_frequencies(strength: np.ndarray, n_std: float = ACTIVE_STD, has_const: bool = True) -> np.ndarray:
    """Boolean mask of active frequencies along the last axis: strength > mean + n_std * std (paper).

    strength (..., F) with index 0 the constant when `has_const` (never active; left out of mean and std).
    """
    s = np.asarray(strength, dtype=float)
    body = s[..., 1:] if has_const else s
    thr = body.mean(-1, keepdims=True) + n_std * body.std(-1, keepdims=True)
    active = (body > thr) & (body > 1e-9 * np.abs(s).max(-1, keepdims=True))  # float noise on a flat spectrum
    if has_const:
        active = np.concatenate([np.zeros(active.shape[:-1] + (1,), bool), active], axis=-1)
    return active


def frequency_dominance(acts_grid: np.ndarray) -> np.ndarray:
    """Share of the MLP's variance at each frequency: acts_grid (p, p, N) -> (p//2 + 1,), index 0 = 0.

    The sum over neurons of `neuron_freq_fractions` weighted by each neuron's variance, normalised to
    sum to 1 over k >= 1 (the paper's Fig. 16 normalises each time step the same way).
    """
    frac = neuron_freq_fractions(acts_grid)  # (p//2, N)
    var = acts_grid.reshape(-1, acts_grid.shape[-1]).var(0)  # (N,)
    dom = frac @ var
    return np.concatenate([[0.0], dom / max(dom.sum(), 1e-30)])


# ---------------------------------------------------------------- SVD and positions


def embedding_svd(W: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """W (p, d) -> U (p, r), S (r,) descending, Vt (r, d) with r = min(p, d) (thin SVD)."""
    U, S, Vt = np.linalg.svd(np.asarray(W, dtype=np.float64), full_matrices=False)
    return U, S, Vt


def variance_count(S: np.ndarray, frac: float, power: int = 2) -> int:
    """How many leading singular values reach `frac` of the total: the smallest k with
    sum(S[:k]**power) >= frac * sum(S**power).

    power=2 (default) is the explained variance (sum sigma^2); power=1 is the original miiii code's
    normalisation by sum sigma, which the paper's indices 5/49 (nanda) and 35/73 (miiii) use (docs/definitions.md).
    """
    w = np.asarray(S, dtype=float) ** power
    cum = np.cumsum(w) / w.sum()
    return int(np.searchsorted(cum, frac - 1e-12) + 1)


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two vectors (paper Fig. 7: W_pos rows 0 and 1; nanda 0.95, miiii -0.64)."""
    a, b = np.ravel(a).astype(float), np.ravel(b).astype(float)
    a, b = a - a.mean(), b - b.mean()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def gini(x: np.ndarray) -> np.ndarray:
    """Gini coefficient along the last axis of non-negative values (0: all equal, -> 1: one non-zero).

    Nanda et al. 2023 track the Gini of the embedding's Fourier norms as a sparsity progress measure.
    """
    x = np.sort(np.abs(np.asarray(x, dtype=float)), axis=-1)
    n = x.shape[-1]
    i = np.arange(1, n + 1)
    total = x.sum(-1)
    return ((2 * i - n - 1) * x).sum(-1) / (n * np.where(total > 0, total, 1.0))


# ---------------------------------------------------------------- Nanda's restricted / excluded loss


def sum_basis(p: int, freqs) -> np.ndarray:
    """(2K, p*p) orthonormal vectors cos(w_k (x0 + x1)), sin(w_k (x0 + x1)) over the grid, w_k = 2 pi k / p."""
    n = np.arange(p * p)
    s = (n % p + n // p) % p
    rows = []
    for k in freqs:
        rows += [np.cos(2 * np.pi * k * s / p), np.sin(2 * np.pi * k * s / p)]
    rows = np.array(rows).reshape(-1, p * p)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean CE over the input axis: logits (..., N, C), labels (N,) -> (...)."""
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, np.broadcast_to(labels[:, None], logp.shape[:-1] + (1,)), -1)[..., 0].mean(-1)


def restricted_excluded_logits(logits: np.ndarray, p: int, freqs) -> tuple[np.ndarray, np.ndarray]:
    """Nanda et al.'s restricted and excluded logits, in logit space.

    logits (..., p*p, C) over the whole grid. Restricted: the mean logit plus the projection of the
    logits (over inputs) onto cos/sin(w_k (x0 + x1)) of the key frequencies; excluded: the logits minus
    that projection. Nanda project the MLP neurons and map them through W_U W_out; projection over
    inputs commutes with that linear map, so this equals their definition up to the (small) part of
    the key-frequency signal that bypasses the MLP. It needs only the logits, which are recorded per step.
    """
    B = sum_basis(p, freqs)  # (2K, N)
    proj = np.einsum("kn,...kc->...nc", B, np.einsum("km,...mc->...kc", B, logits))  # B.T (B logits): 2K x N
    mean = logits.mean(-2, keepdims=True)
    return mean + proj - proj.mean(-2, keepdims=True), logits - proj


def progress_measures(
    logits: np.ndarray, W_E: np.ndarray, p: int, freqs, train_idx: np.ndarray
) -> dict[str, np.ndarray]:
    """Nanda et al. 2023's progress measures over time for the nanda task.

    logits (T, p*p, p) over the grid (order n = x0 + x1*p), W_E (T, >= p, d), the key frequencies (from
    the final model's neurons, `neuron_key_freqs`), train_idx: grid indices of the training set.
    Returns (T,) arrays: train_loss, test_loss (all inputs not in train), restricted_loss (whole grid),
    excluded_loss (train), gini (of the embedding's Fourier norms over frequencies 1 .. p//2).
    """
    n = np.arange(p * p)
    labels = (n % p + n // p) % p
    test_idx = np.setdiff1d(n, train_idx)
    logits = np.asarray(logits, dtype=np.float64)
    restricted, excluded = restricted_excluded_logits(logits, p, freqs)
    return dict(
        train_loss=cross_entropy(logits[:, train_idx], labels[train_idx]),
        test_loss=cross_entropy(logits[:, test_idx], labels[test_idx]),
        restricted_loss=cross_entropy(restricted, labels),
        excluded_loss=cross_entropy(excluded[:, train_idx], labels[train_idx]),
        gini=gini(freq_norms(np.asarray(W_E, dtype=np.float64)[:, :p])[..., 1:]),
    )


# ---------------------------------------------------------------- grokking


def grok_steps(step: np.ndarray, valid_acc: np.ndarray, threshold: float = GROK_THRESHOLD) -> list[int | None]:
    """First step at which each task's validation accuracy reached `threshold` (None if never).

    step (T,), valid_acc (T, K) with NaN where validation was not run.
    """
    out = []
    for k in range(valid_acc.shape[1]):
        hit = np.nonzero(np.nan_to_num(valid_acc[:, k], nan=-1.0) >= threshold)[0]
        out.append(int(step[hit[0]]) if len(hit) else None)
    return out


def last_evaluated(valid_acc: np.ndarray) -> np.ndarray:
    """valid_acc (T, K) with NaN rows where validation was not run -> the newest evaluated row (NaN if none)."""
    seen = ~np.isnan(valid_acc).any(-1)
    return valid_acc[seen][-1] if seen.any() else np.full(valid_acc.shape[-1], np.nan)


def grok_order(names, steps) -> list[str]:
    """Task names of the tasks that grokked, earliest first (ties keep the given order)."""
    done = [(s, i, n) for i, (n, s) in enumerate(zip(names, steps, strict=True)) if s is not None]
    return [n for _, _, n in sorted(done)]


# ---------------------------------------------------------------- the original code's definitions (syrkis/miiii)


def svd_tick(S: np.ndarray, frac: float) -> int:
    """The original code's mark on Fig. 8: the last 0-based index whose cumulative share of sum sigma is below
    `frac` (`jnp.where((S / S.sum()).cumsum() < frac)[0].max()`); -1 when the first value already reaches it.

    It equals `variance_count(S, frac, power=1) - 2`: an index, one before the last value not yet needed.
    """
    cum = np.cumsum(np.asarray(S, dtype=float)) / np.sum(S)
    below = np.nonzero(cum < frac)[0]
    return int(below.max()) if len(below) else -1


def spearman(a, b) -> float:
    """Spearman's rank correlation (`scipy.stats.spearmanr`: ties at their mean rank); NaN for fewer than two pairs.

    It replaced a hand-written Pearson correlation of the ranks: the same value up to float rounding (a few ulp; 1.0
    may read 0.9999999999999999), tests/test_scipy_stats.py."""
    if len(a) < 2:
        return float("nan")
    return float(stats.spearmanr(a, b).statistic)


def permutation_p(a, b, n_perm: int = 10_000, seed: int = 0) -> float:
    """Two-sided permutation p-value of Spearman's rho(a, b): the share of pairings of a's ranks with b's whose |rho|
    reaches the observed |rho| (`scipy.stats.permutation_test`, permutation_type="pairings").

    With n! > n_perm (n >= 8 pairs at 10,000: every table the report tests, `report.MIN_ORDER_TASKS`) these are
    n_perm random pairings from `np.random.default_rng(seed)` and the observed one, p = (1 + hits) / (n_perm + 1),
    p >= 1 / (n_perm + 1). With n! <= n_perm it is every pairing once, the exact p. What changed when scipy replaced
    the hand-written test: at n >= 8 nothing (scipy draws its pairings with `rng.permuted` as that code did: the same
    pairings from the same seed, the same p bit for bit); at n <= 7 the hand-written test drew n_perm random pairings
    too, so its p differed from this exact one by its sampling error (sd <= 0.005 at 10,000; tests/test_scipy_stats.py).
    """
    if len(a) < 2:
        return 1.0
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()  # |rank covariance|: |rho| up to a constant; exact in floats (k / 4)

    def cov(y, axis=-1):
        return np.abs(np.moveaxis(y, axis, -1) @ ra)

    res = stats.permutation_test((rb,), cov, permutation_type="pairings", vectorized=True, n_resamples=n_perm,
                                 alternative="greater", rng=np.random.default_rng(seed))
    return float(res.pvalue)


def fisher_exact_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """Two-sided Fisher exact p of k1/n1 vs k2/n2 successes (`scipy.stats.fisher_exact` of the 2x2 table): the
    hypergeometric probability of every table with the same margins that is no more likely than the observed one
    (how many seeds grok, two implementations). scipy counts a table as no more likely within a relative 1e-7 (the
    hand-written test it replaced: 1e-9); the same p on every table results/book compares."""
    return float(stats.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]]).pvalue)


def rank_sum_p(a, b, max_exact: int = 200_000, seed: int = 0) -> float:
    """Two-sided exact permutation p of the rank-sum (Mann-Whitney) statistic of samples a and b, ties at their
    mean rank: the share of all splits of the pooled values into groups of len(a) and len(b) whose rank sum lies
    at least as far from its mean as the observed one (when there are more than max_exact splits: max_exact random
    ones from `np.random.default_rng(seed)` and the observed, so p >= 1 / (max_exact + 1)).

    `scipy.stats.permutation_test` (permutation_type="independent") of |rank sum - its mean|, which gives the p of
    the hand-written test it replaced bit for bit, on both paths (scipy draws one `rng.permutation` per random split,
    as that code did). Not `scipy.stats.mannwhitneyu`: its method="exact" ignores ties (results/book's samples have
    them: a seed that never jumps counts at budget + 1), and with a `PermutationMethod` its two-sided p is twice the
    smaller one-sided p, which differs from this one where ties make the null distribution asymmetric (a = [1, 1],
    b = [2, 2, 2]: 0.2 against 0.1). scipy wants two values in each group: a group of one is counted here (n splits)."""
    r = stats.rankdata(np.concatenate([np.asarray(a, float), np.asarray(b, float)]))
    n, m = len(r), len(a)
    if m == 0 or m == n:
        return 1.0
    centre = m * (n + 1) / 2  # the mean rank sum
    if min(m, n - m) == 1:  # the n ways to split one value off
        sums = r if m == 1 else r.sum() - r
        return float((np.abs(sums - centre) >= abs(r[:m].sum() - centre) - 1e-9).mean())

    def distance(x, y, axis=-1):
        return np.abs(x.sum(axis) - centre)

    res = stats.permutation_test((r[:m], r[m:]), distance, permutation_type="independent", vectorized=True,
                                 n_resamples=max_exact, alternative="greater", rng=np.random.default_rng(seed))
    return float(res.pvalue)


def original_neuron_spectrum(neurons: np.ndarray, p: int) -> np.ndarray:
    """The original code's per-step neuron spectrum (`scope_fn`): neurons (T, p*p, N) recorded over the grid ->
    (T, N, (p - 1)//2 + 1).

    As the original: the grid indexed [high digit x1, low digit x0], the x0 = 0 and x1 = 0 rows dropped, the
    2-D real FFT of the (p-1, p-1) rest, its magnitude averaged over the x1 frequency axis.
    """
    grid = np.asarray(neurons, dtype=np.float64).reshape(len(neurons), p, p, -1)  # [t, x1, x0, n]
    grid = np.moveaxis(grid, -1, 1)[:, :, 1:, 1:]  # (T, N, p-1, p-1)
    return np.abs(np.fft.rfft2(grid)).mean(2)


def original_active_counts(series: np.ndarray, steps: np.ndarray, n_std: float = 1.0, kernel: int = 3,
                           length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The original code's count of active frequencies over training (`omega_aux`): series (T, F) -> (steps of
    the log-spaced axis (L,), active count at each (L,)).

    A `kernel`-step moving average of each frequency over the recorded steps, sampled at L = 3 (F - 1) log-spaced
    steps, each frequency normalised to sum 1 over time, and counted where it exceeds mean + n_std std of the
    whole (frequency x time) matrix (the original: n_std = 1; the paper's text: 2).
    """
    s = np.asarray(series, dtype=np.float64)
    smooth = np.stack([np.convolve(col, np.ones(kernel) / kernel, mode="valid") for col in s.T])  # (F, T-k+1)
    centre = np.asarray(steps)[kernel // 2: kernel // 2 + smooth.shape[1]]  # the step of each smoothed row
    length = length or 3 * (s.shape[1] - 1)
    wanted = np.logspace(0, np.log10(centre[-1] + 1), length) - 1  # the original's log axis, over steps here
    idx = np.clip(np.searchsorted(centre, wanted, side="right") - 1, 0, len(centre) - 1)
    m = smooth[:, idx]
    m = m / m.sum(1, keepdims=True)
    return centre[idx], (m > m.mean() + n_std * m.std()).sum(0)
