"""JAX's persistent compilation cache, switched on in one place: `train`, `sweep` and `book` (cli.py), the
experiments scripts and the tests (tests/conftest.py) call `setup_compile_cache()` before their first compile.

A process that compiles a program another process already compiled (same program, jax, jaxlib, device and
flags) loads the executable from disk instead: seconds of a CPU's compile per chunk length, evaluation and
init program. Loaded executables are the ones compiled before, so results are bit-identical.

    directory   $MIIII_COMPILE_CACHE if set; else $JAX_COMPILATION_CACHE_DIR (jax's own setting) if set;
                else $XDG_CACHE_HOME/miiii/jax, i.e. ~/.cache/miiii/jax
    off         MIIII_COMPILE_CACHE=off (or 0, false, no, none): nothing is read or written

Several processes may share the directory (pytest-xdist workers, a sweep beside a run): jax files each entry
under a hash of the program, compressed (zlib or zstd, whose streams end with a checksum), so an entry another
process is still writing does not decompress: jax warns and compiles as if it were missing. The directory grows
without bound (jax's `jax_compilation_cache_max_size` is unset): delete it any time, nothing else lives there.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "MIIII_COMPILE_CACHE"
OFF = frozenset({"off", "0", "false", "no", "none"})
# jax caches only compiles slower than 1 s by default; many of this project's programs compile in 0.1-1 s on a
# CPU (evaluation, init, short chunks, a test's tiny models), so every compile is cached. Measured (nanda-tiny,
# miiii-tiny and addition-tiny trained in one process, 2 shared cores at load 3.5): warm 18.6-18.9 s with every
# compile cached, 25.7-27.1 s with jax's 1 s threshold.
MIN_COMPILE_S = 0.0


def cache_dir(environ=None) -> Path | None:
    """The directory the cache uses under `environ` (default os.environ), or None when it is off."""
    env = os.environ if environ is None else environ
    value = env.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if value:
        return Path(value).expanduser()
    if env.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(env["JAX_COMPILATION_CACHE_DIR"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "miiii" / "jax"


def setup_compile_cache(environ=None) -> Path | None:
    """Point jax's persistent compilation cache at `cache_dir(environ)` (or switch it off); returns the directory.

    Takes effect for compiles after the call: call it before the first jitted function runs.
    """
    import jax

    path = cache_dir(environ)
    jax.config.update("jax_enable_compilation_cache", path is not None)
    if path is not None:
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_S)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path
