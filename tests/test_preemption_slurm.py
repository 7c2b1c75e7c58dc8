"""Preemption, requeue, resume and failing ranks on the real SLURM test cluster.

Jobs go in through `make submit` (jobs/train.sbatch, bare mode, 4 CPU ranks on 2 nodes, gloo).
The warning SLURM sends before a time limit (`--signal=B:USR1@120` in the template) is sent
here at once to the batch shell alone, as SLURM does (SlurmCluster.signal_batch_shell).
Every job has its own LOG_DIR and output.dir: the cluster numbers jobs from 1 each session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tests.harness.machine import cmdline
from train.errors import EXIT_REQUEUE, EXIT_STOPPED
from train.loop import checkpoint as ck

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.harness.conftest_slurm"]

REQUEST = ["NODES=2", "GPUS=4", "IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1", "CONFIG=tiny"]
# 1200 training nodes over 4 ranks, batches of 64: 5 steps per epoch
TRAIN = "sampler.batch_size=64 trainer.epochs=3 trainer.log_every=1"
SLOW = "trainer.step_delay_seconds=0.5"  # so that a signal lands in the middle of an epoch
JOB_TIMEOUT = 300  # a 2-core CI machine; a healthy job takes ~15-40 s, a requeue adds ~10 s


def submit(cluster, tmp_path: Path, name: str, args: str) -> tuple[str, Path]:
    logs = tmp_path / f"logs-{name}"
    p = subprocess.run(["make", "--no-print-directory", "submit", *REQUEST, f"LOG_DIR={logs}", f"ARGS={args}"],
                       cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1)
    return job, logs / f"pyg-train-{job}.log"


def wait(cluster, job: str, log: Path, timeout: float = JOB_TIMEOUT) -> str:
    try:
        return cluster.wait_job(job, timeout=timeout)
    except TimeoutError:
        subprocess.run(["scancel", job], env=cluster.env, timeout=30)
        pytest.fail(f"job {job} did not end within {timeout} s; log:\n{read(log)}\n{cluster.logs_tail()}")


def read(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else "<no log>"


def wait_for_line(cluster, job: str, log: Path, pattern: str, timeout: float = JOB_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, read(log), re.M):
        if time.monotonic() > deadline or cluster.job_state(job) not in ("PENDING", "RUNNING", "CONFIGURING"):
            subprocess.run(["scancel", job], env=cluster.env, timeout=30)
            pytest.fail(f"never saw {pattern!r} in job {job}:\n{read(log)}")
        time.sleep(0.1)


def same_weights(a: Path, b: Path) -> None:
    left, right = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), f"tensor {name} differs"


def metrics(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    return {k: v for k, v in summary.items() if not k.endswith("_seconds")}


def rank_pid(cluster, job: str, rank: int) -> int:
    """The host pid of `rank`'s training process, among this cluster's processes (other clusters on
    this machine have a job with this number too)."""
    for pid, environ in cluster.job_processes(job).items():
        if environ.get("SLURM_PROCID") == str(rank) and "-m train fit" in cmdline(pid):
            return pid
    raise LookupError(f"no training process of rank {rank} in job {job}")


@pytest.fixture(scope="module")
def baseline(slurm_cluster, tmp_path_factory) -> Path:
    """An uninterrupted 4-rank job of the tiny config."""
    tmp = tmp_path_factory.mktemp("slurm-baseline")
    job, log = submit(slurm_cluster, tmp, "baseline", f"{TRAIN} output.dir={tmp / 'run'}")
    assert wait(slurm_cluster, job, log) == "COMPLETED", read(log)
    return tmp / "run"


def test_template_and_package_agree_on_the_requeue_status():
    script = (ROOT / "jobs" / "train.sbatch").read_text()
    assert re.search(r"^#SBATCH --signal=B:USR1@\d+$", script, re.M)
    assert re.search(r"^#SBATCH --requeue$", script, re.M)
    assert f"EXIT_REQUEUE={EXIT_REQUEUE} " in script
    assert 'scontrol requeue "$SLURM_JOB_ID"' in script


@pytest.mark.slurm
def test_warning_signal_checkpoints_requeues_and_resumes_to_the_same_weights(slurm_cluster, baseline, tmp_path,
                                                                             capsys):
    run_dir = tmp_path / "run"
    job, log = submit(slurm_cluster, tmp_path, "requeue", f"{TRAIN} {SLOW} output.dir={run_dir}")
    wait_for_line(slurm_cluster, job, log, r"^0: epoch 1 step 2/5")
    sent = time.monotonic()
    slurm_cluster.signal_batch_shell(job, signal.SIGUSR1)  # as --signal=B:USR1@120 does
    state = wait(slurm_cluster, job, log)
    text = read(log)
    info = slurm_cluster.job_info(job)
    with capsys.disabled():
        print(f"\n[preemption] job {job}: USR1 to the batch shell -> {state} with Restarts={info['Restarts']} "
              f"{time.monotonic() - sent:.1f} s later", flush=True)
    assert state == "COMPLETED" and info["Restarts"] == "1", text
    assert "batch script: received SIGUSR1, forwarding it to the training step as SIGURG" in text
    stopped = re.search(r"^0: stopped in epoch 1 after step (\d): SIGURG.*exit status 3: the batch script requeues",
                        text, re.M)
    assert stopped, text
    assert f"training step exited with status {EXIT_REQUEUE}" in text
    assert f"requeueing job {job} (restart 1)" in text
    assert re.search(rf"^0: resuming from \S+{ck.checkpoint_name(1, int(stopped.group(1)))} .*; job {job} restart 1$",
                     text, re.M), text
    assert "training step exited with status 0" in text
    same_weights(baseline, run_dir)
    assert metrics(run_dir) == metrics(baseline)


@pytest.mark.slurm
def test_no_requeue_once_max_restarts_is_used_up(slurm_cluster, tmp_path):
    job, log = submit(slurm_cluster, tmp_path, "norestart",
                      f"{TRAIN} {SLOW} trainer.max_restarts=0 output.dir={tmp_path / 'run'}")
    wait_for_line(slurm_cluster, job, log, r"^0: epoch 0 step 2/5")
    slurm_cluster.signal_batch_shell(job, signal.SIGUSR1)
    state = wait(slurm_cluster, job, log)
    text = read(log)
    assert state == "FAILED" and slurm_cluster.job_info(job)["Restarts"] == "0", text
    assert f"training step exited with status {EXIT_STOPPED}" in text and "requeueing" not in text
    assert "not requeued, the job was already restarted 0 times (trainer.max_restarts=0)" in text
    assert ck.find_latest_valid(tmp_path / "run" / ck.CHECKPOINT_DIR, on_invalid=pytest.fail)[1]["epoch"] == 0


@pytest.mark.slurm
def test_kill_9_of_one_rank_fails_the_job_in_time_and_a_resubmission_completes(slurm_cluster, baseline, tmp_path,
                                                                               capsys):
    timeout = 60  # dist.collective_timeout_seconds: the bound asked for
    run_dir = tmp_path / "run"
    args = f"{TRAIN} {SLOW} dist.collective_timeout_seconds={timeout} output.dir={run_dir}"
    job, log = submit(slurm_cluster, tmp_path, "kill", args)
    wait_for_line(slurm_cluster, job, log, r"^0: epoch 1 step 2/5")
    os.kill(rank_pid(slurm_cluster, job, 2), signal.SIGKILL)
    killed = time.monotonic()
    state = wait(slurm_cluster, job, log)
    elapsed = time.monotonic() - killed
    text = read(log)
    with capsys.disabled():
        print(f"\n[preemption] job {job}: kill -9 of rank 2 -> {state} {elapsed:.1f} s later", flush=True)
    assert state == "FAILED", text
    assert elapsed < timeout + 15, text
    assert "task 2: Killed" in text
    # the job script names it (train/cli/killed.py): srun's first task line, the plan's figures make submit gave
    said = re.search(r"^rank 2 on (n\d) was ended by SIGKILL: often the kernel's out-of-memory killer: the plan said "
                     r"this rank peaks at [\d.,]+ [GM]iB and the node has ([\d.]+) GiB", text, re.M)
    assert said, text
    assert said.group(1) == re.search(r"^2: rank 2/4 on (n\d) ", text, re.M).group(1)  # where rank 2 ran
    assert float(said.group(2)) == round(2000 / 1024, 1)  # the cluster's nodes declare RealMemory=2000 (MB)
    path, _ = ck.find_latest_valid(run_dir / ck.CHECKPOINT_DIR, on_invalid=pytest.fail)
    assert path.name == ck.checkpoint_name(1, 0)
    again, log2 = submit(slurm_cluster, tmp_path, "resubmit", f"{TRAIN} output.dir={run_dir}")
    assert wait(slurm_cluster, again, log2) == "COMPLETED", read(log2)
    assert f"resuming from {path} " in read(log2)
    same_weights(baseline, run_dir)
    assert metrics(run_dir) == metrics(baseline)


@pytest.mark.slurm
def test_truncated_newest_checkpoint_is_skipped_and_the_previous_one_used(slurm_cluster, baseline, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(baseline, run_dir, ignore=shutil.ignore_patterns("model.pt", "summary.json"))
    newest = ck.list_checkpoints(run_dir / ck.CHECKPOINT_DIR)[0]
    assert newest.name == ck.checkpoint_name(3, 0)
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 3])
    job, log = submit(slurm_cluster, tmp_path, "truncated", f"{TRAIN} output.dir={run_dir}")
    assert wait(slurm_cluster, job, log) == "COMPLETED", read(log)
    text = read(log)
    assert f"warning: checkpoint {newest} is not usable (truncated" in text
    assert re.search(rf"^0: resuming from \S+{ck.checkpoint_name(2, 0)} ", text, re.M), text
    same_weights(baseline, run_dir)
    assert metrics(run_dir) == metrics(baseline)
