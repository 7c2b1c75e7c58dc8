"""`make sweep` and `make report SWEEP=` on the real SLURM test cluster: 2 x 2 points x 2 seeds, one job array of
8 elements (bare mode, one CPU task each, the tiny config), one of them requeued mid-run (`scontrol requeue`), all
COMPLETED, and the report's 4 rows of mean ± std over the seeds; a sweep larger than the cluster's MaxArraySize
refused before anything is queued; and one element's run predicted as a job (`make submit MODE=predict RUN=...`).

The elements write runs/<array id>_<index> in the project they were submitted from: here a copy of the project made of
links to this one's parts (the test cluster numbers its jobs from 1 each session; this project's runs/ is left alone).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import train
from train.graph.datasets.loading import load_graph
from train.sweep import element_dir, expand, list_link, parse_grid, recorded_submission, submission_of

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

REQUEST = ["NODES=1", "GPUS=1", "IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1", "CONFIG=tiny"]
GRID = "optim.lr=0.01,0.003 model.name=sage,gcn"
# 1200 training nodes, batches of 128: 10 steps an epoch, 0.2 s each, so that element 0 is caught in its second epoch
ARGS = "trainer.epochs=2 trainer.log_every=1 trainer.step_delay_seconds=0.2"
TIMEOUT = 240  # a 2-core machine running 8 elements at once; they take ~40-70 s in all


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project whose parts are this one's (links), with runs/ and logs/ of its own."""
    copy = tmp_path_factory.mktemp("sweep") / "project"
    copy.mkdir()
    for part in ROOT.iterdir():
        if part.name not in ("runs", "logs", ".pytest_cache"):
            (copy / part.name).symlink_to(part)
    return copy


def make(cluster, project: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=project, env=cluster.env, capture_output=True,
                          text=True, timeout=timeout)


