"""The training benchmark end to end at a tiny size, without the pyg-lib anchor (the baseline then
samples with the stand-in, and says so); the project's step time is split into its phases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.harness.localjob import ROOT
from train.timing import PHASES


def test_quick_training_bench_names_its_baseline_and_splits_the_project_time(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_RESULTS": str(tmp_path), "BENCH_ANCHOR": "none"}
    proc = subprocess.run([sys.executable, "-m", "bench", "training", "--nodes", "4000", "--features", "16",
                           "--steps", "2", "--rounds", "1", "--batch-size", "256"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = tmp_path.glob("training-*.json")
    result = json.loads(path.read_text())
    assert result["baseline_loader"].startswith("stand-in: TorchNeighborSampler")
    assert "BENCH_ANCHOR=none" in result["baseline_loader"]
    loops = result["loops"]
    assert loops["project"]["seeds_per_s_per_rank"] > 0 and loops["baseline"]["seeds_per_s_per_rank"] > 0
    assert result["ratios"]["project_over_baseline"] == (loops["project"]["seeds_per_s_per_rank"]
                                                         / loops["baseline"]["seeds_per_s_per_rank"])
    phases = result["project_phase_seconds"]
    assert list(phases) == list(PHASES) and all(v >= 0 for v in phases.values())
    assert phases["compute"] > 0 and phases["sample"] > 0
    assert "project's step time (mean rank): sample " in proc.stdout
