"""jobs/train.sbatch run by bash as slurmd would, with the stand-in srun and scontrol of standins/:
what the job script would start, without a cluster (tests/test_jobs.py, tests/test_doctor.py)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.harness import standin_bin
from tests.harness.knobs import knobs
from tests.harness.localjob import ROOT

# Settings a developer's shell may have set (jobs/knobs.md, and DRY_RUN); the tests start from none of them.
KNOBS = (*knobs(), "DRY_RUN", "MAKEFLAGS", "MAKELEVEL")


def run_job_script(tmp_path, knobs: dict[str, str], srun_rc: int = 0, root: Path = ROOT):
    """jobs/train.sbatch of `root` run by bash as slurmd would (a copy of the script elsewhere, job env,
    working dir = the project), with stand-in srun/scontrol; returns (completed process, srun argv lists)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name in ("srun", "scontrol"):  # srun records its argv and exits STANDIN_SRUN_RC; scontrol: gpu07, gpu08
        standin_bin.install(bindir, name)
    spool = tmp_path / "spool"  # slurmd runs its own copy of the batch script
    spool.mkdir(exist_ok=True)
    (spool / "slurm_script").write_text((root / "jobs" / "train.sbatch").read_text())
    record = tmp_path / "srun-calls.txt"
    env = {k: v for k, v in os.environ.items() if k not in KNOBS and not k.startswith("SLURM_")}
    env.update({"PATH": f"{bindir}:{env['PATH']}", "STANDIN_RECORD": str(record), "STANDIN_SRUN_RC": str(srun_rc),
                "SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2",
                "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "6",
                "PROJECT_DIR": str(root), "OMP_NUM_THREADS": "",
                "INFINIBAND_DEVICES": str(tmp_path / "no-infiniband")}, **knobs)  # no HCAs, unless a test gives some
    p = subprocess.run(["bash", str(spool / "slurm_script")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=60)
    calls = [c.splitlines() for c in record.read_text().split("\n\n") if c.strip()] if record.exists() else []
    return p, calls
