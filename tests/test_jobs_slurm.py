"""`make submit` and `make srun` end to end on the real SLURM test cluster (four nodes; jobs of four and two).

Bare mode (IMAGE=none: the project's .venv on the nodes, which share this filesystem), CPU-only
(GPUS_PER_TASK=0, gloo), the tiny config, one CPU per task (the nodes have two each). Every job
gets its own LOG_DIR and output.dir: the test cluster numbers its jobs from 1 again each session.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness.localjob import final_summary
from tests.harness.machine import cmdline
from tests.harness.placement import RANK_LINE, block_placement, placement
from tests.harness.slurm_conf import TERMINAL_STATES
from train.cluster.distenv import port_for_job

ROOT = Path(__file__).resolve().parents[1]
# The fixture comes from the plugin; this works whether or not tests/conftest.py loads it too.
pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

REQUEST = ["NODES=2", "GPUS=4", "IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1", "CONFIG=tiny"]
JOB_TIMEOUT = 240  # generous for a 2-core CI machine; a healthy job takes ~10-30 s
# rank 0's last line: every rank ended with the same weights (train/loop/run.py; summary.json holds the hash)
SAME_WEIGHTS = "0: final weights {} (sha256 {}, the same on all {} ranks)"
FINAL = re.compile(r"^0: final weights ", re.M)


def make(cluster, *args: str) -> subprocess.CompletedProcess:
    """`make ARGS` in the project, as a user on the cluster's login node types it."""
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=120)


def submit(cluster, tmp_path: Path, *args: str, request: list[str] = REQUEST) -> tuple[str, Path, float]:
    """`make submit` with `request` and `args`; returns (job id, printed log path, submit time)."""
    started = time.monotonic()
    p = make(cluster, "submit", *request, f"LOG_DIR={tmp_path / 'logs'}", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1)
    log = Path(re.search(r"^log: +(\S+)$", p.stdout, re.M).group(1))
    assert log == tmp_path / "logs" / f"pyg-train-{job}.log"
    assert f"tail -f {log}" in p.stdout
    # what make logs / make tail follow from now on, even before the job starts (jobs/lib/latest_log.sh)
    assert (tmp_path / "logs" / ".last-submitted").read_text() == f"{log}\n"
    return job, log, started


def wait(cluster, job: str, log: Path) -> str:
    try:
        return cluster.wait_job(job, timeout=JOB_TIMEOUT)
    except TimeoutError:
        subprocess.run(["scancel", job], env=cluster.env, timeout=30)
        text = log.read_text() if log.exists() else "<no log>"
        pytest.fail(f"job {job} did not end within {JOB_TIMEOUT} s; log:\n{text}\n{cluster.logs_tail()}")


def report(capsys, headline: str, text: str) -> None:
    """Show the outcome and the rank placement in the test log (CI's log), even when passing (capsys None:
    the caller has disabled capturing)."""
    shown = [ln for ln in text.splitlines()
             if RANK_LINE.match(ln) or FINAL.match(ln) or ln.startswith(("job ", "training step", "srun: error"))
             or "injected failure" in ln]
    with capsys.disabled() if capsys else contextlib.nullcontext():
        print(f"\n[jobs] {headline}\n" + "\n".join(f"[jobs]   {ln}" for ln in shown), flush=True)


def graph_copies_while_running(cluster, job: str, ranks: int) -> dict[int, set[str]]:
    """rank -> the names of the folders of node-shared graph files its training process maps (/proc/PID/maps),
    the job's segments ("...j<job>-p<port>-n<node>-u<uid>", train/graph/sharing/shared_graph.py), once all `ranks` have
    mapped theirs (the files may be unlinked by then: the mappings stay)."""
    segment = re.compile(rf"j{job}-p{port_for_job(job)}-n\d+-u{os.getuid()}$")
    deadline = time.monotonic() + JOB_TIMEOUT
    seen: dict[int, set[str]] = {}
    while len(seen) < ranks:
        if time.monotonic() > deadline or cluster.job_state(job) in TERMINAL_STATES:
            pytest.fail(f"job {job}: saw the graph mapped by ranks {sorted(seen)} only, of {ranks}")
        for pid, environ in cluster.job_processes(job).items():
            try:
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
            mapped = {Path(line.split(None, 5)[5].removesuffix(" (deleted)")) for line in maps.splitlines()
                      if len(line.split(None, 5)) == 6}
            folders = {f.parent.name for f in mapped if segment.search(f.parent.name)}
            if folders and "-m train fit" in cmdline(pid):
                seen[int(environ["SLURM_PROCID"])] = folders
        time.sleep(0.1)
    return seen


