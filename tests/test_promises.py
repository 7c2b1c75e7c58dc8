"""`make submit DRY_RUN=1` shows the job's own promises (jobs/lib/promises.sh): the warning signal and its lead
time, the time limit, and what follows each (checkpoint, requeue, the trainer.max_restarts left), each read from
its one home: jobs/train.sbatch's #SBATCH lines (SBATCH_ARGS after them), TIME, and the resolved config.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import standin_bin
from tests.harness.jobscript import KNOBS
from train.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "jobs" / "train.sbatch"
PROMISES = "# The job's promises (jobs/train.sbatch's sbatch options, SBATCH_ARGS, TIME, trainer.max_restarts):"


def script_option(name: str) -> str:
    """The value of `#SBATCH --NAME=VALUE` in the job script, as a reader of the file sees it."""
    return re.search(rf"^#SBATCH --{name}=(\S+)", SCRIPT.read_text(), re.M).group(1)


def promises(script: Path, sbatch_args: str = "", time: str = "", max_restarts: str = "3") -> list[str]:
    """job_promises's lines (with lib/checks.sh's time_seconds)."""
    call = 'source "$1"; source "$2"; job_promises "$3" "$4" "$5" "$6"'
    p = subprocess.run(["bash", "-c", call, "promises", str(ROOT / "lib" / "checks.sh"),
                        str(ROOT / "jobs" / "lib" / "promises.sh"), str(script), sbatch_args, time, max_restarts],
                       capture_output=True, text=True, check=True)
    assert p.stdout.startswith(PROMISES + "\n"), p.stdout
    return p.stdout.splitlines()[1:]


def job_script(tmp_path: Path, *directives: str) -> Path:
    """A job script with these #SBATCH lines, then a command, then a directive sbatch no longer reads."""
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {d}\n" for d in directives) +
                    "# a comment\nset -eu\n#SBATCH --signal=B:HUP@999\n")
    return path


# ---- the lines, from each fact ---------------------------------------------------------------------------
def test_the_warning_and_time_limit_come_from_the_job_script_time_and_max_restarts():
    spec = script_option("signal")  # B:USR1@120 today; the lines follow the script, not a copy of it
    sig, lead = re.fullmatch(r"B:(\w+)@(\d+)", spec).groups()
    warning, limit, at_limit = promises(SCRIPT, time="1:00:00", max_restarts="5")
    assert warning == (f"#   the warning: SIG{sig} {lead} s before the time limit, after {3600 - int(lead)} s of 3600 "
                       f"(--signal={spec}): the ranks stop after the step they are in, rank 0 writes a checkpoint, "
                       "and the job requeues itself and resumes from it, up to trainer.max_restarts=5 times (5 left: "
                       "a new job has not restarted yet); after that it ends there and says how to resubmit")
    assert limit == "#   the time limit: TIME=1:00:00 (3600 s)"
    assert at_limit.startswith("#   at the time limit: SLURM sends SIGTERM, then SIGKILL after its KillWait; a run "
                               "still going checkpoints on SIGTERM where it can and is not requeued")


def test_sbatch_args_override_the_scripts_signal_as_sbatch_reads_them(tmp_path):
    script = job_script(tmp_path, "--requeue", "--signal=B:USR1@120")
    assert promises(script, "--exclusive --signal B:USR2@300")[0].startswith(
        "#   the warning: SIGUSR2 300 s before the time limit (--signal=B:USR2@300):")
    assert promises(script, "--signal=B:10")[0].startswith(  # a number, and sbatch's default lead of 60 s
        "#   the warning: SIGUSR1 60 s before the time limit (--signal=B:10):")


def test_a_signal_without_b_is_sent_to_the_steps_and_the_dry_run_says_so(tmp_path):
    lines = promises(job_script(tmp_path, "--requeue", "--signal=USR1@90"))
    assert lines[1] == ("#   note: --signal=USR1@90 has no B: prefix, so SLURM sends SIGUSR1 to the step's processes, "
                        "not to the batch script that turns it into a stop request (docs/preemption.md)")


