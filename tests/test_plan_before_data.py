""""Would it fit?" before the download: `make plan` and `make submit`'s dry run print the memory plan from the
dataset's published size where its files are not there yet, and "not prepared" is one problem among the others;
`python -m train` started by a Python that lacks a dependency says which and how to run it, with no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np

from login.config_check import scan_values
from tests import test_jobs
from tests.harness.graph_folder import write_graph_folder
from tests.harness.side_by_side import map_side_by_side
from tests.test_jobs import ROOT, make
from train.config import DataConfig

sbatch_standin = test_jobs.sbatch_standin  # the fixture: stand-in sbatch and sinfo first on PATH
cluster_standin = test_jobs.cluster_standin  # and sinfo's answer: partitions gpu (2 x 4 A100) and cpu (3 x 8)


def test_make_plan_prints_the_plan_of_a_dataset_not_downloaded(sbatch_standin, tmp_path):
    env, _record = sbatch_standin
    data = tmp_path / "data"
    data.mkdir()
    env = {**env, "DATA_DIR": str(data)}  # nothing there: the plan reads no file
    runs = map_side_by_side(lambda words: make(env, "plan", *words), [
        ["CONFIG=ogbn-papers100M", "NODES=4", "GPUS=16", "NODE_MEMORY=2T", "GPU_MEMORY=80G"],
        ["CONFIG=igbh-rgat", "ARGS=data.name=igbh-full", "NODES=4", "GPUS=16", "NODE_MEMORY=2048G"],
    ])
    papers, igbh = runs
    assert papers.returncode == 0, papers.stdout + papers.stderr
    assert "memory plan: ogbn-papers100M (111,059,956 nodes, 1,615,685,872 edges" in papers.stdout
    assert "4 node(s) x 4 rank(s)" in papers.stdout
    assert re.search(r"a node has\s+2,048\.0 GiB\s+\(--node-memory\)", papers.stdout), papers.stdout  # NODE_MEMORY=2T
    assert re.search(r"a GPU has\s+80\.0 GiB\s+\(--gpu-memory\)", papers.stdout), papers.stdout
    assert papers.stdout.rstrip().endswith("fits")
    # IGBH-full's published size: the graph alone is more than a 2 TiB node has, refused naming the numbers
    assert "memory plan: igbh-full (547,306,935 nodes" in igbh.stdout, igbh.stdout + igbh.stderr
    assert igbh.returncode == 2 and "error: this plan does not fit: a node needs" in igbh.stderr, igbh.stderr
    assert "Traceback" not in igbh.stderr and not list(data.iterdir())  # nothing downloaded


def test_make_plan_refuses_a_memory_that_is_no_size(sbatch_standin):
    env, _record = sbatch_standin
    p = make(env, "plan", "GPU_MEMORY=lots")
    assert p.returncode == 2
    assert "make plan: error: GPU_MEMORY='lots' is not a memory size" in p.stderr, p.stderr


def test_the_dry_run_plans_a_dataset_not_prepared_and_names_it_among_the_other_problems(sbatch_standin, tmp_path):
    env, record = sbatch_standin
    runs = map_side_by_side(lambda words: make(env, "submit", "IMAGE=none", "NODES=4", "GPUS=16", "DRY_RUN=1",
                                               f"DATA_DIR={tmp_path}", "TIME=soon", *words),
                            [["CONFIG=ogbn-papers100M"], ["CONFIG=igbh-rgat", "ARGS=data.name=igbh-full"]])
    papers, igbh = runs
    for p, name in ((papers, "ogbn-papers100M"), (igbh, "igbh-full")):
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"memory plan: {name} (" in p.stdout, p.stdout + p.stderr  # printed, though other checks failed
        errors = [line for line in p.stderr.splitlines() if "error:" in line]
        assert any("TIME='soon'" in line for line in errors), errors  # the other problem, told beside it
        assert "nothing was submitted" in p.stderr
    assert any("dataset 'ogbn-papers100M' is not prepared in" in line for line in papers.stderr.splitlines())
    assert ("data.name=igbh-full is IGBH-full's published size, for the memory plan only (make plan): to train on "
            "it, download it") in igbh.stderr, igbh.stderr
    assert "data.path='' does not exist" not in igbh.stderr
    assert not record.exists()


def test_python_without_a_dependency_says_which_and_how_to_run_it():
    """The base interpreter of the venv with no site-packages (-S): as the system's Python lacks hostlist."""
    base = getattr(sys, "_base_executable", "") or sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([base, "-S", "-m", "train", "plan", "--config", "tiny"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert re.match(rf"error: {re.escape(base)} cannot import '(hostlist|yaml)', which this project needs: run it "
                    r"with the project's Python, \.venv/bin/python -m train plan --config tiny", lines[0]), lines
    assert "make setup" in lines[0]


# ---- the values of your own graph: scanned before the queue, or said not to be (login/config_check.py) --------

def test_the_dry_run_refuses_nan_features_that_the_plan_alone_would_pass(sbatch_standin, tmp_path):
    env, record = sbatch_standin
    graph = write_graph_folder(tmp_path / "graph", nodes=40, edges=120, features=4, classes=3)
    x = np.load(graph / "x.npy")
    x[5, 2] = np.nan
    np.save(graph / "x.npy", x)
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", f"ARGS=data.name=files data.path={graph}", "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"data.path={graph}: x holds NaN or infinite values in 1 rows (first: row 5)" in p.stderr, p.stderr
    assert "memory plan: files (40 nodes" in p.stdout  # the shapes are good: the plan is made, and printed
    assert not record.exists()


def test_a_graph_too_large_to_scan_here_is_said_not_to_be(tmp_path):
    graph = write_graph_folder(tmp_path / "graph", nodes=40, edges=120, features=4, classes=3)
    data = DataConfig(name="files", path=str(graph))
    assert scan_values(data) == ""  # scanned: clean
    said = scan_values(data, limit=100)  # 640 bytes of features
    assert said.startswith(f"data.path={graph}: its ") and "were not scanned for NaN here" in said, said
    assert "the job scans them as it loads" in said


def test_a_plan_that_cannot_fit_is_refused_beside_the_dataset_not_prepared(cluster_standin, tmp_path):
    """Both problems, each once: the plan (published size) against the cluster's nodes, and the download."""
    env, record = cluster_standin
    p = make(env, "submit", "IMAGE=none", "CONFIG=ogbn-papers100M", "NODES=2", "GPUS=8", f"DATA_DIR={tmp_path}",
             "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(errors) == 2, errors
    assert "dataset 'ogbn-papers100M' is not prepared in" in errors[0], errors  # the checks' order: files, plan
    assert "NODES=2 GPUS=8: this plan does not fit: a node needs" in errors[1], errors
    assert not record.exists()
