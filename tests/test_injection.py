"""No user string is ever run by a shell: every make variable reaches its program as data.

Two layers: (1) for every target and every variable a user can set, `make -n` shows recipes that
never contain the value (it travels in the environment: Makefile `export_for`); (2) the targets
run for real (dry where they would build or submit) with injection strings, and the file the
injected command would create never appears.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.harness.knobs import make_variables
from tests.harness.side_by_side import map_side_by_side

ROOT = Path(__file__).resolve().parents[1]
MAKEFILES = [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]
# Every variable a user may set: the `VAR ?=` lines and the job's settings (jobs/knobs.md): what `make help` lists.
VARIABLES = sorted(make_variables())
TARGETS = sorted({m for f in MAKEFILES for m in re.findall(r"^([a-z][a-z-]*):.*## ", f.read_text(), re.M)}
                 - {"help", "clean"})
TOKEN = "INJECTEDTOKEN"


def injections(marker: Path) -> list[str]:
    """Values that would run `touch MARKER` if a shell parsed them as code."""
    m = str(marker)
    return [f"x'; touch {m}; echo '", f'x"; touch {m}; echo "', f"$(touch {m})", f"`touch {m}`",
            f"x\ntouch {m}", f"x; touch {m}", f"x && touch {m} #", f"x | touch {m}", f"$$(touch {m})"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES and not k.startswith(("SLURM_", "MAKE"))}
    return {**env, **extra}


def make(*args: str, env: dict[str, str] | None = None, dry: bool = False, timeout: float = 240):
    return subprocess.run(["make", "--no-print-directory", *(["-n"] if dry else []), *args], cwd=ROOT,
                          env=env or clean_env(), capture_output=True, text=True, timeout=timeout)


def test_the_lists_are_complete():
    assert {"DATASET", "PYG_TAG", "RUN", "ARGS", "CONFIG", "SBATCH_ARGS", "LOG_DIR", "VENV", "NPROC"} <= set(VARIABLES)
    assert {"run", "data", "image", "report", "submit", "srun", "doctor", "logs", "tail", "bench",
            "test"} <= set(TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_no_recipe_contains_a_value(target):
    """`make -n TARGET VAR=...` for every variable: the value is never part of a recipe's text."""
    value = f"{TOKEN}'\"; `x` $(touch {TOKEN})"
    dry_runs = map_side_by_side(lambda var: make(target, f"{var}={value}", dry=True), VARIABLES)
    leaks = [f"{var}: {done.stdout.strip()[:300]}" for var, done in zip(VARIABLES, dry_runs) if TOKEN in done.stdout]
    assert not leaks, "\n".join(leaks)


# (target, variable, fixed assignments): run for real; each must end without running the injection.
CHEAP = [
    ("data", "DATASET", ["IMAGE=none", "DRY_RUN=1"]),
    ("data", "DATA_DIR", ["DATASET=tiny", "IMAGE=none", "DRY_RUN=1"]),
    ("data", "IMAGE", ["DATASET=tiny", "DRY_RUN=1"]),
    ("data", "DATA_MODE", ["DATASET=tiny", "IMAGE=none", "DRY_RUN=1"]),
    ("image", "PYG_TAG", ["BUILDER=docker", "DRY_RUN=1"]),
    ("image", "IMAGE", ["BUILDER=docker", "DRY_RUN=1"]),
    ("image", "IMAGE_DIR", ["BUILDER=docker", "DRY_RUN=1"]),
    ("image", "BUILDER", ["DRY_RUN=1"]),
    ("image", "SQSH", ["BUILDER=docker", "DRY_RUN=1"]),
    ("report", "RUN", []),
    ("report", "RUNS", []),
    ("tensorboard", "TB_PORT", []),
    ("logs", "LOG_DIR", []),
    *[(t, v, ["DRY_RUN=1", "IMAGE=none"] if v != "IMAGE" else ["DRY_RUN=1"])
      for t in ("submit", "srun")
      for v in ("NODES", "GPUS", "CONFIG", "ARGS", "IMAGE", "GPUS_PER_TASK", "CPUS_PER_TASK", "MEM", "TIME",
                "PARTITION", "ACCOUNT", "QOS", "SBATCH_ARGS", "SRUN_ARGS", "DATA_DIR", "LOG_DIR", "JOB_NAME",
                "CONTAINER_MOUNTS", "INSTALL_PROJECT", "BARE_PYTHON", "DOCTOR", "DOCTOR_TIMEOUT")],
]


