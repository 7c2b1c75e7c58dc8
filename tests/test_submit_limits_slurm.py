"""`make submit` asks the real test cluster (4 nodes of 2 CPUs, no GPUs, partition debug) before submitting:
a request that could never start is refused with what the partition offers; one that fits is submitted."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

BASE = ["IMAGE=none", "CONFIG=tiny"]  # a later CONFIG= wins


def make(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "submit", *BASE, *args], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=120)


def jobs(cluster) -> list[str]:
    return cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split()


@pytest.mark.parametrize("args,named", [
    # the old default CPUS_PER_TASK=8: accepted by SLURM, then pending forever (Reason=PartitionConfig)
    (["NODES=2", "GPUS=4", "GPUS_PER_TASK=0", "CPUS_PER_TASK=8"],
     ["CPUS_PER_TASK=8 x 2 tasks per node = 16 CPUs per node", "'debug' have at most 2 CPUs", "CPUS_PER_TASK=1"]),
    (["NODES=1", "GPUS=2", "GPUS_PER_TASK=0", "CPUS_PER_TASK=2"], ["4 CPUs per node", "at most 2 CPUs"]),
    (["NODES=5", "GPUS=5", "GPUS_PER_TASK=0"], ["NODES=5", "partition 'debug' has only 4 node(s)"]),
    (["PARTITION=nosuch", "GPUS_PER_TASK=0"], ["PARTITION='nosuch'", "debug"]),
    (["NODES=1", "GPUS=1"], ["1 GPUs per node", "at most 0 GPU(s)", "GPUS_PER_TASK=0"]),
    (["GPUS_PER_TASK=0", "TIME=12:00:00:00"], ["TIME='12:00:00:00' is not a SLURM time"]),
    # the memory plan against the memory the nodes declare (RealMemory=2000, checked by slurmd)
    (["NODES=2", "GPUS=4", "GPUS_PER_TASK=0", "CONFIG=synthetic", "ARGS=data.num_nodes=3000000"],
     ["memory plan for CONFIG='synthetic'", "a node needs", "but has 2.0 GiB (sinfo -p debug: smallest node)"]),
])
def test_unschedulable_requests_are_refused_naming_the_limit(slurm_cluster, args, named):
    before = jobs(slurm_cluster)
    for dry in ([], ["DRY_RUN=1"]):
        p = make(slurm_cluster, *args, *dry)
        assert p.returncode == 2, p.stdout + p.stderr
        for text in named:
            assert text in p.stderr, (text, p.stderr)
        assert "nothing was submitted" in p.stderr and "Traceback" not in p.stderr
    assert set(jobs(slurm_cluster)) <= set(before), "a refused request was queued"  # an earlier job may end


def test_a_request_that_fits_is_submitted_and_runs(slurm_cluster, tmp_path):
    """Two ranks on each of two nodes that declare 2000 MB: the plan holds the job to the nodes' real memory."""
    p = make(slurm_cluster, "NODES=2", "GPUS=4", "GPUS_PER_TASK=0", "CONFIG=synthetic", "TIME=10",
             f"LOG_DIR={tmp_path / 'logs'}",
             f"ARGS=trainer.epochs=1 trainer.max_steps_per_epoch=3 output.dir={tmp_path / 'run'}")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not checked" not in p.stderr  # the cluster was asked
    assert "2.0 GiB  (sinfo -p debug: smallest node)" in p.stdout and "\nfits\n" in p.stdout, p.stdout
    job = re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1)
    state = slurm_cluster.wait_job(job, timeout=240)
    log = tmp_path / "logs" / f"pyg-train-{job}.log"
    assert state == "COMPLETED", log.read_text() if log.exists() else slurm_cluster.logs_tail()
    assert (tmp_path / "run" / "summary.json").is_file()
