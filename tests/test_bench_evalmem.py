"""The evaluation-memory benchmark end to end at a tiny size: both modes run on 1 and 2 ranks over
the same weights, agree on accuracy, and the figures it prints are the ones it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.evalmem import MODES, summarize
from tests.harness.localjob import ROOT


def test_quick_evalmem_bench_measures_both_modes_at_each_world_size(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_RESULTS": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "bench", "evalmem", "--nodes", "3000", "--features", "16",
                           "--hidden", "32", "--eval-batch-size", "512", "--world-sizes", "1", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = tmp_path.glob("evalmem-*.json")
    result = json.loads(path.read_text())
    summary = result["summary"]
    assert sorted(summary) == ["1", "2"]
    for world, entry in summary.items():
        ranks = result["raw"][world]["ranks"]
        assert sorted(r["rank"] for r in ranks) == list(range(int(world)))
        for mode in MODES:
            peaks = [r[mode]["peak_growth_bytes"] for r in ranks]
            assert all(p >= 0 for p in peaks)
            assert entry[mode]["max_peak_growth_bytes_per_rank"] == max(peaks)
            assert 0.0 <= entry[mode]["accuracy"]["val_acc"] <= 1.0
        # the anchor is a different algorithm over the same weights: it must reach the same answer
        assert entry["same_accuracy"] is True, entry
    assert "project/anchor" in proc.stdout and "same accuracy" in proc.stdout


def test_summarize_takes_each_modes_largest_rank_and_flags_disagreement():
    def rank(r, project, anchor, acc=0.5):
        return {"rank": r, "project": {"peak_growth_bytes": project, "accuracy": {"val_acc": 0.5}, "seconds": 1.0},
                "anchor": {"peak_growth_bytes": anchor, "accuracy": {"val_acc": acc}, "seconds": 2.0}}

    summary = summarize({2: {"ranks": [rank(0, 100, 400), rank(1, 300, 200, acc=0.25)]}})
    assert summary[2]["project"]["max_peak_growth_bytes_per_rank"] == 300
    assert summary[2]["anchor"]["max_peak_growth_bytes_per_rank"] == 400
    assert summary[2]["project_over_anchor"] == 0.75
    assert summary[2]["same_accuracy"] is True  # rank 0 reports the all-reduced accuracy
    summary = summarize({1: {"ranks": [rank(0, 100, 400, acc=0.25)]}})
    assert summary[1]["same_accuracy"] is False


def test_ranks_that_give_no_result_in_time_are_one_message_not_a_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_RESULTS": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "bench", "evalmem", "--nodes", "3000", "--world-sizes", "1",
                           "--timeout", "0.5"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rank 0 gave no result within 0.5 s; give more with --timeout" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("evalmem-*.json"))  # nothing written for a run that did not finish
