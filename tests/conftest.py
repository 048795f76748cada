"""The test session's set-up: JAX's persistent compilation cache (miiii/compile_cache.py), and one directory for the
runs every worker shares (`_runhelp.finished_run`).

Every pytest-xdist worker and every CLI process a test starts uses the one directory (MIIII_COMPILE_CACHE,
default ~/.cache/miiii/jax; `MIIII_COMPILE_CACHE=off make test` runs without it): a program compiled once,
by any worker, in any earlier session, by `make train`, is loaded instead of compiled again.
"""

import os

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
