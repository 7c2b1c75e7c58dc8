"""The doctor as a job step on the real SLURM test cluster: `make doctor NODES= GPUS=` with a planted fault
fails the job before any training. Bare mode, CPU-only (gloo), as tests/test_jobs_slurm.py, whose four-node
job runs with DOCTOR=1 (`make submit ... DOCTOR=1` checks every node, then trains: tested there, one job
answering both)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The fixture comes from the plugin; this works whether or not tests/conftest.py loads it too.
pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

REQUEST = ["NODES=2", "GPUS=4", "IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1", "CONFIG=tiny",
           "DOCTOR_TIMEOUT=60"]
JOB_TIMEOUT = 240


def make(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=120)


def run_job(cluster, tmp_path: Path, target: str, *args: str) -> tuple[str, str, list[str]]:
    """`make TARGET` with REQUEST; waits for the job; returns (state, log text, the job's nodes)."""
    p = make(cluster, target, *REQUEST, f"LOG_DIR={tmp_path / 'logs'}", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1)
    log = Path(re.search(r"^log: +(\S+)$", p.stdout, re.M).group(1))
    try:
        state = cluster.wait_job(job, timeout=JOB_TIMEOUT)
    except TimeoutError:
        subprocess.run(["scancel", job], env=cluster.env, timeout=30)
        pytest.fail(f"job {job} did not end within {JOB_TIMEOUT} s:\n{log.read_text() if log.exists() else ''}")
    text = log.read_text()
    print(f"job {job} ({target}): {state}\n{text}")
    return state, text, cluster.job_nodes(job)


def test_make_doctor_job_fails_on_a_missing_dataset_without_training(slurm_cluster, tmp_path):
    empty = tmp_path / "data"
    empty.mkdir()
    # Cora: its memory plan fits the test nodes (2000 MiB), so the job is submitted and the doctor finds the gap
    state, text, (first, second) = run_job(slurm_cluster, tmp_path, "doctor",
                                           f"ARGS=data.name=Cora data.root={empty}")
    assert state == "FAILED", text
    assert (f"FAIL  data      dataset 'Cora' is missing under {empty / 'Planetoid' / 'Cora'} for ranks 0-3 "
            f"({first}, {second})") in text
    # srun reports rank 0's status 1, or 143 for the ranks --kill-on-bad-exit ended first
    assert re.search(r"^doctor step exited with status [1-9]\d*: not training", text, re.M), text
    assert "training step" not in text


def test_make_doctor_job_reports_transport_cpus_free_gpu_memory_and_the_all_to_all(slurm_cluster, tmp_path):
    """A healthy doctor job over two nodes: its table has a line per node with the CPUs per rank, the GPUs' free
    memory and the link NCCL would use, the transport between ranks, and the run's other collectives timed."""
    state, text, (first, second) = run_job(slurm_cluster, tmp_path, "doctor")
    assert state == "COMPLETED", text
    for node in (first, second):
        assert re.search(rf"node {node}: CPUs per rank \d+; GPU free memory: no GPU; between nodes NCCL would use TCP "
                         "over", text), text
    assert re.search(r"ok\s+transport gloo over TCP between ranks", text), text
    assert re.search(r"ok\s+all2all\s+all_to_all_single of 1 MiB a rank over 4 rank\(s\)", text), text
    assert re.search(r"ok\s+groups\s+the node groups' split \(2 gloo group\(s\)", text), text
