"""login/: the Python the login-node scripts run (no torch at import), called directly; and the rules that keep
the shell scripts' decisions, messages and Python in one place each (issue 19 §3)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from login import config_check, pip_settings, wheel_list
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SHELL = sorted(p for p in {*ROOT.glob("*/*.sh"), *ROOT.glob("*/*/*.sh"), ROOT / "jobs" / "train.sbatch"}
               if "tests" not in p.parts)  # the project's scripts, not the test stand-ins


# ---- login.pip_settings -----------------------------------------------------------------------------------

def test_pip_config_listing_keeps_the_highest_scope():
    listing = ("global.index-url='https://global.example/simple'\n"
               "user.index-url='https://user.example/simple'\n"
               ":env:.index-url='https://env.example/simple'\n"
               "site.cert='/etc/ssl/site.pem'\n"
               "global.cert='/etc/ssl/global.pem'\n"
               "garbage line\n")
    assert pip_settings.parse_pip_config(listing) == {"index-url": "https://env.example/simple",
                                                      "cert": "/etc/ssl/site.pem"}


def test_settings_pass_the_sites_index_proxy_and_ca_but_no_local_index(tmp_path):
    ca = tmp_path / "site-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    config = {"index-url": "https://mirror.example/simple",
              "extra-index-url": "file:///srv/wheels https://extra.example/simple /local/dir",
              "cert": str(ca)}
    environ = {"https_proxy": "http://proxy:3128", "NO_PROXY": "localhost", "PIP_TRUSTED_HOST": "mirror.example",
               "HOME": "/root"}
    lines, copied = pip_settings.settings(config, environ, "/opt/build")
    assert lines == ["PIP_INDEX_URL=https://mirror.example/simple", "PIP_EXTRA_INDEX_URL=https://extra.example/simple",
                     "PIP_TRUSTED_HOST=mirror.example", "https_proxy=http://proxy:3128", "NO_PROXY=localhost",
                     "PIP_CERT=/opt/build/ca-bundle.pem", "SSL_CERT_FILE=/opt/build/ca-bundle.pem",
                     "REQUESTS_CA_BUNDLE=/opt/build/ca-bundle.pem"]
    assert copied == str(ca)


def test_settings_name_no_ca_that_is_not_a_file_and_nothing_for_a_plain_host():
    assert pip_settings.settings({"cert": "/nonexistent.pem"}, {"SSL_CERT_FILE": "/also/missing"}, "/x") == ([], None)
    assert pip_settings.settings({}, {}, "/x") == ([], None)


def test_pip_settings_runs_as_a_module_and_copies_the_ca(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("cert\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SSL_CERT_FILE": str(ca), "PIP_CONFIG_FILE": "/dev/null"}
    p = subprocess.run([sys.executable, "-m", "login.pip_settings", "/opt/in", str(scratch)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "SSL_CERT_FILE=/opt/in/ca-bundle.pem" in p.stdout.splitlines()
    assert (scratch / "ca-bundle.pem").read_text() == "cert\n"


# ---- login.wheel_list -------------------------------------------------------------------------------------

PYPROJECT = """[project]
name = "demo"
dependencies = ["torch>=2.1", "torch_geometric>=2.5", "PyYAML>=6.0", "python-hostlist>=1.23", "tqdm"]
"""


def test_wheel_list_leaves_guarded_packages_to_the_image_and_pins_the_rest():
    lock = "torch==2.4.0  # the venv's\npyyaml==6.0.2\npython_hostlist==1.23.0\n# comment==1\n"
    guard = "^(torch|torch[-_].*|numpy|pyyaml)=="
    assert wheel_list.wanted(PYPROJECT, lock, guard) == ["python-hostlist==1.23.0", "tqdm"]


def test_wheel_list_of_this_project():
    p = subprocess.run([sys.executable, "-m", "login.wheel_list", str(ROOT),
                        str(ROOT / "container" / "guarded-packages.regex")], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    names = [line.split("==")[0].lower() for line in p.stdout.splitlines()]
    assert "python-hostlist" in names and not {"torch", "torch_geometric", "numpy"} & set(names)


# ---- login.config_check -----------------------------------------------------------------------------------

def test_config_check_takes_a_good_config_and_names_a_bad_override():
    assert config_check.check("tiny", ["trainer.epochs=1"], dataset=False) == ""
    with pytest.raises(UserError, match="trainer.epochz"):
        config_check.check("tiny", ["trainer.epochz=1"], dataset=False)


def test_config_check_names_an_unknown_dataset():
    assert config_check.check("synthetic", ["data.name=Cora"], dataset=True) == ""
    with pytest.raises(UserError, match="data.name='Coraa' is not known"):
        config_check.check("synthetic", ["data.name=Coraa"], dataset=True)


def test_config_check_says_what_it_could_not_check(monkeypatch):
    monkeypatch.setitem(sys.modules, "train.graph.datasets.lookup", None)  # as on a login node without numpy
    assert "the dataset name is checked in the image" in config_check.check("tiny", [], dataset=True)
    assert config_check.check("tiny", [], dataset=False, data_dir="/d").endswith(
        "the dataset name is checked in the image; whether it is prepared in /d was not checked")
    monkeypatch.setitem(sys.modules, "train.config", None)  # without PyYAML
    assert "CONFIG and ARGS were not checked here" in config_check.check("tiny", [], dataset=False)


def test_config_check_refuses_a_dataset_not_prepared_in_data_dir(tmp_path, capsys):
    assert config_check.main(["--data-dir", str(tmp_path), "tiny"]) == 0  # synthetic: nothing to prepare
    assert config_check.main(["--data-dir", str(tmp_path), "cora"]) == 2
    said = capsys.readouterr().err
    assert said.startswith(f"dataset 'Cora' is not prepared in '{tmp_path}' (DATA_DIR): ") and said.count("\n") == 1
    assert said.rstrip().endswith(f"make data DATASET=Cora DATA_DIR={tmp_path}")
    assert config_check.main(["--dataset", "--data-dir"]) == 2 and "usage" in capsys.readouterr().err


def test_config_check_exit_statuses(capsys):
    assert config_check.main(["tiny"]) == 0
    assert config_check.main(["tiny", "model.hidden=-1"]) == 2 and "model.hidden" in capsys.readouterr().err
    assert config_check.main([]) == 2 and "usage" in capsys.readouterr().err


def test_login_modules_import_no_torch():
    code = ("import sys, login.config_check, login.pip_settings, login.wheel_list; "
            "login.config_check.check('tiny', [], False); print('torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stdout + p.stderr


# ---- one home each (issue 19 §3): read from the scripts ---------------------------------------------------

def code_lines(path: Path) -> list[str]:
    """The lines of a shell script that are not comments."""
    return [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]


def homes(pattern: str) -> set[str]:
    """The shell scripts whose code (not their comments) matches pattern."""
    return {str(p.relative_to(ROOT)) for p in SHELL if any(re.search(pattern, ln) for ln in code_lines(p))}


def test_the_shell_scripts_are_found():
    names = {str(p.relative_to(ROOT)) for p in SHELL}
    assert {"jobs/submit.sh", "jobs/train.sbatch", "jobs/lib/steps.sh", "lib/checks.sh", "container/data.sh",
            "container/install-project.sh", "bench/gpu_check.sh"} <= names


@pytest.mark.parametrize("what, pattern, home", [
    ("die, defined", r"^\s*die\(\)", "lib/msg.sh"),
    ("say, defined", r"^\s*say\(\)", "lib/msg.sh"),
    ("the script prologue's root", r"^root=\$\(cd ", "lib/cmd.sh"),
    ("the Dockerfile's tag, read", r"ARG PYG_TAG=", "jobs/lib/knobs.sh"),
    ("the image kind", r"/\* \| \.\* \| \*\.sqsh\)", "lib/image.sh"),
    ("INSTALL_PROJECT=auto, decided", r"\bauto\b.*registry", "lib/image.sh"),
    ("the install step's srun line", r"install-project\.sh /workspace", "jobs/lib/steps.sh"),
    ("whether the doctor runs", r"^\s*runs_doctor\(\)|^\s*trains\(\)|DOCTOR [!=]= (0|1|only)\b", "jobs/lib/steps.sh"),
    ("the GPU options", r"--gpu-bind=none", "jobs/lib/steps.sh"),
    ("the training step", r"-m train fit", "jobs/lib/steps.sh"),
    ("a SLURM time, parsed", r"86400", "lib/checks.sh"),
    ("the squashfs magic", r"hsqs", "lib/checks.sh"),
])
def test_each_decision_has_one_home(what, pattern, home):
    assert homes(pattern) == {home}, what


def test_mk_reads_the_tag_through_its_one_home():
    text = (ROOT / "mk" / "image.mk").read_text()
    assert "ARG PYG_TAG=" not in text.replace("`ARG PYG_TAG=` line", "")
    assert "jobs/lib/knobs.sh PYG_TAG" in text


def python_in_shell(path: Path) -> list[tuple[int, int]]:
    """(line, length in lines) of each piece of Python a shell script holds: a heredoc fed to python, a
    `python -c '...'` string, or a variable holding Python code."""
    text = path.read_text()
    found = []
    for m in re.finditer(r"^(.*(?i:py).*?)<<-?\s*'?(\w+)'?.*$", text, re.M):
        body = text[m.end() + 1:].split(f"\n{m.group(2)}\n", 1)[0]
        found.append((text[:m.start()].count("\n") + 1, body.count("\n") + 1))
    for m in re.finditer(r"\S*(?i:py)\S*\s+(?:-\S+\s+)*-c\s+(['\"])(.*?)(?<!\\)\1", text, re.S):
        found.append((text[:m.start()].count("\n") + 1, m.group(2).count("\n") + 1))
    for m in re.finditer(r"^\s*\w+='([^']*^\s*(?:import|from) [^']*)'", text, re.S | re.M):  # code in a variable
        found.append((text[:m.start()].count("\n") + 1, m.group(1).strip("\n").count("\n") + 1))
    return found


def test_no_python_longer_than_three_lines_in_a_shell_script(tmp_path):
    found = {str(p.relative_to(ROOT)): python_in_shell(p) for p in SHELL}
    assert found["jobs/submit.sh"], "the finder finds no Python at all: it is broken"
    # the finder finds the forms the scripts used to hold (enroot-build.sh's pip reader, submit.sh's check)
    old = tmp_path / "old.sh"
    old.write_text('x() {\n    "$py" - "$a" "$b" <<\'PY\'\nimport os\nprint(1)\nprint(2)\nprint(3)\nPY\n}\n'
                   'err=$(cd "$root" && "$check_py" -c \'\nimport sys\nfrom x import y\ny()\n\' "$c" 2>&1)\n'
                   "check='\nimport sys\ntry:\n    import a\nexcept ImportError:\n    pass\n'\n")
    assert [n for _, n in python_in_shell(old)] == [4, 5, 5]
    long = {name: pieces for name, pieces in found.items() if any(n > 3 for _, n in pieces)}
    assert long == {}, "Python belongs in a module (login/) that ruff checks and tests call"


def test_the_login_package_is_linted_and_not_installed():
    assert 'include = ["train*"]' in (ROOT / "pyproject.toml").read_text()
    # stdlib, PyYAML (through train.config), train's errors: a login node may have no torch. ranks.py is the one
    # exception: launch.py starts make run's ranks on this machine through it, with torch's own launcher.
    for module in sorted(set((ROOT / "login").glob("*.py")) - {ROOT / "login" / "ranks.py"}):
        imported = {n.split(".")[0] for node in ast.walk(ast.parse(module.read_text()))
                    for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                              [node.module or ""] if isinstance(node, ast.ImportFrom) else [])}
        assert not imported & {"torch", "torch_geometric", "numpy"}, module
