"""The test session's set-up: JAX's persistent compilation cache (miiii/compile_cache.py), and one directory for the
runs every worker shares (`_runhelp.finished_run`).

Every pytest-xdist worker and every CLI process a test starts uses the one directory (MIIII_COMPILE_CACHE,
default ~/.cache/miiii/jax; `MIIII_COMPILE_CACHE=off make test` runs without it): a program compiled once,
by any worker, in any earlier session, is loaded instead of compiled again (`make train`'s are not the tests': XLA's
options, below, are part of the key).

The tests compile with `jax_disable_most_optimizations` (exported, so the CLI processes they start do too): XLA
skips most of its CPU optimisation passes, which on tests' tiny models cost more than the programs run. Measured:
test_train.py and test_model.py in 3 workers on 2 idle cores, empty cache: 131 s with the optimisations, 100 s
without. The tests check what the code computes, not how fast (`make bench` keeps the optimised build);
`JAX_DISABLE_MOST_OPTIMIZATIONS=0 make test` runs them optimised.
"""

import os
from importlib.metadata import version

from miiii.gpu import visible_gpus  # no jax import

os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")  # before jax is imported, here and in subprocesses
# True float32 matmuls where the code leaves the precision to JAX (a bare `apply`, numpy comparisons at float32
# tolerances; a GPU's default, TF32, keeps 10 mantissa bits; without this line 32 tests failed on an H200, names
# not captured, cause not confirmed), exported likewise; a no-op on a CPU. The code's own precision (train.precision,
# set inside the trainer and the hooked forward) overrides it, and test_precision's `default` cases would fail if a
# path forgot to set it (they see HIGHEST from here).
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
# Where nvidia-smi lists a GPU, XLA's deterministic scatters and reductions, exported as the line above: the
# bit-identical resume tests (a GPU's atomic adds come in any order). Only there: a CPU's are deterministic already.
if visible_gpus() and "xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_deterministic_ops=true".strip()

# XLA's legacy CPU fusion emitters instead of its MLIR ones (the default), exported as the lines above: the tests'
# programs compile in about half the time (measured: make test in 3 workers on 2 idle cores, empty cache, 12:57 wall
# and 1,539 s of CPU without, 9:31 and 1,120 s with). Only on the jaxlib minor the tests ran on (0.10): a jaxlib that
# no longer knows the flag aborts every process at its first compile ("Unknown flag in XLA_FLAGS").
if version("jaxlib").startswith("0.10.") and "xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_use_fusion_emitters=false".strip()

import jax
import pytest
from _runhelp import SHARED

from miiii.compile_cache import ENV, setup_compile_cache

# exported so that the subprocesses the tests start resolve the same directory (or `off`)
os.environ[ENV] = str(setup_compile_cache() or "off")


@pytest.fixture(scope="session", autouse=True)
def _shared_runs(tmp_path_factory):
    """The pytest-xdist workers of one session share their base temporary directory's parent: a reference run
    trained there by one worker is loaded by the others instead of trained again (pytest keeps the last three)."""
    base = tmp_path_factory.getbasetemp()
    os.environ[SHARED] = str((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-runs")


UNOPTIMIZED = jax.config.values["jax_disable_most_optimizations"]  # the session's (the setdefault at the top: on)


@pytest.fixture(autouse=True)
def _optimized(request):
    """`@pytest.mark.optimized`: this test compiles with XLA's optimisations, as the project's users do (but with the
    session's fusion emitters, above: the fingerprints' logits hold to their rtol either way): the preset
    fingerprints (bits written by an optimised build) and the grokking runs (thousands of steps, where running
    costs more than compiling).

    The setting is switched, and the in-memory compile caches cleared (they are not keyed on it), only where a test
    wants the other one than its worker's last test left: consecutive tests of one kind (the 14 fingerprints, a
    module's grokking runs) share what they compiled."""
    wanted = False if request.node.get_closest_marker("optimized") is not None else UNOPTIMIZED
    if jax.config.values["jax_disable_most_optimizations"] != wanted:
        jax.config.update("jax_disable_most_optimizations", wanted)
        jax.clear_caches()  # nothing compiled the other way is reused
    yield


@pytest.fixture(autouse=True)
def _no_pending_interrupt():
    """A stop a test asked for (its run ended in that chunk, so it is remembered for the next safe point) does not
    stop the next test in the same worker."""
    yield
    from miiii.errors import take_interrupt

    take_interrupt()
