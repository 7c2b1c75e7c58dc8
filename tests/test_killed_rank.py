"""A rank that a signal ends says how (train/loop/killed_rank.py): the words from the signal, the rank, its node
and the memory plan's figures; the survivor's naming of a silent rank's node; and `make run`'s launcher
(login/launch.py) with one of two real ranks killed by SIGKILL in the middle of an epoch.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from bench.localranks import scrubbed_env
from tests.harness import standin_bin
from tests.harness.jobscript import run_job_script
from train.cluster.memory_limit import physical_memory_bytes as node_memory_bytes
from train.config import load_config
from train.loop import checkpoint as ck
from train.loop.failure_report import _failure_cause, _whereabouts, announce
from train.loop.killed_rank import (
    GIB,
    NODE_MEMORY_REMEDIES,
    MemoryFigures,
    figures_text,
    first_killed_task,
    killed_rank_message,
    parse_figures,
    sacct_max_rss,
    signal_of_words,
    silent_rank_cause,
)
from train.plan.memory_figures import plan_figures
from train.plan.terms import make_plan

ROOT = Path(__file__).resolve().parents[1]
KNOWN = MemoryFigures(rank_peak=int(1.5 * GIB), node_memory=4 * GIB, shared_graph=GIB // 2)


# ---- the words ---------------------------------------------------------------------------------------
def test_sigkill_names_the_out_of_memory_killer_with_the_plans_figures():
    said = killed_rank_message(signal.SIGKILL, 3, "n2", KNOWN, pid=4242)
    assert said.startswith("rank 3 on n2 (pid 4242) was ended by SIGKILL: often the kernel's out-of-memory killer: "
                           "the plan said this rank peaks at 1.5 GiB and the node has 4.0 GiB; if it was, "), said
    assert NODE_MEMORY_REMEDIES in said and said.endswith(".")
    with_rss = killed_rank_message(signal.SIGKILL, 3, "n2", dataclasses.replace(KNOWN, max_rss="3900M"))
    assert "the node has 4.0 GiB; sacct says the step's MaxRSS was 3900M; if it was" in with_rss


def test_unknown_figures_are_said_to_be_unknown_not_invented():
    said = killed_rank_message(signal.SIGKILL, 0, "n1", MemoryFigures())
    assert "the plan's figures are not known here (`python -m train plan` prints them) and the node's memory is not " \
           "known" in said


def test_sigbus_points_at_a_full_dev_shm_only_where_the_graph_is_shared_there():
    shared = killed_rank_message(signal.SIGBUS, 1, "n1", KNOWN)
    assert "was ended by SIGBUS: a memory-mapped file could not be backed, most often a full /dev/shm under the " \
           "node-shared graph (512.0 MiB, data.share=node): see `df -h /dev/shm` on that node, or use " \
           "data.share=process." in shared
    private = killed_rank_message(signal.SIGBUS, 1, "n1", dataclasses.replace(KNOWN, shared_graph=0))
    assert "/dev/shm" not in private and "removed, truncated, or its file system gone" in private


@pytest.mark.parametrize(("signum", "said"), [
    (signal.SIGSEGV, "SIGSEGV: a crash in native code"),
    (signal.SIGABRT, "SIGABRT: a fatal error in native code"),
    (signal.SIGHUP, "SIGHUP: Hangup."),
    (99, "signal 99: an unexpected signal."),
])
def test_other_signals_are_named_with_what_they_usually_mean(signum, said):
    assert said in killed_rank_message(signum, 1, "n1", KNOWN)


def test_a_survivor_lists_the_likely_causes_with_the_figures_of_its_node():
    said = silent_rank_cause(KNOWN)
    assert said.startswith("killed (often by the kernel's out-of-memory killer: the plan said a rank peaks at 1.5 GiB "
                           "and this node has 4.0 GiB), crashed (SIGSEGV, or SIGBUS from a full /dev/shm), or its node "
                           "was lost"), said


# ---- the figures, from the memory plan ----------------------------------------------------------------
def test_the_figures_are_the_plans_rank_peak_and_this_machines_memory():
    config = load_config("tiny", [])
    figures = plan_figures(config, 1, 2, gpus=False)
    from train.graph.datasets.loading import dataset_kind

    planned = make_plan(config, dataset_kind(config.data).plan_size(config.data), 1, 2, gpus=False)
    assert figures.rank_peak == planned.rank_peak > 0
    assert figures.node_memory == node_memory_bytes() > 0
    assert figures.shared_graph > 0  # two ranks on the node share one copy (data.share=node, tiny's default)
    alone = plan_figures(load_config("tiny", ["data.share=process"]), 1, 2, gpus=False)
    assert alone.shared_graph == 0


def test_a_plan_that_cannot_be_made_leaves_the_figures_unknown():
    config = load_config("tiny", [])
    broken = dataclasses.replace(config, data=dataclasses.replace(config.data, name="no-such-dataset"))
    assert plan_figures(broken, 1, 2, gpus=False) == MemoryFigures(node_memory=node_memory_bytes())


# ---- the survivor names where the silent rank ran --------------------------------------------------
def test_each_rank_announces_its_node_and_pid_and_a_survivor_reads_them():
    store = dist.HashStore()
    announce(store, 1)
    assert _whereabouts(store, [1, 2]) == {1: f"{socket.gethostname()}, pid {os.getpid()}"}


def test_the_silent_ranks_get_the_words_about_them_and_rank_0_gone_too():
    about = lambda silent: f"; about {silent}"  # noqa: E731
    assert _failure_cause({}, [1, 2], False, 0, about) == "ranks 1, 2 stopped answering without reporting an " \
                                                          "error; about [1, 2]"
    assert _failure_cause({}, [0], True, 1, about).endswith("no longer answers (it failed, or); about [0]")
    origin = {2: {"kind": "error", "error": "RuntimeError: x"}}
    assert _failure_cause(origin, [1, 2], False, 0, about) == "rank 2 failed: RuntimeError: x"


# ---- make run's launcher, with a rank killed for real ------------------------------------------------
CONFIG = ["fit", "--config", "tiny", "data.num_nodes=2002", "sampler.batch_size=100", "trainer.epochs=3",
          "trainer.log_every=1", "trainer.step_delay_seconds=0.5"]


def child_with_rank(parent: int, rank: int, timeout: float = 60) -> int:
    """The pid of the child of `parent` whose environment has RANK=`rank` (torchrun's worker)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == parent and f"RANK={rank}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    return int(entry.name)
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.2)
    raise AssertionError(f"no child of {parent} with RANK={rank}")


