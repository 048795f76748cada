"""Every preset's model is the one it was before the small-decoder options (RoPE, RMSNorm, QK-norm, SwiGLU, grouped
key/value heads, head size, arc embedding) joined the family: its initial parameters bit for bit (a sha256 in
tests/data/preset_fingerprints.json) and its eval-mode logits on two inputs (tests/data/preset_logits.npz), both
written by the code before them (`python tests/test_preset_fingerprints.py --write`). The logits are compared as
values to rtol 1e-5: XLA's CPU kernels differ in the last bits between instruction sets (AVX-512 against AVX2), so a
hash of them holds only on the machine that wrote it, while any change to the model moves them by far more. A preset
whose recipe changed on purpose is left out by name."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest

pytestmark = pytest.mark.optimized  # tests/conftest.py: compiled as users compile

FILE = Path(__file__).parent / "data" / "preset_fingerprints.json"
LOGITS = FILE.with_name("preset_logits.npz")


def fingerprint(cfg) -> tuple[str, np.ndarray]:
    """sha256 of the initial parameters (seed 0, leaves in order), and the eval-mode logits on two inputs."""
    from miiii.model import build_model
    from miiii.tasks import make_task

    task_cfg = replace(cfg.task, n_train=8, n_valid=8) if cfg.task.is_sequence else cfg.task
    task = make_task(task_cfg)
    model = build_model(cfg.model, task)
    x = task.train.x[:2]
    # lazy_init: the parameters' draws run op by op as model.init's do, bit for bit (the sha256s it wrote), while the
    # forward pass init makes on the way is only traced, not compiled op by op (the logits: one jitted program)
    params = model.lazy_init({"params": jax.random.key(0)}, jax.ShapeDtypeStruct(x.shape, x.dtype))["params"]
    logits = np.asarray(jax.jit(model.apply)({"params": params}, x)[0])
    digest = hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in jax.tree.leaves(params))).hexdigest()
    return digest, logits


def _recorded() -> dict:
    return json.loads(FILE.read_text())


def _distinct() -> list[str]:
    """One recorded preset per distinct model and task shape (presets that differ only in their recipe share one)."""
    from miiii.presets import PRESETS

    seen, names = set(), []
    for name in sorted(_recorded()):
        assert name in PRESETS, f"preset {name} is gone: regenerate {FILE.name} on purpose if so"
        cfg = PRESETS[name][0]
        key = (cfg.model, replace(cfg.task, n_train=0, n_valid=0, train_seed=0, valid_seed=0))
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names


@pytest.mark.parametrize("name", _distinct())
def test_preset_model_is_unchanged(name):
    from miiii.presets import PRESETS

    digest, logits = fingerprint(PRESETS[name][0])
    assert digest == _recorded()[name]["params"]
    with np.load(LOGITS) as recorded:
        np.testing.assert_allclose(logits, recorded[name], rtol=1e-5, atol=1e-6)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    from miiii.presets import PRESETS

    skip = {"nanda-paper-cpu", "miiii-paper-cpu", "miiii-masked-paper-cpu", "miiii-basis-paper-cpu",
            "miiii-original-paper-cpu", "nanda-original-paper-cpu"}  # moved to miiii-cpu's recipe on purpose
    prints = {n: fingerprint(c) for n, (c, _) in sorted(PRESETS.items()) if n not in skip}
    FILE.write_text(json.dumps({n: dict(params=d) for n, (d, _) in prints.items()}, indent=1) + "\n")
    np.savez_compressed(LOGITS, **{n: logits for n, (_, logits) in prints.items()})
