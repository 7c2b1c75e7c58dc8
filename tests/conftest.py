"""Shared pytest wiring: the real SLURM test cluster fixture, and a leak check for /dev/shm."""

import re
from pathlib import Path

import pytest

from train.graph.segments import PREFIX, SHM

pytest_plugins = ["tests.harness.conftest_slurm"]
PRIVATE_DIR = re.compile(rf"^{re.escape(PREFIX)}u\d+$")  # a user's private directory: it stays, its contents go


def _project_segments() -> set[Path]:
    found: set[Path] = set()
    for entry in Path(SHM).glob(f"{PREFIX}*"):
        if PRIVATE_DIR.match(entry.name) and entry.is_dir() and not entry.is_symlink():
            try:
                found.update(entry.iterdir())
            except OSError:  # another user's (the tests of tests/test_shm_users.py run as other users)
                found.add(entry)
        else:
            found.add(entry)
    return found


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
