"""The paths a job reads, as its container sees them (login/job_paths.py, jobs/submit.sh): one outside every mount
is refused before the queue, naming it and the fixes; one under a mount is given to the job as the container sees
it. The dry runs use the stand-in sbatch and sinfo of tests/test_jobs.py; the real job is in the container tests."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from login.job_paths import mounts_of, place
from tests import test_jobs
from tests.harness.graph_folder import write_graph_folder
from tests.harness.side_by_side import map_side_by_side
from tests.test_jobs import dry_steps, make

sbatch_standin = test_jobs.sbatch_standin  # the fixture: stand-in sbatch and sinfo first on PATH

IMAGE = "IMAGE=nvcr.io#nvidia/pyg:25.05-py3"  # a container, with nothing to build for the dry run


def graph_folder(folder: Path) -> Path:
    """A small graph of the user's own, a folder of arrays (docs/data.md)."""
    return write_graph_folder(folder, nodes=50, edges=200, features=4, classes=3)


def test_each_form_of_a_path_is_placed_where_the_container_reads_it(tmp_path):
    project, data, scratch = tmp_path / "project", tmp_path / "data", tmp_path / "scratch"
    for folder in (project / "graphs", data / "igbh", scratch):
        folder.mkdir(parents=True)
    (data / "g.pt").touch()
    mounts = mounts_of(str(project), str(data), f"{scratch}:/scratch,{tmp_path}/same")
    assert place("graphs/g.pt", mounts) == ("graphs/g.pt", "graphs/g.pt")  # the project's: its working directory
    assert place("g.pt", mounts) == (str(data / "g.pt"), "/data/g.pt")  # not the project's: DATA_DIR's
    assert place("/data/igbh", mounts) == (str(data / "igbh"), "/data/igbh")  # as the container sees it
    assert place(str(data / "igbh"), mounts) == (str(data / "igbh"), "/data/igbh")  # as this machine sees it
    assert place(str(project / "graphs"), mounts) == (str(project / "graphs"), "/workspace/graphs")
    assert place(f"{scratch}/run/ckpt.pt", mounts) == (f"{scratch}/run/ckpt.pt", "/scratch/run/ckpt.pt")
    assert place("/scratch/x", mounts) == (f"{scratch}/x", "/scratch/x")
    assert place(f"{tmp_path}/same/x", mounts) == (f"{tmp_path}/same/x", f"{tmp_path}/same/x")  # SRC alone: SRC:SRC
    assert place("/home/me/g.pt", mounts) is None
    assert place("../outside/g.pt", mounts) is None  # out of the project through '..'
    assert place("../data/g.pt", mounts) == (str(data / "g.pt"), "/data/g.pt")


def test_a_graph_outside_every_mount_is_refused_naming_it_and_the_two_fixes(sbatch_standin, tmp_path):
    env, record = sbatch_standin
    graph = graph_folder(tmp_path / "graphs" / "g")
    p = make(env, "submit", IMAGE, "CONFIG=tiny", f"ARGS=data.name=files data.path={graph}", "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    line = next(ln for ln in p.stderr.splitlines() if "data.path=" in ln)
    assert f"data.path='{graph}' is outside every folder the job's container sees" in line, line
    assert f"DATA_DIR={graph.parent} data.path=g" in line and "data.path=/data/g" in line, line
    assert f"CONTAINER_MOUNTS={graph.parent}:{graph.parent}" in line, line
    assert "nothing was submitted" in p.stderr and "Traceback" not in p.stderr
    assert not record.exists()


def test_a_resume_checkpoint_and_a_data_root_outside_are_refused_too(sbatch_standin, tmp_path):
    env, _record = sbatch_standin
    p = make(env, "submit", IMAGE, "CONFIG=tiny", f"ARGS=trainer.resume={tmp_path}/c.pt data.root={tmp_path}/r",
             "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"trainer.resume='{tmp_path}/c.pt' is outside" in p.stderr, p.stderr
    assert f"data.root='{tmp_path}/r' is outside" in p.stderr, p.stderr


def test_a_graph_mounted_or_under_data_dir_passes_and_the_job_reads_it_as_the_container_sees_it(
        sbatch_standin, tmp_path):
    env, record = sbatch_standin
    graph = graph_folder(tmp_path / "graphs" / "g")
    folder = graph.parent
    cases = [  # (the knobs, data.path as the training step gets it)
        ([f"CONTAINER_MOUNTS={folder}:{folder}", f"ARGS=data.name=files data.path={graph}"], str(graph)),
        ([f"DATA_DIR={folder}", "ARGS=data.name=files data.path=g"], "/data/g"),
        ([f"DATA_DIR={folder}", "ARGS=data.name=files data.path=/data/g"], "/data/g"),
    ]
    runs = map_side_by_side(lambda knobs: make(env, "submit", IMAGE, "CONFIG=tiny", "DRY_RUN=1", *knobs),
                            [knobs for knobs, _ in cases])
    for (knobs, seen), p in zip(cases, runs):
        assert p.returncode == 0, (knobs, p.stdout + p.stderr)
        assert "memory plan: files (50 nodes" in p.stdout, (knobs, p.stdout)  # the plan read the file here
        train = dry_steps(p.stdout)["training"]
        paths = [word for word in train if word.startswith("data.path=")]
        assert paths[-1] == f"data.path={seen}", (knobs, train)  # the last override wins
        env_line = next(ln for ln in p.stdout.splitlines() if re.match(r"^env .* sbatch ", ln))
        assert f"data.path={seen}" in dict(w.split("=", 1) for w in shlex.split(env_line)[1:] if "=" in w)["ARGS"]
    assert not record.exists()


def test_bare_mode_reads_every_path_the_nodes_see(sbatch_standin, tmp_path):
    env, _record = sbatch_standin
    graph = graph_folder(tmp_path / "graphs" / "g")
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", f"ARGS=data.name=files data.path={graph}", "DRY_RUN=1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert dry_steps(p.stdout)["training"][-1] == f"data.path={graph}"


@pytest.mark.parametrize("value", ["/data", "/data/", "data"])
def test_the_data_folder_itself_is_a_path_too(tmp_path, value):
    project, data = tmp_path / "project", tmp_path / "data"
    project.mkdir()
    data.mkdir()
    placed = place(value, mounts_of(str(project), str(data), ""))
    if value == "data":  # the project's data/ (not there): read from the working directory, as given
        assert placed == ("data", "data")
    else:
        assert placed == (str(data), "/data")
