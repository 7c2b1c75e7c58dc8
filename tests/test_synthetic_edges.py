"""The shipped synthetic graph with edge features (configs/synthetic-edges.yaml, issue 31 §5): each edge carries a
noisy signal of its target's class, so a model that reads the edges' features learns what the same model without
them cannot, and the shipped GINE reaches the accuracy of the textbook GINE on the same graph (issue 41). Real
2-rank runs of `python -m train fit`."""

from __future__ import annotations

import pytest
import torch

from tests.harness.full_batch import TextbookGINE, accuracy_at_best_val
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


def _textbook_accuracy(epochs: int = 60) -> float:
    """Hu et al.'s GINE (2 GINEConv and a Linear: tests/harness/full_batch.py), full batch on the config's graph."""
    config = load_config("synthetic-edges")
    data = synthetic_graph(config.data)
    torch.manual_seed(config.trainer.seed)
    model = TextbookGINE(data.num_features, config.model.hidden, int(data.y.max()) + 1, data.edge_attr.size(1))
    splits = {"train": data.train_idx, "val": data.val_idx, "test": data.test_idx}
    return accuracy_at_best_val(model, lambda m: m(data.x, data.edge_index, data.edge_attr), data.y, splits, epochs)


def test_the_shipped_gine_reaches_the_textbook_gines_accuracy_and_the_model_without_edges_stays_at_chance(tmp_path):
    with_edges = _test_accuracy(tmp_path, "gine", [])  # GINE with model.kwargs.edge_dim=8 (the config's)
    without = _test_accuracy(tmp_path, "gin", ["model.name=gin", "model.kwargs={}"])
    textbook = _textbook_accuracy()
    assert textbook > 0.8, textbook  # the anchor reads the edges' signal (8 classes: chance is 0.125)
    assert without < 0.25  # neither features nor neighbours say much
    # issue 41's bound: the shipped model, sampled and 5 epochs on 2 ranks, within 0.85 of the textbook's
    assert with_edges >= 0.85 * textbook, (with_edges, textbook)


@pytest.mark.parametrize("value", ["-1", "two"])
def test_a_bad_edge_feature_count_is_named(value):
    from train.errors import UserError

    with pytest.raises(UserError, match="data.edge_features"):
        load_config("synthetic-edges", [f"data.edge_features={value}"])
