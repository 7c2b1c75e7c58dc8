"""The exact evaluation's batch benchmark end to end at a tiny size: both paths give the same rows and the
ratio it prints is the one it measured and recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.harness.localjob import ROOT


def test_quick_evalchunks_bench_times_both_paths_and_checks_their_rows(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_RESULTS": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "bench", "evalchunks", "--nodes", "2000", "--features", "8",
                           "--hidden", "16", "--eval-batch-size", "256", "--rounds", "2"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = tmp_path.glob("evalchunks-*.json")
    result = json.loads(path.read_text())
    assert result["same_rows"] is True
    assert sorted(result["seconds"]) == ["csc chunks", "sampler"]
    assert all(len(times) == 2 and min(times) > 0 for times in result["seconds"].values())
    assert result["speedup"] == result["best"]["sampler"] / result["best"]["csc chunks"]
    assert f"csc chunks: {result['speedup']:.2f}x the sampler path's speed; same rows: yes" in proc.stdout
