"""model.trim: each layer computes only the rows later layers read, and the seeds' outputs stay
exactly those of computing every sampled node (PyG's NeighborLoader order: hop by hop)."""

from __future__ import annotations

import pytest
import torch

from train.config import ModelConfig, load_config
from train.graph.data import synthetic_graph
from train.graph.sampler import build_csc, make_node_loader
from train.loop.model import build_model, hop_counts


def _batch(fanouts, batch_size=64):
    config = load_config("synthetic", ["data.num_nodes=3000", "data.num_features=16", "data.avg_degree=8"])
    data = synthetic_graph(config.data)
    loader = make_node_loader(data, data.train_idx[: batch_size * 2], fanouts, batch_size, seed=3,
                              csc=build_csc(data.edge_index, data.num_nodes))
    return next(iter(loader))


@pytest.mark.parametrize("fanouts,num_layers", [([5, 3], 2), ([4, 3, 2], 3), ([4, 3, 2], 2), ([6], 2)])
def test_trimmed_forward_gives_the_seeds_the_same_outputs(fanouts, num_layers):
    batch = _batch(fanouts)
    model = build_model(ModelConfig(hidden=32, num_layers=num_layers), 16, 8, seed=0).eval()
    with torch.no_grad():
        full = model(batch.x, batch.edge_index)[: batch.batch_size]
        trimmed = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert trimmed.shape == (batch.batch_size, 8)
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-6)


def test_each_layer_computes_only_the_rows_later_layers_read():
    batch = _batch([5, 3])
    model = build_model(ModelConfig(hidden=32, num_layers=2), 16, 8, seed=0).eval()
    rows = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: rows.append(out.size(0))) for layer in model.layers]
    with torch.no_grad():
        model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
        model(batch.x, batch.edge_index)
    for hook in hooks:
        hook.remove()
    seeds, hop1, hop2 = batch.num_sampled_nodes
    assert rows[:2] == [seeds + hop1, seeds]  # trimmed: the seeds and their neighbours, then the seeds
    assert rows[2:] == [seeds + hop1 + hop2] * 2  # every sampled node in every layer
    assert hop2 > 0


def test_hop_counts_follow_model_trim_and_the_batch():
    batch = _batch([5, 3])
    assert hop_counts(batch, ModelConfig()) == (batch.num_sampled_nodes, batch.num_sampled_edges)
    assert hop_counts(batch, ModelConfig(trim=False)) == (None, None)
    assert hop_counts(object(), ModelConfig()) == (None, None)  # MLP batches carry no hop counts
