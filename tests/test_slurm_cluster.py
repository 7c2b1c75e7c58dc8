"""The SLURM test-cluster harness itself, against real daemons (no mocks)."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.localjob import WORKERS
from tests.harness.slurm_cluster import SlurmCluster, SlurmClusterError, skip_or_fail_unavailable, unavailable_reason

# The session fixture `slurm_cluster` comes from tests/harness/conftest_slurm.py: through
# tests/conftest.py when that loads it (as a plugin or by import), else from here.
if "tests.harness.conftest_slurm" not in sys.modules:
    pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm


@pytest.fixture
def capable():
    """For tests that start their own SlurmCluster: skip (or fail) where none can run."""
    reason = unavailable_reason(install=True)
    if reason:
        skip_or_fail_unavailable(reason)


def _log(msg: str) -> None:
    print(f"[slurm-cluster] {msg}", flush=True)


def test_nodes_idle(slurm_cluster):
    c = slurm_cluster
    _log(f"{c!r} started in {c.timings['start_s']:.2f}s (network {c.timings['network_s']:.2f}s)")
    assert c.node_names == [f"n{i}" for i in range(1, c.nodes + 1)] and c.nodes >= 4  # jobs of more than 2 nodes
    c.wait_nodes_idle(30)  # a job of an earlier test may still be completing
    assert c.node_states() == dict.fromkeys(c.node_names, "idle")
    p = c.run(["scontrol", "show", "node", c.node_names[-1], "-o"], check=True)
    assert "CPUTot=2" in p.stdout and "State=IDLE" in p.stdout
    assert c.env["SLURM_CONF"] == str(c.conf_path)
    assert c.conf_path.is_file() and str(c.conf_path).startswith(str(c.workdir))


def test_srun_spreads_tasks_over_the_nodes(slurm_cluster):
    c = slurm_cluster
    t0 = time.monotonic()
    p = c.run(["srun", "-N2", "-n4", "--ntasks-per-node=2", "--cpus-per-task=1", "hostname"], timeout=60)
    _log(f"srun -N2 -n4 hostname: {time.monotonic() - t0:.2f}s")
    assert p.returncode == 0, p.stderr
    first, second = sorted(set(p.stdout.split()))  # whichever two nodes SLURM gave, two tasks on each
    assert sorted(p.stdout.split()) == [first, first, second, second] and {first, second} <= set(c.node_names)
    p = c.run(["srun", f"-N{c.nodes}", f"-n{c.nodes}", "hostname"], timeout=60)
    assert p.returncode == 0 and sorted(p.stdout.split()) == c.node_names, p.stdout + p.stderr


def test_node_names_resolve_and_tcp_between_nodes(slurm_cluster):
    c = slurm_cluster
    first, last = c.node_names[0], c.node_names[-1]
    p = c.run(["srun", "-N1", "-w", last, "getent", "hosts", first], timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[:2] == [c.addresses[first], first]

    # rank 0 (the first node) listens; rank 1 (the last node) connects to the first by name.
    port = random.randint(40000, 45000)
    t0 = time.monotonic()
    p = c.run(["srun", "-N2", "-n2", "--ntasks-per-node=1", "-w", f"{first},{last}", sys.executable,
               str(WORKERS / "tcp_pair.py"), str(port)], timeout=60)
    _log(f"TCP {last} -> {first} over srun: {time.monotonic() - t0:.2f}s")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(p.stdout.splitlines())
    assert lines[0] == f"rank0 {first} got hello-from-{last} from {c.addresses[last]}"
    assert lines[1] == f"rank1 {last} sent"


def test_batch_jobs_complete_and_fail(slurm_cluster):
    c = slurm_cluster
    out = c.workdir / "jobs"
    t0 = time.monotonic()
    ok = c.sbatch(["-N1", "-o", f"{out}/%j.out", "--wrap", "echo ok-$SLURM_JOB_ID"])
    assert c.wait_job(ok, timeout=30) == "COMPLETED"
    dt_ok = time.monotonic() - t0
    t0 = time.monotonic()
    bad = c.sbatch(["-N1", "-o", f"{out}/%j.out", "--wrap", "echo about-to-fail; exit 3"])
    assert c.wait_job(bad, timeout=30) == "FAILED"
    dt_bad = time.monotonic() - t0
    _log(f"sbatch --wrap submit->COMPLETED {dt_ok:.2f}s, submit->FAILED {dt_bad:.2f}s")
    assert (out / f"{ok}.out").read_text().strip() == f"ok-{ok}"
    info = c.job_info(bad)
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "3:0"
    assert info["JobId"] == bad
    assert dt_ok < 10 and dt_bad < 10  # ~1 s each once the scheduler runs
    assert c.job_state(ok) == "COMPLETED"  # still visible (MinJobAge)


def test_first_hostname_in_a_batch_job_on_every_node(slurm_cluster):
    c = slurm_cluster
    out = c.workdir / "jobs" / "first-host-%j.out"
    t0 = time.monotonic()
    job = c.sbatch([f"-N{c.nodes}", "--ntasks-per-node=1", "-o", str(out), "--wrap",
                    'echo "$SLURM_JOB_NODELIST"; scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1; hostname'])
    assert c.wait_job(job, timeout=30) == "COMPLETED"
    _log(f"{c.nodes}-node batch job turnaround {time.monotonic() - t0:.2f}s")
    text = Path(str(out).replace("%j", job)).read_text().split()
    # a host list with a range; its first host, and the batch host, is n1
    assert text == [f"n[1-{c.nodes}]", "n1", "n1"] and c.job_info(job)["NodeList"] == f"n[1-{c.nodes}]"
    assert c.job_nodes(job) == c.node_names


def test_wait_job_rides_through_requeue(slurm_cluster):
    c = slurm_cluster
    out = c.workdir / "jobs" / "requeue-%j.out"
    job = c.sbatch(["-N1", "--requeue", "-o", str(out), "--open-mode=append", "--wrap",
                    'echo "run $SLURM_RESTART_COUNT"; sleep 1'])
    deadline = time.monotonic() + 30
    while c.job_state(job) != "RUNNING":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    c.requeue(job)
    state = c.wait_job(job, timeout=30)
    assert state == "COMPLETED", (c.job_info(job), c.logs_tail(40))
    _log(f"requeue -> COMPLETED {time.monotonic() - t0:.2f}s")
    assert c.job_info(job)["Restarts"] == "1"
    assert "run 1" in Path(str(out).replace("%j", job)).read_text()


def _pids_named_in(names: set[str], ns_inodes: set[int]) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            comm = Path(f"/proc/{d}/comm").read_text().strip()
            ino = os.stat(f"/proc/{d}/ns/net").st_ino
        except OSError:
            continue
        if comm in names and ino in ns_inodes:
            pids.append(int(d))
    return pids


def test_second_instance_and_clean_teardown(slurm_cluster, capable, tmp_path):
    """A short-lived second cluster next to the session one; a job is still running
    when it stops; afterwards nothing of it is left."""
    first = slurm_cluster
    t0 = time.monotonic()
    # a workdir too long for UNIX socket paths: sockets go to a short /tmp dir
    with SlurmCluster(nodes=2, cpus_per_node=2, workdir=tmp_path / ("long" * 10) / "c2") as c:
        assert c.rundir != c.workdir / "run" and len(str(c.munge_socket)) < 100
        _log(f"second cluster {c!r} started in {time.monotonic() - t0:.2f}s")
        assert c.subnet != first.subnet and c.ctld_port != first.ctld_port
        assert set(c.netns.values()).isdisjoint(first.netns.values())
        p = c.run(["srun", "-N2", "hostname"], timeout=60)
        assert sorted(p.stdout.split()) == ["n1", "n2"], p.stderr
        job = c.sbatch(["-N2", "--wrap", "srun sleep 300"])
        deadline = time.monotonic() + 30
        while len(_pids_named_in({"slurmstepd"}, c._ns_inodes)) < 3:  # batch + 2 step
            assert time.monotonic() < deadline, c.job_info(job)
            time.sleep(0.1)
        stepds = _pids_named_in({"slurmstepd", "sleep", "srun"}, c._ns_inodes)
        daemons = [p.pid for _, p in c._procs]
        daemons += _pids_named_in({"slurmd"}, c._ns_inodes)
        ns_names, links = list(c.netns.values()), [c.bridge, *c.veths.values()]
        rundir = c.rundir
    _log(f"second cluster stopped in {c.timings['stop_s']:.2f}s (with a running job)")

    for pid in stepds + daemons:
        assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} still exists"
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        assert str(c.workdir) not in cmd, f"pid {pid} still uses the stopped cluster: {cmd}"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    linkl = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for ns in ns_names:
        assert ns not in netns
    for ln in links:
        assert f" {ln}:" not in linkl and f" {ln}@" not in linkl
    assert not rundir.exists()
    assert c.leftovers() == []
    # the session cluster did not notice
    assert first.node_states() == dict.fromkeys(first.node_names, "idle")


def test_failed_start_cleans_up(capable, tmp_path):
    """slurmctld refuses this config: start() raises with the log tails and leaves nothing."""
    c = SlurmCluster(nodes=2, workdir=tmp_path / "bad",
                     extra_conf=["SelectType=select/nonexistent"])
    t0 = time.monotonic()
    with pytest.raises(SlurmClusterError) as exc:
        c.start()
    _log(f"failed start detected in {time.monotonic() - t0:.2f}s")
    assert "slurmctld" in str(exc.value)
    assert c.leftovers() == []
