"""A rank leaves within dist.exit_timeout_seconds of its run's end with the run's exit status, even where
torch.distributed's teardown hangs (train/errors.py leave_within): gloo's did now and then, and the job would
have held its nodes until its time limit. The hang is injected (tests/harness/workers/hung_teardown.py)."""

from __future__ import annotations

import errno
import time

import pytest

from tests.harness.localjob import run_local_job
from train.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_STORAGE,
    EXIT_USER_ERROR,
    AnotherRanksError,
    UserError,
    exit_status,
)
from train.storage.faults import StorageError, StorageFault

WORKER = "tests.harness.workers.hung_teardown"
TINY = ["fit", "--config", "tiny", "trainer.epochs=1", "dist.exit_timeout_seconds=4"]


@pytest.fixture(scope="module")
def hung_fit(tmp_path_factory):
    """A 2-rank fit whose teardown hangs on both ranks: (the job, its seconds, its run directory)."""
    run = tmp_path_factory.mktemp("hung-fit")
    started = time.monotonic()
    job = run_local_job([*TINY, f"output.dir={run}"], 2, module=WORKER, extra_env={"HANG": "released"}, timeout=120)
    return job, time.monotonic() - started, run


def test_a_hung_teardown_leaves_with_the_runs_status_naming_where_it_hung(hung_fit):
    job, seconds, run = hung_fit
    text = "\n".join(job.outputs)
    assert job.returncodes == [0, 0], text[-3000:]
    assert (run / "summary.json").exists()  # the run's files were written before the teardown
    for rank in (0, 1):
        assert (f"rank {rank}: still here 4 s after its run ended (exit status 0): torch.distributed's teardown "
                "hangs (dist.exit_timeout_seconds); it leaves without it" in job.outputs[rank]), job.outputs[rank]
        assert "hung_teardown.py" in job.outputs[rank]  # where it hung: its stack
    assert seconds < 100


def test_a_teardown_hung_holding_the_interpreters_lock_still_ends_with_its_stacks(tmp_path):
    job = run_local_job([*TINY, f"output.dir={tmp_path}"], 1, module=WORKER, extra_env={"HANG": "held"},
                        timeout=120)
    text = job.outputs[0]
    assert job.returncodes == [1], text[-3000:]  # faulthandler's exit: the lock-free way out
    assert "still here" not in text  # the timer thread never got the lock
    assert "Timeout (0:00:08)!" in text and "hung_teardown.py" in text, text[-3000:]


def test_predict_leaves_with_its_status_too(hung_fit):
    """`predict` holds a process group as `fit` does; the run's config.yaml gives it the same setting."""
    fit, _seconds, run = hung_fit
    assert fit.returncodes == [0, 0], "\n".join(fit.outputs)[-3000:]
    job = run_local_job(["predict", "--run-dir", str(run)], 2, module=WORKER, extra_env={"HANG": "released"},
                        timeout=120)
    assert job.returncodes == [0, 0], "\n".join(job.outputs)[-3000:]
    assert "rank 1: still here 4 s after its run ended (exit status 0)" in job.outputs[1]
    assert (run / "predictions" / "manifest.json").exists()


@pytest.mark.parametrize("error, status", [
    (UserError("x"), EXIT_USER_ERROR), (AnotherRanksError("x", 1), EXIT_USER_ERROR),
    (StorageError(StorageFault("runs/1/model.pt", errno.ENOSPC)), EXIT_STORAGE),
    (KeyboardInterrupt(), EXIT_INTERRUPTED), (RuntimeError("x"), EXIT_FAILED),
])
def test_a_rank_leaves_with_the_status_the_command_line_gives_its_error(error, status):
    assert exit_status(error) == status
