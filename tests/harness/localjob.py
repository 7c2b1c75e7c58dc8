"""Start N real local processes with the variables srun sets, as a stand-in for nothing:
each process is a real `python -m train ...` that rendezvous over real torch.distributed (gloo).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from train.cluster.distenv import free_port  # also for the tests that import it from here

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"  # the programs tests start, as real files


def srun_env(rank: int, world_size: int, nodes: int, job_id: str, port: int) -> dict[str, str]:
    """What srun exports to task `rank` of a job with `world_size` tasks spread evenly over `nodes`."""
    per_node = world_size // nodes
    return {
        "SLURM_JOB_ID": job_id,
        "SLURM_STEP_ID": "0",  # started by srun: a step (train.cluster.distenv refuses a batch shell claiming tasks)
        "SLURM_NTASKS": str(world_size),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(rank // per_node),
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_JOB_NODELIST": f"node[1-{nodes}]" if nodes > 1 else "node1",
        "MASTER_ADDR": "127.0.0.1",  # every "node" is this machine
        "MASTER_PORT": str(port),
    }


@dataclass
class JobResult:
    returncodes: list[int]
    outputs: list[str]


def final_summary(run_dir: Path) -> dict:
    """A finished run's summary.json, checked to say that every rank ended with the same weights
    (`weights_sha256`: their SHA-256)."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    assert summary["weights_same_on_all_ranks"] is True, summary
    return summary


def run_local_job(args: list[str], world_size: int, nodes: int = 1, job_id: str = "4242",
                  timeout: float = 240, extra_env: dict[str, str] | None = None, port: int | None = None) -> JobResult:
    port = port or free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "WORLD_SIZE", "RANK",
                                                                       "LOCAL_RANK", "LOCAL_WORLD_SIZE"))}
    base.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1",
                **(extra_env or {}))
    procs = [
        subprocess.Popen([sys.executable, "-m", "train", *args], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={**base, **srun_env(rank, world_size, nodes, job_id, port)})
        for rank in range(world_size)
    ]
    return collect(procs, timeout)


def collect(procs: list[subprocess.Popen], timeout: float) -> JobResult:
    """Wait for every process; past `timeout`, kill the rest so a hang shows up as output, not a stuck test."""
    deadline = time.monotonic() + timeout
    outputs, codes = [], []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER=1: print every thread's stack first
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            proc.kill()
            out, _ = proc.communicate()
            out += f"\n[killed after {timeout} s: hang]"
        outputs.append(out)
        codes.append(proc.returncode)
    return JobResult(codes, outputs)


def make_data(*assignments: str) -> subprocess.CompletedProcess:
    """`make data`; the .sqsh route runs with the real enroot in tests/test_container_real.py."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "IMAGE", "DATASET", "DRY_RUN")}
    return subprocess.run(["make", "--no-print-directory", "data", *assignments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