def wait_for_line(log: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{text!r} never came:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def test_make_runs_launcher_names_a_rank_killed_mid_epoch_and_the_last_checkpoint_stays(tmp_path):
    timeout = 60  # dist.collective_timeout_seconds: the run must end well within it
    run_dir, log = tmp_path / "run", tmp_path / "launch.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "login.launch", "--nproc", "2", *CONFIG, f"output.dir={run_dir}",
             f"dist.collective_timeout_seconds={timeout}"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=scrubbed_env(os.environ, threads=1))
    try:
        wait_for_line(log, "epoch 1 step 2/7", proc)
        victim = child_with_rank(proc.pid, 1)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        status = proc.wait(timeout=timeout)
        ended = time.monotonic() - killed_at
    finally:
        proc.kill()
    text = log.read_text()
    assert status == 128 + signal.SIGKILL, text
    assert ended < timeout, ended
    host = socket.gethostname()
    assert (f"error: rank 1 on {host} (pid {victim}) was ended by SIGKILL: often the kernel's out-of-memory killer: "
            "the plan said this rank peaks at ") in text, text
    assert (f"rank 0: stopping because rank 1 stopped answering without reporting an error; rank 1 ran on {host}, "
            f"pid {victim}: killed (often by the kernel's out-of-memory killer: the plan said a rank peaks at ") in text
    for noise in ("ChildFailedError", "torch/distributed/run.py"):
        assert noise not in text, text
    path, _state = ck.find_latest_valid(run_dir / ck.CHECKPOINT_DIR, on_invalid=pytest.fail)
    assert path.name == ck.checkpoint_name(1, 0)  # the end of epoch 0: intact, and the one a rerun resumes


# ---- in a job: srun's first task line, the plan's figures make submit gave, sacct's MaxRSS ---------------
@pytest.mark.parametrize(("words", "signum"), [("Killed", signal.SIGKILL), ("Segmentation fault (core dumped)",
                                                                          signal.SIGSEGV), ("Bus error", signal.SIGBUS),
                                               ("Exited with exit code 1", None)])
def test_srun_words_name_their_signal(words, signum):
    assert signal_of_words(words) == signum


