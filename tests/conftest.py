"""The test session's set-up: JAX's persistent compilation cache (miiii/compile_cache.py).

Every pytest-xdist worker and every CLI process a test starts uses the one directory (MIIII_COMPILE_CACHE,
default ~/.cache/miiii/jax; `MIIII_COMPILE_CACHE=off make test` runs without it): a program compiled once,
by any worker, in any earlier session, by `make train`, is loaded instead of compiled again.
"""

import os

from miiii.compile_cache import ENV, setup_compile_cache

# exported so that the subprocesses the tests start resolve the same directory (or `off`)
os.environ[ENV] = str(setup_compile_cache() or "off")
