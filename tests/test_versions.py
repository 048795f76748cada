"""pyproject.toml's pins admit the versions installed here, which are the ones the tests run on: a cap may never
exclude them. Raise a cap after `make test` passed on a newer release (README, "Versions")."""

import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement  # packaging: a dependency of pytest

ROOT = Path(__file__).resolve().parents[1]
CAPPED = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint")


def requirements() -> dict[str, Requirement]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {(r := Requirement(d)).name.lower(): r for d in deps}


@pytest.mark.parametrize("name", sorted(requirements()))
def test_every_dependency_admits_the_installed_version(name):
    try:
        installed = version(name)
    except PackageNotFoundError:
        pytest.fail(f"{name} is a dependency in pyproject.toml but is not installed")
    spec = requirements()[name].specifier
    assert spec.contains(installed, prereleases=True), f"{name} {installed} is installed, pyproject.toml wants {spec}"


@pytest.mark.parametrize("name", CAPPED)
def test_jax_and_its_libraries_are_capped(name):
    spec = requirements()[name].specifier
    caps = [s for s in spec if s.operator == "<"]
    assert len(caps) == 1, f"{name}: one upper bound '<X.Y' (the next minor release after the tested one): {spec}"


def test_jaxlib_is_pinned_as_jax_is():
    reqs = requirements()
    assert reqs["jaxlib"].specifier == reqs["jax"].specifier