def test_only_sruns_first_task_line_counts():
    """--kill-on-bad-exit kills the other tasks after the first one ended: their lines say Killed too."""
    assert first_killed_task(["0: epoch 1 step 2/4", "srun: error: n2: task 3: Killed",
                              "srun: error: n1: tasks 0-1: Killed"]) == ("n2", 3, signal.SIGKILL)
    assert first_killed_task(["srun: error: n2: tasks 2,5: Bus error"]) == ("n2", 2, signal.SIGBUS)
    assert first_killed_task(["srun: error: n2: task 3: Exited with exit code 1",
                              "srun: error: n1: tasks 0-1: Killed"]) is None  # a rank that failed by itself
    assert first_killed_task(["1: srun: error: n2: task 3: Killed (a rank's own output)"]) is None


def test_the_figures_travel_as_text_and_come_back():
    assert parse_figures(figures_text(KNOWN)) == KNOWN
    assert figures_text(MemoryFigures()) == "rank_peak=- node_memory=- shared_graph=0"
    assert parse_figures("rank_peak=- node_memory=12 other=3 junk") == MemoryFigures(node_memory=12)


def test_sacct_gives_the_training_steps_max_rss():
    text = "77|||\n77.batch|5000K|n1\n77.extern|0|n1\n77.0|812M|n1\n77.1|3900M|n2\n"
    assert sacct_max_rss(text) == "3900M (on n2)"
    assert sacct_max_rss("77|||\n77.batch|5000K|n1\n") == ""  # no step: nothing to say
    assert sacct_max_rss("") == ""


def test_the_plan_writes_its_figures_for_the_job(tmp_path):
    out = tmp_path / "figures"
    p = subprocess.run([sys.executable, "-m", "train", "plan", "--config", "tiny", "--nodes", "1", "--gpus", "2",
                        "--cpu", "--node-memory", "8", "--figures-file", str(out)], cwd=ROOT, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    config = load_config("tiny", [])
    assert parse_figures(out.read_text()) == dataclasses.replace(plan_figures(config, 1, 2, gpus=False),
                                                                 node_memory=8 * GIB)


def test_the_job_script_names_a_task_a_signal_ended(tmp_path):
    """jobs/train.sbatch with a stand-in srun that ends as a task killed by SIGBUS would leave it, and a stand-in
    sacct: the job's log names the task, its node, the signal, the shared graph's size and the MaxRSS."""
    bindir = tmp_path / "bin"
    standin_bin.install(bindir, "sacct", "fixed-output")
    (bindir / "sacct.out").write_text("123456|||\n123456.batch|5000K|gpu07\n123456.0|3900M|gpu08\n")
    p, _calls = run_job_script(tmp_path, {
        "IMAGE": "none", "GPUS_PER_TASK": "0", "CONFIG": "tiny", "PYG_MEMORY_PLAN": figures_text(KNOWN),
        "STANDIN_DIR": str(bindir), "STANDIN_SRUN_STDERR": "srun: error: gpu08: task 5: Bus error"}, srun_rc=135)
    assert p.returncode == 135, p.stdout + p.stderr
    assert "srun: error: gpu08: task 5: Bus error" in p.stderr  # srun's own line still reaches the log
    assert ("training step exited with status 135\nrank 5 on gpu08 was ended by SIGBUS: a memory-mapped file could "
            "not be backed, most often a full /dev/shm under the node-shared graph (512.0 MiB, data.share=node)") \
        in p.stdout, p.stdout
    (bindir / "sacct.out").write_text("123456.0|3900M|gpu08\n")
    p, _calls = run_job_script(tmp_path, {
        "IMAGE": "none", "GPUS_PER_TASK": "0", "CONFIG": "tiny", "PYG_MEMORY_PLAN": figures_text(KNOWN),
        "STANDIN_DIR": str(bindir), "STANDIN_SRUN_STDERR": "srun: error: gpu08: task 5: Killed"}, srun_rc=137)
    assert "sacct says the step's MaxRSS was 3900M (on gpu08)" in p.stdout, p.stdout
    assert (bindir / "sacct.argv").read_text().splitlines()[-1] == "-n -P -j 123456 -o JobID,MaxRSS,MaxRSSNode"


def test_the_words_run_on_a_python_without_site_packages(tmp_path):
    """The job script runs them with the node's own Python, outside the image: the standard library only."""
    errors = tmp_path / "srun-errors"
    errors.write_text("srun: error: n2: task 3: Killed\n")
    p = subprocess.run([sys.executable, "-S", "-m", "train.cli.killed", "--srun-errors", str(errors),
                        "--figures", figures_text(KNOWN)], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("rank 3 on n2 was ended by SIGKILL: often the kernel's out-of-memory killer: the plan "
                               "said this rank peaks at 1.5 GiB and the node has 4.0 GiB;"), p.stdout
