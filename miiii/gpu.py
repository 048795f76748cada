"""The GPU box: what `nvidia-smi` says (one query, every caller's), the CUDA build of JAX its driver supports,
installing that build (`make install-gpu`, `python -m miiii.gpu`), and the guard that stops `train` and `sweep`
from training on the CPU, without a word, on a machine that has an NVIDIA GPU.

JAX only logs a warning when it falls back to the CPU, so the backend is checked, not assumed. No jax import at
module level: the installer runs pip and must not hold the jax it replaces.

    python -m miiii.gpu [--cuda 12|13] [--dry-run]    # `make install-gpu [CUDA=12|13] [DRY_RUN=1]`
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from miiii.errors import ConfigError, OneLineParser, shown

QUERY = ("--query-gpu=name,driver_version", "--format=csv,noheader")
# JAX 0.10's installation guide: jax[cuda13] needs an NVIDIA driver >= 580, jax[cuda12] >= 525.
DRIVER_FLOOR = {13: 580, 12: 525}
# the packages each CUDA build installs that register a `cuda` backend: both register under one name and the CUDA 13
# one loads first, so the build not chosen is removed before the chosen one is installed
PLUGINS = {12: ("jax-cuda12-plugin", "jax-cuda12-pjrt"), 13: ("jax-cuda13-plugin", "jax-cuda13-pjrt")}
INSTALL_HINT = "make install-gpu"


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str

    @property
    def driver_major(self) -> int:
        head = self.driver.split(".")[0]
        if not head.isdigit():
            raise ConfigError(f"nvidia-smi reports driver '{shown(self.driver)}' for {shown(self.name)}: not a "
                              "version number")
        return int(head)


def visible_gpus() -> list[Gpu]:
    """The NVIDIA GPUs `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` lists: none when the
    program is not on PATH, fails or times out (a CPU machine, CI)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    rows = [line.rsplit(",", 1) for line in out.stdout.splitlines() if "," in line]
    return [Gpu(name.strip(), driver.strip()) for name, driver in rows]


def describe(gpus: list[Gpu]) -> str:
    return ", ".join(f"{g.name} (driver {g.driver})" for g in gpus) or "none"


def choose_cuda(gpus: list[Gpu], override: int | None = None) -> int:
    """The CUDA build for these GPUs' driver (the oldest driver decides): >= 580 -> 13, >= 525 -> 12; `override`
    (CUDA=12|13) wins. No GPU, or an older driver, is a ConfigError that names what was found and what is needed."""
    if override is not None:
        if override not in DRIVER_FLOOR:
            raise ConfigError(f"CUDA must be 12 or 13, got {shown(override)}")
        return override
    need = f"JAX's CUDA 12 build needs an NVIDIA driver >= {DRIVER_FLOOR[12]}, its CUDA 13 build >= {DRIVER_FLOOR[13]}"
    if not gpus:
        raise ConfigError(f"no NVIDIA driver found (`nvidia-smi` is not on PATH or lists no GPU); {need}")
    oldest = min(gpus, key=lambda g: g.driver_major)
    for cuda in sorted(DRIVER_FLOOR, reverse=True):
        if oldest.driver_major >= DRIVER_FLOOR[cuda]:
            return cuda
    raise ConfigError(f"NVIDIA driver {shown(oldest.driver)} found ({shown(oldest.name)}): too old; {need}; update "
                      "the driver")


def installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def install_commands(cuda: int, python: str = sys.executable) -> list[list[str]]:
    """pip's commands: remove every other CUDA build's plugins that are installed, then install `jax[cudaN]` at the
    version of the jax already installed (the tested one: pyproject.toml pins it)."""
    jax_version = installed("jax")
    if jax_version is None:
        raise ConfigError("jax is not installed: run `make install` first")
    other = [p for k, names in PLUGINS.items() if k != cuda for p in names if installed(p) is not None]
    cmds = [[python, "-m", "pip", "uninstall", "-y", *other]] if other else []
    return cmds + [[python, "-m", "pip", "install", f"jax[cuda{cuda}]=={jax_version}"]]


BACKEND_PROBE = "import jax; print(jax.default_backend()); print(jax.devices())"


def install(cuda: int | None, dry_run: bool) -> int:
    gpus = visible_gpus()
    print(f"GPUs: {describe(gpus)}")
    try:
        chosen = choose_cuda(gpus, cuda)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    why = "CUDA=" + str(cuda) if cuda is not None else f"driver {min(gpus, key=lambda g: g.driver_major).driver}"
    cmds = install_commands(chosen)
    print(f"CUDA {chosen} build ({why})")
    for cmd in cmds:
        print("$ " + " ".join(cmd), flush=True)
        if not dry_run and subprocess.run(cmd).returncode != 0:
            print(f"error: `{' '.join(cmd[2:])}` failed (its output is above)", file=sys.stderr)
            return 2
    if dry_run:
        print("dry run: nothing installed")
        return 0
    probe = subprocess.run([sys.executable, "-c", BACKEND_PROBE], capture_output=True, text=True)
    lines = probe.stdout.split("\n", 1)
    if probe.returncode != 0 or lines[0].strip() != "gpu":
        found = lines[0].strip() or (probe.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"error: jax[cuda{chosen}] is installed but JAX's backend is '{shown(found, 200)}', not gpu; see "
              "`python -m miiii doctor`", file=sys.stderr)
        return 2
    print(f"devices: {lines[1].strip() if len(lines) > 1 else ''}")
    return 0


# ---------------------------------------------------------------- the guard of train and sweep

def cpu_asked(device: str | None = None, environ=None) -> bool:
    """The CPU was asked for: `--device cpu`, or JAX_PLATFORMS naming the CPU alone."""
    env = os.environ if environ is None else environ
    platforms = {p.strip().lower() for p in env.get("JAX_PLATFORMS", "").split(",") if p.strip()}
    return device == "cpu" or platforms == {"cpu"}


def check_backend(device: str | None = None) -> None:
    """Before anything compiles: `--device cpu` pins JAX to the CPU; otherwise a visible NVIDIA GPU with JAX on the
    CPU backend (the CPU build installed, or a CUDA build that failed to load) is refused in one line. A machine
    without nvidia-smi (CI, a laptop) pays one PATH lookup."""
    import jax

    if device == "cpu":
        jax.config.update("jax_platforms", "cpu")
        return
    if cpu_asked(device):
        return
    gpus = visible_gpus()
    if gpus and jax.default_backend() == "cpu":
        raise ConfigError(f"an NVIDIA GPU is visible ({describe(gpus[:1])}) but JAX runs on the CPU: run "
                          f"`{INSTALL_HINT}` (or, to train on the CPU on purpose, pass --device cpu or set "
                          "JAX_PLATFORMS=cpu)")


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m miiii.gpu", description=(
        "Install the CUDA build of the installed jax that this machine's NVIDIA driver supports (driver >= 580: "
        "CUDA 13, >= 525: CUDA 12; older or none: an error), removing the other build's plugins first; then check "
        "that JAX's backend is the GPU (exit 2 if not)."))
    ap.add_argument("--cuda", type=int, choices=sorted(DRIVER_FLOOR), default=None,
                    help="the CUDA build, whatever the driver (make install-gpu CUDA=12)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the pip commands it would run and exit as the real run would decide; install nothing")
    args = ap.parse_args(argv)
    return install(args.cuda, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
