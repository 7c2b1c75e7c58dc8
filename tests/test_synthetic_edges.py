"""The shipped synthetic graph with edge features (configs/synthetic-edges.yaml, issue 31 §5): each edge carries a
noisy signal of its target's class, so a model that reads the edges' features learns what the same model without
them cannot. Real 2-rank runs of `python -m train fit`."""

from __future__ import annotations

import pytest
import torch

from tests.harness.localjob import final_summary, run_local_job
from train.config import DataConfig, load_config
from train.graph.datasets.loading import dataset_kind, synthetic_graph


def test_edge_features_leave_the_graph_as_it_was_and_signal_each_edges_target_class():
    plain = synthetic_graph(DataConfig(num_nodes=500, seed=3))
    edged = synthetic_graph(DataConfig(num_nodes=500, seed=3, edge_features=4, edge_signal=5.0))
    for key in ("x", "y", "edge_index", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(plain[key], edged[key]), key  # drawn last: the same graph, with edge features
    assert getattr(plain, "edge_attr", None) is None and edged.edge_attr.shape == (edged.edge_index.size(1), 4)
    # a strong signal: each edge's features are nearest their target's class mean, not its source's
    target_class = edged.y[edged.edge_index[1]]
    means = torch.stack([edged.edge_attr[target_class == c].mean(0) for c in range(int(edged.y.max()) + 1)])
    nearest = torch.cdist(edged.edge_attr, means).argmin(1)
    assert (nearest == target_class).float().mean() > 0.9
    config = load_config("synthetic-edges").data
    assert dataset_kind(config).plan_size(config).edge_features == 8  # the plan counts them


def _test_accuracy(tmp_path, name: str, overrides: list[str]) -> float:
    out = tmp_path / name
    job = run_local_job(["fit", "--config", "synthetic-edges", "trainer.epochs=5", "output.progress=lines",
                         *overrides, f"output.dir={out}"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    return final_summary(out)["test_acc_at_best_val"]


def test_a_model_that_reads_the_edge_features_beats_the_same_model_without_them(tmp_path):
    with_edges = _test_accuracy(tmp_path, "gine", [])  # GINE with model.kwargs.edge_dim=8 (the config's)
    without = _test_accuracy(tmp_path, "gin", ["model.name=gin", "model.kwargs={}"])
    assert without < 0.25  # 8 classes: chance is 0.125, and neither features nor neighbours say much
    assert with_edges > without + 0.3, (with_edges, without)


@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_bad_edge_feature_count_is_named(value):
    from train.errors import UserError

    with pytest.raises(UserError, match="data.edge_features"):
        load_config("synthetic-edges", [f"data.edge_features={value}"])
