"""Named interventions (miiii/interventions.py) against independent computations: Nanda et al.'s restricted and
excluded logits, a synthetic Fourier signal, head ablation by hand, and the frequency ablation's answer for a
task whose frequency is known in advance."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _runhelp import finished_run

from experiments.paper.report import needed_frequencies
from miiii import analysis as A
from miiii.interventions import (
    axis_frequencies,
    batch_mean,
    frequency_ablation,
    mean_ablate,
    project_over_inputs,
    remove_grid_frequencies,
    zero_ablate,
)

NEURONS = "blocks.0.mlp.hook_post"


def test_restricted_and_excluded_logits_as_interventions_equal_the_analysis():
    """analysis.restricted_excluded_logits (numpy, on recorded logits) and the same projection applied as a hook on
    `logits` through run_with_hooks give the same numbers and the same losses."""
    run = finished_run("nanda-tiny")
    p = run.config.task.p
    x, y = run.inputs("grid"), run.labels("grid")[:, 0]
    logits, cache = run.model.run_with_cache(run.params, x, names=(NEURONS,))
    _, key = A.neuron_key_freqs(A.neuron_freq_fractions(A.to_grid(np.asarray(cache[NEURONS])[:, -1], p)))
    assert len(key) >= 1
    want_r, want_e = A.restricted_excluded_logits(np.asarray(logits, np.float64)[:, 0], p, key)
    basis = A.sum_basis(p, key)
    got_r = run.model.run_with_hooks(run.params, x, {"logits": project_over_inputs(basis, keep=True)})[:, 0]
    got_e = run.model.run_with_hooks(run.params, x, {"logits": project_over_inputs(basis, keep=False)})[:, 0]
    scale = float(np.abs(want_e).max())
    np.testing.assert_allclose(got_r, want_r, atol=2e-5 * scale)
    np.testing.assert_allclose(got_e, want_e, atol=2e-5 * scale)
    for got, want in ((got_r, want_r), (got_e, want_e)):
        np.testing.assert_allclose(A.cross_entropy(np.asarray(got, np.float64), y), A.cross_entropy(want, y),
                                   rtol=1e-4, atol=1e-5)
    assert A.cross_entropy(want_r, y) < A.cross_entropy(want_e, y)  # the trained model lives on its key frequencies


def test_removing_grid_frequencies_from_a_known_signal():
    p = 11
    x1, x0 = np.divmod(np.arange(p * p), p)  # grid order: row i = (x0, x1) = (i % p, i // p)
    w = 2 * np.pi / p
    keep = 0.5 * np.sin(w * 2 * x1) + 1.5
    value = np.stack([np.cos(w * (3 * x0 + 5 * x1)) + keep, keep], axis=-1)[:, None, :]  # (p^2, 1 position, 2)
    out = np.asarray(remove_grid_frequencies(p, [(3, 5)])(value.astype(np.float32), "x"))
    np.testing.assert_allclose(out[:, 0, 0], keep, atol=1e-5)  # the (3, 5) wave and its conjugate are gone
    np.testing.assert_allclose(out[:, 0, 1], keep, atol=1e-5)  # the other neuron had none of it
    np.testing.assert_allclose(remove_grid_frequencies(p, [])(value.astype(np.float32), "x"), value, atol=1e-5)
    gone = np.asarray(remove_grid_frequencies(p, axis_frequencies(p, 2))(value.astype(np.float32), "x"))
    np.testing.assert_allclose(gone[:, 0, 1], 1.5, atol=1e-5)  # frequency 2 of x1 removed, the constant stays


def test_head_and_neuron_ablations_by_hand():
    run = finished_run("nanda-tiny")
    x = run.inputs("valid")[:32]
    m = run.model
    names = ("blocks.0.attn.hook_z", "blocks.0.hook_attn_out", NEURONS)
    _, plain = m.run_with_cache(run.params, x, names)
    _, hooked = m.run_with_hooks(run.params, x, {names[0]: zero_ablate([1], axis=2)}, names=names)
    W_O = run.params["blocks_0"]["attn"]["W_O"]
    z = np.asarray(plain[names[0]]).copy()
    z[:, :, 1] = 0
    np.testing.assert_allclose(hooked[names[1]], np.einsum("bthe,hed->btd", z, W_O), rtol=1e-5, atol=1e-5)
    mean = batch_mean(plain[NEURONS])
    _, c = m.run_with_hooks(run.params, x, {NEURONS: mean_ablate(mean, [0, 3])}, names=(NEURONS,))
    got = np.asarray(c[NEURONS])
    np.testing.assert_allclose(got[..., [0, 3]], np.broadcast_to(np.asarray(mean)[..., [0, 3]], got[..., [0, 3]].shape))
    np.testing.assert_array_equal(got[..., 4:], np.asarray(plain[NEURONS])[..., 4:])


@pytest.mark.study  # make test-studies: an end-to-end run kept out of make test's 10 minutes
def test_frequency_ablation_finds_the_frequencies_tasks_use():
    """nanda: every frequency the loss needs is one of the neurons' key frequencies (two analyses agree).
    miiii: (x0 + 23 x1) mod 2 is the parity of x0 + x1, whose nearest frequency on Z_23 is 11 (23 / 2): the
    grokked q = 2 task needs k = 11 most."""
    run = finished_run("nanda-tiny")
    ab = frequency_ablation(run)
    p = run.config.task.p
    assert ab["loss"].shape == (p // 2, 1) and ab["base"][0] < 0.05
    need = [k for k, _ in needed_frequencies(ab, 0)]
    _, cache = jax.jit(run.model.run_with_cache, static_argnames="names")(run.params, run.inputs("grid"), (NEURONS,))
    _, key = A.neuron_key_freqs(A.neuron_freq_fractions(A.to_grid(np.asarray(cache[NEURONS])[:, -1], p)))
    assert need and set(need) <= set(key.tolist()), (need, key)
    miiii = finished_run("miiii-tiny")
    ab = frequency_ablation(miiii)
    slot = ab["tasks"].index("q=2")
    assert needed_frequencies(ab, slot)[0][0] == 11