@pytest.fixture(scope="module")
def four_nodes(slurm_cluster, tmp_path_factory, request) -> dict:
    """`make submit NODES=4 GPUS=8 DOCTOR=1` on every node of the session's cluster: the doctor step, then the
    training step, whose ranks' graph mappings are looked at while they run. One job, several questions."""
    tmp = tmp_path_factory.mktemp("four-nodes")
    out_dir = tmp / "run"
    # the delay keeps the ranks alive for a few seconds after they mapped the graph, to look at their maps
    job, log, started = submit(slurm_cluster, tmp, "DOCTOR=1", "DOCTOR_TIMEOUT=120",
                               f"ARGS=trainer.step_delay_seconds=1 output.dir={out_dir}",
                               request=[*REQUEST, "NODES=4", "GPUS=8"])
    copies = graph_copies_while_running(slurm_cluster, job, 8)
    state = wait(slurm_cluster, job, log)
    text = log.read_text()
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        report(None, f"make submit NODES=4 GPUS=8 DOCTOR=1: job {job} {state} after {time.monotonic() - started:.1f} s",
               text)
    assert state == "COMPLETED", text
    return {"job": job, "text": text, "nodes": slurm_cluster.job_nodes(job), "copies": copies, "out_dir": out_dir}


def test_make_submit_four_nodes_eight_ranks_completes_with_a_graph_copy_on_every_node(slurm_cluster, four_nodes):
    """The node list comes as a range, every rank meets at its first node at the package's port for the job
    (nothing exported), two ranks on each node, and each node holds one copy of the graph (data.share=node),
    which both of its ranks map and no other node's rank does; the ranks train and end with the same weights
    and metrics."""
    job, text, nodes, out_dir = four_nodes["job"], four_nodes["text"], four_nodes["nodes"], four_nodes["out_dir"]
    assert slurm_cluster.job_info(job)["NodeList"] == "n[1-4]" and nodes == ["n1", "n2", "n3", "n4"]
    assert f"job {job} on n[1-4]: 8 tasks, 2 per node" in text, text
    assert "MASTER_ADDR" not in text
    where = placement(text, 8)
    assert where == block_placement(nodes, 8, port_for_job(job)), text
    # both ranks of node i map one copy, node i's own
    by_node = [{folder for rank, (host, _m) in where.items() if host == node for folder in four_nodes["copies"][rank]}
               for node in nodes]
    assert [len(folders) for folders in by_node] == [1, 1, 1, 1], by_node
    assert all(next(iter(folders)).endswith(f"-n{i}-u{os.getuid()}") for i, folders in enumerate(by_node)), by_node
    # the training ran (rank 0's epoch lines) and every rank ends with the same weights and metrics
    assert re.search(r"^0: epoch +1 mean loss [\d.]+ train_acc [\d.]+ val_acc [\d.]+", text, re.M), text
    summary = final_summary(out_dir)  # every rank ended with the same weights
    assert summary["world_size"] == 8 and summary["final_test_acc"] is not None
    assert SAME_WEIGHTS.format(out_dir / "model.pt", summary["weights_sha256"][:16], 8) in text, text
    assert "training step exited with status 0" in text
    assert (out_dir / "curves.png").is_file()  # the end-of-run report


def test_doctor_step_checks_every_node_then_training_starts(four_nodes):
    """DOCTOR=1: `make doctor`'s checks as a step of the job, on every task of the allocation; rank 0's table
    (srun --label prefixes "0: ") has one row per rank, two ranks on each node; training only after it passed."""
    text, nodes = four_nodes["text"], four_nodes["nodes"]
    rows = re.findall(r"^0: (\d)\s+(n\d)\s+(\d)\s+(\d)/2\s", text, re.M)
    assert rows == [(str(r), nodes[r // 2], str(r // 2), str(r % 2)) for r in range(8)], text
    assert f"0: ok    contract  8 rank(s) on 4 node(s) agree on world size 8 and master {nodes[0]}:" in text
    assert "gloo:eth0" in text  # the nodes' hostnames resolve to their eth0: gloo stays off loopback
    busbw = re.search(r"^0: 1 MiB\s+[\d.]+ ms\s+[\d.]+ GB/s\s+([\d.]+) GB/s", text, re.M)
    assert busbw and float(busbw.group(1)) > 0, text
    assert "doctor step passed" in text
    assert text.index("doctor step passed") < text.index("training step exited with status 0")


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
    assert "was ended by SIG" not in text, "a rank that failed by itself is not named as killed by a signal"
    assert elapsed < JOB_TIMEOUT
    assert not FINAL.search(text), "the run finished although a rank failed"


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
    assert placement(text, 4) == block_placement(slurm_cluster.job_nodes(job), 4, port), text
    digest = final_summary(out_dir)["weights_sha256"]  # every rank ended with the same weights
    assert SAME_WEIGHTS.format(out_dir / "model.pt", digest[:16], 4) in text, text
    assert shlex.split(line)[-1] == f"output.dir={out_dir}"
