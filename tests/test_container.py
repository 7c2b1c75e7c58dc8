"""`make image`: the Dockerfile, the enroot recipe and the guarded install, without containers.

The real enroot builds, fails and is interrupted in tests/test_container_real.py. What cannot run
on the test machines runs here against recording stand-ins: docker (no docker engine exists
there), enroot's registry import (no registry is reachable), and the DRY_RUN listings. They are
small bash scripts named `enroot` and `docker`, written into tmp_path and put first on PATH, that
append their argv to a log, mimic the files the real commands write (import/export write the -o file in
two parts, so a partial file is left when told to fail in between), keep created containers as
folders (`enroot list` prints them), and fail or sleep at a given subcommand on request
(STANDIN_FAIL_AT=export, STANDIN_SLEEP_AT=start). The guarded install (install-project.sh) runs
for real with pip, offline, against throwaway venvs.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from tests.harness import standin_bin

ROOT = Path(__file__).resolve().parents[1]
CONTAINER = ROOT / "container"
ENROOT_BUILD = CONTAINER / "enroot-build.sh"
IMAGE_SH = CONTAINER / "image.sh"
INSTALL = CONTAINER / "install-project.sh"
DOCKERFILE = CONTAINER / "Dockerfile"
VENV_BIN = ROOT / ".venv" / "bin"
HOST = "testhost"  # HOSTNAME given to the scripts: their container names carry it


def dockerfile_tag() -> str:
    m = re.search(r"^ARG PYG_TAG=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert m, "container/Dockerfile has no 'ARG PYG_TAG=' line"
    return m.group(1)


TAG = dockerfile_tag()


class Standins:
    """The stand-in bin folder, its log and state, and the environment to run the scripts in."""

    def __init__(self, tmp_path: Path, tools: tuple[str, ...] = ("enroot", "docker")):
        self.bin = tmp_path / "standin-bin"
        self.bin.mkdir()
        self.log = tmp_path / "standin.log"
        self.log.touch()
        self.state = tmp_path / "enroot-containers"
        self.state.mkdir()
        self.images = tmp_path / "images"
        for tool in tools:  # tests/harness/standins/enroot.sh and docker.sh
            standin_bin.install(self.bin, tool)

    def env(self, **extra: str) -> dict[str, str]:
        env = clean_env()
        env.update(
            PATH=f"{self.bin}:{env['PATH']}",
            STANDIN_LOG=str(self.log),
            STANDIN_STATE=str(self.state),
            IMAGE_DIR=str(self.images),
            PYG_TAG=TAG,
            HOSTNAME=HOST,
        )
        env.update(extra)
        return env

    def calls(self, tool: str | None = None) -> list[list[str]]:
        rows = [line.split("\x1f") for line in self.log.read_text().splitlines()]
        return [r for r in rows if tool is None or r[0] == tool]

    def enroot_calls(self) -> list[list[str]]:
        """enroot calls without the `list` look-up for stale containers."""
        return [r[1:] for r in self.calls("enroot") if r[1] != "list"]

    def containers(self) -> list[str]:
        return sorted(p.name for p in self.state.iterdir())

    def image_files(self) -> list[str]:
        return sorted(p.name for p in self.images.iterdir()) if self.images.exists() else []


def clean_env() -> dict[str, str]:
    """This environment minus what would steer make or the scripts from outside the test."""
    drop = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "BUILDER", "PYG_TAG", "IMAGE",
            "IMAGE_DIR", "DRY_RUN", "SQSH", "BASE_SQSH", "PROJECT_FILES", "GUARD_REGEX",
            "IMPORT_CHECK", "PYTHON"}
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.startswith(("STANDIN_", "ENROOT_", "PIP_"))}


def run(cmd: list[str], env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def dry_commands(stdout: str) -> list[list[str]]:
    """The printed commands of a DRY_RUN (summary lines start with '#')."""
    return [shlex.split(line) for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def si(tmp_path: Path) -> Standins:
    return Standins(tmp_path)


# --------------------------------------------------------------------------- enroot recipe

def test_enroot_import_failure_leaves_nothing_and_says_how_to_log_in(si: Standins):
    """A registry pull cannot run here (no registry is reachable): the one enroot step left to
    the stand-in. Failures of create/start/export run for real in test_container_real.py."""
    r = run(["bash", str(ENROOT_BUILD)], si.env(STANDIN_FAIL_AT="import"))
    assert r.returncode != 0
    assert [c[0] for c in si.enroot_calls()] == ["import"]
    assert si.image_files() == [] and si.containers() == []
    for text in ("machine nvcr.io login $oauthtoken password",
                 "machine authn.nvidia.com login $oauthtoken password", ".credentials"):
        assert text in r.stderr


def test_import_failure_hint_names_enroot_config_path(si: Standins, tmp_path: Path):
    r = run(["bash", str(ENROOT_BUILD)],
            si.env(STANDIN_FAIL_AT="import", ENROOT_CONFIG_PATH=str(tmp_path / "cfg")))
    assert r.returncode != 0
    assert f"{tmp_path / 'cfg'}/.credentials" in r.stderr


def test_enroot_build_dry_run_runs_nothing(si: Standins):
    r = run(["bash", str(ENROOT_BUILD)], si.env(DRY_RUN="1"))
    assert r.returncode == 0, r.stderr
    assert si.calls() == []
    assert not si.images.exists()
    cmds = dry_commands(r.stdout)
    assert [c[:2] for c in cmds if c[0] == "enroot"] == [
        ["enroot", "import"], ["enroot", "create"], ["enroot", "start"], ["enroot", "export"],
        ["enroot", "remove"]]
    export_tmp = next(c[3] for c in cmds if c[:2] == ["enroot", "export"])
    assert ["mv", "-f", "--", export_tmp, str(si.images / f"pyg-train-{TAG}.sqsh")] in cmds


def test_dry_run_quotes_awkward_paths(si: Standins, tmp_path: Path):
    odd = tmp_path / "my images" / "it's here"
    r = run(["bash", str(ENROOT_BUILD)], si.env(DRY_RUN="1", IMAGE_DIR=str(odd)))
    assert r.returncode == 0, r.stderr
    cmds = dry_commands(r.stdout)
    assert ["enroot", "create", "--name"] == next(c[:3] for c in cmds if c[:2] == ["enroot", "create"])
    assert next(c for c in cmds if c[:2] == ["enroot", "create"])[-1] == str(odd / f"nvidia+pyg+{TAG}.sqsh")
    assert next(c for c in cmds if c[0] == "mv" and c[-1].endswith(f"pyg-train-{TAG}.sqsh"))[-1] == \
        str(odd / f"pyg-train-{TAG}.sqsh")


# --------------------------------------------------------------------------- make image

def make_image(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run(["make", "--no-print-directory", "image", *args], env)


def test_make_image_dry_run_enroot_prints_the_recipe_in_order(tmp_path: Path):
    env = clean_env()
    r = make_image(env, "DRY_RUN=1", "BUILDER=enroot", f"IMAGE_DIR={tmp_path}")
    assert r.returncode == 0, r.stderr
    cmds = dry_commands(r.stdout)
    enroot = [c for c in cmds if c[0] == "enroot"]
    assert [c[1] for c in enroot] == ["import", "create", "start", "export", "remove"]
    assert enroot[0][-1] == f"docker://nvcr.io#nvidia/pyg:{TAG}"
    assert enroot[1][-1] == str(tmp_path / f"nvidia+pyg+{TAG}.sqsh")
    assert "/opt/project/container/install-project.sh" in enroot[2]
    export_tmp = enroot[3][3]
    assert ["mv", "-f", "--", export_tmp, str(tmp_path / f"pyg-train-{TAG}.sqsh")] in cmds
    assert f"#   make submit NODES=2 GPUS=4 IMAGE={tmp_path}/pyg-train-{TAG}.sqsh" in r.stdout.splitlines()


def test_make_image_defaults_follow_the_dockerfile_tag():
    r = make_image(clean_env(), "DRY_RUN=1", "BUILDER=enroot")
    assert r.returncode == 0, r.stderr
    cmds = dry_commands(r.stdout)
    assert any(c[:3] == ["mv", "-f", "--"] and c[-1] == f"images/pyg-train-{TAG}.sqsh" for c in cmds)
    assert ["enroot", "create"] == next(c[:2] for c in cmds if c[:2] == ["enroot", "create"])
    # The default image is the job template's default: plain make submit.
    assert "#   make submit NODES=2 GPUS=4" in r.stdout.splitlines()


def test_make_image_pyg_tag_override_changes_every_name(tmp_path: Path):
    r = make_image(clean_env(), "DRY_RUN=1", "BUILDER=enroot", "PYG_TAG=26.01-py3", f"IMAGE_DIR={tmp_path}")
    assert r.returncode == 0, r.stderr
    assert "docker://nvcr.io#nvidia/pyg:26.01-py3" in r.stdout
    assert f"{tmp_path}/pyg-train-26.01-py3.sqsh" in r.stdout
    assert f":{TAG}" not in r.stdout or TAG == "26.01-py3"


def test_make_image_refuses_a_base_or_an_output_that_is_no_squashfs_file(tmp_path: Path):
    """BASE_SQSH is reused as it is: a folder, a file of another kind or an odd path must not reach
    `enroot create` (nor say it was reused); IMAGE is written with mv: it must not be a folder."""
    folder = tmp_path / "base.sqsh"
    folder.mkdir()
    text = tmp_path / "base.txt.sqsh"
    text.write_text("not an image\n")
    cases = [(f"BASE_SQSH={folder}", f"BASE_SQSH='{folder}' is a directory, not a squashfs image"),
             (f"BASE_SQSH={text}", "does not start with the squashfs magic 'hsqs'"),
             (f"BASE_SQSH={tmp_path}/a\nb.sqsh", "BASE_SQSH=$'"),
             (f"IMAGE={folder}", f"IMAGE='{folder}' is a directory: expected the path of the .sqsh file to write"),
             (f"IMAGE_DIR={text}", "is a file, not a directory")]
    for assignment, named in cases:
        for route in (["BUILDER=enroot"], ["BUILDER=docker", "SQSH=1"]) if assignment.startswith("IMAGE=") else [[]]:
            r = make_image(clean_env(), "DRY_RUN=1", "BUILDER=enroot", *route, f"IMAGE_DIR={tmp_path}", assignment)
            assert r.returncode == 2, r.stdout + r.stderr
            assert named in r.stderr and "reusing" not in r.stderr, r.stderr
            assert "enroot create" not in r.stdout
    assert folder.is_dir() and not any(folder.iterdir())
    # a real squashfs base is reused as the import
    base = tmp_path / "real-base.sqsh"
    base.write_bytes(b"hsqs" + bytes(92))
    r = make_image(clean_env(), "DRY_RUN=1", "BUILDER=enroot", f"IMAGE_DIR={tmp_path}", f"BASE_SQSH={base}")
    assert r.returncode == 0, r.stderr
    assert "reusing the imported base" in r.stderr
    assert ["enroot", "import"] not in [c[:2] for c in dry_commands(r.stdout)]


def test_make_image_dry_run_docker_prints_docker_build():
    r = make_image(clean_env(), "DRY_RUN=1", "BUILDER=docker", "SQSH=0")
    assert r.returncode == 0, r.stderr
    cmds = dry_commands(r.stdout)
    assert cmds == [["docker", "build", "-f", "container/Dockerfile", "--build-arg", f"PYG_TAG={TAG}",
                     "-t", f"pyg-train:{TAG}", "."]]


def test_make_image_dry_run_docker_with_sqsh_converts_via_enroot(tmp_path: Path):
    r = make_image(clean_env(), "DRY_RUN=1", "BUILDER=docker", "SQSH=1", f"IMAGE_DIR={tmp_path}")
    assert r.returncode == 0, r.stderr
    cmds = dry_commands(r.stdout)
    imp = next(c for c in cmds if c[:2] == ["enroot", "import"])
    assert imp[-1] == f"dockerd://pyg-train:{TAG}"
    assert cmds.index(imp) > next(i for i, c in enumerate(cmds) if c[:2] == ["docker", "build"])
    assert ["mv", "-f", "--", imp[3], str(tmp_path / f"pyg-train-{TAG}.sqsh")] in cmds


def test_docker_route_builds_and_converts_through_a_temp_name(si: Standins):
    r = run(["bash", str(IMAGE_SH)], si.env(BUILDER="docker"))
    assert r.returncode == 0, r.stderr
    docker = [c[1:] for c in si.calls("docker")]
    assert ["build", "-f", "container/Dockerfile", "--build-arg", f"PYG_TAG={TAG}",
            "-t", f"pyg-train:{TAG}", "."] in docker
    imp = si.enroot_calls()
    assert [c[0] for c in imp] == ["import"] and imp[0][-1] == f"dockerd://pyg-train:{TAG}"
    assert si.image_files() == [f"pyg-train-{TAG}.sqsh"]
    final = si.images / f"pyg-train-{TAG}.sqsh"
    assert f"make submit NODES=2 GPUS=4 IMAGE={final}" in r.stdout


def test_docker_route_failed_conversion_leaves_no_sqsh(si: Standins):
    r = run(["bash", str(IMAGE_SH)], si.env(BUILDER="docker", STANDIN_FAIL_AT="import"))
    assert r.returncode != 0
    assert si.image_files() == []


def test_docker_route_to_a_registry_tag_prints_the_pyxis_uri(si: Standins):
    r = run(["bash", str(IMAGE_SH)],
            si.env(BUILDER="docker", IMAGE="registry.example.com/team/pyg-train:1"))
    assert r.returncode == 0, r.stderr
    assert ["build", "-f", "container/Dockerfile", "--build-arg", f"PYG_TAG={TAG}",
            "-t", "registry.example.com/team/pyg-train:1", "."] in [c[1:] for c in si.calls("docker")]
    assert si.enroot_calls() == []
    assert "make submit NODES=2 GPUS=4 IMAGE=registry.example.com#team/pyg-train:1" in r.stdout


def test_auto_prefers_enroot_then_a_docker_daemon(tmp_path: Path):
    (tmp_path / "a").mkdir()
    both = Standins(tmp_path / "a")
    r = make_image(both.env(DRY_RUN="1"))
    assert r.returncode == 0, r.stderr
    assert "BUILDER=auto chose enroot" in r.stderr

    docker_only = tmp_path / "b"
    docker_only.mkdir()
    d = Standins(docker_only, tools=("docker",))
    r = make_image(d.env(DRY_RUN="1", PATH=f"{d.bin}:{restricted_path(docker_only)}"))
    assert r.returncode == 0, r.stderr
    assert "BUILDER=auto chose docker" in r.stderr
    assert ["info"] in [c[1:] for c in d.calls("docker")]


def restricted_path(tmp_path: Path) -> str:
    """A bin folder of symlinks to the basic tools only: no enroot, no docker."""
    bin_dir = tmp_path / "basic-bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for tool in ("make", "bash", "sh", "env", "sed", "grep", "dirname", "cat", "mkdir", "mv", "rm",
                     "ls", "sort", "tr"):
            found = shutil.which(tool)
            assert found, tool
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("make")]


def test_make_image_without_enroot_or_docker_says_what_to_install(tmp_path: Path):
    env = clean_env()
    env["PATH"] = restricted_path(tmp_path)
    r = make_image(env)
    assert r.returncode != 0
    lines = _error_lines(r.stderr)
    assert len(lines) == 1, r.stderr
    sentence = lines[0]
    assert "enroot" in sentence and "docker" in sentence and "install" in sentence
    assert sentence.rstrip().endswith(".") and sentence.count(". ") == 0


def test_make_image_with_a_stopped_docker_daemon_says_what_to_install(tmp_path: Path):
    d = Standins(tmp_path, tools=("docker",))
    r = make_image(d.env(PATH=f"{d.bin}:{restricted_path(tmp_path)}", STANDIN_DOCKER_DAEMON="down"))
    assert r.returncode != 0
    assert len(_error_lines(r.stderr)) == 1, r.stderr
    assert "running daemon" in r.stderr


def test_make_image_bogus_builder_is_named():
    r = make_image(clean_env(), "BUILDER=bogus")
    assert r.returncode != 0
    assert "bogus" in r.stderr
    for valid in ("auto", "docker", "enroot"):
        assert valid in r.stderr


def test_make_help_lists_image_and_its_variables():
    r = run(["make", "--no-print-directory", "help"], clean_env())
    assert r.returncode == 0, r.stderr
    assert re.search(r"make image\s+\S", r.stdout)
    for var in ("PYG_TAG=", "IMAGE_DIR=images", "IMAGE=images/pyg-train-", "BUILDER=auto", "DRY_RUN="):
        assert var in r.stdout


# --------------------------------------------------------------------------- Dockerfile, lint

def test_dockerfile_is_the_single_tag_source_and_uses_the_shared_install():
    text = DOCKERFILE.read_text()
    assert re.fullmatch(r"\d\d\.\d\d-py3", TAG)
    assert len(re.findall(r"\d\d\.\d\d-py3", text)) == 1, "the tag must appear once, in ARG PYG_TAG="
    assert re.search(r"^FROM nvcr\.io/nvidia/pyg:\$\{PYG_TAG\}$", text, re.M)
    assert "sh /opt/project/container/install-project.sh /opt/project" in text
    assert re.search(r"^WORKDIR /\S+", text, re.M)
    assert not re.search(r"password|token|api[_-]?key|secret|credential", text, re.I)
    for script in (ENROOT_BUILD, IMAGE_SH, INSTALL, ROOT / "mk" / "image.mk"):
        assert not re.search(r"\d\d\.\d\d-py3", script.read_text()), f"{script} hardcodes a tag"


def test_dockerignore_excludes_local_state():
    entries = {line.strip().strip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for name in (".venv", "data", "runs", "logs", "images", ".git"):
        assert name in entries
    assert any("__pycache__" in e for e in entries)


def test_scripts_are_executable():
    for script in (ENROOT_BUILD, IMAGE_SH, INSTALL):
        assert os.access(script, os.X_OK), script


@pytest.mark.skipif(not (VENV_BIN / "shellcheck").exists(), reason="shellcheck not in .venv")
def test_shellcheck_clean():
    r = subprocess.run([str(VENV_BIN / "shellcheck"), "-x", *map(str, sorted(CONTAINER.glob("*.sh")))],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "", r.stdout


@pytest.mark.skipif(not (VENV_BIN / "hadolint").exists(), reason="hadolint not in .venv")
def test_hadolint_clean():
    r = subprocess.run([str(VENV_BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "", r.stdout


@pytest.mark.skipif(not shutil.which("dash"), reason="no dash")
def test_install_script_is_posix_sh():
    r = subprocess.run(["dash", "-n", str(INSTALL)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- the guarded install, for real

TINY_BACKEND = '''
"""PEP 517 backend of the test project: writes the wheel by hand, needs nothing installed."""
import base64, hashlib, os, re, zipfile

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    text = open("pyproject.toml").read()
    name = re.search(r'^name = "(.*)"', text, re.M).group(1)
    version = re.search(r'^version = "(.*)"', text, re.M).group(1)
    deps = re.findall(r'^    "(.*)",$', text, re.M)
    files = {}
    for base, _, names in os.walk("demo"):
        for n in names:
            if n.endswith(".py"):
                files[os.path.join(base, n)] = open(os.path.join(base, n)).read()
    dist = f"{name}-{version}.dist-info"
    files[f"{dist}/METADATA"] = "Metadata-Version: 2.1\\nName: %s\\nVersion: %s\\n%s" % (
        name, version, "".join(f"Requires-Dist: {d}\\n" for d in deps))
    files[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\\nGenerator: tiny\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(c.encode())}" for p, c in files.items()]
    files[f"{dist}/RECORD"] = "\\n".join(record + [f"{dist}/RECORD,,"]) + "\\n"
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w") as z:
        for p, c in files.items():
            z.writestr(p, c)
    return filename
'''


def make_wheel(outdir: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A minimal pure-Python wheel, written by hand (a fake `torch` standing for the image's)."""
    outdir.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = dict(files)
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for p, c in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{p},sha256={digest},{len(c.encode())}")
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    path = outdir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, c in files.items():
            z.writestr(p, c)
    return path


