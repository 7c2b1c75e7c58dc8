"""bench/common.py's launcher of local ranks: a failing rank ends the launch at once, with what it printed; the
caller's PYTHONPATH reaches the ranks."""

from __future__ import annotations

import time

import pytest

from bench.common import ROOT, BenchError, launch_local_ranks


def test_a_rank_that_fails_while_rank_0_waits_ends_the_launch_at_once():
    started = time.monotonic()
    with pytest.raises(BenchError) as info:
        launch_local_ranks("tests.harness.workers.bench_rank_fails", [], 2, timeout=100)
    assert time.monotonic() - started < 30, "the launcher waited for rank 0 instead of seeing rank 1 fail"
    assert "--- rank 1 (exit 3) ---" in str(info.value) and "cannot bind its port" in str(info.value)


def test_a_launch_past_its_timeout_says_so_with_what_the_ranks_printed():
    with pytest.raises(BenchError, match=r"rank 0 gave no result within 3 s; give more with --timeout") as info:
        launch_local_ranks("tests.harness.workers.bench_rank_fails", [], 1, timeout=3)
    assert "--- rank 0 (exit -9) ---" in str(info.value)


def test_the_ranks_import_the_callers_packages_from_pythonpath(tmp_path, monkeypatch):
    """The checkout first, then the caller's PYTHONPATH (issue 30: it used to vanish)."""
    (tmp_path / "callers_package.py").write_text("VALUE = 42\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = launch_local_ranks("tests.harness.workers.bench_rank_path", [], 2, timeout=100,
                                extra_env={"CALLER_MODULE": "callers_package"})
    assert result["value"] == 42
    assert result["pythonpath"].split(":") == [str(ROOT), str(tmp_path)]
