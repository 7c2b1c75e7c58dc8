"""Exact resume, stop signals and failing ranks, with real local processes (gloo over TCP).

Each rank is a real `python -m train fit` started with the variables srun sets; signals are
real signals sent to one process. Runs are tiny (seconds) but the epochs are uneven: rank 0
has 7 batches, rank 1 has 6, so DDP's Join is part of every epoch.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from bench.localranks import LocalRanks, srun_env, torchrun_env
from tests.harness.localjob import WORKERS, free_port
from train.errors import EXIT_FAILED, EXIT_REQUEUE, EXIT_STOPPED
from train.loop import checkpoint as ck
from train.loop.failure_report import is_peer_failure
from train.loop.stop_signals import stop_outcome

# 2002 nodes -> 1201 training nodes -> shards of 601 and 600 -> 7 and 6 batches of 100
CONFIG = ["fit", "--config", "tiny", "data.num_nodes=2002", "sampler.batch_size=100", "trainer.epochs=3",
          "trainer.log_every=1"]
SLOW = ["trainer.step_delay_seconds=0.5"]  # long enough to interrupt in the middle of an epoch


class Job(LocalRanks):
    """N ranks of one local job with srun's variables (bench/localranks.py); each rank's output goes to
    `logs/rank-R.log`."""

    def __init__(self, args: list[str], world_size: int, logs: Path, job_id: str = "4242",
                 extra_env: dict[str, str] | None = None):
        port = free_port()
        super().__init__([sys.executable, "-m", "train", *args], world_size,
                         lambda rank: srun_env(rank, world_size, 1, job_id, port), logs, extra_env or {}, threads=1)

    def wait_for(self, pattern: str, rank: int = 0, timeout: float = 120) -> None:
        try:
            super().wait_for(pattern, rank, timeout)
        except RuntimeError as exc:
            self.kill()
            pytest.fail(str(exc))

    def wait(self, timeout: float = 180) -> list[int | None]:
        return super().wait(timeout)

    def outputs(self) -> str:
        return "\n".join(f"--- rank {r}\n{out}" for r, out in enumerate(super().outputs()))


def run(args: list[str], world_size: int, logs: Path, **kwargs) -> Job:
    job = Job(args, world_size, logs, **kwargs)
    codes = job.wait()
    job.codes = codes
    return job


def metrics(run_dir: Path) -> dict:
    """summary.json without the timings (wall-clock time is not part of the result)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return {k: v for k, v in summary.items() if not k.endswith("_seconds")}


def assert_same_weights(a: Path, b: Path) -> None:
    left, right = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert left.keys() == right.keys()
    for name in left:
        assert torch.equal(left[name], right[name]), f"tensor {name} differs"


def history(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.endswith("_seconds") and k != "seeds_per_second"} for r in rows]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """An uninterrupted 2-rank run of CONFIG."""
    out = tmp_path_factory.mktemp("baseline")
    job = run([*CONFIG, f"output.dir={out}"], 2, out / "logs")
    assert job.codes == [0, 0], job.outputs()
    return out


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> tuple[Path, Job, dict, Path]:
    """CONFIG stopped by SIGUSR1 to rank 1 in the middle of epoch 1 (with time-based checkpoints).

    Also returns a copy of the stop checkpoint (the run directory goes on when it is resumed).
    """
    out = tmp_path_factory.mktemp("interrupted")
    job = Job([*CONFIG, *SLOW, f"output.dir={out}", "trainer.checkpoint_every_minutes=0.005",
               "trainer.keep_checkpoints=2"], 2, out / "logs-1")
    job.wait_for(r"^epoch 1 step 3/7")
    job.signal(1, signal.SIGUSR1)
    job.codes = job.wait()
    newest = ck.list_checkpoints(out / ck.CHECKPOINT_DIR)[0]
    kept = Path(shutil.copy(newest, tmp_path_factory.mktemp("stop-checkpoint")))
    return out, job, ck.load_checkpoint(newest), kept


