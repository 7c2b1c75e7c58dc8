"""A run directory belongs to one job: job ids repeat across clusters and controller restarts."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.loop import rundir
from train.loop.rundir import choose, job_identity, write_identity

ROOT = Path(__file__).resolve().parents[1]


def ident(cluster="a", job="2", submission="s1"):
    return job_identity(job, cluster, submission)


def existing(runs: Path, name: str, identity: dict | None, files=("config.yaml",)) -> Path:
    d = runs / name
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_text("x")
    if identity is not None:
        write_identity(d, identity)
    return d


# (id, the directories already there: name -> identity, ours, requeued, expected directory name)
CASES = [
    ("fresh", {}, ident(), False, "2"),
    ("requeue-of-the-same-submission", {"2": ident()}, ident(), True, "2"),
    ("same-submission-restart-count-0", {"2": ident()}, ident(), False, "2"),
    ("other-cluster-same-id", {"2": ident(cluster="b", submission="x")}, ident(), False, "2-a-1"),
    ("restarted-controller-same-cluster", {"2": ident(submission="old")}, ident(), False, "2-a-1"),
    ("requeue-does-not-take-another-submission", {"2": ident(submission="old")}, ident(), True, "2-a-1"),
    ("no-submission-id-requeue", {"2": ident(submission="")}, ident(submission=""), True, "2"),
    ("no-submission-id-new-job", {"2": ident(submission="")}, ident(submission=""), False, "2-a-1"),
    ("legacy-dir-new-job", {"2": None}, ident(), False, "2-a-1"),
    ("legacy-dir-requeue", {"2": None}, ident(), True, "2"),
    ("requeue-finds-its-own-suffixed-dir", {"2": ident(cluster="b"), "2-a-1": ident(submission="old"),
                                             "2-a-2": ident()}, ident(), True, "2-a-2"),
    ("next-free-suffix", {"2": ident(cluster="b"), "2-a-1": ident(submission="old")}, ident(), False, "2-a-2"),
]


@pytest.mark.parametrize("dirs,ours,requeued,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_choose(tmp_path, dirs, ours, requeued, expected):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, identity in dirs.items():
        existing(runs, name, identity)
    chosen, note = choose(runs, ours, requeued)
    assert chosen == runs / expected
    assert (note is None) == (expected == "2")
    if note and "belongs to another job" in note:
        assert str(runs / "2") in note and str(chosen) in note


def fit(cwd: Path, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "TORCHELASTIC_", "PYG_"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", SLURM_JOB_ID="2", **environ)
    return subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny", "data.num_nodes=600",
                           "trainer.epochs=2"], cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_clusters_sharing_the_project_each_train_from_scratch(tmp_path):
    first = fit(tmp_path, SLURM_CLUSTER_NAME="alpha", PYG_SUBMISSION_ID="s-alpha")
    assert first.returncode == 0, first.stderr
    before = digest(tmp_path / "runs" / "2")
    second = fit(tmp_path, SLURM_CLUSTER_NAME="beta", PYG_SUBMISSION_ID="s-beta")
    assert second.returncode == 0, second.stderr
    out = second.stdout + second.stderr
    assert "belongs to another job" in out and "runs/2-beta-1" in out
    assert "resuming" not in out  # trained from scratch
    assert digest(tmp_path / "runs" / "2") == before  # the other job's run is untouched
    assert json.loads((tmp_path / "runs" / "2-beta-1" / "job.json").read_text())["cluster"] == "beta"
    assert (tmp_path / "runs" / "2-beta-1" / "summary.json").is_file()


def test_a_requeued_job_resumes_its_own_run(tmp_path):
    first = fit(tmp_path, SLURM_CLUSTER_NAME="alpha", PYG_SUBMISSION_ID="s1")
    assert first.returncode == 0, first.stderr
    again = fit(tmp_path, SLURM_CLUSTER_NAME="alpha", PYG_SUBMISSION_ID="s1", SLURM_RESTART_COUNT="1")
    assert again.returncode == 0, again.stderr
    assert "resuming from" in again.stdout and "belongs to another job" not in again.stdout
    assert not list((tmp_path / "runs").glob("2-*"))


# ---- one rule for the run, its checks, the doctor and the report (rundir.decide) ---------------------------

STAMP = "20260101-000000"


def job_env(job_id: str | None, cluster="a", submission="s1", restarts=0):
    from train.cluster.distenv import resolve

    return dataclasses.replace(resolve({}, pick_free_port=lambda: 29500), job_id=job_id, cluster_name=cluster,
                               submission_id=submission, restart_count=restarts)


# (id, output.dir, job id, what is in runs/ already, expected run directory, a note said)
DECIDE_CASES = [
    ("output-dir-as-given", "elsewhere/mine", "2", {}, "elsewhere/mine", False),
    ("slurm-fresh", "", "2", {}, "runs/2", False),
    ("slurm-a-file-in-the-way", "", "2", {"2": "file"}, "runs/2-a-1", True),
    ("slurm-another-jobs-run", "", "2", {"2": "other"}, "runs/2-a-1", True),
    ("no-slurm-timestamp", "", None, {}, f"runs/{STAMP}", False),
]


@pytest.fixture
def in_project(tmp_path, monkeypatch):
    """A working directory of its own and a clock that always says STAMP (what rundir.timestamp reads)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(rundir, "timestamp", lambda: STAMP)
    return tmp_path


def lay_out(runs: dict[str, str]) -> None:
    for name, what in runs.items():
        if what == "file":
            Path("runs").mkdir(exist_ok=True)
            Path("runs", name).write_text("x")
        else:
            existing(Path("runs"), name, ident(cluster="b"))


@pytest.mark.parametrize("output_dir,job_id,runs,expected,noted", [c[1:] for c in DECIDE_CASES],
                         ids=[c[0] for c in DECIDE_CASES])
def test_the_run_its_checks_and_the_doctor_take_the_same_run_directory(in_project, output_dir, job_id, runs,
                                                                        expected, noted):
    """preflight once checked runs/<jobid> where the run wrote runs/<jobid>-<cluster>-<n>, and the doctor probed
    runs/ whatever the job: all three now ask rundir.decide."""
    import torch.distributed as dist

    from train.cli.preflight import planned_run_dir
    from train.config import load_config
    from train.doctor.probes import probe_run_dir
    from train.loop.run import run_dir

    lay_out(runs)
    config = load_config("tiny", [f"output.dir={output_dir}"] if output_dir else [])
    env = job_env(job_id)
    chosen, note = rundir.decide(output_dir, env)
    assert (chosen, note is not None) == (Path(expected), noted)
    assert planned_run_dir(config, env) == chosen
    assert probe_run_dir(config, env).path == str(chosen)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert run_dir(config, env) == chosen
    finally:
        dist.destroy_process_group()
    assert not Path(expected).exists() or runs.get(Path(expected).name)  # deciding writes nothing


def test_a_requeue_decides_its_own_run_again(in_project):
    existing(Path("runs"), "2", ident())
    assert rundir.decide("", job_env("2", restarts=1)) == (Path("runs/2"), None)


def test_the_reports_hint_lists_the_runs_folder_the_runs_are_made_in(in_project):
    from train.errors import UserError
    from train.loop.report import load_run

    Path(rundir.RUNS, "7").mkdir(parents=True)
    Path(rundir.RUNS, "7", "metrics.jsonl").write_text("{}\n")
    with pytest.raises(UserError, match=r"Runs under runs: 7\."):
        load_run(Path("nosuch/8"))