def fake_torch(outdir: Path, version: str) -> Path:
    return make_wheel(outdir, "torch", version, {"torch/__init__.py": f"__version__ = {version!r}\n"})


def demo_project(path: Path, *requirements: str) -> Path:
    (path / "demo").mkdir(parents=True)
    (path / "demo" / "__init__.py").write_text("X = 1\n")
    (path / "tinybackend.py").write_text(TINY_BACKEND)
    deps = "".join(f'    "{r}",\n' for r in requirements)
    (path / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = []
        build-backend = "tinybackend"
        backend-path = ["."]

        [project]
        name = "demo"
        version = "0.1.0"
        dependencies = [
        """) + deps + "]\n")
    return path


@pytest.fixture(scope="module")
def image_venv_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv standing for the image's Python: pip, and a fake torch 0.0.1 as the image's torch."""
    tmp = tmp_path_factory.mktemp("image")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheel = fake_torch(tmp / "wheels", "0.0.1")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", str(wheel)],
                   check=True, env=clean_env())
    return venv


@pytest.fixture
def image_python(image_venv_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the template venv per test (a venv is relocatable for `python -m pip`)."""
    venv = tmp_path / "image-venv"
    shutil.copytree(image_venv_template, venv, symlinks=True)
    return venv / "bin" / "python"


def install(py: Path, project: Path, **env: str) -> subprocess.CompletedProcess:
    e = clean_env()
    e.update(PYTHON=str(py), PIP_NO_INDEX="1", PROJECT_FILES="pyproject.toml tinybackend.py demo",
             IMPORT_CHECK="demo")
    e.update(env)
    return subprocess.run(["sh", str(INSTALL), str(project)], env=e, capture_output=True, text=True,
                          timeout=120)


def version_of(py: Path, dist: str) -> str | None:
    r = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def test_install_refuses_a_requirement_that_would_change_torch(image_python: Path, tmp_path: Path):
    project = demo_project(tmp_path / "needs-new-torch", "torch>=2.1")
    r = install(image_python, project)
    assert r.returncode != 0
    assert "torch==0.0.1" in r.stdout  # the constraint it built from what is installed
    assert "error" in r.stderr and "torch==0.0.1" in r.stderr, r.stderr
    assert version_of(image_python, "torch") == "0.0.1"
    assert version_of(image_python, "demo") is None
    assert sorted(p.name for p in project.iterdir()) == ["demo", "pyproject.toml", "tinybackend.py"]


def test_install_adds_a_project_whose_requirements_are_met(image_python: Path, tmp_path: Path):
    project = demo_project(tmp_path / "fits", "torch")
    r = install(image_python, project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert version_of(image_python, "torch") == "0.0.1"
    assert version_of(image_python, "demo") == "0.1.0"
    assert "site-packages/demo/__init__.py" in r.stderr  # installed, not editable (its progress: stderr)
    # Nothing was written into the project (it builds from a copy).
    assert sorted(p.name for p in project.iterdir()) == ["demo", "pyproject.toml", "tinybackend.py"]


def test_install_accepts_ngc_style_prerelease_versions(image_python: Path, tmp_path: Path):
    # NGC builds torch/PyG from source: versions like 2.8.0a0+<sha>.nv25.5 must satisfy the
    # project's ranges (torch>=2.1, torch_geometric>=2.5) as installed, and stay.
    wheels = tmp_path / "ngc-wheels"
    torch_v, pyg_v = "2.8.0a0+5228986c39.nv25.5", "2.7.0a0"
    fake_torch(wheels, torch_v)
    make_wheel(wheels, "torch_geometric", pyg_v, {"torch_geometric/__init__.py": f"__version__ = {pyg_v!r}\n"})
    subprocess.run([str(image_python), "-m", "pip", "install", "-q", "--no-index", *map(str, wheels.iterdir())],
                   check=True, env=clean_env())
    project = demo_project(tmp_path / "ranges", "torch>=2.1", "torch_geometric>=2.5")
    r = install(image_python, project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"    torch=={torch_v}" in r.stdout.splitlines()
    assert f"    torch_geometric=={pyg_v}" in r.stdout.splitlines()
    assert version_of(image_python, "torch") == torch_v
    assert version_of(image_python, "torch_geometric") == pyg_v
    assert version_of(image_python, "demo") == "0.1.0"


def test_install_fails_if_torch_changed_anyway(image_python: Path, tmp_path: Path):
    # With torch left out of the guard, pip does replace it: the after-check must catch that.
    project = demo_project(tmp_path / "pins-other-torch", "torch==0.0.2")
    links = tmp_path / "wheels-newer"
    fake_torch(links, "0.0.2")
    r = install(image_python, project, GUARD_REGEX="^numpy==", PIP_FIND_LINKS=str(links))
    assert r.returncode != 0
    assert "torch changed from '0.0.1' to '0.0.2'" in r.stderr, r.stdout + r.stderr


def test_install_real_project_keeps_torch_and_pyg(tmp_path: Path):
    """The real project into a Python that already has torch and torch_geometric (the .venv's)."""
    site = next((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
    if not (site / "torch").is_dir() or not list(site.glob("torch_geometric-*.dist-info")):
        pytest.skip("the project venv has no torch/torch_geometric (run make setup)")
    py_version = site.parent.name
    venv = tmp_path / "image-venv"
    # No pip of its own: pip, torch, torch_geometric, setuptools all come from the project venv,
    # read-only through a .pth file; only the project lands in this venv.
    subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "lib" / py_version / "site-packages" / "project-venv.pth").write_text(f"{site}\n")
    py = venv / "bin" / "python"
    torch_v, pyg_v = version_of(py, "torch"), version_of(py, "torch_geometric")
    before = sorted(p.name for p in site.iterdir())
    checkout_before = sorted(p.name for p in ROOT.iterdir())

    e = clean_env()
    # Offline: the build backend (setuptools) is the one already there.
    e.update(PYTHON=str(py), PIP_NO_INDEX="1", PIP_NO_BUILD_ISOLATION="0")
    r = subprocess.run(["sh", str(INSTALL), str(ROOT)], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    constraints = [line.strip() for line in r.stdout.splitlines() if line.startswith("    ")]
    assert f"torch=={torch_v}" in constraints
    assert any(re.fullmatch(rf"torch[-_]geometric=={re.escape(pyg_v)}", c) for c in constraints), constraints
    assert version_of(py, "torch") == torch_v and version_of(py, "torch_geometric") == pyg_v
    assert version_of(py, "pyg-slurm-train") == "0.1.0"
    assert f"{venv}/lib/{py_version}/site-packages/train/__init__.py" in r.stderr
    assert sorted(p.name for p in site.iterdir()) == before, "the project venv must not change"
    assert sorted(p.name for p in ROOT.iterdir()) == checkout_before, "nothing may be built in the checkout"


def test_the_wheelhouse_renames_its_wheels_into_place_and_drops_only_the_ones_no_longer_wanted(tmp_path):
    """container/wheelhouse.sh (make submit INSTALL_PROJECT=1 runs it) once emptied its folder before the rebuild: a
    job of an earlier submit, installing from it meanwhile, found no wheels (two `make test` sessions at once met
    it). It now renames each new wheel over the old one (built beside them, in a folder it removes), and then
    removes only the wheels it did not build: the project's wheel is there at every moment of the rebuild."""
    dest = tmp_path / "wheels"
    dest.mkdir()
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    project = dest / f"pyg_slurm_train-{version}-py3-none-any.whl"
    project.write_bytes(b"the wheel of the last submit")
    (dest / "gone_dependency-1.0-py3-none-any.whl").write_bytes(b"a wheel of a dependency no longer listed")
    (dest / "notes.txt").write_text("not a wheel: left alone\n")
    build = subprocess.Popen(["bash", str(CONTAINER / "wheelhouse.sh"), str(dest)], env=clean_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    missing = 0  # looks at which the project's wheel was not there
    while build.poll() is None:
        missing += not project.exists()
        time.sleep(0.002)
    out = build.communicate()[0]
    assert build.returncode == 0, out
    assert missing == 0, f"the project's wheel was missing at {missing} looks during the rebuild"
    wheels = sorted(w.name.split("-")[0] for w in dest.glob("*.whl"))
    assert wheels == ["pyg_slurm_train", "python_hostlist"], sorted(dest.iterdir())
    assert sorted(w.name for w in dest.iterdir() if not w.name.endswith(".whl")) == ["notes.txt"]  # no staging left
    with zipfile.ZipFile(project) as wheel:  # the new one
        assert "train/__init__.py" in wheel.namelist()
