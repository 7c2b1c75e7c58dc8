"""pytest wiring for the real SLURM test cluster (tests/harness/slurm_cluster.py).

Use from tests/conftest.py either as a plugin (also registers the auto-marking hook)::

    pytest_plugins = ["tests.harness.conftest_slurm"]

or by importing the fixture::

    from tests.harness.conftest_slurm import slurm_cluster  # noqa: F401

``slurm_cluster`` is session-scoped: one four-node cluster (n1..n4, 2 CPUs each)
for the whole session, torn down at the end, with NVIDIA's pyxis and enroot loaded
(tests/harness/pyxis_setup.py builds them from ../shared/pyxis when missing). Where pyxis
cannot be had, the cluster starts without it and ``pyxis_cluster`` (the container
tests' fixture) skips with the reason, or fails under SLURM_CLUSTER_REQUIRED=1.  Where the machine cannot host it
(not root, no namespaces, packages not installable) the tests using it are
skipped with the reason; set SLURM_CLUSTER_REQUIRED=1 (CI) to fail instead.
"""
from __future__ import annotations

import contextlib
import signal
import threading

import pytest

from tests.harness import anchor_cache, ngc_standin, pyxis_setup
from tests.harness.machine import machine_lock
from tests.harness.prepare import Preparation
from tests.harness.slurm_cluster import (
    SlurmCluster,
    SlurmClusterUnavailable,
    skip_or_fail_unavailable,
    unavailable_reason,
)

__all__ = ["SESSION_NODES", "anchor_venv", "machine_parts", "part_outcome", "slurm_cluster", "pyxis_cluster",
           "slurm_capable", "skip_or_fail_unavailable"]

# One cluster serves the whole suite (a start costs seconds; a node, a few processes and a
# namespace). Four nodes, so that a job spans more than two (host lists with ranges, the master
# on the first of a longer list), and the two-node jobs run on whichever two SLURM picks, as on
# a real cluster.
SESSION_NODES = 4


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


def _install_pyxis(log) -> None:
    reason = unavailable_reason(install=True)  # SLURM first: pyxis is built against its headers
    if reason:
        raise pyxis_setup.PyxisUnavailable(f"no SLURM test cluster here: {reason}")
    with machine_lock():
        pyxis_setup.ensure_installed(log=log)


# What the suite builds once per machine (tests/harness/prepare.py), in the order it is built, and the
# fixtures whose tests need each: those tests run last, after the ones that need nothing of it.
MACHINE_PARTS = [
    ("enroot+pyxis", _install_pyxis, {"slurm_cluster", "pyxis_cluster", "slurm_capable"}),
    ("NGC stand-in", lambda log: ngc_standin.build_standin(log=log), {"ngc_image"}),
    ("pyg-lib anchor", lambda log: anchor_cache.ensure_anchor(log=log), {"anchor_venv"}),
]
_PARTS = pytest.StashKey[Preparation]()


def _parts(config) -> Preparation:
    if _PARTS not in config.stash:
        config.stash[_PARTS] = Preparation([(name, step) for name, step, _fixtures in MACHINE_PARTS])
    return config.stash[_PARTS]


def _needs(item) -> int:
    """1 + the index in MACHINE_PARTS of the last part the test needs; 0 for none."""
    names = set(getattr(item, "fixturenames", ()))
    return max((i + 1 for i, (_n, _s, fixtures) in enumerate(MACHINE_PARTS) if names & fixtures), default=0)


@pytest.fixture(scope="session")
def machine_parts(request) -> Preparation:
    """The session's once-per-machine parts: ``machine_parts.result(name)`` waits for one (see MACHINE_PARTS)."""
    return _parts(request.config)


@contextlib.contextmanager
def part_outcome(machine_parts: Preparation, request, name: str, tag: str):
    """Wait for a once-per-machine part (MACHINE_PARTS) with pytest's capture off, so that its build messages,
    and what the caller prints inside the block, show as they come: yields the part's outcome."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        outcome = machine_parts.outcome(name)
        for message in outcome.messages:
            print(f"\n[{tag}] {message}", flush=True)
        yield outcome


@pytest.fixture(scope="session")
def anchor_venv(machine_parts, request):
    """The per-machine anchor, built in the background from the start of the session (tests/harness/prepare.py);
    skipped, with the reason, only where it cannot be built (no sources, no compiler)."""
    with part_outcome(machine_parts, request, "pyg-lib anchor", "anchor") as outcome:
        if isinstance(outcome.error, anchor_cache.AnchorUnavailable):
            pytest.skip(f"the pyg-lib anchor cannot be built here: {outcome.error}")
        venv, seconds = machine_parts.result("pyg-lib anchor")
        print(f"\n[anchor] {venv}: " + (f"built in {seconds:.0f} s" if seconds else "reused"), flush=True)
    return venv


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory, machine_parts):
    """A started SlurmCluster of SESSION_NODES nodes shared by the session (tests/harness/slurm_cluster.py)."""
    reason = unavailable_reason(install=True)
    if reason:
        skip_or_fail_unavailable(reason)
    pyxis_reason = None
    try:
        machine_parts.result("enroot+pyxis")
    except pyxis_setup.PyxisUnavailable as e:
        pyxis_reason = str(e)
    cluster = SlurmCluster(nodes=SESSION_NODES, cpus_per_node=2, pyxis=pyxis_reason is None,
                           workdir=tmp_path_factory.mktemp("slurm-cluster"))
    cluster.pyxis_unavailable = pyxis_reason
    with _sigterm_as_interrupt():
        try:
            cluster.start()  # cleans up after itself when it fails
        except SlurmClusterUnavailable as e:
            skip_or_fail_unavailable(str(e))
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture(scope="session")
def pyxis_cluster(slurm_cluster):
    """The session's cluster, for tests that need pyxis and enroot (skip or fail without).
    enroot's PyTorch hook is off; a test that turns it on turns it off again."""
    if not slurm_cluster.pyxis:
        skip_or_fail_unavailable(f"pyxis/enroot unavailable: {slurm_cluster.pyxis_unavailable}")
    return slurm_cluster


@pytest.fixture
def slurm_capable():
    """For tests that start their own SlurmCluster: skip (or fail) where none can run."""
    reason = unavailable_reason(install=True)
    if reason:
        skip_or_fail_unavailable(reason)


def pytest_collection_modifyitems(config, items):
    """Tests that use the cluster carry the `slurm` marker (so `-m "not slurm"` works). Tests that need a
    once-per-machine part run after those that need none, in the order the parts are built, so that a fresh
    machine builds them in the background meanwhile (tests/harness/prepare.py)."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "slurm_cluster" in names or "pyxis_cluster" in names:
            item.add_marker(pytest.mark.slurm)
        if "pyxis_cluster" in names:
            item.add_marker(pytest.mark.container)
    items.sort(key=_needs)  # stable: the order within each group is kept


def pytest_collection_finish(session):
    """Start building, in the background, the parts the selected tests need."""
    if session.config.option.collectonly or not session.items:
        return
    used = set().union(*(getattr(item, "fixturenames", ()) for item in session.items))
    wanted = [name for name, _step, fixtures in MACHINE_PARTS if used & fixtures]
    if wanted:
        _parts(session.config).start(wanted)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[prepare] building in the background at nice 19, if missing: {', '.join(wanted)} "
                                "(the tests that need them run last)")
