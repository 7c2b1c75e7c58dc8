"""The shape of every make variable of every target and every job knob: one table (lib/checks.sh), checked the
same way by the scripts (jobs/submit.sh, jobs/train.sbatch, container/*.sh) and the Makefile's other targets.

Three layers: the table covers every variable make knows (read from make's own database); each kind of shape
refuses its bad values and takes its good ones (lib/checks.sh run directly, cheap); and every target, given a
bad value of every variable it reads at once, names each of them and runs nothing (exit 2).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.harness.jobscript import KNOBS
from tests.harness.knobs import make_variables

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "lib" / "checks.sh"


def clean_env(**extra: str) -> dict[str, str]:
    drop = {*KNOBS, *make_variables()}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("SLURM_", "MAKE", "STANDIN_"))}
    return {**env, **extra}


def shapes() -> dict[str, str]:
    """lib/checks.sh's table: variable -> its shape."""
    script = 'source "$1"; for k in "${!SHAPE[@]}"; do printf "%s\\t%s\\n" "$k" "${SHAPE[$k]}"; done'
    p = subprocess.run(["bash", "-c", script, "shapes", str(CHECKS)], capture_output=True, text=True, check=True)
    return dict(line.split("\t") for line in p.stdout.splitlines())


def target_variables() -> dict[str, list[str]]:
    """Every target -> the variables it reads, as make itself has them (Makefile export_for: TARGET_VARS)."""
    p = subprocess.run(["make", "-pq", "help"], cwd=ROOT, env=clean_env(), capture_output=True, text=True)
    found = {m.group(1): m.group(2).split() for m in re.finditer(r"^([a-z][a-z-]*|\S+/\.stamp)_VARS :?= (.*)$",
                                                                  p.stdout, re.M)}
    assert {"run", "submit", "srun", "data", "image", "bench", "report", "logs", "setup"} <= set(found), found
    return found


def check(env_value: dict[str, str], *names: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CHECKS), "make t", *names], env=clean_env(**env_value), capture_output=True,
                          text=True, timeout=30)


def test_every_variable_of_every_target_and_every_knob_has_a_shape():
    table = shapes()
    declared = make_variables()
    read = {v for names in target_variables().values() for v in names}
    assert declared - set(table) == set(), "a make variable without a shape in lib/checks.sh"
    assert read - set(table) == set(), "a variable a target reads without a shape in lib/checks.sh"
    kinds = {shape.removeprefix("optional ").split()[0] for shape in table.values()}
    assert kinds == set(BAD), "a kind of shape without its bad values below"


# A value of each kind that must be refused, and the words the refusal must contain. Numbers are far past any
# bound: bash arithmetic wraps at 2**63, the check must never get there.
BAD = {
    "count": ("12345678901234567890", "positive whole number, at most"),
    "choice": ("bogus", "is not valid: expected"),
    "path": ("-rf", "is not a usable path"),
    "command": ("-c", "is not a program"),
    "name": ("my account", "is not a name"),
    "names": ("a,,b", "comma-separated list of names"),
    "tag": ("a:b", "is not a docker tag"),
    "words": ("a\nb", "control character"),
    "options": ("--cpus-per-task=4", "an option the job sets itself"),
    "memory": ("lots", "is not a memory size"),
    "time": ("soon", "is not a SLURM time"),
    "image": ("bad image", "expected none, a .sqsh path, or a registry image"),
    "mounts": (":/extra", "has an empty source"),
}


