"""pytest wiring for the real SLURM test cluster (tests/slurm_cluster.py).

Use from tests/conftest.py either as a plugin (also registers the auto-marking hook)::

    pytest_plugins = ["tests.conftest_slurm"]

or by importing the fixture::

    from tests.conftest_slurm import slurm_cluster  # noqa: F401

``slurm_cluster`` is session-scoped: one two-node cluster (n1, n2, 2 CPUs each)
for the whole session, torn down at the end.  Where the machine cannot host it
(not root, no namespaces, packages not installable) the tests using it are
skipped with the reason; set SLURM_CLUSTER_REQUIRED=1 (CI) to fail instead.
"""
from __future__ import annotations

import contextlib
import signal
import threading

import pytest

from tests.slurm_cluster import (SlurmCluster, SlurmClusterUnavailable,
                                 skip_or_fail_unavailable, unavailable_reason)

__all__ = ["slurm_cluster", "slurm_capable", "skip_or_fail_unavailable"]


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """A SIGTERM (CI timeout) ends the session like Ctrl-C, so teardown still runs."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A started two-node SlurmCluster shared by the session (see tests/slurm_cluster.py)."""
    reason = unavailable_reason(install=True)
    if reason:
        skip_or_fail_unavailable(reason)
    cluster = SlurmCluster(nodes=2, cpus_per_node=2,
                           workdir=tmp_path_factory.mktemp("slurm-cluster"))
    with _sigterm_as_interrupt():
        try:
            cluster.start()  # cleans up after itself when it fails
        except SlurmClusterUnavailable as e:
            skip_or_fail_unavailable(str(e))
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def slurm_capable():
    """For tests that start their own SlurmCluster: skip (or fail) where none can run."""
    reason = unavailable_reason(install=True)
    if reason:
        skip_or_fail_unavailable(reason)


def pytest_collection_modifyitems(config, items):
    """Tests that use the cluster carry the `slurm` marker (so `-m "not slurm"` works)."""
    for item in items:
        if "slurm_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)
