"""A rank leaves within dist.exit_timeout_seconds of its run's end with the run's exit status, even where
torch.distributed's teardown hangs (train/errors.py leave_within): gloo's did now and then, and the job would
have held its nodes until its time limit. The hang is injected (tests/harness/workers/hung_teardown.py)."""

from __future__ import annotations

import time

from tests.harness.localjob import run_local_job

WORKER = "tests.harness.workers.hung_teardown"
TINY = ["fit", "--config", "tiny", "trainer.epochs=1", "dist.exit_timeout_seconds=4"]


def test_a_hung_teardown_leaves_with_the_runs_status_naming_where_it_hung(tmp_path):
    started = time.monotonic()
    job = run_local_job([*TINY, f"output.dir={tmp_path}"], 2, module=WORKER, extra_env={"HANG": "released"},
                        timeout=120)
    text = "\n".join(job.outputs)
    assert job.returncodes == [0, 0], text[-3000:]
    assert (tmp_path / "summary.json").exists()  # the run's files were written before the teardown
    for rank in (0, 1):
        assert (f"rank {rank}: still here 4 s after its run ended (exit status 0): torch.distributed's teardown "
                "hangs (dist.exit_timeout_seconds); it leaves without it" in job.outputs[rank]), job.outputs[rank]
        assert "hung_teardown.py" in job.outputs[rank]  # where it hung: its stack
    assert time.monotonic() - started < 100


def test_a_teardown_hung_holding_the_interpreters_lock_still_ends_with_its_stacks(tmp_path):
    job = run_local_job([*TINY, f"output.dir={tmp_path}"], 1, module=WORKER, extra_env={"HANG": "held"},
                        timeout=120)
    text = job.outputs[0]
    assert job.returncodes == [1], text[-3000:]  # faulthandler's exit: the lock-free way out
    assert "still here" not in text  # the timer thread never got the lock
    assert "Timeout (0:00:08)!" in text and "hung_teardown.py" in text, text[-3000:]


def test_predict_leaves_with_its_status_too(tmp_path):
    """`predict` holds a process group as `fit` does; the run's config.yaml gives it the same setting."""
    run = tmp_path / "run"
    fit = run_local_job([*TINY, f"output.dir={run}"], 1, timeout=120)
    assert fit.returncodes == [0], fit.outputs[0][-3000:]
    job = run_local_job(["predict", "--run-dir", str(run)], 2, module=WORKER, extra_env={"HANG": "released"},
                        timeout=120)
    assert job.returncodes == [0, 0], "\n".join(job.outputs)[-3000:]
    assert "rank 1: still here 4 s after its run ended (exit status 0)" in job.outputs[1]
    assert (run / "predictions" / "manifest.json").exists()
