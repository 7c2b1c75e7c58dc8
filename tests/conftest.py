"""Shared pytest wiring: the real two-node SLURM cluster fixture, and a leak check for /dev/shm.

`make test` runs the suite on two pytest-xdist workers: every test that uses a SLURM cluster
goes to one of them (xdist group `slurm-cluster`, tests/harness/conftest_slurm.py), so the other
keeps the cores busy while the cluster's jobs start and stop.
"""

from pathlib import Path

import pytest

from train.shared_graph import PREFIX, SHM

pytest_plugins = ["tests.harness.conftest_slurm"]


def _project_segments() -> set[Path]:
    return set(Path(SHM).glob(f"{PREFIX}*"))


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    if not _is_xdist_worker(config):  # the whole run's view: the controller, or a run without workers
        config.stash[_SEGMENTS_BEFORE] = _project_segments()


def pytest_sessionfinish(session, exitstatus):
    """Every test run, the kill -9 ones included, must leave no /dev/shm entry of the project.

    Checked once all workers are done (a worker's own end would see the other's live segments)."""
    if _is_xdist_worker(session.config) or _SEGMENTS_BEFORE not in session.config.stash:
        return
    leaked = sorted(str(p) for p in _project_segments() - session.config.stash[_SEGMENTS_BEFORE])
    if leaked:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"FAILED: the tests left shared-memory segments behind: {leaked}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_SEGMENTS_BEFORE = pytest.StashKey[set]()
