"""`make data DATASET=...`: prepares a dataset on a login node, in the image or the local venv."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.test_data import write_reddit_raw

ROOT = Path(__file__).resolve().parents[1]


def make_data(*assignments: str, path_prefix: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATA_DIR", "IMAGE", "DATASET", "DRY_RUN")}
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run(["make", "--no-print-directory", "data", *assignments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def recording_standin(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A stand-in for `name` (enroot/srun are not on the test machine) that records its argv."""
    bin_dir, log = tmp_path / "bin", tmp_path / f"{name}.log"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\n')
    script.chmod(0o755)
    return bin_dir, log


def test_bare_mode_prepares_reddit_into_data_dir(tmp_path):
    write_reddit_raw(tmp_path)
    done = make_data("DATASET=reddit", f"DATA_DIR={tmp_path}", "IMAGE=none")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "Reddit" / "processed" / "data.pt").is_file()
    assert "ready under" in done.stdout


def test_sqsh_image_runs_inside_it_with_enroot(tmp_path):
    image = tmp_path / "pyg-train.sqsh"
    image.write_bytes(b"sqsh")
    bin_dir, log = recording_standin(tmp_path, "enroot")
    done = make_data("DATASET=reddit", f"DATA_DIR={tmp_path / 'd'}", f"IMAGE={image}", path_prefix=bin_dir)
    assert done.returncode == 0, done.stderr
    argv = log.read_text()
    assert argv.startswith("start ") and str(image) in argv
    assert f"{ROOT}:/workspace" in argv and f"{tmp_path / 'd'}:/data" in argv
    assert argv.strip().endswith("python -m train data --config reddit")


def test_registry_image_is_a_one_task_srun(tmp_path):
    done = make_data("DATASET=Flickr", "IMAGE=nvcr.io#nvidia/pyg:25.05-py3", f"DATA_DIR={tmp_path}", "DRY_RUN=1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("srun --nodes=1 --ntasks=1 --container-image=nvcr.io#nvidia/pyg:25.05-py3")
    assert "data.name=Flickr" in done.stdout


def test_mistakes_are_named(tmp_path):
    missing = make_data("DATASET=reddit", f"IMAGE={tmp_path / 'absent.sqsh'}", "DATA_MODE=enroot")
    assert missing.returncode == 2 and "absent.sqsh' does not exist" in missing.stderr
    empty = make_data()
    assert empty.returncode != 0 and "DATASET is empty" in empty.stderr
    bad_mode = make_data("DATASET=reddit", "DATA_MODE=docker")
    assert bad_mode.returncode != 0 and "DATA_MODE 'docker'" in bad_mode.stderr
