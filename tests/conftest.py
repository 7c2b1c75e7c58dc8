"""Shared pytest wiring: the real SLURM test cluster fixture, and a leak check for /dev/shm."""

from pathlib import Path

import pytest

from train.graph.shared_graph import PREFIX, SHM

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

    Checked once, at the very end (by the controller when pytest-xdist runs workers: a worker's own end
    would see another worker's live segments)."""
    if _is_xdist_worker(session.config) or _SEGMENTS_BEFORE not in session.config.stash:
        return
    leaked = sorted(str(p) for p in _project_segments() - session.config.stash[_SEGMENTS_BEFORE])
    if leaked:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"FAILED: the tests left shared-memory segments behind: {leaked}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_SEGMENTS_BEFORE = pytest.StashKey[set]()
