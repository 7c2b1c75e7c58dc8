"""`make submit` / `make srun` without a cluster: the sbatch command, DRY_RUN, and the checks.

Every `make` runs as a user types it, in the project, with a recording stand-in `sbatch` first
on PATH: a check that fails must leave the stand-in uncalled (nothing submitted). The real
cluster runs are in tests/test_jobs_slurm.py.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.harness import standin_bin
from tests.harness.jobscript import KNOBS, run_job_script
from tests.harness.knobs import TABLE, knobs, make_variables
from tests.harness.side_by_side import map_side_by_side
from train.errors import EXIT_STORAGE

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = [ROOT / "jobs" / "submit.sh", ROOT / "jobs" / "train.sbatch", *sorted((ROOT / "jobs" / "lib").glob("*.sh")),
           *sorted((ROOT / "lib").glob("*.sh"))]
SHELLCHECK = ROOT / ".venv" / "bin" / "shellcheck"


@pytest.fixture
def sbatch_standin(tmp_path):
    """(env, record): PATH starts with the stand-in sbatch; `record` lists its calls."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    standin_bin.install(bindir, "sbatch")  # records its arguments and the job's knobs, answers like --parsable
    standin_bin.install(bindir, "sinfo", "fixed-output")  # answers nothing (not this machine's SLURM, if it has one)
    (bindir / "sinfo.out").write_text("")
    record = tmp_path / "sbatch-calls.txt"
    env = {k: v for k, v in os.environ.items()
           if k not in (*KNOBS, "OMP_NUM_THREADS", "MPLCONFIGDIR") and not k.startswith("SLURM_")}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env["STANDIN_RECORD"] = str(record)
    env["STANDIN_DIR"] = str(bindir)
    return env, record