# Where a run costs seconds (the package checks the value), one value holds every form at once.
EACH_FORM = {("data", "DATASET"), ("data", "DATA_MODE"), ("image", "PYG_TAG"), ("image", "IMAGE"),
             ("image", "IMAGE_DIR"), ("image", "BUILDER"), ("image", "SQSH"), ("report", "RUN"), ("report", "RUNS"),
             ("logs", "LOG_DIR"),
             ("submit", "ARGS"), ("submit", "SBATCH_ARGS"), ("submit", "CONFIG"), ("srun", "SRUN_ARGS")}


@pytest.fixture(scope="module")
def cheap_runs(tmp_path_factory) -> dict[tuple[str, str], list[tuple[str, Path, subprocess.CompletedProcess]]]:
    """Every run of CHEAP, side by side, once for the module: {(target, var): [(value, its marker, the run)]}.
    Each value has its own marker and HOME, so that the runs are independent and a marker names its value."""
    root = tmp_path_factory.mktemp("injected")
    cases = [(target, var, fixed, form) for target, var, fixed in CHEAP
             for form in range(len(injections(root)) if (target, var) in EACH_FORM else 1)]

    def run(case) -> tuple[str, Path, subprocess.CompletedProcess]:
        target, var, fixed, form = case
        marker, home = root / f"{target}-{var}-{form}" / "INJECTED", root / f"{target}-{var}-{form}" / "home"
        home.mkdir(parents=True)
        forms = injections(marker)
        value = forms[form] if (target, var) in EACH_FORM else " ; ".join(forms)
        return value, marker, make(target, *fixed, f"{var}={value}", env=clean_env(HOME=str(home)))

    runs: dict[tuple[str, str], list] = {}
    for (target, var, _fixed, _form), done in zip(cases, map_side_by_side(run, cases)):
        runs.setdefault((target, var), []).append(done)
    return runs


@pytest.mark.parametrize("target,var,fixed", CHEAP, ids=[f"{t}-{v}" for t, v, _ in CHEAP])
def test_injection_strings_have_no_effect(target, var, fixed, cheap_runs):
    runs = cheap_runs[(target, var)]
    assert len(runs) == (len(injections(Path("m"))) if (target, var) in EACH_FORM else 1)
    for value, marker, done in runs:
        assert not marker.exists(), f"{target} {var}={value!r} ran the injected command:\n{done.stdout}{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("target,var", [("run", "CONFIG"), ("run", "ARGS"), ("doctor", "ARGS"), ("bench", "BENCH"),
                                        ("bench", "BENCH_ARGS")])
def test_injection_into_programs_that_start(target, var, tmp_path):
    """Targets that start Python: one value holding every injection form at once."""
    marker = tmp_path / "INJECTED"
    value = " ; ".join(injections(marker))
    # bench: no pyg-lib sources, so the anchor is not built (minutes) before the value is refused
    fixed = (["CONFIG=tiny", "NPROC=1", "DOCTOR_TIMEOUT=30"] if target != "bench"
             else [f"PYG_LIB_SRC={tmp_path / 'no-pyg-lib'}"])
    done = make(target, *fixed, f"{var}={value}", env=clean_env(HOME=str(tmp_path)), timeout=300)
    assert done.returncode != 0  # the value is refused as data (a config, an override, a benchmark name)
    assert not marker.exists(), done.stdout + done.stderr


@pytest.mark.parametrize("assignment,named", [
    ("DATASET=../etc", "DATASET='../etc'"),
    ("DATASET=nosuch", "data.name='nosuch'"),
    ("DATA_DIR=/dev/null", "DATA_DIR='/dev/null' is a file"),
    ("DATA_DIR=/dev/null/sub", "'/dev/null' is a file"),
    ("IMAGE=bad image", "IMAGE='bad image'"),
])
def test_dry_make_data_validates_like_a_real_run_and_creates_nothing(assignment, named, tmp_path):
    done = make("data", "DRY_RUN=1", "IMAGE=none", "DATASET=tiny", f"DATA_DIR={tmp_path}/d", assignment)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "d").exists()


def test_dry_make_data_creates_no_data_dir(tmp_path):
    done = make("data", "DRY_RUN=1", "IMAGE=none", "DATASET=Flickr", f"DATA_DIR={tmp_path}/new/data")
    assert done.returncode == 0, done.stderr
    assert f"DATA_DIR={tmp_path}/new/data" in done.stdout
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("assignment,named", [
    ("PYG_TAG=25.05 -py3", "PYG_TAG='25.05 -py3'"),
    ("PYG_TAG=-rm", "PYG_TAG='-rm'"),
    ("PYG_TAG=a:b", "PYG_TAG='a:b'"),
    ("IMAGE=Bad Image", "IMAGE='Bad Image'"),
    ("SQSH=maybe", "SQSH='maybe'"),
    ("BUILDER=podman", "BUILDER='podman'"),
])
def test_make_image_validates_shapes(assignment, named):
    done = make("image", "BUILDER=docker", "DRY_RUN=1", assignment)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr
