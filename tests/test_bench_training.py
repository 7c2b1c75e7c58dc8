"""The training benchmark end to end at a tiny size, without the pyg-lib anchor (the baseline then
samples with the stand-in, and says so); the project's step time is split into its phases; the model
step is measured against PyG's own model with trim_to_layer (bench/pyg_anchor.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from bench.common import local_ranks, machine_summary
from tests.harness.localjob import ROOT
from train.loop.timing import PHASES


@pytest.mark.long  # about 28 s of CPU: beside the cluster's tests (tests/harness/streams.py)
def test_quick_training_bench_names_its_baseline_splits_the_time_and_times_to_target(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_RESULTS": str(tmp_path), "BENCH_ANCHOR": "none"}
    proc = subprocess.run([sys.executable, "-m", "bench", "training", "--nodes", "4000", "--features", "16",
                           "--steps", "2", "--rounds", "1", "--batch-size", "256",
                           "--target-nodes", "3000", "--target-features", "16", "--target-acc", "0.3",
                           "--max-epochs", "3", "--anchor-models", "gat", "--gat-heads", "2", "--timeout", "150"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = tmp_path.glob("training-*.json")
    result = json.loads(path.read_text())
    ranks, backend = local_ranks(torch.cuda.device_count())  # 2 CPU ranks over gloo here; one per GPU on a GPU node
    assert result["backend"] == backend and result["measured_on"] == machine_summary(result["machine"])
    assert f"Training throughput: {ranks} ranks ({backend}) on {result['measured_on']}, synthetic graph" in proc.stdout
    assert result["baseline_loader"].startswith("stand-in: TorchNeighborSampler")
    assert "BENCH_ANCHOR=none" in result["baseline_loader"]
    loops = result["loops"]
    assert loops["project"]["seeds_per_s_per_rank"] > 0 and loops["baseline"]["seeds_per_s_per_rank"] > 0
    assert result["ratios"]["project_over_baseline"] == (loops["project"]["seeds_per_s_per_rank"]
                                                         / loops["baseline"]["seeds_per_s_per_rank"])
    assert loops["project untrimmed"]["seeds_per_s_per_rank"] > 0
    assert result["ratios"]["project_untrimmed_over_baseline"] == (
        loops["project untrimmed"]["seeds_per_s_per_rank"] / loops["baseline"]["seeds_per_s_per_rank"])
    phases = result["project_phase_seconds"]
    assert list(phases) == list(PHASES) and all(v >= 0 for v in phases.values())
    assert phases["compute"] > 0 and phases["sample"] > 0
    assert "project's step time (mean rank): sample " in proc.stdout
    split = result["baseline_split_seconds"]
    assert set(split) == {"loader", "step"} and split["step"] > 0
    assert "baseline's step time (mean rank): loader " in proc.stdout

    # time to the target accuracy: both loops from the same weights, each stopping at its first epoch there
    target = result["time_to_target"]
    assert target["target_val_acc"] == 0.3
    reached = {}
    for name in ("project", "baseline"):
        curve = target["curves"][name]
        assert 1 <= len(curve) <= 3 and [row["epoch"] for row in curve] == list(range(len(curve)))
        times = [row["train_seconds"] for row in curve]
        assert times == sorted(times) and times[0] > 0  # cumulative training time
        # each loop stops at the first epoch at the target, or runs out of epochs
        assert all(row["val_acc"] < 0.3 for row in curve[:-1])
        reached[name] = curve[-1] if curve[-1]["val_acc"] >= 0.3 else None
    if all(reached.values()):
        assert target["ratio"] == reached["baseline"]["train_seconds"] / reached["project"]["train_seconds"]
        assert "baseline/project training time to val_acc >= 0.3" in proc.stdout
    else:
        assert target["ratio"] is None and "not reached by" in proc.stdout

    # the model step against PyG's own GAT with trim_to_layer: same batches, same weights, both loops measured
    anchor = result["pyg_trim_to_layer_anchor"]
    assert list(anchor) == ["gat"]
    rates = anchor["gat"]["seeds_per_s_per_rank"]
    assert rates["project"] > 0 and rates["PyG trim_to_layer"] > 0
    assert anchor["gat"]["project_over_trim_to_layer"] == rates["project"] / rates["PyG trim_to_layer"]
    assert result["ratios"]["project_over_pyg_trim_to_layer_gat"] == anchor["gat"]["project_over_trim_to_layer"]
    profile = anchor["gat"]["profile_ms_rank0"]
    for loop in ("project", "PyG trim_to_layer"):  # where GAT's time goes, per layer and part
        parts = profile[loop]
        assert {"layer 0", "layer 0 lin", "layer 0 attention", "layer 0 message passing", "layer 1", "forward",
                "backward"} <= set(parts) and all(v > 0 for v in parts.values())
    assert set(anchor["gat"]["project_phase_seconds_rank0"]) == set(PHASES)
    curves = anchor["gat"]["time_to_target"]["curves"]
    assert set(curves) == {"project", "PyG trim_to_layer"} and all(1 <= len(c) <= 3 for c in curves.values())
    assert "project / PyG" in proc.stdout and "layer 0 message passing" in proc.stdout
