"""Shared pytest wiring: the real two-node SLURM cluster fixture, and a leak check for /dev/shm."""

from pathlib import Path

import pytest

from train.shared_graph import PREFIX, SHM

pytest_plugins = ["tests.harness.conftest_slurm"]


@pytest.fixture(scope="session", autouse=True)
def no_shared_memory_left_behind():
    """Every test run, the kill -9 ones included, must leave no /dev/shm entry of the project."""
    before = set(Path(SHM).glob(f"{PREFIX}*"))
    yield
    leaked = sorted(str(p) for p in set(Path(SHM).glob(f"{PREFIX}*")) - before)
    assert not leaked, f"the tests left shared-memory segments behind: {leaked}"
