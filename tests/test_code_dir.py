"""CODE_DIR: the user's own model code on every task without rebuilding the image (jobs/lib/code_dir.sh).

The launch line mounts the folder at /code and puts it in front of the image's own PYTHONPATH (run here by
the same `sh` the task runs); `make submit` refuses a folder that is missing or a model that does not import
from it, and says where the import was checked. The two-node run in containers is in
tests/test_container_real.py (the baseline job trains a model defined in a temporary folder).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.harness import standin_bin
from tests.harness.jobscript import KNOBS, run_job_script

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "jobs" / "lib"
MODEL = """
    from torch_geometric.nn.models import GraphSAGE


    class MySAGE(GraphSAGE):
        '''A user's model: PyG's GraphSAGE subclassed, no glue.'''
"""


@pytest.fixture
def code_dir(tmp_path) -> Path:
    """A folder outside the project with a package `mymodels` holding `gnn.MySAGE`."""
    code = tmp_path / "my code"  # a space: every expansion quoted
    (code / "mymodels").mkdir(parents=True)
    (code / "mymodels" / "__init__.py").write_text("")
    (code / "mymodels" / "gnn.py").write_text(textwrap.dedent(MODEL))
    return code


def launch(image: str, code: str, data: str = "/d") -> list[str]:
    script = 'source "$0"; source "$1"; source "$2"; shift 2; launch_line "$1" "$2" "$3"; code_dir_launch "$4"; ' \
             'printf "%s\\n" "${LAUNCH[@]}"'
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script, str(ROOT / "lib" / "cmd.sh"), str(LIB / "pyxis.sh"),
                        str(LIB / "code_dir.sh"), image, str(ROOT), data, code],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_in_the_image_the_folder_is_mounted_at_code_and_put_before_the_images_pythonpath(code_dir):
    words = launch("/img/pyg.sqsh", str(code_dir))
    assert f"--container-mounts={ROOT}:/workspace,/d:/data,{code_dir}:/code" in words
    sh, dash_c, script, python = words[-4:]
    assert (sh, dash_c, python) == ("sh", "-c", "python")
    # the task's shell (as in the container: the image's PYTHONPATH, then `python -m train ...`)
    probe = subprocess.run([sh, dash_c, script, sys.executable, "-c", "import os; print(os.environ['PYTHONPATH'])"],
                           env={**os.environ, "PYTHONPATH": "/opt/image/lib"}, capture_output=True, text=True)
    assert probe.stdout.strip() == "/code:/opt/image/lib", probe.stderr
    probe = subprocess.run([sh, dash_c, script, sys.executable, "-c", "import os; print(os.environ['PYTHONPATH'])"],
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, capture_output=True,
                           text=True)
    assert probe.stdout.strip() == "/code"


def test_in_bare_mode_the_host_python_imports_the_users_model(code_dir):
    words = launch("none", str(code_dir))
    assert words[:2] == ["sh", "-c"] and words[-1] == str(ROOT / ".venv" / "bin" / "python")
    run = subprocess.run([*words, "-c", "from mymodels.gnn import MySAGE; print(MySAGE.__mro__[1].__name__)"],
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "GraphSAGE", run.stderr


def test_without_code_dir_the_launch_line_is_unchanged():
    assert launch("/img/pyg.sqsh", "")[-1] == "python"


def test_the_job_script_mounts_code_dir_on_the_training_step(tmp_path, code_dir):
    image = tmp_path / "pyg.sqsh"
    image.write_bytes(b"")
    p, calls = run_job_script(tmp_path, {"IMAGE": str(image), "CONFIG": "tiny", "DATA_DIR": str(tmp_path),
                                         "CODE_DIR": str(code_dir), "ARGS": "model.name=mymodels.gnn:MySAGE"})
    assert p.returncode == 0, p.stderr
    (step,) = calls
    assert f"--container-mounts={ROOT}:/workspace,{tmp_path}:/data,{code_dir}:/code" in step
    assert step[-10:-6] == ["sh", "-c", step[-8], "python"] and "PYTHONPATH=/code" in step[-8]
    assert step[-6:] == ["-m", "train", "fit", "--config", "tiny", "model.name=mymodels.gnn:MySAGE"]


@pytest.fixture
def submit_env(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    standin_bin.install(bindir, "sbatch")
    env = {k: v for k, v in os.environ.items() if k not in KNOBS and not k.startswith("SLURM_")}
    env.update(PATH=f"{bindir}:{env['PATH']}", STANDIN_RECORD=str(tmp_path / "sbatch-calls.txt"))
    return env


def submit(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "submit", "CONFIG=tiny", "GPUS_PER_TASK=0", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case,needle", [
    ("missing", "is not a directory: it is the folder of your own code"),
    ("class", "mymodels.gnn has no 'MySAGEX'; torch.nn.Module classes there: GraphSAGE, MySAGE"),
])
def test_make_submit_refuses_a_missing_folder_or_a_model_that_does_not_import(submit_env, code_dir, tmp_path, case,
                                                                                  needle):
    folder = tmp_path / "absent" if case == "missing" else code_dir
    name = "MySAGE" if case == "missing" else "MySAGEX"
    p = submit(submit_env, "IMAGE=none", f"CODE_DIR={folder}", f"ARGS=model.name=mymodels.gnn:{name}")
    assert p.returncode == 2 and needle in p.stderr and "nothing was submitted" in p.stderr, p.stderr
    assert not (tmp_path / "sbatch-calls.txt").exists()


def test_make_submit_passes_code_dir_to_the_job_and_says_where_the_import_was_checked(submit_env, code_dir):
    p = submit(submit_env, "IMAGE=nvcr.io#nvidia/pyg:25.05-py3", f"CODE_DIR={code_dir}",
               "ARGS=model.name=mymodels.gnn:MySAGE", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    assert "checked with" in p.stderr and "not in IMAGE='nvcr.io#nvidia/pyg:25.05-py3'" in p.stderr
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("env "))
    assert f"CODE_DIR={code_dir}" in shlex.split(line)
