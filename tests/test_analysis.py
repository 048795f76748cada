"""Every analysis function against inputs with a known answer."""

import numpy as np
import pytest

from miiii import analysis as A
from miiii.tokens import grid_inputs


@pytest.mark.parametrize("p", [11, 12, 37])
def test_fourier_basis_is_orthonormal(p):
    B, names = A.fourier_basis(p)
    assert B.shape == (p, p) and len(names) == p
    np.testing.assert_allclose(B @ B.T, np.eye(p), atol=1e-10)
    assert names[:3] == ["const", "cos 1", "sin 1"]
    assert len(A.basis_freqs(p)) == p and A.basis_freqs(p).max() == p // 2


def test_pure_cosine_embedding_has_one_active_frequency():
    p, d, k = 37, 8, 5
    x = np.arange(p)
    W = np.outer(np.cos(2 * np.pi * k * x / p), np.arange(1, d + 1))  # every dimension the same cosine
    norms = A.freq_norms(W)
    assert norms.shape == (p // 2 + 1,)
    active = A.active_frequencies(norms)
    assert np.flatnonzero(active).tolist() == [k]
    # the numpy FFT sees the same single frequency
    assert np.flatnonzero(A.active_frequencies(A.fft_embed(W).sum(1))).tolist() == [k]
    # a constant embedding: nothing is active (k = 0 never is)
    assert not A.active_frequencies(A.freq_norms(np.ones((p, d)))).any()


def test_freq_norms_keeps_time_axis_and_sums_cos_and_sin():
    p, x = 23, np.arange(23)
    W = np.stack([np.cos(2 * np.pi * 3 * x / p), np.sin(2 * np.pi * 3 * x / p)], 1)  # (p, 2)
    n = A.freq_norms(np.stack([W, 2 * W]))  # (T=2, p//2 + 1)
    assert n.shape == (2, p // 2 + 1)
    np.testing.assert_allclose(n[:, 3], [np.sqrt(p), 2 * np.sqrt(p)])  # ||cos|| = ||sin|| = sqrt(p/2)
    np.testing.assert_allclose(np.delete(n, 3, axis=1), 0, atol=1e-9)


def test_active_frequencies_threshold_is_mean_plus_two_std():
    s = np.array([100.0, 1, 1, 1, 1, 1, 1, 1, 1, 9])  # index 0 is the constant and is ignored
    body = s[1:]
    assert body[-1] > body.mean() + 2 * body.std()
    assert A.active_frequencies(s).tolist() == [False] * 9 + [True]
    # two equal spikes in 9 frequencies: neither passes mean + 2 std, both pass mean + 1 std
    s2 = np.array([0.0, 1, 1, 1, 1, 1, 1, 1, 9, 9])
    assert A.active_frequencies(s2).sum() == 0
    assert A.active_frequencies(s2, n_std=1.0).sum() == 2
    # over time: one row per step
    assert A.active_frequencies(np.stack([s, s2])).sum(-1).tolist() == [1, 0]


def test_to_grid_matches_grid_inputs_order():
    p = 7
    x = grid_inputs(p)
    g = A.to_grid(x[:, :2], p)  # (p, p, 2)
    assert g[3, 5].tolist() == [3, 5]  # [x0, x1]
    assert A.to_grid(np.arange(p * p), p)[2, 4] == 2 + 4 * p


def test_fft2_grid_finds_the_planted_frequency():
    p = 17
    x0, x1 = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    g = np.cos(2 * np.pi * (3 * x0 + 5 * x1) / p)
    spec = A.fft2_grid(g)
    peaks = {tuple(int(v) for v in i) for i in np.argwhere(spec > spec.max() / 2) - p // 2}
    assert peaks == {(3, 5), (-3, -5)}


def test_neuron_freq_fractions_and_key_freqs():
    p = 31
    x0, x1 = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    w = lambda k: 2 * np.pi * k / p  # noqa: E731
    neurons = np.stack(
        [
            np.cos(w(4) * (x0 + x1)),  # Nanda's neuron: frequency 4 of x0 + x1
            np.sin(w(9) * x0),  # a digit-wise neuron, frequency 9 in x0 only
            np.cos(w(2) * x0) + np.cos(w(7) * x1),  # two frequencies, half each: no cluster at 0.85
        ],
        -1,
    )
    frac = A.neuron_freq_fractions(neurons)
    assert frac.shape == (p // 2, 3)
    np.testing.assert_allclose(frac[3, 0], 1.0, atol=1e-9)
    np.testing.assert_allclose(frac[8, 1], 1.0, atol=1e-9)
    np.testing.assert_allclose(frac[[1, 6], 2], [0.5, 0.5], atol=1e-9)
    freq, key = A.neuron_key_freqs(frac)
    assert freq.tolist() == [4, 9, -1] and key.tolist() == [4, 9]
    dom = A.frequency_dominance(neurons[..., :1])
    assert dom.shape == (p // 2 + 1,) and dom.argmax() == 4 and np.isclose(dom.sum(), 1.0)


def test_svd_of_rank_two_matrix_and_variance_counts():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(29, 2)) @ rng.normal(size=(2, 16))
    U, S, Vt = A.embedding_svd(W)
    assert U.shape == (29, 16) and S.shape == (16,) and Vt.shape == (16, 16)
    assert (S[:2] > 1e-6).all() and (S[2:] < 1e-10).all()
    np.testing.assert_allclose((U * S) @ Vt, W, atol=1e-10)
    S = np.array([3.0, 1.0, 1.0, 1.0])  # sigma^2: 9, 1, 1, 1 of 12; sigma: 3, 1, 1, 1 of 6
    assert A.variance_count(S, 0.5) == 1 and A.variance_count(S, 0.9) == 3
    assert A.variance_count(S, 0.5, power=1) == 1 and A.variance_count(S, 0.9, power=1) == 4
    assert A.variance_count(np.ones(10), 0.5) == 5  # a flat spectrum needs half the values for half


def test_pearson_known_values():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert A.pearson(a, a) == pytest.approx(1.0)
    assert A.pearson(a, -a) == pytest.approx(-1.0)
    assert A.pearson(a, 5 - 2 * a) == pytest.approx(-1.0)
    assert A.pearson([1, -1, 1, -1], [1, 1, -1, -1]) == pytest.approx(0.0)


def test_gini_known_values():
    assert A.gini(np.ones(8)) == pytest.approx(0.0)
    assert A.gini(np.eye(1, 8)[0]) == pytest.approx(7 / 8)  # one non-zero of n: (n - 1) / n
    np.testing.assert_allclose(A.gini(np.stack([np.ones(4), [0, 0, 0, 1.0]])), [0.0, 0.75])


def test_restricted_and_excluded_loss_on_a_perfect_fourier_model():
    """Logits that are exactly Nanda's algorithm at frequency k: restricting to k keeps them, excluding k
    leaves nothing (chance loss), and restricting to another frequency loses the signal."""
    p, k = 13, 3
    n = np.arange(p * p)
    s = (n % p + n // p) % p
    c = np.arange(p)
    logits = 80 * np.cos(2 * np.pi * k * (s[:, None] - c[None, :]) / p)  # (p*p, p)
    restricted, excluded = A.restricted_excluded_logits(logits, p, [k])
    np.testing.assert_allclose(restricted, logits, atol=1e-9)
    np.testing.assert_allclose(excluded, 0, atol=1e-9)
    labels = s
    assert A.cross_entropy(excluded, labels) == pytest.approx(np.log(p))
    wrong, _ = A.restricted_excluded_logits(logits, p, [k + 1])
    assert A.cross_entropy(wrong, labels) == pytest.approx(np.log(p), abs=1e-6)
    assert A.cross_entropy(logits, labels) < 0.1


def test_progress_measures_over_time():
    p, k, T = 11, 2, 3
    n = np.arange(p * p)
    s = (n % p + n // p) % p
    base = np.cos(2 * np.pi * k * (s[:, None] - np.arange(p)[None, :]) / p)
    logits = np.stack([0 * base, 2 * base, 10 * base])  # (T, p*p, p): a circuit growing over time
    x = np.arange(p)
    clean = np.outer(np.r_[np.cos(2 * np.pi * k * x / p), 0], np.ones(4))  # (p + 1, 4): one frequency
    W_E = np.stack([np.random.default_rng(0).normal(size=(p + 1, 4)), clean, clean])
    m = A.progress_measures(logits, W_E, p, [k], train_idx=np.arange(0, p * p, 3))
    assert set(m) == {"train_loss", "test_loss", "restricted_loss", "excluded_loss", "gini"}
    assert all(v.shape == (T,) for v in m.values())
    assert m["restricted_loss"][0] == pytest.approx(np.log(p)) and np.all(np.diff(m["restricted_loss"]) < 0)
    np.testing.assert_allclose(m["excluded_loss"], np.log(p), atol=1e-9)  # all signal is at frequency k
    assert m["gini"][0] < 0.6 and m["gini"][1] == pytest.approx(1 - 1 / (p // 2))


def test_grok_steps_and_order():
    step = np.arange(6)
    acc = np.array(
        [[0.5, 0.1, np.nan], [np.nan, np.nan, np.nan], [1.0, 0.2, 0.0], [0.3, 0.995, 0.0], [1, 1, 0.5], [1, 1, 0.5]]
    )
    steps = A.grok_steps(step, acc)
    assert steps == [2, 3, None]
    assert A.grok_order(["q=2", "q=3", "q=5"], steps) == ["q=2", "q=3"]
    assert A.grok_order(["a", "b"], [7, 7]) == ["a", "b"]


def test_sample_steps_bounds_the_recording_read():
    from miiii.plotstyle import sample_steps

    assert sample_steps(5, 10, log=True).tolist() == [0, 1, 2, 3, 4]
    for log in (True, False):
        i = sample_steps(100_000, 50, log)
        assert len(i) <= 50 and i[0] == 0 and i[-1] == 99_999 and np.all(np.diff(i) > 0)
    assert sample_steps(100_000, 50, log=True)[5] < 10  # log spacing crowds the early steps


def test_last_evaluated_skips_rows_without_validation():
    acc = np.array([[0.1, 0.2], [np.nan, np.nan], [0.5, 0.7], [np.nan, np.nan]])
    np.testing.assert_array_equal(A.last_evaluated(acc), [0.5, 0.7])
    assert np.isnan(A.last_evaluated(np.full((3, 2), np.nan))).all()


def test_fourier_2d_and_projection_equal_explicit_matrix_products():
    """The contractions behind Fig. 16 and the progress measures (paths chosen for speed) equal plain B G B^T and
    B^T (B L), written independently as a loop over neurons / steps."""
    rng = np.random.default_rng(0)
    p = 13
    grid = rng.normal(size=(p, p, 5))
    B, _ = A.fourier_basis(p)
    want = np.stack([B @ grid[:, :, n] @ B.T for n in range(5)], axis=-1)
    np.testing.assert_allclose(A.fourier_2d(grid), want, atol=1e-10)
    logits = rng.normal(size=(3, p * p, p))
    S = A.sum_basis(p, [2, 5])
    restricted, excluded = A.restricted_excluded_logits(logits, p, [2, 5])
    for t in range(3):
        proj = S.T @ (S @ logits[t])
        np.testing.assert_allclose(excluded[t], logits[t] - proj, atol=1e-10)
        np.testing.assert_allclose(restricted[t], logits[t].mean(0) + proj - proj.mean(0), atol=1e-10)


def _brute_fisher(k1, n1, k2, n2):
    """Fisher's two-sided p by counting: every way to place k1 + k2 successes among the n1 + n2 seeds."""
    from collections import Counter
    from itertools import combinations

    n, k = n1 + n2, k1 + k2
    tables = Counter(sum(i < n1 for i in c) for c in combinations(range(n), k))  # successes in group 1
    total = sum(tables.values())
    return sum(v for v in tables.values() if v <= tables[k1]) / total


@pytest.mark.parametrize("k1, n1, k2, n2", [(4, 8, 5, 5), (4, 8, 8, 8), (7, 8, 7, 8), (0, 3, 3, 3), (1, 5, 4, 6)])
def test_fisher_exact_p_equals_counting_every_table(k1, n1, k2, n2):
    assert A.fisher_exact_p(k1, n1, k2, n2) == pytest.approx(_brute_fisher(k1, n1, k2, n2), rel=1e-12)


def test_fisher_exact_p_both_directions():
    assert A.fisher_exact_p(0, 8, 8, 8) < 0.001  # none vs all of 8 seeds: a difference
    assert A.fisher_exact_p(4, 8, 5, 5) > 0.05  # 4/8 vs 5/5: 8 and 5 seeds cannot tell them apart
    assert A.fisher_exact_p(3, 6, 3, 6) == 1.0


def _brute_rank_sum(a, b):
    """The Mann-Whitney U (pairs a > b, ties half) over every split of the pooled values: two-sided p."""
    from itertools import combinations

    pooled = list(a) + list(b)
    n, m = len(pooled), len(a)

    def u(xs, ys):
        return sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)

    obs = abs(u(a, b) - m * (n - m) / 2)
    devs = [abs(u([pooled[i] for i in c], [pooled[i] for i in range(n) if i not in c]) - m * (n - m) / 2)
            for c in combinations(range(n), m)]
    return sum(d >= obs - 1e-9 for d in devs) / len(devs)


@pytest.mark.parametrize("a, b", [([1, 2, 3], [4, 5, 6]), ([1, 5, 3], [4, 2, 6]),
                                  ([151, 151, 32, 82, 151], [90, 65, 10, 15, 51, 151]), ([7, 7, 7], [7, 7])])
def test_rank_sum_p_equals_the_u_statistic_over_every_split(a, b):
    assert A.rank_sum_p(a, b) == pytest.approx(_brute_rank_sum(a, b), rel=1e-12)


def test_rank_sum_p_both_directions_and_the_sampled_path():
    early, late = [5, 8, 9, 12, 15, 20, 22, 30], [60, 70, 80, 90, 100, 151, 151, 151]
    assert A.rank_sum_p(early, late) == pytest.approx(2 / 12870)  # only the two most extreme splits
    assert A.rank_sum_p(early, early) == 1.0
    sampled = A.rank_sum_p(early, late, max_exact=1000)  # sampled splits when there are more than max_exact
    assert 1 / 1001 <= sampled < 0.01  # the observed split counts: never p = 0
    assert A.rank_sum_p(early, early, max_exact=1000) == 1.0
