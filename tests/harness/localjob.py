"""Start N real local processes with the variables srun sets, as a stand-in for nothing:
each process is a real `python -m train ...` that rendezvous over real torch.distributed (gloo).
The launcher itself is bench/localranks.py's, the one the benchmarks use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.localranks import LocalRanks, srun_env  # srun_env: also for the tests that import it from here
from train.cluster.distenv import free_port  # also for the tests that import it from here

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"  # the programs tests start, as real files


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
                  timeout: float = 240, extra_env: dict[str, str] | None = None, port: int | None = None,
                  module: str = "train") -> JobResult:
    """`python -m train ARGS` (or another `module`: a worker that changes one thing first) as `world_size` ranks with
    srun's variables (bench/localranks.py); past `timeout` the ranks still running print their stacks and are
    killed, so a hang shows up as output, not a stuck test."""
    port = port or free_port()
    with LocalRanks([sys.executable, "-m", module, *args], world_size,
                    lambda rank: srun_env(rank, world_size, nodes, job_id, port), extra_env=extra_env or {},
                    threads=1) as ranks:
        codes = ranks.wait(timeout, dump_stacks=True)
        outputs = [out + (f"\n[killed after {timeout} s: hang]" if code is None else "")
                   for out, code in zip(ranks.outputs(), codes)]
        return JobResult([ranks.procs[r].returncode if code is None else code for r, code in enumerate(codes)],
                         outputs)


def make_data(*assignments: str) -> subprocess.CompletedProcess:
    """`make data`; the .sqsh route runs with the real enroot in tests/test_container_real.py."""
    env = {k: v for k, v in os.environ.items()  # a user runs it from a shell: not under the session's make test
           if k not in ("DATA_DIR", "IMAGE", "DATASET", "DRY_RUN", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", "data", *assignments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
