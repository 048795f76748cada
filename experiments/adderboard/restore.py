r"""A study run's folder rebuilt from its committed submission: its config (the setting's) and its final parameters
(the export's weights, float32 as trained), so that the settings that start from a run whose folder is gone (runs/
is not committed; the 41's lineage took hours) can train again.

    python -m experiments.adderboard.restore results/adderboard/submissions/adder-41p-41a1-m7-b17.py \
        --runs runs/adder                      # runs/adder/41a1-m7-b17, the run the file's RUN names

The folder holds config.json, params.npz and checksums.json, and restored.json naming the file it came from; no
summary.json or metrics, so the study never reads it as a run it trained (it is a source of parameters and hard
pairs only). The parameters are checked against the setting's model, leaf by leaf.
"""

from __future__ import annotations

import argparse
import base64
import io
import shutil
import sys
from pathlib import Path

import numpy as np

from experiments.adderboard.settings import SEARCH
from miiii.errors import ConfigError, OneLineParser, one_line_errors

RESTORED = "restored.json"


def read_submission(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    """(the run it exports, RUN; its flat {'/'-joined path: array} weights, _WEIGHTS) of a submission file
    (miiii/export.py's), read without running the file."""
    import ast
    import binascii

    if not path.is_file():
        raise ConfigError(f"{path}: no such file; name a submission file that export-adder wrote")
    found = {}
    try:
        for node in ast.parse(path.read_text()).body:
            names = [getattr(t, "id", "") for t in getattr(node, "targets", [])]
            if isinstance(node, ast.Assign) and ("_WEIGHTS" in names or "RUN" in names):
                found[names[0]] = ast.literal_eval(node.value)
        if "_WEIGHTS" in found and "RUN" in found:
            with np.load(io.BytesIO(base64.b64decode(found["_WEIGHTS"], validate=True))) as z:
                return str(found["RUN"]), {k: z[k] for k in z.files}
    except (SyntaxError, ValueError, TypeError, binascii.Error, OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: its weights do not read ({type(e).__name__}: {e}); name a submission file "
                          "that export-adder wrote") from None
    raise ConfigError(f"{path}: no RUN and _WEIGHTS in it; name a submission file that export-adder wrote")


def setting_config(name: str, runs: Path):
    """The RunConfig the study trains setting `name` with (its task.replay left out: a source needs no replay)."""
    from miiii.config import apply_overrides
    from miiii.presets import get_preset

    by_name = {s.name: s for s in SEARCH}
    if name not in by_name:
        raise ConfigError(f"--setting {name}: not a setting of experiments/adderboard/settings.py")
    s = by_name[name]
    if not s.init_from or s.phased:
        raise ConfigError(f"--setting {name}: a sweep or a phased preset; restore a solo phase")
    return apply_overrides(get_preset("adder-146"), [*s.sets, f"train.steps={s.steps}", f"train.seed={s.seed or 0}",
                                                     f"train.init_from={runs / s.init_from}"])


def restore(submission: Path, runs: Path, name: str | None = None) -> Path:
    """RUNS/NAME rebuilt from `submission` (NAME: the run it exports, its RUN); ConfigError when NAME is not that run,
    the folder exists, or the weights are not the setting's model."""
    import jax

    from experiments.adderboard.study import model_shapes
    from miiii.rundir import flatten_params

    exported, weights = read_submission(submission)
    if name is not None and name != exported:
        raise ConfigError(f"{submission} exports {exported}, not {name}; leave out --setting, or name {exported}")
    name = exported
    run_dir = runs / name
    if runs.exists() and not runs.is_dir():
        raise ConfigError(f"--runs {runs} is a file; name the study's runs folder")
    if run_dir.exists() or run_dir.is_symlink():
        raise ConfigError(f"{run_dir} exists; restore into a runs folder without it")
    cfg = setting_config(name, runs)
    shapes = model_shapes(cfg)
    want = {k: tuple(v.shape) for k, v in flatten_params(jax.tree.map(lambda a: np.zeros(a.shape), shapes)).items()}
    have = {k: tuple(v.shape) for k, v in weights.items()}
    if want != have:
        wrong = sorted(set(want) ^ set(have)) or [k for k in want if want[k] != have[k]]
        raise ConfigError(f"{submission}'s weights are not {name}'s model (first differing: {wrong[0]})")
    return write_source(run_dir, cfg, weights, RESTORED, {"from": str(submission), "setting": name})


def write_source(run_dir: Path, cfg, weights: dict[str, np.ndarray], note: str, provenance: dict) -> Path:
    """A run folder that is a source of parameters only (config.json, params.npz, checksums.json and `note`, a JSON
    file saying where it came from; no summary), written aside and then renamed: it appears whole or not at all."""
    import jax

    from miiii.files import write_json_atomic
    from miiii.integrity import write_manifest
    from miiii.rundir import unflatten, write_config, write_params

    tmp = run_dir.parent / f".{run_dir.name}.restoring"
    shutil.rmtree(tmp, ignore_errors=True)  # an earlier write's, stopped half-way: nothing in it is kept
    tmp.mkdir(parents=True)
    try:
        write_config(tmp, cfg)
        write_params(tmp, jax.tree.map(np.asarray, unflatten(weights)))
        write_json_atomic(tmp / note, provenance)
        write_manifest(tmp)
        tmp.rename(run_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return run_dir


def main(argv=None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("submission", type=Path, help="a submission file export-adder wrote (results/adderboard/"
                    "submissions/*.py)")
    ap.add_argument("--setting", default=None, help="the study setting whose run it exports: checked against the "
                    "file's RUN line (default: that run)")
    ap.add_argument("--runs", type=Path, default=Path("runs/adder"), help="the study's runs folder (default runs/"
                    "adder); the run is written to RUNS/SETTING, which must not exist")
    args = ap.parse_args(argv)

    def run() -> int:
        print(f"restored {restore(args.submission, args.runs, args.setting)} from {args.submission}")
        return 0

    return one_line_errors(run)


if __name__ == "__main__":
    sys.exit(main())