def make(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def sbatch_words(stdout: str) -> list[str]:
    """The printed sbatch command (after `env K=V ...`), split as the shell would."""
    line = next(ln for ln in stdout.splitlines() if re.match(r"^env .* sbatch ", ln))
    words = shlex.split(line)
    return words[words.index("sbatch"):]


def job_env(stdout: str) -> dict[str, str]:
    line = next(ln for ln in stdout.splitlines() if re.match(r"^env .* sbatch ", ln))
    words = shlex.split(line)
    return dict(w.split("=", 1) for w in words[1:words.index("sbatch")])


def dry_steps(stdout: str) -> dict[str, list[str]]:
    """The job's steps a dry run prints: {"install"|"doctor"|"training": the command line's words}."""
    steps, name = {}, None
    for line in stdout.split("# The job's steps, as jobs/train.sbatch will run them", 1)[1].splitlines()[1:]:
        if line.startswith("# "):
            name = next((n for n in ("install", "doctor", "training") if n in line.split(",")[0]), None)
        elif name:
            steps[name], name = shlex.split(line), None
    return steps


def test_dry_run_prints_the_sbatch_command_and_the_steps_with_their_pyxis_flags(sbatch_standin):
    env, record = sbatch_standin
    p = make(env, "submit", "NODES=2", "GPUS=4", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    words = sbatch_words(p.stdout)
    for option in ("--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--gpus-per-task=1", "--gpu-bind=none",
                   f"--chdir={ROOT}", "--job-name=pyg-train", f"--output={ROOT}/logs/%x-%j.log", "--export=ALL"):
        assert option in words, (option, words)
    assert words[-1] == str(ROOT / "jobs" / "train.sbatch")
    # the default image is the .sqsh `make image` writes, absolute so pyxis reads it as a path
    image = job_env(p.stdout)["IMAGE"]
    assert image.startswith(str(ROOT) + "/") and image.endswith(".sqsh")
    # the training step as the job runs it: its environment, srun's options and the pyxis flags
    steps = dry_steps(p.stdout)
    assert list(steps) == ["training"]  # a .sqsh from make image: no install; DOCTOR=0: no doctor
    train = steps["training"]
    assert train[:5] == ["env", "DATA_DIR=/data", "OMP_NUM_THREADS=1", "MPLCONFIGDIR=/tmp/matplotlib", "srun"]
    assert train[5:9] == ["--kill-on-bad-exit=1", "--label", "--gpus-per-task=1", "--gpu-bind=none"]
    assert train[9:] == [f"--container-image={image}", f"--container-mounts={ROOT}:/workspace,{ROOT}/data:/data",
                         "--container-workdir=/workspace", "--no-container-mount-home",
                         "--container-env=DATA_DIR,OMP_NUM_THREADS,MPLCONFIGDIR",
                         "python", "-m", "train", "fit", "--config", "synthetic"]
    # the script itself is a pointer, not 200 lines of output; the memory plan came first
    assert f"# The job script: {ROOT}/jobs/train.sbatch" in p.stdout
    assert "#SBATCH" not in p.stdout and "forward_signal" not in p.stdout
    assert p.stdout.index("memory plan: synthetic") < p.stdout.index("# DRY_RUN=1: nothing submitted")
    assert not record.exists(), "DRY_RUN called sbatch"


def squashfs(path: Path) -> Path:
    """A file that starts as a squashfs image does (its magic), for the checks on the login node."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"hsqs" + bytes(92))
    return path


@pytest.mark.parametrize("knobs", [
    ["IMAGE=nvcr.io#nvidia/pyg:25.05-py3", "DOCTOR=1", "CONTAINER_MOUNTS=/tmp:/scratch", "SRUN_ARGS=--exclusive",
     "ARGS=trainer.epochs=1 optim.lr=0.02"],
    ["IMAGE=none", "GPUS_PER_TASK=0", "DOCTOR=only", "DOCTOR_TIMEOUT=30"],
], ids=["registry-install-doctor", "bare-doctor-only"])
def test_dry_run_steps_are_what_the_job_runs(sbatch_standin, tmp_path, knobs):
    """The lines `make submit DRY_RUN=1` prints are the job's, word for word: the job script, given the
    environment the printed sbatch command gives it, prints and runs the same steps."""
    env, record = sbatch_standin
    env.pop("PYTHONPATH", None)  # make exports PYTHONPATH=ROOT to the job (Makefile)
    p = make(env, "submit", "NODES=2", "GPUS=8", "CPUS_PER_TASK=6", "CONFIG=tiny", *knobs, "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    printed = dry_steps(p.stdout)
    job, calls = run_job_script(tmp_path, {**job_env(p.stdout), "PYTHONPATH": str(ROOT)})
    assert job.returncode == 0, job.stdout + job.stderr
    ran = [shlex.split(line) for line in job.stdout.splitlines() if line.startswith("env ")]
    expected = [[w.replace("JOBID", "123456") for w in words] for words in printed.values()]
    assert ran == expected, (ran, expected)  # the job prints each step's line before it runs it
    assert calls == [words[words.index("srun") + 1:] for words in expected]  # and runs exactly that
    assert not record.exists()


def test_cpu_only_drops_gpu_options_and_passes_knobs(sbatch_standin):
    env, record = sbatch_standin
    p = make(env, "submit", "NODES=3", "GPUS=6", "GPUS_PER_TASK=0", "CPUS_PER_TASK=2", "IMAGE=none",
             "CONFIG=tiny", "TIME=00:10:00", "PARTITION=debug", "ACCOUNT=proj1", "QOS=high", "MEM=0",
             "ARGS=trainer.epochs=1 optim.lr=0.02", "SBATCH_ARGS=--exclusive --comment=x", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    words = sbatch_words(p.stdout)
    assert not [w for w in words if w.startswith(("--gpus", "--gpu-bind"))], words
    for option in ("--nodes=3", "--ntasks=6", "--ntasks-per-node=2", "--cpus-per-task=2", "--time=00:10:00",
                   "--partition=debug", "--account=proj1", "--qos=high", "--exclusive", "--comment=x", "--mem=0"):
        assert option in words, (option, words)
    knobs = job_env(p.stdout)
    assert knobs["ARGS"] == "trainer.epochs=1 optim.lr=0.02"  # one word through make and the shell
    assert (knobs["CONFIG"], knobs["IMAGE"], knobs["GPUS_PER_TASK"]) == ("tiny", "none", "0")
    assert (knobs["DOCTOR"], knobs["DOCTOR_TIMEOUT"]) == ("0", "120")  # the printed command is the whole job
    assert not record.exists()


def test_doctor_knobs_are_part_of_the_printed_command(sbatch_standin):
    env, record = sbatch_standin
    p = make(env, "submit", "NODES=2", "GPUS=4", "IMAGE=none", "DOCTOR=1", "DOCTOR_TIMEOUT=30", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    assert (job_env(p.stdout)["DOCTOR"], job_env(p.stdout)["DOCTOR_TIMEOUT"]) == ("1", "30")
    assert not record.exists()


def test_submit_prints_job_id_log_path_and_follow_command(sbatch_standin, tmp_path):
    env, record = sbatch_standin
    logs = tmp_path / "joblogs"
    p = make(env, "submit", "NODES=2", "GPUS=4", "IMAGE=none", "GPUS_PER_TASK=0", "CONFIG=tiny",
             "ARGS=trainer.epochs=1", f"LOG_DIR={logs}")
    assert p.returncode == 0, p.stderr
    log = logs / "pyg-train-4242.log"
    assert "Submitted job 4242" in p.stdout
    assert f"log:    {log}" in p.stdout
    assert f"tail -f {log}" in p.stdout
    assert logs.is_dir(), "the log folder must exist before the job starts"
    calls = record.read_text().splitlines()
    argv = [ln for ln in calls if ln.startswith("ARGV")]
    assert len(argv) == 1
    assert f"--output={logs}/%x-%j.log" in argv[0] and "--ntasks=4" in argv[0]
    assert "ENV CONFIG=tiny" in calls and "ENV ARGS=trainer.epochs=1" in calls
    assert f"ENV PROJECT_DIR={ROOT}" in calls and "ENV IMAGE=none" in calls


@pytest.mark.parametrize("args, named", [
    (["NODES=2", "GPUS=3"], ["GPUS=3", "NODES=2", "multiple"]),
    (["NODES=0", "GPUS=4"], ["NODES='0'", "positive"]),
    (["NODES=two", "GPUS=4"], ["NODES='two'", "positive"]),
    (["NODES=1", "GPUS=-1"], ["GPUS='-1'", "positive"]),
    (["GPUS_PER_TASK=2"], ["GPUS_PER_TASK='2'", "1", "0"]),
    (["CPUS_PER_TASK=0"], ["CPUS_PER_TASK='0'"]),
    (["CONFIG=nosuchconfig"], ["CONFIG='nosuchconfig'", "synthetic", "tiny"]),
    (["IMAGE=/nonexistent/pyg.sqsh"], ["IMAGE='/nonexistent/pyg.sqsh'", "make image", "IMAGE=none"]),
    (["IMAGE=images/missing.sqsh"], ["IMAGE='images/missing.sqsh'", "make image"]),
    (["CONFIG=tiny", "ARGS=trainer.epochz=3"], ["trainer.epochz", "epochs"]),
    (["IMAGE=nvcr.io#nvidia/pyg:25.05-py3", "DATA_DIR=/nonexistent/data"], ["DATA_DIR='/nonexistent/data'"]),
    (["JOB_NAME=my job"], ["JOB_NAME='my job'"]),
    (["DOCTOR=yes"], ["DOCTOR='yes'", "0, 1", "only"]),
    (["DOCTOR=1", "DOCTOR_TIMEOUT=soon"], ["DOCTOR_TIMEOUT='soon'"]),
])
def test_bad_request_names_the_value_and_submits_nothing(sbatch_standin, args, named):
    env, record = sbatch_standin
    p = make(env, "submit", *(["NODES=2", "GPUS=4", "IMAGE=none", "CONFIG=tiny"] + args))
    assert p.returncode != 0
    assert "error:" in p.stderr and "nothing was submitted" in p.stderr
    for text in named:
        assert text in p.stderr, (text, p.stderr)
    assert "Traceback" not in p.stderr
    assert not record.exists(), "a failed check still called sbatch"


def test_every_problem_is_reported_at_once(sbatch_standin):
    env, record = sbatch_standin
    p = make(env, "submit", "NODES=0", "GPUS=x", "GPUS_PER_TASK=3", "CONFIG=nosuchconfig", "IMAGE=/nonexistent.sqsh")
    assert p.returncode != 0
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("make submit: error: ")]
    named = [e.split("=", 1)[0].rsplit(" ", 1)[1] for e in errors]
    assert named == ["NODES", "GPUS", "GPUS_PER_TASK", "IMAGE", "CONFIG"]
    assert not record.exists()


def test_srun_line_container_mode(sbatch_standin):
    env, record = sbatch_standin
    p = make(env, "srun", "NODES=2", "GPUS=4", "IMAGE=nvcr.io#nvidia/pyg:25.05-py3", "CONFIG=tiny")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 2  # install into a named container, then train in it
    install, train = (shlex.split(ln) for ln in lines)
    # offline, from the wheels `make srun` prepared on this login node (compute nodes have no index)
    assert install[:4] == ["env", "WHEELS=/workspace/.wheels", "OFFLINE=1", "srun"], install
    assert "--container-env=WHEELS,OFFLINE" in install
    assert {w.name.split("-")[0] for w in (ROOT / ".wheels").glob("*.whl")} >= {"pyg_slurm_train", "python_hostlist"}
    assert "--ntasks-per-node=1" in install and "--container-name=pyg-train" in install
    assert install[-2:] == ["/workspace/container/install-project.sh", "/workspace"]
    assert train[:5] == ["env", "DATA_DIR=/data", "OMP_NUM_THREADS=1", "MPLCONFIGDIR=/tmp/matplotlib", "srun"]
    for option in ("--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "--gpus-per-task=1", "--gpu-bind=none",
                   "--container-image=nvcr.io#nvidia/pyg:25.05-py3",
                   f"--container-mounts={ROOT}:/workspace,{ROOT}/data:/data",
                   "--container-workdir=/workspace", "--no-container-mount-home", "--container-name=pyg-train",
                   "--kill-on-bad-exit=1"):
        assert option in train, (option, train)
    assert train[-6:] == ["python", "-m", "train", "fit", "--config", "tiny"]
    assert not record.exists()


def test_srun_line_bare_mode_has_no_pyxis_flags(sbatch_standin):
    env, _ = sbatch_standin
    p = make(env, "srun", "NODES=2", "GPUS=4", "IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1",
             "CONFIG=tiny", "ARGS=trainer.epochs=1")
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.strip().splitlines()
    words = shlex.split(line)
    assert not [w for w in words if w.startswith(("--container", "--gpu"))], words
    assert f"--chdir={ROOT}" in words and "--ntasks-per-node=2" in words
    assert words[-6:] == ["-m", "train", "fit", "--config", "tiny", "trainer.epochs=1"]


# ---- every knob's shape (lib/checks.sh), the same in a dry run; numbers without overflow -----------------

@pytest.mark.parametrize("args, named", [
    (["MEM=lots"], ["MEM='lots' is not a memory size"]),
    (["ACCOUNT=my account"], ["ACCOUNT='my account' is not a name"]),
    (["CONTAINER_MOUNTS=:/extra", "IMAGE=nvcr.io#nvidia/pyg:25.05-py3"],
     ["CONTAINER_MOUNTS=':/extra'", "empty source"]),
    (["SBATCH_ARGS=--exclusive --nodes=8"], ["'--nodes=8' is an option the job sets itself; use NODES="]),
    (["NODES=12345678901234567890", "GPUS=3"], ["NODES='12345678901234567890'", "at most 100000"]),
    (["NODES=3", "GPUS=99999999999999999999"], ["GPUS='99999999999999999999'", "at most 1000000"]),
    (["LOG_DIR=FILE/logs"], ["LOG_DIR=", "is a file, not a directory"]),
    (["DATA_DIR=FILE/data"], ["DATA_DIR=", "is a file, not a directory"]),
    (["BARE_PYTHON=/nonexistent/python3"], ["BARE_PYTHON='/nonexistent/python3' is not a program here"]),
    (["DOCTOR=1", "DOCTOR_TIMEOUT=600", "TIME=10"],
     ["DOCTOR_TIMEOUT=600 seconds is not below TIME='10' (600 seconds)"]),
])
def test_bad_knobs_are_refused_alike_in_a_dry_run_and_a_real_one(sbatch_standin, tmp_path, args, named):
    env, record = sbatch_standin
    regular = tmp_path / "a-file"
    regular.write_text("not a folder\n")
    args = [a.replace("FILE", str(regular)) for a in args]
    for p in map_side_by_side(lambda dry: make(env, "submit", "NODES=2", "GPUS=4", "IMAGE=none", "CONFIG=tiny",
                                               "BARE_PYTHON=python3", *args, *dry), ([], ["DRY_RUN=1"])):
        assert p.returncode == 2, p.stdout + p.stderr
        assert "nothing was submitted" in p.stderr and "Traceback" not in p.stderr
        for text in named:
            assert text in p.stderr, (text, p.stderr)
        # no number the user did not type: nothing wrapped around in shell arithmetic
        typed = {w for a in args for w in re.findall(r"\d{8,}", a)}
        assert set(re.findall(r"\d{8,}", p.stderr)) <= typed, p.stderr
        assert "# DRY_RUN=1" not in p.stdout
    assert not record.exists(), "a refused knob still called sbatch"
    assert not (regular.parent / "a-file").is_dir()


def test_memory_above_what_the_partitions_nodes_have_is_refused(cluster_standin):
    env, record = cluster_standin  # partition gpu: 128000 MB per node; cpu: 16000 MB
    refused = [("200G", "gpu"), ("16001", "cpu"), ("1T", "gpu")]
    fitting = [("0", "cpu"), ("16000", "cpu"), ("15G", "cpu")]
    runs = map_side_by_side(lambda case: make(env, "submit", "IMAGE=none", "CONFIG=tiny", "GPUS_PER_TASK=0",
                                              f"PARTITION={case[1]}", f"MEM={case[0]}", "BARE_PYTHON=python3",
                                              "DRY_RUN=1"), refused + fitting)
    for (mem, partition), p in zip(refused, runs):
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"MEM='{mem}' is more than the nodes of partition '{partition}' have" in p.stderr, p.stderr
    for (mem, _), p in zip(fitting, runs[len(refused):]):  # 0: all of a node's memory
        assert p.returncode == 0, p.stderr
        assert f"--mem={mem}" in sbatch_words(p.stdout)
    assert not record.exists()


# ---- the image is an image before the job waits in the queue (issue 20 §2) ------------------------------

def test_an_image_that_is_no_squashfs_is_refused_before_the_queue(sbatch_standin, tmp_path):
    env, record = sbatch_standin
    not_sqsh = tmp_path / "pyg.sqsh"
    not_sqsh.write_bytes(b"PK\x03\x04 a zip, not a squashfs")
    folder = tmp_path / "folder.sqsh"
    folder.mkdir()
    empty = tmp_path / "empty.sqsh"
    empty.write_bytes(b"")
    cases = [(not_sqsh, "does not start with the squashfs magic 'hsqs'"), (empty, "squashfs magic"),
             (folder, "is a directory, not a squashfs image"), (tmp_path / "link.sqsh", "is not a regular file")]
    (tmp_path / "link.sqsh").symlink_to(tmp_path / "gone.sqsh")
    calls = [(image, named, args) for image, named in cases for args in (["submit"], ["submit", "DRY_RUN=1"], ["srun"])]
    runs = map_side_by_side(lambda c: make(env, *c[2], "NODES=2", "GPUS=4", "CONFIG=tiny", f"IMAGE={c[0]}"), calls)
    for (image, named, _args), p in zip(calls, runs):
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"IMAGE='{image}' " in p.stderr and named in p.stderr, p.stderr
        assert "does not exist" not in p.stderr, p.stderr  # a folder is there: it is the wrong thing, not absent
    p = make(env, "submit", "NODES=2", "GPUS=4", "CONFIG=tiny", f"IMAGE={tmp_path}/a\nb.sqsh", "DRY_RUN=1")
    assert p.returncode == 2 and "is not a usable path" in p.stderr, p.stderr
    assert not record.exists()


def test_a_squashfs_image_is_taken_as_an_absolute_path(sbatch_standin, tmp_path):
    env, _ = sbatch_standin
    image = squashfs(tmp_path / "images" / "pyg.sqsh")
    p = make(env, "srun", "NODES=2", "GPUS=4", "CONFIG=tiny", f"IMAGE={os.path.relpath(image, ROOT)}")
    assert p.returncode == 0, p.stderr
    assert f"--container-image={image}" in shlex.split(p.stdout)


@pytest.mark.skipif(os.geteuid() != 0, reason="runs make as another user (nobody), which needs root")
def test_an_unreadable_image_and_an_unwritable_log_dir_are_refused(tmp_path):
    """As a user who cannot read the image or write the log folder (root reads and writes everything)."""
    shared = Path(tempfile.mkdtemp(prefix="pyg-shapes-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        image = squashfs(shared / "pyg.sqsh")
        image.chmod(0o600)
        locked = shared / "locked"
        locked.mkdir(mode=0o755)
        env = {k: v for k, v in os.environ.items() if k not in KNOBS and not k.startswith(("SLURM_", "MAKE"))}
        env.update(HOME=str(shared), PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "make",
                            "--no-print-directory", "submit", "NODES=2", "GPUS=4", "CONFIG=tiny", f"IMAGE={image}",
                            f"LOG_DIR={locked}/logs", "DRY_RUN=1"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"IMAGE='{image}' cannot be read" in p.stderr, p.stderr
        assert f"LOG_DIR='{locked}/logs' cannot be written: '{locked}' is not writable by nobody" in p.stderr
    finally:
        shutil.rmtree(shared)


def test_srun_checks_like_submit(sbatch_standin):
    env, _ = sbatch_standin
    p = make(env, "srun", "NODES=2", "GPUS=3")
    assert p.returncode != 0 and "GPUS=3 is not a multiple of NODES=2" in p.stderr
    assert p.stdout == ""


def test_job_script_sqsh_image_runs_one_pyxis_step(tmp_path):
    image = tmp_path / "pyg.sqsh"
    image.write_bytes(b"")
    data = tmp_path / "data"
    p, calls = run_job_script(tmp_path, {"IMAGE": str(image), "CONFIG": "tiny", "DATA_DIR": str(data),
                                         "ARGS": "trainer.epochs=1 optim.lr=0.02"})
    assert p.returncode == 0, p.stderr
    assert "MASTER_ADDR" not in p.stdout  # every rank derives it from its own step
    (step,) = calls
    assert step[:2] == ["--kill-on-bad-exit=1", "--label"]
    for option in ("--cpus-per-task=6", "--gpus-per-task=1", "--gpu-bind=none", f"--container-image={image}",
                   f"--container-mounts={ROOT}:/workspace,{data}:/data", "--container-workdir=/workspace",
                   "--no-container-mount-home", "--container-env=DATA_DIR,OMP_NUM_THREADS,MPLCONFIGDIR"):
        assert option in step, (option, step)
    assert not [w for w in step if w.startswith("--container-name")]
    assert step[-8:] == ["python", "-m", "train", "fit", "--config", "tiny", "trainer.epochs=1", "optim.lr=0.02"]


def test_the_job_hands_the_nodes_hcas_to_enroots_mellanox_hook(tmp_path):
    """Where the node has /dev/infiniband, the step sets MELLANOX_VISIBLE_DEVICES and lists it in --container-env
    (enroot's 99-mellanox hook then mounts the HCAs); where it has none, neither."""
    image = tmp_path / "pyg.sqsh"
    image.write_bytes(b"")
    (tmp_path / "infiniband").mkdir()
    knobs = {"IMAGE": str(image), "CONFIG": "tiny", "DATA_DIR": str(tmp_path)}
    p, (step,) = run_job_script(tmp_path, {**knobs, "INFINIBAND_DEVICES": str(tmp_path / "infiniband")})
    assert p.returncode == 0, p.stderr
    assert "--container-env=DATA_DIR,OMP_NUM_THREADS,MPLCONFIGDIR,MELLANOX_VISIBLE_DEVICES" in step
    source = 'source lib/checks.sh; source jobs/lib/steps.sh; hca_env'
    seen = {given: subprocess.run(["bash", "-c", source], cwd=ROOT, capture_output=True, text=True, timeout=30,
                                  env={**os.environ, "INFINIBAND_DEVICES": str(tmp_path / "infiniband"),
                                       "MELLANOX_VISIBLE_DEVICES": given}).stdout for given in ("", "0,1")}
    assert seen == {"": "MELLANOX_VISIBLE_DEVICES=all\n", "0,1": "MELLANOX_VISIBLE_DEVICES=0,1\n"}
    (tmp_path / "none").mkdir()
    p, (step,) = run_job_script(tmp_path / "none", knobs)
    assert not [w for w in step if "MELLANOX" in w]


def test_job_script_registry_image_installs_first_and_propagates_failure(tmp_path):
    p, calls = run_job_script(tmp_path, {"IMAGE": "nvcr.io#nvidia/pyg:25.05-py3", "GPUS_PER_TASK": "0"}, srun_rc=3)
    # the install step fails (stand-in srun exits 3): the job stops there with that status
    assert p.returncode == 3
    (install,) = calls
    assert "--ntasks-per-node=1" in install and "--ntasks=2" in install
    assert "--container-name=pyg-train-123456" in install
    assert "--container-image=nvcr.io#nvidia/pyg:25.05-py3" in install
    assert install[-3:] == ["sh", "/workspace/container/install-project.sh", "/workspace"]


def test_job_script_bare_mode_status_is_the_steps(tmp_path):
    p, calls = run_job_script(tmp_path, {"IMAGE": "none", "GPUS_PER_TASK": "0", "CONFIG": "tiny"}, srun_rc=7)
    assert p.returncode == 7 and "training step exited with status 7" in p.stdout
    (step,) = calls
    assert not [w for w in step if w.startswith(("--container", "--gpu"))], step
    assert step[-6:] == [str(ROOT / ".venv" / "bin" / "python"), "-m", "train", "fit", "--config", "tiny"]


def test_job_script_does_not_requeue_after_a_storage_fault(tmp_path):
    assert f"EXIT_STORAGE={EXIT_STORAGE} " in (ROOT / "jobs" / "train.sbatch").read_text()  # train/errors.py's
    p, _ = run_job_script(tmp_path, {"IMAGE": "none", "GPUS_PER_TASK": "0", "CONFIG": "tiny"}, srun_rc=EXIT_STORAGE)
    assert p.returncode == EXIT_STORAGE, p.stdout + p.stderr
    assert f"training step exited with status {EXIT_STORAGE}\nstorage fault: not requeueing" in p.stdout
    assert "requeueing job" not in p.stdout and "resubmit with output.dir=runs/123456" in p.stdout


def test_scripts_are_shellcheck_clean():
    if not SHELLCHECK.exists():
        pytest.skip(f"{SHELLCHECK} is missing: run `make setup`")
    p = subprocess.run([str(SHELLCHECK), "-x", *map(str, SCRIPTS)], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture
def cluster_standin(sbatch_standin):
    env, record = sbatch_standin
    standin_bin.install(Path(env["PATH"].split(":")[0]), "sinfo")  # partitions gpu (2 x 4 A100) and cpu (3 x 8)
    return env, record


@pytest.mark.parametrize("args,named", [
    (["PARTITION=nosuch"], ["PARTITION='nosuch'", "gpu", "cpu"]),
    (["NODES=3", "GPUS=3"], ["NODES=3", "'gpu' has only 2 node(s)"]),
    (["NODES=2", "GPUS=10"], ["GPUS=10", "5 GPUs per node", "at most 4 GPU(s)"]),
    (["NODES=1", "GPUS=4", "CPUS_PER_TASK=32"], ["CPUS_PER_TASK=32", "128 CPUs per node", "at most 64 CPUs"]),
    (["PARTITION=cpu", "GPUS_PER_TASK=0", "NODES=2", "GPUS=4", "CPUS_PER_TASK=8"],
     ["CPUS_PER_TASK=8", "16 CPUs per node", "at most 8 CPUs", "CPUS_PER_TASK=4"]),
    (["PARTITION=cpu", "NODES=1", "GPUS=1"], ["at most 0 GPU(s)", "GPUS_PER_TASK=0"]),
    (["TIME=3-00:00:00"], ["TIME='3-00:00:00'", "2-00:00:00"]),
    (["PARTITION=cpu", "GPUS_PER_TASK=0", "TIME=61"], ["TIME='61'", "'cpu' (1:00:00)"]),
    (["TIME=1:2:3:4"], ["TIME='1:2:3:4' is not a SLURM time"]),
    (["TIME=soon"], ["TIME='soon' is not a SLURM time"]),
    (["PARTITION=a b"], ["PARTITION='a b'"]),
])
def test_requests_the_cluster_cannot_run_are_refused(cluster_standin, args, named):
    env, record = cluster_standin
    for dry in ([], ["DRY_RUN=1"]):  # a dry run checks as much as a real one
        p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", *args, *dry)
        assert p.returncode == 2, p.stdout + p.stderr
        for text in named:
            assert text in p.stderr, (text, p.stderr)
        assert "nothing was submitted" in p.stderr
    assert not record.exists()


@pytest.mark.parametrize("args", [
    ["NODES=2", "GPUS=8", "CPUS_PER_TASK=16", "TIME=2-00:00:00"],
    ["PARTITION=cpu", "GPUS_PER_TASK=0", "NODES=3", "GPUS=6", "CPUS_PER_TASK=4", "TIME=59:59"],
    ["NODES=1", "GPUS=4", "TIME=90"],  # minutes; CPUS_PER_TASK empty: the node's 64 CPUs / its 4 GPUs
])
def test_requests_that_fit_are_submitted(cluster_standin, args):
    env, record = cluster_standin
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", *args)
    assert p.returncode == 0, p.stderr
    assert "Submitted job 4242" in p.stdout and record.exists()


def test_without_sinfo_it_says_what_was_not_checked(sbatch_standin, tmp_path):
    env, _ = sbatch_standin
    tools = tmp_path / "tools"  # every program of PATH but sinfo
    tools.mkdir()
    for folder in reversed(env["PATH"].split(":")):
        for program in Path(folder).glob("*") if Path(folder).is_dir() else ():
            if program.name != "sinfo":
                (tools / program.name).unlink(missing_ok=True)
                (tools / program.name).symlink_to(program)
    env["PATH"] = str(tools)
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    assert "sinfo is not on PATH" in p.stderr and "time limit were not checked" in p.stderr
    assert "warning: CPUS_PER_TASK is empty and the nodes' CPUs per GPU are not known here" in p.stderr


def test_default_cpus_per_task_is_the_clusters():
    """No --cpus-per-task unless asked: the old default of 8 pended forever on small nodes."""
    p = subprocess.run(["make", "--no-print-directory", "submit", "IMAGE=none", "DRY_RUN=1"], cwd=ROOT,
                       env={k: v for k, v in os.environ.items() if k not in KNOBS}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--cpus-per-task" not in sbatch_words(p.stdout)


# ---- the memory plan before sbatch (train/cli/plan.py) ----------------------------------------------

def prepared_stand_in(data_dir: Path, name: str) -> Path:
    """`data_dir` holding what a prepared dataset `name` holds, as empty files: enough for the check before
    sbatch (train/graph/datasets/kinds.py is_prepared looks for the files, it does not read them)."""
    from train.config import DataConfig
    from train.graph.datasets.kinds import DATASETS

    kind = DATASETS[name]
    folder = kind.folder(DataConfig(name=name), data_dir)
    for relative in (*kind.processed, "RELEASE_v1.txt"):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).touch()
    return data_dir


def test_a_plan_that_cannot_fit_is_refused_naming_the_numbers(cluster_standin, tmp_path):
    env, record = cluster_standin
    data_dir = prepared_stand_in(tmp_path / "data", "ogbn-papers100M")
    for p in map_side_by_side(lambda dry: make(env, "submit", "IMAGE=none", "CONFIG=ogbn-papers100M", "NODES=2",
                                               "GPUS=8", f"DATA_DIR={data_dir}", *dry), ([], ["DRY_RUN=1"])):
        assert p.returncode == 2, p.stdout + p.stderr
        assert "memory plan: ogbn-papers100M" in p.stdout and "per node" in p.stdout  # the table, then the verdict
        verdict = re.search(r"memory plan for CONFIG='ogbn-papers100M' ARGS='' NODES=2 GPUS=8: this plan does not "
                            r"fit: a node needs ([\d.]+) GiB at its peak but has 125.0 GiB \(sinfo -p gpu: smallest "
                            r"node\)", p.stderr)
        assert verdict and float(verdict.group(1)) > 125.0, p.stderr
        # the verdict's figure is the table's: the node's peak row, as printed above it
        assert re.search(rf"^\s*peak\s.*\b{re.escape(verdict.group(1))} GiB", p.stdout, re.M), p.stdout
        assert "nothing was submitted" in p.stderr and "Traceback" not in p.stderr
    assert not record.exists()


# ---- the dataset prepared where the job reads it (login/config_check.py --data-dir) ------------------

@pytest.mark.parametrize("config, dataset, missing", [
    ("cora", "Cora", "Planetoid/Cora/processed/data.pt"),
    ("ogbn-products", "ogbn-products", "ogbn_products/processed/geometric_data_processed.pt")])
def test_a_dataset_not_prepared_in_data_dir_is_refused_naming_the_make_data_that_prepares_it(
        cluster_standin, tmp_path, config, dataset, missing):
    """One line: the dataset, where it was looked for, the file missing, the `make data` that prepares it."""
    env, record = cluster_standin
    empty = tmp_path / "data"
    empty.mkdir()
    cases = [(str(empty), "DATA_DIR", ["DRY_RUN=1"])]  # a dry run checks as a real submit does
    if not (ROOT / "data" / missing).exists():  # the default data/, unless this checkout has it prepared
        cases.append(("", "the default data root", []))
    runs = map_side_by_side(lambda c: make(env, "submit", "IMAGE=none", f"CONFIG={config}", f"DATA_DIR={c[0]}", *c[2]),
                            cases)
    for (data_dir, source, _dry), p in zip(cases, runs):
        shown = data_dir or "data"
        assert p.returncode == 2, p.stdout + p.stderr
        lines = [line for line in p.stderr.splitlines() if dataset in line]
        assert lines == [f"make submit: error: CONFIG='{config}' ARGS='': dataset '{dataset}' is not prepared in "
                         f"'{shown}' ({source}): {shown}/{missing} is missing; prepare it on a login node (with "
                         f"internet): make data DATASET={dataset} DATA_DIR={shown}"], p.stderr
        assert "nothing was submitted" in p.stderr
        assert f"memory plan: {dataset}" in p.stdout  # from its published size: one problem among the others
    assert not record.exists()
    prepared_stand_in(empty, dataset)  # prepared: the same request passes the check
    p = make(env, "submit", "IMAGE=none", f"CONFIG={config}", f"DATA_DIR={empty}", "DRY_RUN=1")
    assert p.returncode == 0 and "is not prepared" not in p.stderr, p.stderr


def test_own_files_that_are_not_there_are_refused_before_sbatch(cluster_standin, tmp_path):
    env, record = cluster_standin
    absent = tmp_path / "graph"
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", f"ARGS=data.name=files data.path={absent}", "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    assert (f"CONFIG='tiny' ARGS='data.name=files data.path={absent}': data.path='{absent}' does not exist here"
            in p.stderr), p.stderr
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "ARGS=data.name=files", "DRY_RUN=1")
    assert p.returncode == 2 and "data.name=files needs data.path" in p.stderr, p.stderr
    assert not record.exists()


def test_the_doctor_job_is_not_refused_for_a_missing_dataset(cluster_standin, tmp_path):
    """`make doctor NODES= GPUS=` (DOCTOR=only) is how to see what each node finds: it looks for the data there."""
    env, _record = cluster_standin
    p = make(env, "submit", "IMAGE=none", "CONFIG=cora", f"DATA_DIR={tmp_path}", "DOCTOR=only", "DRY_RUN=1")
    assert p.returncode == 0 and "is not prepared" not in p.stderr, p.stderr


def test_dry_run_prints_the_plan_and_a_plan_that_fits_is_submitted(cluster_standin):
    env, record = cluster_standin
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "PARTITION=cpu", "GPUS_PER_TASK=0", "NODES=2", "GPUS=4",
             "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    assert "memory plan: synthetic (2,000 nodes" in p.stdout and "2 node(s) x 2 rank(s)" in p.stdout
    assert "15.6 GiB  (sinfo -p cpu: smallest node)" in p.stdout and "\nfits\n" in p.stdout
    assert not record.exists()
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "PARTITION=cpu", "GPUS_PER_TASK=0", "NODES=2", "GPUS=4",
             "ARGS=data.share=process")
    assert p.returncode == 0 and "Submitted job 4242" in p.stdout and record.exists(), p.stderr


def test_a_gpu_jobs_plan_and_cpus_come_from_the_partitions_nodes_or_the_settings(cluster_standin):
    """The stand-in cluster's GPU nodes (64 CPUs, gpu:a100:4): planned at the A100's memory, or at GPU_MEMORY where
    it is given; each GPU rank gets the node's CPUs / its GPUs, or CPUS_PER_TASK where it is given."""
    env, record = cluster_standin
    typed, given = map_side_by_side(
        lambda extra: make(env, "submit", "IMAGE=none", "CONFIG=tiny", "NODES=2", "GPUS=8", "DRY_RUN=1", *extra),
        ([], ["GPU_MEMORY=24G", "CPUS_PER_TASK=3"]))
    assert typed.returncode == 0 and given.returncode == 0, typed.stderr + given.stderr
    assert "40.0 GiB  (sinfo -p gpu: gpu:a100, A100 comes with 40 GB or 80 GB" in typed.stdout
    assert "24.0 GiB  (--gpu-memory)" in given.stdout
    assert "--cpus-per-task=16" in sbatch_words(typed.stdout) and "note: CPUS_PER_TASK=16 for each GPU rank" in \
        typed.stderr
    assert "--cpus-per-task=3" in sbatch_words(given.stdout) and "CPUS_PER_TASK=16" not in given.stderr
    assert not record.exists()


# ---- one table for the job's settings: jobs/knobs.md ----------------------------------------------

def test_every_setting_has_one_row_with_its_documentation():
    table = TABLE.read_text()
    rows = knobs()
    assert len(rows) >= 20 and len(rows) == len(re.findall(r"^\| *[A-Z]", table, re.M)), "a row the reader missed"
    for row in rows.values():
        assert len(row.doc.split()) >= 2, f"{row.name} has no documentation"
        assert len(row.default.split()) <= 1, f"{row.name}'s default is not one word or nothing"
        assert all(o.startswith("-") for o in row.sbatch), row
    for makefile in [ROOT / "Makefile", *(ROOT / "mk").glob("*.mk")]:  # no second default in make ...
        assert not set(rows) & set(re.findall(r"^([A-Z_]+) \??[:?]?=", makefile.read_text(), re.M)), makefile
    scripts = [ROOT / "jobs" / "submit.sh", ROOT / "jobs" / "train.sbatch", *(ROOT / "container").glob("*.sh")]
    for script in scripts:  # ... nor in the scripts
        text = script.read_text()  # (DATA_DIR's empty default means data/ in the project, as the table says)
        defaults = [k for k in set(rows) - {"DATA_DIR"}
                    if re.search(rf"^\s*(export )?{k}=\$\{{{k}:-|\$\{{{k}:=", text, re.M)]
        assert not defaults, script


def test_the_table_is_the_only_list_of_the_settings():
    """No file spells the settings out again: eight or more names in a row (a third of the table) is a list of them,
    and only the table has one (a target that reads a few of them names those)."""
    names = "|".join(knobs())
    a_list = re.compile(rf"\b(?:{names})\b(?:[\s\\,'\"]+\b(?:{names})\b){{7,}}")
    files = [ROOT / "Makefile", *(ROOT / "mk").glob("*.mk"), *(ROOT / "jobs").rglob("*.sh"),
             ROOT / "jobs" / "train.sbatch", *(ROOT / "lib").glob("*.sh"), *(ROOT / "container").glob("*.sh"),
             *(ROOT / "tests" / "harness").glob("*.py")]
    for path in files:
        found = a_list.search(path.read_text())
        assert not found, f"{path.relative_to(ROOT)} lists settings itself: {found.group(0)!r}"


def test_what_make_passes_submit_checks_and_forwards_are_the_tables_rows(sbatch_standin, tmp_path):
    env, record = sbatch_standin
    rows = knobs()
    # make: what reaches jobs/submit.sh (its export list), and lib/checks.sh's shape of each
    p = subprocess.run(["make", "-pq", "help"], cwd=ROOT, env=env, capture_output=True, text=True)
    submit_vars = re.search(r"^submit_VARS :?= (.*)$", p.stdout, re.M).group(1).split()
    assert submit_vars == [*rows, "DRY_RUN"]
    script = 'source "$1"; for k in "${KNOBS[@]}"; do printf "%s\t%s\n" "$k" "${SHAPE[$k]}"; done'
    shapes = subprocess.run(["bash", "-c", script, "shapes", str(ROOT / "lib" / "checks.sh")], capture_output=True,
                            text=True, check=True).stdout
    assert dict(line.split("\t") for line in shapes.splitlines()) == {k: r.shape for k, r in rows.items()}
    # submit.sh: every setting with an sbatch option becomes it; the job's environment is the rows that travel
    given = {"NODES": "2", "GPUS": "4", "CPUS_PER_TASK": "3", "MEM": "7G", "TIME": "9", "PARTITION": "p1",
             "ACCOUNT": "a1", "QOS": "q1", "JOB_NAME": "j1"}
    assert set(given) == {k for k, r in rows.items() if r.sbatch}, "a new sbatch option: give it a value here"
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", *(f"{k}={v}" for k, v in given.items()), "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    words = sbatch_words(p.stdout)
    for name, value in given.items():
        assert f"{rows[name].sbatch[0]}={value}" in words, (name, words)
    assert set(job_env(p.stdout)) == {k for k, r in rows.items() if r.job} | {"PROJECT_DIR", "PYG_SUBMISSION_ID",
                                                                                         "PYG_MEMORY_PLAN"}
    # SBATCH_ARGS may set none of those options, long or short: each names its setting
    options = [(name, option) for name, row in rows.items() for option in row.sbatch]
    runs = map_side_by_side(lambda o: make(env, "submit", "IMAGE=none", "CONFIG=tiny", f"SBATCH_ARGS={o[1]}=1",
                                           "DRY_RUN=1"), options)
    for (name, option), p in zip(options, runs):
        assert p.returncode == 2 and f"use {name}=" in p.stderr, (option, p.stderr)
    # the job checks exactly the settings that travel to it: a bad value of one of them is refused there
    choices = [name for name, row in rows.items() if row.job and row.shape.split()[-1] in ("1", "only")]  # "x": none

    def job_script(name: str):  # each in its own folder (stand-ins, spool, record), so they go side by side
        (tmp_path / name).mkdir()
        return run_job_script(tmp_path / name, {"IMAGE": "none", "CONFIG": "tiny", name: "x"})
    for name, (job, calls) in zip(choices, map_side_by_side(job_script, choices)):
        assert job.returncode == 2 and f"{name}='x'" in job.stderr and not calls, (name, job.stderr)
    assert not record.exists()


@pytest.mark.parametrize("call, meant", [
    (["submit", "NODE=2", "DRY_RUN=1"], "NODES"), (["submit", "nodes=2", "DRY_RUN=1"], "NODES"),
    (["submit", "CPU_PER_TASK=2", "DRY_RUN=1"], "CPUS_PER_TASK"), (["help", "GPU=1"], "GPUS"),
    (["help", "NPROCS=1"], "NPROC")])
def test_a_mistyped_setting_is_refused_naming_the_valid_ones(sbatch_standin, call, meant):
    env, record = sbatch_standin
    p = make(env, *call)
    assert p.returncode == 2, p.stdout + p.stderr
    typo = call[1].split("=")[0]
    assert f"{typo} ({meant}?): not a setting" in p.stderr and " ".join(knobs()) in p.stderr, p.stderr
    assert "NPROC" in p.stderr and not p.stdout  # the other variables too; and nothing ran
    assert not record.exists()


def test_another_variable_passes_to_the_job_and_a_typo_of_a_value_name_is_named(sbatch_standin):
    """NCCL_DEBUG=INFO on the command line is an environment variable for the job (--export=ALL), not a typo."""
    env, record = sbatch_standin
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "NCCL_DEBUG=INFO", "HOME=/nonexistent-home")
    assert p.returncode == 0 and "not a setting" not in p.stderr, p.stderr
    assert "Submitted job 4242" in p.stdout and record.exists()
    p = subprocess.run(["bash", str(ROOT / "jobs" / "lib" / "knobs.sh"), "NODE"], capture_output=True, text=True)
    assert p.returncode != 0 and "NODE is not a setting" in p.stderr and " ".join(knobs()) in p.stderr


def test_help_shows_every_value_expanded():
    """`make help` shows what each variable is, never make's $(...) text (the image tag: container/Dockerfile's)."""
    tag = re.search(r"^ARG PYG_TAG=(\S+)$", (ROOT / "container" / "Dockerfile").read_text(), re.M).group(1)
    p = subprocess.run(["make", "--no-print-directory", "help", "NODES=3"], cwd=ROOT, capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"]}, timeout=60)
    assert p.returncode == 0, p.stderr
    values = dict(re.findall(r"^  ([A-Z_]+)=(\S*)", p.stdout, re.M))
    assert values["PYG_TAG"] == tag and values["IMAGE"] == f"images/pyg-train-{tag}.sqsh"
    assert values["NODES"] == "3" and values["VENV"] == ".venv" and values["CONFIG"] == "synthetic"
    assert not [v for v in values.values() if "$" in v], values
    assert set(values) == make_variables()


def test_setup_prints_the_commands_it_runs_with_their_values(tmp_path):
    """make setup (the venv's rule; the first make run's) says it installs, then prints each command as it runs it,
    with its values: no $PYTHON, no comment."""
    python = tmp_path / "py"  # a stand-in interpreter: its `-m venv -- DIR` makes DIR/bin/pip, which succeeds
    python.write_text('#!/bin/sh\nmkdir -p "$4/bin" && printf "#!/bin/sh\\nexit 0\\n" >"$4/bin/pip" && '
                      'chmod +x "$4/bin/pip"\n')
    python.chmod(0o755)
    venv = tmp_path / "venv"
    p = subprocess.run(["make", "--no-print-directory", "setup", f"PYTHON={python}", f"VENV={venv}"], cwd=ROOT,
                       capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"installing the pinned dependencies into {venv} with pip (torch and PyG: a few minutes, once):",
        f"{python} -m venv -- {venv}",
        f"{venv}/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.lock  (pinned; CPU torch)"]
    assert (venv / ".stamp").exists()


# ---- where no SLURM controller answers: one short line, no raw sinfo or sbatch errors ----------------

SINFO_ERRORS = ("sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
                "sinfo: error: fetch_config: DNS SRV lookup failed\n"
                "sinfo: error: _establish_config_source: failed to fetch config\n"
                "sinfo: fatal: Could not establish a configuration source\n")


def test_no_controller_is_said_once_in_a_dry_run_and_stops_a_real_submit(sbatch_standin):
    env, record = sbatch_standin
    bindir = Path(env["STANDIN_DIR"])
    standin_bin.install(bindir, "sinfo", "failing")  # what sinfo prints on a machine with no slurm.conf
    (bindir / "sinfo.err").write_text(SINFO_ERRORS)
    said = ("no SLURM controller is reachable from this machine (sinfo: error: resolve_ctls_from_dns_srv: "
            "res_nsearch error: Unknown host)")
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "DRY_RUN=1")
    assert p.returncode == 0, p.stderr
    output = p.stdout + p.stderr
    assert output.count("no SLURM controller") == 1 and said in p.stderr, output
    assert "fetch_config" not in output and "sinfo failed" not in output
    node_row = next(line for line in p.stdout.splitlines() if "a node has" in line)
    assert len(node_row) < 160 and "sinfo could not answer" in node_row, node_row
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("no SLURM controller") == 1 and said in p.stderr and "fetch_config" not in p.stderr
    assert "nothing was submitted" in p.stderr and "memory plan" not in p.stdout
    assert not record.exists()


def make_tree_copy(tmp_path: Path) -> Path:
    """The project's files (as git lists them, committed or not) in tmp_path/project, with this .venv."""
    copy = tmp_path / "project"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


@pytest.mark.parametrize("knob, default", [("DOCTOR_TIMEOUT", "77"), ("GPUS_PER_TASK", "0")])
def test_a_knob_default_changed_in_one_place_is_what_help_submit_and_the_job_use(sbatch_standin, tmp_path, knob,
                                                                                 default):
    env, record = sbatch_standin
    copy = make_tree_copy(tmp_path)
    table = copy / "jobs" / "knobs.md"
    text, count = re.subn(rf"^(\| *{knob} *\| *)\S+", rf"\g<1>{default}", table.read_text(), flags=re.M)
    assert count == 1 and knobs(text)[knob].default == default
    table.write_text(text)
    run_make = functools.partial(subprocess.run, cwd=copy, env=env, capture_output=True, text=True, timeout=120)
    # make help
    p = run_make(["make", "--no-print-directory", "help"])
    assert re.search(rf"^  {knob}={default} +\S", p.stdout, re.M), p.stdout
    # make submit DRY_RUN=1
    p = run_make(["make", "--no-print-directory", "submit", "IMAGE=none", "CONFIG=tiny", "DRY_RUN=1"])
    assert p.returncode == 0, p.stderr
    assert job_env(p.stdout)[knob] == default
    if knob == "GPUS_PER_TASK":
        assert not [w for w in sbatch_words(p.stdout) if w.startswith("--gpu")]
    assert not record.exists()
    # the job, given none of the knobs (sbatch by hand): the doctor step's bound, the steps' GPU options
    p, calls = run_job_script(tmp_path, {"IMAGE": "none", "CONFIG": "tiny", "DOCTOR": "1"}, root=copy)
    assert p.returncode == 0, p.stderr
    doctor, train = calls
    assert doctor[-5:] == ["doctor", "--config", "tiny", "--timeout", "77" if knob == "DOCTOR_TIMEOUT" else "120"]
    gpu_options = [w for w in doctor + train if w.startswith("--gpus-per-task")]
    assert (gpu_options == []) == (knob == "GPUS_PER_TASK"), gpu_options
    assert train[0:1]
    assert train[-6:] == [str(copy / ".venv" / "bin" / "python"), "-m", "train", "fit", "--config", "tiny"]


# ---- the launch line of every step in the image: jobs/lib/pyxis.sh -------------------------------

def launch(*args: str, project: Path = ROOT) -> list[str]:
    script = 'source "$1"; source "$2"; shift 2; launch_line "$@"; printf "%s\\n" "${LAUNCH[@]}"'
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", script, "launch", str(ROOT / "lib" / "cmd.sh"),
                        str(ROOT / "jobs" / "lib" / "pyxis.sh"), args[0], str(project), *args[1:]],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def test_launch_line_sqsh_image():
    assert launch("/img/pyg.sqsh", "/data") == [
        "--container-image=/img/pyg.sqsh", f"--container-mounts={ROOT}:/workspace,/data:/data",
        "--container-workdir=/workspace", "--no-container-mount-home", "python"]


def test_launch_line_registry_image_named_container_extra_mounts_and_env():
    assert launch("nvcr.io#nvidia/pyg:25.05-py3", "/d", "/scratch:/scratch,/x:/y", "pyg-train-7", "DATA_DIR,OMP") == [
        "--container-image=nvcr.io#nvidia/pyg:25.05-py3",
        f"--container-mounts={ROOT}:/workspace,/d:/data,/scratch:/scratch,/x:/y",
        "--container-workdir=/workspace", "--no-container-mount-home", "--container-name=pyg-train-7",
        "--container-env=DATA_DIR,OMP", "python"]


def test_launch_line_bare_mode_is_the_host_interpreter(tmp_path):
    assert launch("none", "/d", "", "", "", "/opt/py/bin/python3") == ["/opt/py/bin/python3"]
    assert launch("none", "/d") == [str(ROOT / ".venv" / "bin" / "python")]
    assert launch("none", "/d", project=tmp_path) == ["python3"]  # no .venv in that project


# ---- what an IMAGE value names: one home, lib/image.sh ----------------------------------------------------

@pytest.mark.parametrize("image, kind", [
    ("none", "none"), ("/abs/pyg.sqsh", "file"), ("./pyg", "file"), ("images/pyg-train-25.05-py3.sqsh", "file"),
    ("nvcr.io#nvidia/pyg:25.05-py3", "registry"), ("registry.example.com/team/pyg:1", "registry")])
def test_the_image_kind_is_decided_in_one_function(image, kind):
    p = subprocess.run(["bash", "-c", 'source "$1"; image_kind "$2"', "kind", str(ROOT / "lib" / "image.sh"), image],
                       capture_output=True, text=True, check=True)
    assert p.stdout == f"{kind}\n"
    scripts = [*(ROOT / "jobs").rglob("*.sh"), ROOT / "jobs" / "train.sbatch", *(ROOT / "lib").glob("*.sh"),
               *(ROOT / "container").glob("*.sh")]
    homes = [s for s in scripts if re.search(r"^image_kind\(\)", s.read_text(), re.M)]
    assert homes == [ROOT / "lib" / "image.sh"]
    for script in scripts:  # no script tells the kinds apart by the value itself
        assert not re.search(r"\$\{?(IMAGE|image|1)\}? [!=]= none", script.read_text()), script


def test_the_cluster_is_asked_once_and_each_limit_checked_on_that_answer(sbatch_standin):
    env, record = sbatch_standin
    bindir = Path(env["STANDIN_DIR"])
    standin_bin.install(bindir, "sinfo", "fixed-output")  # records each call's arguments
    (bindir / "sinfo.out").write_text("big*|n1|4|gpu:2|8000|1:00:00\nbig*|n2|4|gpu:2|8000|1:00:00\n")
    p = make(env, "submit", "IMAGE=none", "CONFIG=tiny", "NODES=3", "GPUS=3", "MEM=9G", "TIME=2:00:00", "DRY_RUN=1")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "NODES=3: partition 'big' has only 2 node(s)" in p.stderr
    assert "MEM='9G' is more than the nodes of partition 'big' have (at most 8000 MB each)" in p.stderr
    assert "TIME='2:00:00' is above the time limit of partition 'big' (1:00:00)" in p.stderr
    calls = (bindir / "sinfo.argv").read_text().splitlines()
    # one call for every limit; the dry run's memory plan, printed though the request is refused, asks for the
    # partition's node memory and its GPU type alone (issue 42: the GPU's memory from the GRES type)
    assert calls[0] == "-h -N -o %P|%N|%c|%G|%m|%l", calls
    assert sorted(calls[1:]) == ["--noheader --format=%G --partition=big", "--noheader --format=%m --partition=big"]
    assert not record.exists()