@pytest.mark.parametrize("name, value, named", [
    # counts: a sign, a leading zero (bash reads 010 as 8), zero, past the bound, twenty digits
    ("NODES", "-1", "NODES='-1'"), ("NODES", "010", "NODES='010'"), ("GPUS", "0", "GPUS='0'"),
    ("NODES", "100001", "at most 100000"), ("GPUS", "99999999999999999999", "at most 1000000"),
    ("CPUS_PER_TASK", "1.5", "CPUS_PER_TASK='1.5'"), ("NPROC", " 2", "NPROC=' 2'"),
    ("DOCTOR_TIMEOUT", "1e3", "DOCTOR_TIMEOUT='1e3'"),
    # sbatch's own shapes
    ("MEM", "lots", "MEM='lots'"), ("MEM", "64 G", "MEM='64 G'"), ("MEM", "-1", "MEM='-1'"),
    ("MEM", "1234567890123G", "MEM='1234567890123G'"),
    ("TIME", "1:2:3:4", "not a SLURM time"), ("TIME", "99999999999999999999", "at most 8 digits"),
    ("TIME", "1-00:000000000000:00", "at most 8 digits"),
    ("ACCOUNT", "my account", "ACCOUNT='my account'"), ("QOS", "a,b", "QOS='a,b'"), ("JOB_NAME", "../x", "JOB_NAME"),
    ("JOB_NAME", "j" * 201, "at most 200 characters"),
    ("PARTITION", "gpu,", "PARTITION='gpu,'"), ("PARTITION", "a b", "PARTITION='a b'"),
    # options that would override a knob, in any spelling getopt takes
    ("SBATCH_ARGS", "--exclusive --nodes=3", "use NODES="), ("SBATCH_ARGS", "-N3", "use NODES="),
    ("SBATCH_ARGS", "--nod=3", "use NODES="), ("SBATCH_ARGS", "--output /tmp/x", "use LOG_DIR="),
    ("SBATCH_ARGS", "--export=NONE", "--export=ALL"), ("SBATCH_ARGS", "exclusive", "does not start with an option"),
    ("SRUN_ARGS", "--label", "every step sets it"), ("SRUN_ARGS", "--container-image=x.sqsh", "use IMAGE="),
    ("SRUN_ARGS", "--no-container-mount-home", "use IMAGE="), ("SRUN_ARGS", "-c 4", "use CPUS_PER_TASK="),
    # pyxis mounts: every way pyxis refuses one only at job start
    ("CONTAINER_MOUNTS", ":/extra", "has an empty source"), ("CONTAINER_MOUNTS", "/a:", "empty destination"),
    ("CONTAINER_MOUNTS", "/a:/b,", "an empty entry"), ("CONTAINER_MOUNTS", "/a,,/b", "an empty entry"),
    ("CONTAINER_MOUNTS", "scratch:/scratch", "the source must be"), ("CONTAINER_MOUNTS", "/a:b", "destination must"),
    ("CONTAINER_MOUNTS", "/srv:/workspace", "mounts over /workspace"), ("CONTAINER_MOUNTS", "/data", "mounts over"),
    ("CONTAINER_MOUNTS", "/a:/b:ro:x", "has flags"), ("CONTAINER_MOUNTS", "/a:/b:ro,rw", "the source must be"),
    # paths, programs, word lists: a newline or another control character, a leading '-'
    ("LOG_DIR", "logs\nx", "LOG_DIR=$'logs\\nx'"), ("DATA_DIR", "-x", "DATA_DIR='-x'"), ("LOG_DIR", "", "is empty"),
    ("BASE_SQSH", "a\tb.sqsh", "BASE_SQSH=$'a\\tb.sqsh'"), ("VENV", "\x1b[31m", "VENV=$'\\E[31m'"),
    ("BARE_PYTHON", "py\nthon", "is not a program"), ("ARGS", "trainer.epochs=1\noptim.lr=2", "control character"),
    ("PYTEST_ARGS", "-k\rx", "control character"),
    # images, names, tags, choices
    ("IMAGE", "bad image", "IMAGE='bad image'"), ("IMAGE", "/img/a\nb.sqsh", "is not a usable path"),
    ("IMAGE", "-x.sqsh", "is not a usable path"), ("DATASET", "", "DATASET is empty"),
    ("DATASET", "../etc", "DATASET='../etc'"), ("PYG_TAG", "25.05 -py3", "PYG_TAG='25.05 -py3'"),
    ("DRY_RUN", "maybe", "expected 1, yes, true, 0, no or false"), ("GPUS_PER_TASK", "2", "expected 0 or 1"),
    ("DOCTOR", "yes", "expected 0, 1 or only"), ("INSTALL_PROJECT", "always", "expected auto, 0 or 1"),
    ("BUILDER", "podman", "expected auto, docker or enroot"), ("DATA_MODE", "docker", "DATA_MODE='docker'"),
])
def test_each_shape_refuses_what_it_must(name, value, named):
    p = check({name: value}, name)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("make t: error: ") and named in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1, "one line per problem, whatever the value holds"


