"""A rank killed with SIGKILL in the middle of an epoch, on the real SLURM test cluster (tests/test_jobs_slurm.py's
request): the job ends well within the collective timeout, its log names the rank, its node, the signal and the
likely cause, and the last checkpoint stays intact."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.test_jobs_slurm import report, submit, wait
from train.loop import checkpoint as ck

pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

SLOW = "data.num_nodes=2002 sampler.batch_size=100 trainer.epochs=3 trainer.log_every=1 trainer.step_delay_seconds=0.5"


def task_pid(job: str, rank: int, timeout: float = 60) -> int:
    """The pid of task `rank` of `job`'s training step (`python -m train fit`), found by its environment."""
    wanted = {f"SLURM_JOB_ID={job}".encode(), f"SLURM_PROCID={rank}".encode()}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                if b"train\0fit" in (entry / "cmdline").read_bytes() and \
                        wanted <= set((entry / "environ").read_bytes().split(b"\0")):
                    return int(entry.name)
            except (OSError, ValueError):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no task {rank} of job {job}")


def test_a_rank_killed_mid_epoch_is_named_in_the_job_log(slurm_cluster, tmp_path, capsys):
    timeout = 120  # dist.collective_timeout_seconds
    run_dir = tmp_path / "run"
    job, log, started = submit(slurm_cluster, tmp_path, f"ARGS={SLOW} dist.collective_timeout_seconds={timeout} "
                                                        f"output.dir={run_dir}")
    deadline = time.monotonic() + 180
    while not (log.exists() and "0: epoch 1 step 1/" in log.read_text()):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.3)
    os.kill(task_pid(job, 3), signal.SIGKILL)
    killed_at = time.monotonic()
    state = wait(slurm_cluster, job, log)
    ended = time.monotonic() - killed_at
    text = log.read_text()
    report(capsys, f"rank 3 killed: job {job} {state} {ended:.1f} s later", text)
    assert state == "FAILED", text
    assert ended < timeout, ended
    # the job script names it from srun's first task line, with the plan's figures make submit gave the job
    said = re.search(r"^rank 3 on (n\d) was ended by SIGKILL: often the kernel's out-of-memory killer: the plan said "
                     r"this rank peaks at [\d.]+ GiB and the node has ([\d.]+) GiB", text, re.M)
    assert said, text
    assert said.group(1) == re.search(r"^3: rank 3/4 on (n\d) ", text, re.M).group(1)  # where rank 3 ran
    assert float(said.group(2)) == round(2000 / 1024, 1)  # the test cluster's nodes declare RealMemory=2000 (MB)
    path, _state = ck.find_latest_valid(run_dir / ck.CHECKPOINT_DIR, on_invalid=pytest.fail)
    assert path.name == ck.checkpoint_name(1, 0)