def wait_for_line(cluster, log: Path, pattern: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (log.exists() and re.search(pattern, log.read_text(errors="replace"), re.M)):
        if time.monotonic() > deadline:
            pytest.fail(f"never saw {pattern!r} in {log}:\n{log.read_text() if log.exists() else '<no log>'}\n"
                        f"{cluster.logs_tail()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def swept(slurm_cluster, project) -> dict:
    """The sweep, submitted; element 0 requeued in its second epoch, as a preemption does; every element ended."""
    started = time.monotonic()
    p = make(slurm_cluster, project, "sweep", *REQUEST, f"SWEEP={GRID}", "SEEDS=2", f"ARGS={ARGS}")
    assert p.returncode == 0, p.stdout + p.stderr
    array = re.search(r"^Submitted sweep (\d+): 8 elements \(--array=0-7\)", p.stdout, re.M).group(1)
    logs = project / "logs"
    submission = submission_of(list_link(logs, array))
    elements = expand(parse_grid(GRID), 2)
    element_logs = [logs / f"pyg-train-{array}_{i}.log" for i in range(8)]
    # element 0 in its second epoch, epoch 1 (a checkpoint of its first written): requeued, as a preemption does
    wait_for_line(slurm_cluster, element_logs[0], r"^0: epoch 1 step 2/", TIMEOUT)
    slurm_cluster.requeue(f"{array}_0")
    states = {}
    for index in range(8):
        try:
            states[index] = slurm_cluster.wait_job(f"{array}_{index}", timeout=TIMEOUT)
        except TimeoutError:
            subprocess.run(["scancel", array], env=slurm_cluster.env, timeout=30)
            pytest.fail(f"element {index} did not end:\n{element_logs[index].read_text(errors='replace')}")
    return {"array": array, "submission": submission, "elements": elements, "logs": element_logs, "states": states,
            "started": started}


def test_a_sweep_is_one_array_whose_elements_all_complete_one_requeued_and_the_report_is_whole(slurm_cluster, project,
                                                                                               swept, capsys):
    array, submission, elements, states = swept["array"], swept["submission"], swept["elements"], swept["states"]
    element_logs, started = swept["logs"], swept["started"]
    texts = [log.read_text(errors="replace") for log in element_logs]
    assert states == dict.fromkeys(range(8), "COMPLETED"), "\n\n".join(texts)
    assert slurm_cluster.job_info(f"{array}_0")["Restarts"] == "1"
    for index, (overrides, text) in enumerate(zip(elements, texts)):
        run_dir = element_dir(array, index, submission, project / "runs")
        assert run_dir == project / "runs" / f"{array}_{index}" and recorded_submission(run_dir) == submission
        assert f"sweep element {index} of array {array}: {' '.join(overrides)}; run directory runs/{array}_{index}" \
            in text
        assert (run_dir / "summary.json").is_file() and (run_dir / "model.pt").is_file()
        config = (run_dir / "config.yaml").read_text()
        assert f"seed: {overrides[-1].split('=')[1]}" in config and f"name: {overrides[1].split('=')[1]}" in config
    # the requeued element went on from its own run directory's checkpoint
    assert re.search(rf"^0: resuming from \S*runs/{array}_0/\S+", texts[0], re.M), texts[0]
    report = make(slurm_cluster, project, "report", f"SWEEP={array}")
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\n[sweep] array {array}: 8 elements COMPLETED (element 0 requeued once) and reported in {elapsed:.0f} s"
              f"\n{report.stdout}", flush=True)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert lines[0].startswith(f"sweep {array}: 8 elements, 4 points x 2 seeds; mean ± std")
    rows = [line for line in lines if re.match(r"^P\d ", line)]
    assert len(rows) == 4
    for row in rows:
        assert re.match(r"^P\d +optim\.lr=\S+ model\.name=\S+ +2/2 +(\d\.\d{4} ± \d\.\d{4} +){3}\d+\.\d\d ± \d+\.\d\d$",
                        row), row
    vals = [float(row.split()[4]) for row in rows]
    assert vals == sorted(vals, reverse=True)  # best first
    assert "have no summary" not in report.stdout
    assert (project / "runs" / f"sweep-{array}-compare.png").is_file()


def test_a_sweep_past_the_cluster_s_max_array_size_is_refused_before_the_queue(slurm_cluster, project):
    max_size = int(re.search(r"^MaxArraySize\s*=\s*(\d+)", slurm_cluster.run(["scontrol", "show", "config"]).stdout,
                             re.M).group(1))
    before = slurm_cluster.run(["squeue", "-h", "-o", "%i"]).stdout
    logs = sorted((project / "logs").glob("*"))
    p = make(slurm_cluster, project, "sweep", *REQUEST, f"SEEDS={max_size + 1}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"the sweep has {max_size + 1} elements, more than this cluster's MaxArraySize={max_size}" in p.stderr
    assert "make sweep: nothing was submitted." in p.stderr
    assert slurm_cluster.run(["squeue", "-h", "-o", "%i"]).stdout == before
    assert sorted((project / "logs").glob("*")) == logs  # no list file, no log


def test_a_sweep_element_s_run_predicted_as_a_job(slurm_cluster, project, swept):
    """make submit MODE=predict on 2 ranks over 2 nodes: every node's rows of element 1's run, its own accuracy."""
    run = f"runs/{swept['array']}_1"
    p = make(slurm_cluster, project, "submit", "MODE=predict", f"RUN={run}", "NODES=2", "GPUS=2", *REQUEST[2:])
    assert p.returncode == 0, p.stdout + p.stderr
    job = re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1)
    log = project / "logs" / f"pyg-train-{job}.log"
    state = slurm_cluster.wait_job(job, timeout=TIMEOUT)
    text = log.read_text(errors="replace")
    assert state == "COMPLETED", text
    assert f"-m train predict --run-dir {run}" in text
    manifest = json.loads((project / run / "predictions" / "manifest.json").read_text())
    assert manifest["files"]["classes.npy"]["shape"] == [2000]
    classes = torch.from_numpy(np.array(np.load(project / run / "predictions" / "classes.npy", mmap_mode="r")))
    data = load_graph(train.load_run(project / run)[0].data)
    accuracy = int((classes[data.test_idx] == data.y[data.test_idx]).sum()) / data.test_idx.numel()
    summary = json.loads((project / run / "summary.json").read_text())
    assert accuracy == pytest.approx(summary["final_test_acc"], abs=1e-9), summary
