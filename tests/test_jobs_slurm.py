"""`make submit` and `make srun` end to end on the real two-node SLURM test cluster.

Bare mode (IMAGE=none: the project's .venv on the nodes, which share this filesystem), CPU-only
(GPUS_PER_TASK=0, gloo), the tiny config, one CPU per task (the nodes have two each). Every job
gets its own LOG_DIR and output.dir: the test cluster numbers its jobs from 1 again each session.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from train.dist.distenv import port_for_job

ROOT = Path(__file__).resolve().parents[1]
# The fixture comes from the plugin; this works whether or not tests/conftest.py loads it too.
pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

REQUEST = ["NODES=2", "GPUS=4", "IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1", "CONFIG=tiny"]
JOB_TIMEOUT = 240  # generous for a 2-core CI machine; a healthy job takes ~10-30 s
PLACEMENT = re.compile(r"^(\d+): rank (\d+)/(\d+) on (\S+) "
                       r"\(node (\d+), local rank (\d+), master (\S+):(\d+) from ([^)]*)\)$", re.M)
FINAL = re.compile(r"^(\d+): rank (\d+) final (\{.*\})$", re.M)


def make(cluster, *args: str) -> subprocess.CompletedProcess:
    """`make ARGS` in the project, as a user on the cluster's login node types it."""
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=120)


def submit(cluster, tmp_path: Path, *args: str) -> tuple[str, Path, float]:
    """`make submit` with REQUEST and `args`; returns (job id, printed log path, submit time)."""
    started = time.monotonic()
    p = make(cluster, "submit", *REQUEST, f"LOG_DIR={tmp_path / 'logs'}", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1)
    log = Path(re.search(r"^log: +(\S+)$", p.stdout, re.M).group(1))
    assert log == tmp_path / "logs" / f"pyg-train-{job}.log"
    assert f"tail -f {log}" in p.stdout
    return job, log, started


def wait(cluster, job: str, log: Path) -> str:
    try:
        return cluster.wait_job(job, timeout=JOB_TIMEOUT)
    except TimeoutError:
        subprocess.run(["scancel", job], env=cluster.env, timeout=30)
        text = log.read_text() if log.exists() else "<no log>"
        pytest.fail(f"job {job} did not end within {JOB_TIMEOUT} s; log:\n{text}\n{cluster.logs_tail()}")


def report(capsys, headline: str, text: str) -> None:
    """Show the outcome and the rank placement in the test log (CI's log), even when passing."""
    shown = [ln for ln in text.splitlines()
             if PLACEMENT.match(ln) or FINAL.match(ln) or ln.startswith(("job ", "training step", "srun: error"))
             or "injected failure" in ln]
    with capsys.disabled():
        print(f"\n[jobs] {headline}\n" + "\n".join(f"[jobs]   {ln}" for ln in shown), flush=True)


def placement(text: str) -> dict[int, tuple[str, str]]:
    """rank -> (host, master addr:port), from the line every rank prints after rendezvous."""
    out = {}
    for label, rank, world, host, _node, _local, addr, port, _source in PLACEMENT.findall(text):
        assert label == rank and world == "4"
        out[int(rank)] = (host, f"{addr}:{port}")
    return out


def test_make_submit_two_nodes_four_ranks_completes(slurm_cluster, tmp_path, capsys):
    out_dir = tmp_path / "run"
    job, log, started = submit(slurm_cluster, tmp_path, f"ARGS=output.dir={out_dir}")
    state = wait(slurm_cluster, job, log)
    text = log.read_text()
    report(capsys, f"make submit NODES=2 GPUS=4: job {job} {state} after {time.monotonic() - started:.1f} s", text)
    assert state == "COMPLETED", text
    # the master is the step's first node, at the package's port for the job (nothing exported)
    port = port_for_job(job)
    assert "MASTER_ADDR" not in text
    # 4 ranks, 2 per node, all rendezvoused at n1
    where = placement(text)
    assert where == {0: ("n1", f"n1:{port}"), 1: ("n1", f"n1:{port}"),
                     2: ("n2", f"n1:{port}"), 3: ("n2", f"n1:{port}")}, text
    # the training ran (rank 0's epoch lines) and every rank ends with the same weights and metrics
    assert re.search(r"^0: epoch +1 loss [\d.]+ train_acc [\d.]+ val_acc [\d.]+", text, re.M), text
    finals = {int(rank): json.loads(body) for label, rank, body in FINAL.findall(text) if label == rank}
    assert sorted(finals) == [0, 1, 2, 3], text
    assert all(f == finals[0] for f in finals.values()), finals
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["world_size"] == 4 and summary["final_test_acc"] == finals[0]["test_acc"]
    assert "training step exited with status 0" in text


def test_one_failing_rank_fails_the_job_quickly(slurm_cluster, tmp_path, capsys):
    # A collective timeout far above the bound: only --kill-on-bad-exit can end the job in time.
    args = ("ARGS=trainer.fail_at_step=2 trainer.fail_rank=3 dist.collective_timeout_seconds=900 "
            f"output.dir={tmp_path / 'run'}")
    job, log, started = submit(slurm_cluster, tmp_path, args)
    state = wait(slurm_cluster, job, log)
    elapsed = time.monotonic() - started
    text = log.read_text()
    report(capsys, f"make submit with rank 3 failing at step 2: job {job} {state} after {elapsed:.1f} s", text)
    assert state == "FAILED", text
    assert "injected failure on rank 3 at step 2" in text
    assert re.search(r"training step exited with status [1-9]", text), text
    assert elapsed < JOB_TIMEOUT
    assert not FINAL.search(text), "ranks finished although one failed"


def test_printed_srun_line_runs_in_salloc(slurm_cluster, tmp_path, capsys):
    out_dir = tmp_path / "run"
    p = make(slurm_cluster, "srun", *REQUEST, f"ARGS=output.dir={out_dir}")
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.strip().splitlines()
    assert "--container" not in line  # bare mode: no pyxis flags
    started = time.monotonic()
    r = slurm_cluster.run(["salloc", "--nodes=2", "--ntasks=4", "--cpus-per-task=1", "bash", "-c", line],
                          cwd=tmp_path, timeout=JOB_TIMEOUT)
    text = r.stdout + r.stderr
    report(capsys, f"salloc -N2 -n4 + the `make srun` line: rc {r.returncode} "
           f"after {time.monotonic() - started:.1f} s", text)
    assert r.returncode == 0, text
    job = re.search(r"Granted job allocation (\d+)", r.stderr).group(1)
    port = port_for_job(job)  # derived by the package from SLURM_JOB_ID: nothing exported it
    assert placement(text) == {0: ("n1", f"n1:{port}"), 1: ("n1", f"n1:{port}"),
                               2: ("n2", f"n1:{port}"), 3: ("n2", f"n1:{port}")}, text
    finals = [json.loads(body) for _, _, body in FINAL.findall(text)]
    assert len(finals) == 4 and all(f == finals[0] for f in finals), text
    assert shlex.split(line)[-1] == f"output.dir={out_dir}"
