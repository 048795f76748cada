"""A sweep over several processes (hosts): joining them (`jax.distributed.initialize`), agreeing on one sweep before
anything is written, member-sharded arrays made from and gathered to every process's host values. sweep.py trains.
"""

from __future__ import annotations

import errno
import json
import math
import socket
import sys
import threading
import time
import zlib
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding

from miiii.claim import check_new
from miiii.config import ConfigError, RunConfig, shown
from miiii.session import check_profile

JOIN_TIMEOUT_S = 300.0  # jax.distributed.initialize's own default (initialization_timeout)


def join_processes(coordinator: str, num_processes: int, process_id: int, timeout: float = JOIN_TIMEOUT_S) -> None:
    """Join a sweep spanning `num_processes` processes (one per host, or several on one): `jax.distributed.initialize`
    with process 0's HOST:PORT; call it before anything touches a device. CPU processes exchange through gloo
    (jax's default CPU collectives in recent versions, named here for older ones); GPUs through NCCL.

    It says what it waits for, and waits at most `timeout` seconds for every process to join (a ConfigError then).
    jax's call runs in a thread, given a longer `initialization_timeout` of its own: jax's wait in C++ takes no
    Ctrl-C and ends its process in ways of its own, the wait here takes Ctrl-C and ends first (the CLI then leaves
    with os._exit, which ends jax's wait too). Process 0
    first checks that the port is free on this host: jax's coordination service would abort the process (a native
    stack dump) when another process 0, or any program, listens there."""
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port = int(coordinator.rpartition(":")[2])
    if process_id == 0:
        _check_port_free(port)
    others = f"the {num_processes - 1} other process{'es' if num_processes > 2 else ''}"
    where = f"its coordinator on port {port}" if process_id == 0 else f"process 0's coordinator at {coordinator}"
    print(f"process {process_id} of {num_processes}: waiting for {others} to join through {where} (at most "
          f"{timeout:g} s: --join-timeout; Ctrl-C stops)", file=sys.stderr, flush=True)
    failed: list[BaseException] = []

    def initialize():
        try:
            jax.distributed.initialize(coordinator, num_processes, process_id,
                                       initialization_timeout=min(math.ceil(timeout) + 60, 2**31 - 1))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            failed.append(e)

    thread = threading.Thread(target=initialize, name="miiii-join", daemon=True)
    deadline = time.monotonic() + timeout
    thread.start()
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.2)  # a Ctrl-C is raised here, in the main thread
    if thread.is_alive() or failed:
        why = (": " + shown(str(failed[0]).strip().splitlines()[0], 200)) if failed and str(failed[0]).strip() else ""
        raise ConfigError(f"process {process_id} of {num_processes}: not all {num_processes} processes joined through "
                          f"{coordinator} within {timeout:g} s (--join-timeout){why}; start every process with the "
                          "same --coordinator and --num-processes and its own --process-id")


def _check_port_free(port: int) -> None:
    """Process 0's coordinator port can be bound on this host (as jax's service binds it: every address)."""
    for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((addr, port))
            except OSError as e:
                if e.errno == errno.EADDRNOTAVAIL:
                    continue
                raise ConfigError(f"process 0 cannot start the coordinator on port {port}: {e.strerror or e} "
                                  "(another process 0 of a sweep, or another program, uses it); choose a free port "
                                  "for --coordinator") from None
            return


def agree(cfg: RunConfig, seeds: int, grid: dict, out_dir: Path, profile: str | Path | None = None) -> None:
    """Every process was given the same sweep, and process 0 may write `out_dir` (check_new there) and its
    `profile` (runner.check_profile): a ConfigError on every process otherwise, before any compile. One all-gather;
    nothing to do in a single process."""
    if jax.process_count() == 1:
        check_new(out_dir)
        check_profile(profile)
        return
    refused = ""
    if jax.process_index() == 0:
        try:
            check_new(out_dir)
            check_profile(profile)
        except ConfigError as e:
            refused = str(e)
    digest = zlib.crc32(json.dumps([cfg.to_dict(), seeds, grid], sort_keys=True).encode())
    rows = multihost_utils.process_allgather(np.array([digest, bool(refused)], np.int64))  # (processes, 2)
    if len(set(rows[:, 0].tolist())) > 1:
        raise ConfigError("the processes of this sweep were given different presets, --set, --seeds or --grid; "
                          "start every process with the same arguments")
    if rows[0, 1]:
        raise ConfigError(refused or f"process 0 cannot write its sweep directory {out_dir} or its --profile "
                          "(see process 0's error)")


def to_global(tree, sharding: NamedSharding):
    """Host values that every process computed alike -> arrays sharded over all processes' devices: each process
    fills its own devices' shards (`jax.device_put` cannot target another process's device). Typed PRNG keys
    travel as their key data."""
    def put(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(put(jax.random.key_data(x)), impl=jax.random.key_impl(x))
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree)


def fetch(tree):
    """A tree of member-sharded arrays as numpy on this process: `jax.device_get` in one process, an all-gather to
    every process across several."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def any_process(flag: bool) -> bool:
    """Whether `flag` holds on any process (a Ctrl-C on one stops every process at the same chunk)."""
    if jax.process_count() == 1:
        return flag
    return bool(multihost_utils.process_allgather(np.array([flag], np.int32)).any())
