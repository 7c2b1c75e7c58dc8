"""bench/common.py's launcher of local ranks: a failing rank ends the launch at once, with what it printed; the
caller's PYTHONPATH reaches the ranks; where a benchmark's ranks go (one per GPU, else CPU ranks), and the machine
its figures name."""

from __future__ import annotations

import re
import time

import pytest
import torch

import bench.common as bench_common
from bench.common import CPU_RANKS, ROOT, BenchError, launch_local_ranks, local_ranks, machine, machine_summary


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


def test_a_rank_0_hung_after_its_result_is_killed_with_its_stacks_shown_and_the_result_stands(monkeypatch, capsys):
    """Gloo's teardown now and then hangs a rank that has printed its result (CI, 2026-12-05): the figures stand,
    the hang is named with where the rank was, and the launch does not wait for the timeout."""
    monkeypatch.setattr(bench_common, "EXIT_GRACE_S", 2)
    started = time.monotonic()
    result = launch_local_ranks("tests.harness.workers.bench_rank_hangs_after_result", [], 2, timeout=100)
    assert result == {"value": 7}
    assert time.monotonic() - started < 40, "the launcher waited for the timeout, not for the result"
    warning = capsys.readouterr().err
    assert "warning: rank(s) [0] did not exit within 2 s of rank 0's result (killed; the result stands)" in warning
    assert "bench_rank_hangs_after_result.py" in warning, warning  # PYTHONFAULTHANDLER's stack of the hung rank


def test_the_ranks_import_the_callers_packages_from_pythonpath(tmp_path, monkeypatch):
    """The checkout first, then the caller's PYTHONPATH (issue 30: it used to vanish)."""
    (tmp_path / "callers_package.py").write_text("VALUE = 42\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    result = launch_local_ranks("tests.harness.workers.bench_rank_path", [], 2, timeout=100,
                                extra_env={"CALLER_MODULE": "callers_package"})
    assert result["value"] == 42
    assert result["pythonpath"].split(":") == [str(ROOT), str(tmp_path)]


# ---- issue 30 §8: a benchmark's ranks go where the machine's GPUs are, and its output names the machine -------
@pytest.mark.parametrize("gpus, requested, expected", [
    (0, 0, (CPU_RANKS, "gloo")), (0, 4, (4, "gloo")),  # no GPU: CPU ranks over gloo, as before
    (1, 0, (1, "nccl")), (8, 0, (8, "nccl")), (8, 2, (2, "nccl")),  # one rank per GPU
])
def test_local_ranks_take_one_gpu_each_where_gpus_are_visible(gpus, requested, expected):
    assert local_ranks(gpus, requested) == expected


@pytest.mark.parametrize("gpus, requested, needle", [(2, 3, "has 2 visible GPU(s)"), (0, -1, "must be >= 0")])
def test_more_ranks_than_gpus_is_refused(gpus, requested, needle):
    with pytest.raises(BenchError, match=re.escape(needle)):
        local_ranks(gpus, requested)


def test_the_machine_summary_names_the_gpu_or_the_cores():
    cpu = {"usable_cores": 16, "cpu_model": "AMD EPYC 9534", "cuda": False}
    assert machine_summary(cpu) == "16 cores (AMD EPYC 9534), no GPU"
    gpu = {**cpu, "cuda": True, "gpu_count": 1, "gpu": "NVIDIA H200", "gpu_memory_gib": 139.8}
    assert machine_summary(gpu) == "1 x NVIDIA H200 (139.8 GiB), 16 cores (AMD EPYC 9534)"
    assert machine_summary(machine()).endswith(", no GPU") != torch.cuda.is_available()


def test_where_this_python_sees_a_gpu_the_benchmark_stays_here_not_in_the_cpu_anchor(monkeypatch):
    from bench import anchor

    monkeypatch.delenv(anchor.IN_ANCHOR, raising=False)
    monkeypatch.setattr(anchor, "have_pyg_lib", lambda: False)
    monkeypatch.setattr(anchor, "cuda_here", lambda: True)
    monkeypatch.setattr(anchor, "anchor_python", lambda: pytest.fail("the CPU anchor must not be asked"))
    code, reason = anchor.run_in_anchor("bench.training", [])
    assert code is None and "sees a GPU" in reason and "CPU build" in reason
