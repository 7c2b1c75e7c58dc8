"""Shared pytest wiring: the real SLURM test cluster fixture, and a leak check for /dev/shm."""

import os

import pytest

from tests.harness.shm_entries import CHECKED_OUTSIDE, leak_message, leaked, project_entries

pytest_plugins = ["tests.harness.conftest_slurm"]


def _is_xdist_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config):
    # the whole run's view: the controller, or a run without workers; not a session that `make test` runs beside
    # another (tests/harness/streams.py checks the two together, after both)
    if not _is_xdist_worker(config) and os.environ.get(CHECKED_OUTSIDE) != "1":
        config.stash[_SEGMENTS_BEFORE] = project_entries()


def pytest_sessionfinish(session, exitstatus):
    """Every test run, the kill -9 ones included, must leave no /dev/shm entry of the project.

    Checked once, at the very end (by the controller when pytest-xdist runs workers: a worker's own end
    would see another worker's live segments; by tests/harness/streams.py when `make test` runs two sessions)."""
    if _is_xdist_worker(session.config) or _SEGMENTS_BEFORE not in session.config.stash:
        return
    left = leaked(session.config.stash[_SEGMENTS_BEFORE])
    if left:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(leak_message(left), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_SEGMENTS_BEFORE = pytest.StashKey[set]()


@pytest.fixture
def torch_switches():
    """torch's process-wide switches (train/loop/numerics.py sets them), restored after the test."""
    import torch

    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory, torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.utils.deterministic.fill_uninitialized_memory = saved[2]
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[3], saved[4]
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[5], saved[6]
    torch.set_float32_matmul_precision(saved[7])
