"""`make data DATASET=...`: prepares a dataset on a login node, in the image or the local venv."""

from __future__ import annotations

import os
import shlex
import subprocess

from tests.harness import standin_bin
from tests.harness.localjob import ROOT, make_data
from tests.harness.reddit_files import write_reddit_raw


def test_bare_mode_prepares_reddit_into_data_dir(tmp_path):
    write_reddit_raw(tmp_path)
    done = make_data("DATASET=reddit", f"DATA_DIR={tmp_path}", "IMAGE=none")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "Reddit" / "processed" / "data.pt").is_file()
    assert "ready under" in done.stdout


def test_registry_image_is_a_one_task_srun(tmp_path):
    done = make_data("DATASET=Flickr", "IMAGE=nvcr.io#nvidia/pyg:25.05-py3", f"DATA_DIR={tmp_path}", "DRY_RUN=1")
    assert done.returncode == 0, done.stderr
    words = shlex.split(done.stdout)
    assert words[:3] == ["srun", "--nodes=1", "--ntasks=1"], words
    # the jobs' launch line (jobs/lib/pyxis.sh): pyxis flags, then the image's python
    for flag in ("--container-image=nvcr.io#nvidia/pyg:25.05-py3",
                 f"--container-mounts={ROOT}:/workspace,{tmp_path}:/data",
                 "--container-workdir=/workspace", "--no-container-mount-home"):
        assert flag in words[:words.index("python")], (flag, words)
    assert words[words.index("python"):][:4] == ["python", "-m", "train", "data"], words
    assert "data.name=Flickr" in done.stdout


def test_mistakes_are_named(tmp_path):
    missing = make_data("DATASET=reddit", f"IMAGE={tmp_path / 'absent.sqsh'}", "DATA_MODE=enroot")
    assert missing.returncode == 2 and "absent.sqsh' does not exist" in missing.stderr
    empty = make_data()
    assert empty.returncode != 0 and "DATASET is empty" in empty.stderr
    bad_mode = make_data("DATASET=reddit", "DATA_MODE=docker")
    assert bad_mode.returncode != 0 and "DATA_MODE='docker'" in bad_mode.stderr


def make_data_on_path(bindir, *assignments: str) -> subprocess.CompletedProcess:
    """`make data` with bindir first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "IMAGE", "IMAGE_DIR", "DATASET", "DRY_RUN")}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    return subprocess.run(["make", "--no-print-directory", "data", *assignments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_dataset_name_is_checked_before_the_image(tmp_path):
    """enroot on PATH and no image built: a wrong DATASET is named first (cheap, certain checks first), then the
    missing image, in one run; enroot is never called."""
    bindir = tmp_path / "bin"
    standin_bin.install(bindir, "enroot")  # records any call in STANDIN_LOG: there must be none
    done = make_data_on_path(bindir, "DATASET=Coraa", f"IMAGE_DIR={tmp_path / 'images'}", f"DATA_DIR={tmp_path}",
                             f"STANDIN_LOG={tmp_path}/log")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 2, done.stderr
    assert "DATASET='Coraa': data.name='Coraa' is not known" in errors[0] and "Cora" in errors[0]
    assert f"IMAGE='{tmp_path}/images/pyg-train-" in errors[1] and "build it with 'make image'" in errors[1]
    assert not (tmp_path / "log").exists(), "enroot was called"


def test_an_image_that_is_a_directory_is_refused_as_one(tmp_path):
    folder = tmp_path / "dir.sqsh"
    folder.mkdir()
    done = make_data("DATASET=tiny", f"IMAGE={folder}", "DATA_MODE=enroot", f"DATA_DIR={tmp_path}", "DRY_RUN=1")
    assert done.returncode == 2 and f"IMAGE='{folder}' is a directory, not a squashfs image" in done.stderr
    assert "does not exist" not in done.stderr


def test_offline_it_says_no_internet_where_the_files_come_from_and_where_they_go(tmp_path, monkeypatch):
    """Without internet: a few short lines, not one line of every missing file and the command just run."""
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):  # no route out, wherever this runs
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    done = make_data("DATASET=cora", f"DATA_DIR={tmp_path}", "IMAGE=none")
    assert done.returncode == 2, done.stderr
    said = done.stderr[done.stderr.index("error: "):].splitlines()
    assert said[0].startswith("error: dataset 'Cora' could not be downloaded: no internet from this machine ("), said
    assert said[1:4] == [
        "Its raw files (ind.cora.x, ind.cora.tx, ind.cora.allx, ind.cora.y, ind.cora.ty, ind.cora.ally, "
        "ind.cora.graph, ind.cora.test.index) come from https://github.com/kimiyoung/planetoid/raw/master/data/<file>.",
        f"Download them on a machine with internet and put them in {tmp_path}/Planetoid/Cora/raw/.",
        "Then run this again: it prepares the files it finds there, with no download."], said
    assert said[4].startswith("make: ***") and len(said) == 5 and "Traceback" not in done.stderr
