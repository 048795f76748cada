"""A loaded run as something to work with: params_at(step) from the checkpoints kept at log-spaced steps equals what
the training had (read back bit for bit from a float32 recording of every parameter), resumes stay bit-identical
with them, inputs/labels by split, and the README's "Extending in JAX" example runs."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from _runhelp import ROOT, SLOW, TINY_CFG, Crash, crash_at, finished_run

from miiii import runner
from miiii.cadence import log_steps
from miiii.config import ConfigError, apply_overrides
from miiii.model import param_names
from miiii.presets import get_preset
from miiii.run import load_run
from miiii.runner import resume_run, train_run
from miiii.tasks import grid_labels

# Short chunks: with every parameter recorded at every step, a step's time grows with the chunk's length (measured,
# warm compile cache, loaded cores: 300 steps in chunks of 100, 22 s a run; in chunks of 50, 13 s; these 120 steps
# in chunks of 40, 9 s; 60 in chunks of 20 saved nothing more)
KEEP = ["steps=120", "train.chunk=40", "ckpt.every=40", "ckpt.keep_log=5", "record.dtype=float32",
        "record.acts=", "record.params_every=1"]


def kept_cfg():
    cfg = apply_overrides(get_preset("nanda-tiny"), KEEP)
    names = ",".join(n.replace("/", ".") for n in ALL_PARAMS)
    return apply_overrides(cfg, [f"record.params={names}"])


ALL_PARAMS = ("W_E", "W_pos", "blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.W_V", "blocks.0.attn.W_O",
              "blocks.0.mlp.W_in", "blocks.0.mlp.b_in", "blocks.0.mlp.W_out", "blocks.0.mlp.b_out", "W_U")


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("kept") / "run"
    built, build = [], runner.build
    with pytest.MonkeyPatch.context() as mp:  # the run's trainer, to count the chunk programs it compiled
        mp.setattr(runner, "build", lambda *a: built.append(build(*a)) or built[-1])
        train_run(kept_cfg(), d, progress=False)
    run = load_run(d)
    run.chunk_programs = built[0][0].chunk._cache_size()
    return run


def test_log_spaced_checkpoints_cost_no_compile(kept_run):
    """Three chunks of 40 steps, four kept steps (1, 3, 11, 36) inside the first, none inside the others: one
    compiled program. A chunk with kept steps had its own program before (another per count of them inside),
    seconds of compile apiece."""
    assert kept_run.chunk_programs == 1


def _leaf(params, name):
    for k in re.sub(r"blocks\.(\d+)", r"blocks_\1", name).split("."):
        params = params[k]
    return params


def test_params_at_is_exact_at_every_log_spaced_step(kept_run):
    """Every step of log_steps(120, 5) is kept (beside the newest 3), and params_at(s) equals, bit for bit, the
    float32 recording of every parameter at step s (row s: the parameters after s updates), a path through the
    training scan that shares nothing with the checkpoints."""
    run = kept_run
    assert sorted(param_names(run.params)) == sorted(ALL_PARAMS)
    want = set(log_steps(120, 5)) | {40, 80, 120}
    assert set(run.kept_steps) == want and {1, 3, 11, 36} <= want  # early steps inside the first chunk too
    for s in run.kept_steps:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an exact step must not warn
            p = run.params_at(s)
        for name in ALL_PARAMS:
            np.testing.assert_array_equal(_leaf(p, name), run.acts[name][s], err_msg=f"{name} at step {s}")
    for name in ALL_PARAMS:  # the final parameters are the last kept step's
        np.testing.assert_array_equal(_leaf(run.params_at(120), name), _leaf(run.params, name))


def test_params_at_an_unkept_step_says_which_step_it_returned(kept_run):
    with pytest.warns(UserWarning, match=r"step 60 was not kept; returning step 40"):
        p = kept_run.params_at(60)
    np.testing.assert_array_equal(p["W_E"], kept_run.acts["W_E"][40])


def test_params_at_before_the_first_kept_step_is_an_error_unless_after_is_asked(tmp_path):
    """_runhelp's TINY keeping its newest two checkpoints, 12 and 24: its programs (ckpt.keep is no part of them),
    compiled once a session, not a config's own."""
    train_run(apply_overrides(TINY_CFG, ["ckpt.keep=2"]), tmp_path / "run", progress=False, tensorboard=False)
    run = load_run(tmp_path / "run")
    first = run.kept_steps[0]
    assert first > 5
    with pytest.raises(ConfigError, match=rf"params_at\(5\): no step at or before 5 was kept \(kept: \[{first}"):
        run.params_at(5)
    with pytest.warns(UserWarning, match=rf"returning step {first}, the nearest kept step after it"):
        run.params_at(5, after=True)