def test_sigusr1_to_one_rank_stops_all_at_the_same_step(interrupted):
    out, job, stop, _ = interrupted
    assert job.codes == [EXIT_REQUEUE, 0], job.outputs()  # rank 0 leaves last, with the status
    assert "rank 1: received SIGUSR1" in job.output(1)
    steps = [r["step"] for r in stop["ranks"]]
    assert stop["epoch"] == 1 and steps[0] == steps[1] and 3 <= steps[0] < 6, steps
    assert stop["reason"] == "stop signal SIGUSR1" and stop["world_size"] == 2
    assert re.search(rf"stopped in epoch 1 after step {steps[0]}: SIGUSR1.*exit status 3: the batch script "
                     r"requeues the job \(restart 1 of at most trainer.max_restarts=3\)", job.output(0))
    assert len(ck.list_checkpoints(out / ck.CHECKPOINT_DIR)) == 2  # trainer.keep_checkpoints
    # checkpoint_every_minutes saved at step boundaries too
    assert re.search(r"^saved checkpoint in epoch [01] after step \d+ \(time interval, "
                     r"trainer.checkpoint_every_minutes\): \S+ckpt-e00000[01]-s\d+\.pt$", job.output(0), re.M)
    assert not (out / "summary.json").exists()


def test_resumed_run_equals_uninterrupted_run(baseline, interrupted, tmp_path):
    out, _, stop, _ = interrupted
    job = run([*CONFIG, f"output.dir={out}"], 2, tmp_path / "logs")
    assert job.codes == [0, 0], job.outputs()
    assert re.search(rf"resuming from \S+{ck.checkpoint_name(1, stop['position_step'])} \(epoch 1 step "
                     rf"{stop['position_step']}, stop signal SIGUSR1", job.output(0))
    assert_same_weights(baseline, out)
    assert metrics(out) == metrics(baseline)
    assert history(out) == history(baseline)  # metrics.jsonl: one row per epoch, none twice


