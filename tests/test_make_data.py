"""`make data DATASET=...`: prepares a dataset on a login node, in the image or the local venv."""

from __future__ import annotations

import shlex

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