def test_a_crash_with_log_spaced_checkpoints_resumes_bit_identical(kept_run, tmp_path):
    """Killed after the first chunk's kept steps were saved but before its end's checkpoint: the run resumes from
    the last kept step, 36, inside a chunk (its chunks then start at 36, 76, 116, each with the same slots for
    kept steps as any other), and ends bit-identical to the uninterrupted run."""
    crash = crash_at(40)

    with pytest.raises(Crash):
        train_run(kept_cfg(), tmp_path / "run", progress=False, on_chunk=crash)
    shutil.rmtree(tmp_path / "run" / "ckpt" / "40")  # as if the process died before the chunk end's save
    resume_run(tmp_path / "run", progress=False)
    again = load_run(tmp_path / "run")
    assert set(log_steps(120, 5)) <= set(again.kept_steps)  # the chunk ends differ: 76, 116 for 40, 80
    for key in ("loss", "train_acc", "valid_acc", "grad_norm"):
        np.testing.assert_array_equal(again.metrics[key], kept_run.metrics[key], err_msg=key)
    for name in ALL_PARAMS:
        np.testing.assert_array_equal(again.acts[name], kept_run.acts[name], err_msg=name)
        np.testing.assert_array_equal(_leaf(again.params_at(11), name), _leaf(kept_run.params_at(11), name))


@SLOW
def test_a_preset_run_keeps_several_checkpoints_before_it_groks():
    """nanda-tiny with its preset's checkpoints (ckpt.keep_log): kept steps before its grok step, and one of them
    hold a model that fits the training set but has not generalised."""
    run = finished_run("nanda-tiny")
    (grok,) = run.summary["grok_step"].values()
    before = [s for s in run.kept_steps if s < grok]
    valid, train = run.metrics["valid_acc"][:, 0], run.metrics["train_acc"][:, 0]
    memorised = [s for s in before if train[s] == 1 and valid[s] < 0.9]  # fit, not generalised: pre-grok
    assert len(before) >= 10 and len(memorised) >= 3 and valid[grok] >= 0.99
    run.params_at(memorised[-1])  # restores, verified against its checksum


def test_inputs_and_labels_by_split(kept_run):
    run = kept_run
    p = run.config.task.p
    x, y = run.inputs("grid"), run.labels("grid")
    assert x.shape == (p * p, 3) and np.array_equal(x[:, 0] + x[:, 1] * p, np.arange(p * p))
    np.testing.assert_array_equal(y, grid_labels("nanda", p)[0])
    np.testing.assert_array_equal(run.inputs("train"), run.task.train.x)
    np.testing.assert_array_equal(run.labels("valid"), run.task.valid.y)
    with pytest.raises(ConfigError, match="split 'dev': this run has train, valid, test, grid"):
        run.inputs("dev")


def readme_example() -> str:
    text = (ROOT / "docs" / "extending.md").read_text()  # the README's guide to extending
    section = text[text.index("## Extending in JAX"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs(capsys):
    """The README's example, run as written on a finished nanda-tiny run: it caches at two steps, ablates and prints
    the two losses; ablating every neuron it names must raise the loss."""
    run = finished_run("nanda-tiny")
    code = readme_example()
    assert '"runs/latest"' in code
    exec(compile(code.replace('"runs/latest"', repr(str(run.path))), "README example", "exec"), {})
    out = capsys.readouterr().out
    pre, grok, acc_pre, acc_end = re.search(r"step (\d+), before grokking at (\d+): accuracy ([\d.]+) .*at the end: "
                                            r"([\d.]+)", out).groups()
    assert int(pre) < int(grok) == run.summary["grok_step"]["mod 37"]
    assert float(acc_pre) < 0.9 < 0.99 < float(acc_end)  # a model that has not generalised yet, and the grokked one
    before, after = (float(v) for v in re.search(r"loss ([-+\de.]+) -> ([-+\de.]+)", out).groups())
    assert after > before
    assert Path(run.path).is_dir()