def test_truncated_newest_checkpoint_falls_back_to_the_previous(baseline, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(baseline, run_dir, ignore=shutil.ignore_patterns("logs", "model.pt", "summary.json"))
    newest = ck.list_checkpoints(run_dir / ck.CHECKPOINT_DIR)[0]
    assert newest.name == ck.checkpoint_name(3, 0)
    newest.write_bytes(newest.read_bytes()[:4096])
    job = run([*CONFIG, f"output.dir={run_dir}"], 2, tmp_path / "logs")
    assert job.codes == [0, 0], job.outputs()
    assert f"warning: checkpoint {newest} is not usable (truncated" in job.output(0)
    assert re.search(rf"resuming from \S+{ck.checkpoint_name(2, 0)}", job.output(0))
    assert_same_weights(baseline, run_dir)  # epoch 2 trained again, to the same weights
    assert metrics(run_dir) == metrics(baseline)


def test_incompatible_checkpoint_is_refused_naming_the_fields(baseline, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(baseline, run_dir, ignore=shutil.ignore_patterns("logs"))
    job = run([*CONFIG, f"output.dir={run_dir}", "model.hidden=64", "data.num_features=8"], 1, tmp_path / "logs")
    out = job.output(0)
    assert job.codes == [2], out
    assert "model.hidden: 32 in the checkpoint, 64 now" in out
    assert "data.num_features: 16 in the checkpoint, 8 now" in out
    assert "Traceback" not in out


def test_other_world_size_resumes_only_at_an_epoch_boundary(baseline, interrupted, tmp_path):
    mid_epoch = interrupted[3]
    job = run([*CONFIG, f"output.dir={tmp_path / 'a'}", f"trainer.resume={mid_epoch}"], 1, tmp_path / "logs-a")
    assert job.codes == [2] and "saved by 2 ranks in the middle of epoch 1; this run has 1" in job.output(0)
    boundary = baseline / ck.CHECKPOINT_DIR / ck.checkpoint_name(2, 0)
    job = run([*CONFIG, f"output.dir={tmp_path / 'b'}", f"trainer.resume={boundary}"], 1, tmp_path / "logs-b")
    assert job.codes == [0], job.output(0)
    assert "resharding: checkpoint saved by 2 ranks at the start of epoch 2, continuing on 1" in job.output(0)
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["epochs"] == 3


# ---- failing ranks ---------------------------------------------------------------------------
def test_exception_on_rank_1_ends_rank_0_with_a_message_naming_it(tmp_path):
    job = run([*CONFIG, f"output.dir={tmp_path}", "trainer.fail_at_step=8", "trainer.fail_rank=1"], 2,
              tmp_path / "logs")
    assert job.codes == [EXIT_FAILED, EXIT_FAILED], job.outputs()
    assert "RuntimeError: injected failure on rank 1 at step 8" in job.output(1)  # its own traceback
    assert "rank 0: stopping because rank 1 failed: RuntimeError: injected failure on rank 1 at step 8" in job.output(0)
    assert "Traceback" not in job.output(0)
    assert ck.find_latest_valid(tmp_path / ck.CHECKPOINT_DIR)[1]["epoch"] == 1


def test_kill_9_of_rank_0_ends_the_other_and_a_rerun_completes(baseline, tmp_path):
    run_dir = tmp_path / "run"
    job = Job([*CONFIG, *SLOW, f"output.dir={run_dir}"], 2, tmp_path / "logs-1")
    job.wait_for(r"^epoch 1 step 2/7")
    killed_at = job.signal(0, signal.SIGKILL)
    codes = job.wait()
    assert codes == [-signal.SIGKILL, EXIT_FAILED], job.outputs()
    assert job.ended_at[1] - killed_at < 20, "rank 1 must notice a dead peer at once (gloo), not at the 180 s timeout"
    assert "rank 1: stopping because rank 0 is gone: the rendezvous store it hosts no longer answers" in job.output(1)
    path, intact = ck.find_latest_valid(run_dir / ck.CHECKPOINT_DIR, on_invalid=pytest.fail)
    assert path.name == ck.checkpoint_name(1, 0)
    rerun = run([*CONFIG, f"output.dir={run_dir}"], 2, tmp_path / "logs-2")
    assert rerun.codes == [0, 0], rerun.outputs()
    assert_same_weights(baseline, run_dir)
    assert metrics(run_dir) == metrics(baseline)


def test_a_hung_rank_ends_the_others_within_the_collective_timeout(tmp_path):
    """SIGSTOP: the process lives but never answers; the survivor gives up after the timeout."""
    timeout = 4
    job = Job([*CONFIG, *SLOW, f"output.dir={tmp_path}", f"dist.collective_timeout_seconds={timeout}"], 2,
              tmp_path / "logs")
    job.wait_for(r"^epoch 0 step 2/7")
    stopped_at = job.signal(1, signal.SIGSTOP)
    try:
        job.wait_for(r"rank 0: stopping because", timeout=60)
        job.procs[0].wait(timeout=30)
        ended = time.monotonic() - stopped_at
    finally:
        job.kill()
    assert job.procs[0].returncode == EXIT_FAILED, job.output(0)
    assert timeout <= ended < timeout + 15, ended  # the timeout plus the report grace and exit (on a busy CI)
    assert "rank 1 stopped answering" in job.output(0) and "Timed out" in job.output(0)


# ---- the vote with ranks that already joined (the worker: tests/harness/workers/join_vote.py) --------
def test_ranks_that_joined_still_vote_and_share_the_optimizer_state(tmp_path):
    port = free_port()
    with LocalRanks([sys.executable, str(WORKERS / "join_vote.py")], 2,
                    lambda r: torchrun_env(r, 2, 1, port), tmp_path / "logs") as ranks:
        codes, outs = ranks.wait(120), ranks.outputs()
    assert codes == [0, 0], outs
    assert "rank 0 steps 3 stop True same_state True" in outs[0], outs  # stopped at rank 1's signal
    assert "rank 1 steps 2 stop True same_state True" in outs[1], outs


# ---- pure parts --------------------------------------------------------------------------------
def test_requeue_status_until_max_restarts_then_stopped():
    assert stop_outcome(0, 3, True, "runs/7")[0] == EXIT_REQUEUE
    assert stop_outcome(2, 3, True, "runs/7")[0] == EXIT_REQUEUE
    code, text = stop_outcome(3, 3, True, "runs/7")
    assert code == EXIT_STOPPED and "trainer.max_restarts=3" in text and "resubmit with output.dir=runs/7" in text
    assert stop_outcome(0, 0, True, "runs/7")[0] == EXIT_STOPPED
    assert "run the same command with output.dir=/tmp/x" in stop_outcome(5, 0, False, "/tmp/x")[1]


def test_collective_errors_are_told_apart_from_local_ones():
    assert is_peer_failure(RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:1234"))
    assert is_peer_failure(RuntimeError("Timed out waiting 5000ms for recv operation to complete"))
    assert not is_peer_failure(RuntimeError("injected failure on rank 1 at step 3"))
    assert not is_peer_failure(ValueError("shapes (3, 4) and (5, 6) do not match"))
