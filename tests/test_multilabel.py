"""Multi-label nodes from the user's files: y of [N, T] with 0, 1 and NaN loads as float tasks, bad values are
refused before anything is written, and 2 ranks learn the tasks, scored by ROC-AUC in metrics, summary and report."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from tests.harness.localjob import ROOT, final_summary, run_local_job
from tests.test_data_files import write_folder
from train.cli.plan_run import graph_size
from train.config import DataConfig, load_config
from train.errors import UserError
from train.graph.datasets.loading import load_graph
from train.loop.fit import EpochStats

N, F, T = 240, 6, 5


def multilabel_arrays(seed: int = 0, unlabelled: float = 0.2) -> dict[str, np.ndarray]:
    """Four communities, features and edges that follow them; each task positive for some communities (10% of the
    labels flipped), a fraction of the entries unlabelled (NaN)."""
    rng = np.random.default_rng(seed)
    community = rng.integers(0, 4, N)
    x = rng.normal(size=(N, F)).astype(np.float32)
    x[np.arange(N), community] += 1.0
    src = rng.integers(0, N, 1200)
    dst = np.array([rng.choice(np.flatnonzero(community == community[s])) for s in src])
    tasks = rng.integers(0, 2, size=(4, T))
    tasks[0], tasks[1] = 1, 0
    y = (tasks[community] ^ (rng.random((N, T)) < 0.1)).astype(np.float32)
    y[rng.random((N, T)) < unlabelled] = np.nan
    perm = rng.permutation(N)
    return {"edge_index": np.stack([src, dst]).astype(np.int64), "x": x, "y": y,
            "train_idx": np.sort(perm[:120]), "val_idx": np.sort(perm[120:180]), "test_idx": np.sort(perm[180:])}


def saved_data(path, arrays) -> str:
    torch.save(Data(**{k: torch.from_numpy(v) for k, v in arrays.items()}), path)
    return str(path)


def test_a_folder_with_tasks_per_node_loads_them_as_floats_and_plans_one_output_per_task(tmp_path):
    arrays = multilabel_arrays()
    folder = write_folder(tmp_path / "graph", arrays)
    data = load_graph(DataConfig(name="files", path=str(folder)))
    assert data.y.dtype == torch.float32 and data.y.shape == (N, T)
    assert torch.equal(torch.isnan(data.y), torch.from_numpy(np.isnan(arrays["y"])))
    assert torch.equal(torch.nan_to_num(data.y, 7.0), torch.from_numpy(np.nan_to_num(arrays["y"], nan=7.0)))
    assert graph_size(load_config("tiny", ["data.name=files", f"data.path={folder}"])).classes == T
    arrays["y"] = np.nan_to_num(arrays["y"]).astype(np.int8)  # OGB's form: integers, every task labelled
    data = load_graph(DataConfig(name="files", path=str(write_folder(tmp_path / "ints", arrays))))
    assert data.y.dtype == torch.float32 and torch.equal(data.y, torch.from_numpy(arrays["y"]).float())


BAD = [  # (id, the bad y, what the message names)
    ("two-and-minus-one", lambda y: np.where(np.arange(N)[:, None] == 3, np.array([2, -1, 0, 1, 1]), y), "-1, 2 in 2"),
    ("a-half", lambda y: np.where(np.arange(N)[:, None] == 5, 0.5, y), "0.5 in 5 entries"),
    ("infinite", lambda y: np.where(np.arange(N)[:, None] == 5, np.inf, y)[:, :2], "inf in 2 entries"),
]


@pytest.mark.parametrize("bad,named", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_tasks_with_values_other_than_0_1_nan_are_refused_naming_them(tmp_path, bad, named):
    arrays = multilabel_arrays()
    arrays["y"] = bad(np.nan_to_num(arrays["y"])).astype(np.float32)
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="files", path=str(write_folder(tmp_path / "graph", arrays))))
    message = str(info.value)
    assert f"y (shape {arrays['y'].shape}, torch.float32) holds {named}" in message, message
    assert "of 0 and 1, with NaN where a node's task is unlabelled" in message


def test_fit_refuses_bad_task_values_with_one_message_and_writes_nothing(tmp_path):
    arrays = multilabel_arrays()
    arrays["y"][4, 1] = 3.0
    path = saved_data(tmp_path / "graph.pt", arrays)
    done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny", "data.name=files",
                           f"data.path={path}", f"output.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"data.path={path}: y (shape (240, 5), torch.float32) holds 3 in 1 entries; a multi-label y is 240 x T" \
        in done.stderr
    assert not (tmp_path / "run").exists()


def test_two_ranks_learn_tasks_with_unlabelled_entries_and_report_their_rocauc(tmp_path):
    path = saved_data(tmp_path / "graph.pt", multilabel_arrays())
    out = tmp_path / "run"
    job = run_local_job(["fit", "--config", "tiny", "data.name=files", f"data.path={path}", "trainer.epochs=15",
                         "trainer.eval_every=1", "optim.lr=0.01", f"output.dir={out}"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"] * 0.9  # BCE over the labelled tasks falls
    assert all(0.0 <= r["val_rocauc"] <= 1.0 and 0.0 <= r["test_rocauc"] <= 1.0 for r in rows)
    summary = final_summary(out)
    assert summary["metric"] == "rocauc" and summary["final_test_rocauc"] > 0.8  # chance is 0.5
    best = max(rows, key=lambda r: r["val_rocauc"])
    assert (summary["best_val_epoch"], summary["test_rocauc_at_best_val"]) == (best["epoch"], best["test_rocauc"])
    assert summary["final_test_rocauc"] == rows[-1]["test_rocauc"]
    log = job.outputs[0]
    assert f"final test ROC-AUC {summary['final_test_rocauc']:.4f} (best val {summary['best_val_rocauc']:.4f}" in log
    assert f" val_rocauc {rows[-1]['val_rocauc']:.4f} test_rocauc {rows[-1]['test_rocauc']:.4f} " in log
    report = log[log.index("\nrun "):]  # the report's table, the run's metric first
    assert re.search(rf"\nbest val ROC-AUC +{summary['best_val_rocauc']:.4f} \(epoch {best['epoch']}\)\n"
                     rf"test ROC-AUC, best val +{summary['test_rocauc_at_best_val']:.4f} \(epoch {best['epoch']}\)\n"
                     rf"final test ROC-AUC +{summary['final_test_rocauc']:.4f} \(epoch 14\)\n", report), report


def test_a_checkpoint_from_before_the_scored_count_resumes_with_every_seed_scored():
    stats = EpochStats(loss_sum=1.5, correct=3, seeds=5, steps=1, scored=40)
    assert EpochStats.restored(dataclasses.asdict(stats)) == stats
    old = {"loss_sum": 1.5, "correct": 3, "seeds": 5, "steps": 1}  # one class per node: each seed scored once
    assert EpochStats.restored(old) == EpochStats(1.5, 3, 5, 1, scored=5)