@pytest.mark.parametrize(("directives", "sbatch_args", "max_restarts", "after"), [
    (["--requeue"], "", "0", "and the job ends there (trainer.max_restarts=0: no requeue): resubmit with "
                             "output.dir=runs/JOBID to resume"),
    (["--requeue"], "--no-requeue", "3", "and the job ends there (--no-requeue): resubmit with output.dir=runs/JOBID"),
    (["--no-requeue"], "--requeue", "2", "up to trainer.max_restarts=2 times (2 left"),
    (["--requeue"], "", "", "up to trainer.max_restarts times (not read here: this Python cannot load the config)"),
])
def test_what_follows_the_warnings_checkpoint(tmp_path, directives, sbatch_args, max_restarts, after):
    script = job_script(tmp_path, *directives, "--signal=B:USR1@120")
    assert after in promises(script, sbatch_args, max_restarts=max_restarts)[0]


def test_no_signal_a_short_time_limit_and_none_are_said(tmp_path):
    """The #SBATCH line after the first command is not read (sbatch stops there too)."""
    assert promises(job_script(tmp_path, "--requeue"))[:2] == [
        "#   no warning before the time limit (no --signal): only the scheduled checkpoints "
        "(trainer.checkpoint_every) are there to resume from",
        "#   the time limit: the partition's default (TIME is empty)"]
    short = promises(job_script(tmp_path, "--signal=B:USR1@120"), time="2")
    assert "#   note: TIME=2 (120 s) is not longer than the warning's lead of 120 s: the warning comes as the job " \
           "starts" in short
    assert "#   the time limit: none (TIME=UNLIMITED)" in promises(SCRIPT, time="UNLIMITED")


# ---- trainer.max_restarts, as the package resolves it -----------------------------------------------------
def config_value(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "login.config_check", *args], cwd=ROOT, capture_output=True,
                          text=True)


def test_config_check_prints_a_resolved_value_and_refuses_a_key_the_config_lacks():
    p = config_value("--value", "trainer.max_restarts", "tiny")
    assert (p.returncode, p.stdout) == (0, f"{load_config('tiny', []).trainer.max_restarts}\n")
    assert config_value("--value", "trainer.max_restarts", "tiny", "trainer.max_restarts=7").stdout == "7\n"
    p = config_value("--value", "trainer.max_restart", "tiny")
    assert p.returncode == 2 and "--value 'trainer.max_restart': the config has no such key" in p.stderr


# ---- the dry run -------------------------------------------------------------------------------------------
def test_the_dry_run_prints_the_promises_with_the_runs_own_max_restarts(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    standin_bin.install(bindir, "sbatch")
    standin_bin.install(bindir, "sinfo", "fixed-output")  # answers nothing: not this machine's SLURM, if it has one
    (bindir / "sinfo.out").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in (*KNOBS, "OMP_NUM_THREADS") and not k.startswith("SLURM_")}
    env.update(PATH=f"{bindir}:{env['PATH']}", STANDIN_RECORD=str(tmp_path / "calls"), STANDIN_DIR=str(bindir))
    p = subprocess.run(["make", "--no-print-directory", "submit", "IMAGE=none", "GPUS_PER_TASK=0", "CONFIG=tiny",
                        "TIME=30", "ARGS=trainer.max_restarts=2", "SBATCH_ARGS=--signal=B:USR1@300", "DRY_RUN=1"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.split(PROMISES + "\n", 1)[1].splitlines()
    assert lines[0].startswith("#   the warning: SIGUSR1 300 s before the time limit, after 1500 s of 1800 "
                               "(--signal=B:USR1@300)"), lines
    assert "up to trainer.max_restarts=2 times (2 left" in lines[0]
    assert lines[1] == "#   the time limit: TIME=30 (1800 s)"
    assert not (tmp_path / "calls").exists(), "DRY_RUN called sbatch"