@pytest.mark.parametrize("name, value", [
    ("NODES", "1"), ("NODES", "100000"), ("GPUS", "1000000"), ("CPUS_PER_TASK", ""), ("NPROC", "4096"),
    ("MEM", "0"), ("MEM", "64G"), ("MEM", "512000"), ("MEM", "2t"), ("TIME", "UNLIMITED"), ("TIME", "2-00:00:00"),
    ("TIME", "90"), ("TIME", "59:59"), ("ACCOUNT", "proj_1.a-b"), ("PARTITION", "gpu,cpu"), ("QOS", ""),
    ("SBATCH_ARGS", "--exclusive --comment=x --mem-per-cpu=2G --signal=B:USR1@300 -v"), ("SBATCH_ARGS", ""),
    ("SRUN_ARGS", "--exclusive --tres-bind=gres/gpu:none"), ("CONTAINER_MOUNTS", "/scratch:/scratch,/opt/ds:/ds:ro"),
    ("CONTAINER_MOUNTS", "./cache:/cache:ro+rprivate,tmpfs:/tmp/x,/models"), ("CONTAINER_MOUNTS", ""),
    ("IMAGE", "none"), ("IMAGE", "nvcr.io#nvidia/pyg:25.05-py3"), ("IMAGE", "my images/pyg.sqsh"),
    ("ARGS", "trainer.epochs=1\toptim.lr=0.02"), ("LOG_DIR", "/tmp/my logs"), ("DRY_RUN", ""), ("DRY_RUN", "false"),
    ("BARE_PYTHON", "/opt/py/bin/python3"), ("DOCTOR", "only"), ("DATASET", "ogbn-products"), ("SQSH", "yes"),
])
def test_each_shape_takes_what_it_must(name, value):
    p = check({name: value}, name)
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_a_variable_without_a_shape_is_a_bug_not_a_pass():
    p = check({"NOSUCHVAR": "1"}, "NOSUCHVAR")
    assert p.returncode == 2, p.stderr
    assert "NOSUCHVAR is not a setting: the job's settings (jobs/knobs.md) are NODES GPUS" in p.stderr


# ---- every target, every variable it reads at once: each named, nothing run -------------------------------

def bad_values(names: list[str]) -> dict[str, str]:
    table = shapes()
    return {name: BAD[table[name].removeprefix("optional ").split()[0]][0] for name in names}


TARGETS = sorted(set(target_variables()) - {".venv/.stamp"})


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_names_each_bad_variable_and_runs_nothing(target, tmp_path):
    """`make TARGET` with a bad value for every variable it reads: one line naming each, exit 2, before any
    prerequisite is built (setup's venv, the anchor) and before anything runs (the scripts' checks come first)."""
    names = target_variables()[target]
    values = bad_values(names)
    if target == "setup":  # setup checks in the venv's recipe, which runs only when the venv is stale
        values["VENV"] = str(tmp_path / "venv\nx")
    env = clean_env(HOME=str(tmp_path), STANDIN_RECORD=str(tmp_path / "record"))
    before = sorted(p.name for p in ROOT.iterdir())
    p = subprocess.run(["make", "--no-print-directory", target, *(f"{k}={v}" for k, v in values.items())], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if ": error: " in line]
    for name in names:
        assert [e for e in errors if re.search(rf"(^|: error: |\b){name}(=|\b)", e)], (name, p.stderr)
    assert "Traceback" not in p.stderr
    assert sorted(p.name for p in ROOT.iterdir()) == before, "a refused target created something"
