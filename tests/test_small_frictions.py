"""The small frictions of a first day (issue 43, item 6): a job's count given to make run, the doctor's job speaking
as make doctor, GPUS=0 on a CPU-only cluster. Each refusal is one line that says what to give instead."""

from __future__ import annotations

import re

from tests import test_jobs
from tests.harness.side_by_side import map_side_by_side
from tests.test_jobs import make as make_job
from tests.test_launch import ROOT, make
from train.config import load_config
from train.graph.datasets.loading import dataset_kind

sbatch_standin = test_jobs.sbatch_standin  # the fixture: stand-in sbatch and sinfo first on PATH


def test_a_job_s_count_given_to_make_run_is_refused_naming_nproc():
    gpus, nodes = map_side_by_side(lambda word: make("run", word), ["GPUS=3", "NODES=2"])
    for p in (gpus, nodes):
        assert p.returncode == 2 and not p.stdout, p.stdout  # nothing ran (the venv exists: no install either)
    assert gpus.stderr.splitlines()[0] == ("make run: error: GPUS=3 is make submit's setting, not make run's: make run "
                                           "starts NPROC processes on this machine; make run NPROC=3.")
    assert "make submit NODES=2 runs a job on 2 nodes" in nodes.stderr


def test_the_doctor_s_job_speaks_as_make_doctor(sbatch_standin):
    env, record = sbatch_standin
    p = make_job(env, "doctor", "NODES=2", "GPUS=3", "IMAGE=none", "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert errors == ["make doctor: error: GPUS=3 is not a multiple of NODES=2: tasks are spread evenly, GPUS/NODES "
                      "per node; use e.g. GPUS=2 or GPUS=4."], p.stderr
    assert "make doctor: nothing was submitted." in p.stderr and "make submit:" not in p.stderr
    assert not record.exists()


def test_gpus_0_points_to_gpus_per_task_0_for_a_cpu_only_cluster(sbatch_standin):
    env, record = sbatch_standin
    p = make_job(env, "submit", "GPUS=0", "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert errors == ["make submit: error: GPUS=0 is not valid: GPUS is the number of tasks (ranks), at least 1; for a "
                      "CPU-only cluster keep GPUS=N tasks and set GPUS_PER_TASK=0 (no GPU options; gloo)."], errors
    assert not record.exists()


def test_the_link_task_docs_give_runs_offline_on_the_synthetic_graph():
    """docs/tasks.md's command for a link task: a config and overrides that load, for a generated graph (nothing to
    download) that can be trained for links (tests/test_link.py trains it); and cora-link's command."""
    text = (ROOT / "docs" / "tasks.md").read_text()
    found = re.search(r"offline, in seconds: `make run CONFIG=(\S+) ARGS='([^']*)'`", text)
    assert found, "docs/tasks.md gives no offline link command"
    config = load_config(found.group(1), found.group(2).split())
    kind = dataset_kind(config.data, config.task.name)  # refuses a task the dataset cannot be trained for
    assert config.task.name == "link" and kind.kind == "generated", (config.data.name, kind.kind)
    assert "`make run CONFIG=cora-link`" in text and load_config("cora-link").task.name == "link"
