"""model.trim: each layer computes only the rows later layers read, and the seeds' outputs stay
exactly those of PyG's own forward over every sampled node (NeighborLoader order: hop by hop), for
every built-in model and the arguments that change how its layers are stacked."""

from __future__ import annotations

import functools

import pytest
import torch
from torch_geometric.nn.conv import GCNConv, PNAConv
from torch_geometric.nn.models import GCN, GraphSAGE

from train.config import ModelConfig, load_config
from train.graph.datasets.loading import synthetic_graph
from train.graph.sampling.samplers import make_node_loader
from train.graph.typed_csc import build_csc
from train.models import ModelStep, build_model, hop_counts


@functools.cache
def _graph():
    config = load_config("synthetic", ["data.num_nodes=3000", "data.num_features=16", "data.avg_degree=8"])
    data = synthetic_graph(config.data)
    return data, build_csc(data.edge_index, data.num_nodes)


def _batch(fanouts, batch_size=64):
    data, csc = _graph()
    loader = make_node_loader(data, data.train_idx[: batch_size * 2], fanouts, batch_size, seed=3, csc=csc)
    return next(iter(loader))


VARIANTS = [("sage", {}), ("gcn", {}), ("gat", {"heads": 4}), ("gin", {}),
            ("gat", {"heads": 2, "v2": True}), ("sage", {"jk": "cat"}), ("gin", {"jk": "max", "norm": "layer_norm",
                                                                                "norm_kwargs": {"mode": "node"}}),
            ("gcn", {"jk": "last", "norm": "batch_norm"}), ("gat", {"jk": "lstm", "heads": 2}),
            ("gat", {"heads": 4, "out_heads": 1})]


@pytest.mark.parametrize("fanouts,num_layers", [([5, 3], 2), ([4, 3, 2], 3)])
@pytest.mark.parametrize("name,kwargs", VARIANTS, ids=[f"{n}-{'-'.join(map(str, k.values()))}" for n, k in VARIANTS])
def test_trimmed_forward_gives_the_seeds_pygs_own_outputs(name, kwargs, fanouts, num_layers):
    batch = _batch(fanouts)
    model = build_model(ModelConfig(name=name, hidden=32, num_layers=num_layers, kwargs=kwargs), 16, 8, seed=0)
    step = ModelStep(model.eval())
    assert step.not_target_trimmed is None and step.trim_mode.startswith("target trimming")
    with torch.no_grad():
        full = model(batch.x, batch.edge_index)[: batch.batch_size]  # PyG's forward on every row
        trimmed = step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert trimmed.shape == (batch.batch_size, 8)
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-6)


def test_trimming_keeps_the_gradients_of_training():
    """In training mode (no dropout) the trimmed step gives the same loss gradients as every row."""
    batch = _batch([5, 3])
    grads = []
    for hops in ((), (batch.num_sampled_nodes, batch.num_sampled_edges)):
        model = build_model(ModelConfig(name="gcn", hidden=16, dropout=0.0), 16, 8, seed=0)
        ModelStep(model)(batch.x, batch.edge_index, *hops)[: batch.batch_size].logsumexp(-1).sum().backward()
        grads.append([p.grad for p in model.parameters()])
    for trimmed, full in zip(*grads):
        torch.testing.assert_close(trimmed, full, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["sage", "gat", "gin", "gcn"])
def test_each_layer_computes_only_the_rows_later_layers_read(name):
    batch = _batch([5, 3])
    model = build_model(ModelConfig(name=name, hidden=32, num_layers=2, kwargs={"heads": 2} if name == "gat" else {}),
                        16, 8, seed=0).eval()
    rows = []
    hooks = [conv.register_forward_hook(lambda _m, _i, out: rows.append(out.size(0))) for conv in model.convs]
    with torch.no_grad():
        ModelStep(model)(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
        model(batch.x, batch.edge_index)
    for hook in hooks:
        hook.remove()
    seeds, hop1, hop2 = batch.num_sampled_nodes
    if name == "gcn":  # one node set: every source row comes out, the later rows are cut right after
        assert rows[:2] == [seeds + hop1 + hop2, seeds + hop1]
    else:
        assert rows[:2] == [seeds + hop1, seeds]  # trimmed: the seeds and their neighbours, then the seeds
    assert rows[2:] == [seeds + hop1 + hop2] * 2  # every sampled node in every layer
    assert hop2 > 0


def test_gcn_sources_keep_their_degree_where_trim_to_layer_changes_the_outputs():
    """Why GCN is not left to PyG's trim_to_layer: it drops the edges into a layer's outermost sources, so
    their degrees (and the seeds' outputs) change; the target trim keeps them."""
    batch = _batch([5, 3])
    torch.manual_seed(0)
    model = GCN(16, 32, 2, 8).eval()
    hops = dict(num_sampled_nodes_per_hop=batch.num_sampled_nodes, num_sampled_edges_per_hop=batch.num_sampled_edges)
    with torch.no_grad():
        full = model(batch.x, batch.edge_index)[: batch.batch_size]
        pyg = model(batch.x, batch.edge_index, **hops)[: batch.batch_size]
        ours = ModelStep(model)(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert not torch.allclose(pyg, full, atol=1e-3)
    torch.testing.assert_close(ours, full, rtol=1e-5, atol=1e-6)


class OwnForward(GraphSAGE):
    def forward(self, x, edge_index, num_sampled_nodes_per_hop=None, num_sampled_edges_per_hop=None):
        return super().forward(x, edge_index, num_sampled_nodes_per_hop=num_sampled_nodes_per_hop,
                               num_sampled_edges_per_hop=num_sampled_edges_per_hop)


class PNA(GraphSAGE):
    def init_conv(self, in_channels, out_channels, **kwargs):
        deg = torch.tensor([0, 4, 4, 2])
        return PNAConv(in_channels, out_channels, ["mean", "max"], ["identity"], deg)


@pytest.mark.parametrize("cls,why", [(OwnForward, "has a forward of its own"), (PNA, "layer PNAConv is not one of")])
def test_other_models_get_their_own_forward_with_the_hop_counts(cls, why):
    batch = _batch([5, 3])
    torch.manual_seed(0)
    model = cls(16, 32, 2, 8).eval()
    step = ModelStep(model)
    assert why in step.not_target_trimmed and "trim_to_layer" in step.trim_mode
    seen = []
    model.register_forward_pre_hook(lambda _m, args, kwargs: seen.append(kwargs), with_kwargs=True)
    with torch.no_grad():
        out = step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert seen[0]["num_sampled_nodes_per_hop"] == batch.num_sampled_nodes
    torch.testing.assert_close(out[: batch.batch_size], model(batch.x, batch.edge_index)[: batch.batch_size])


def test_a_model_whose_forward_takes_no_hop_counts_computes_every_row():
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(16, 8)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    step = ModelStep(Plain())
    batch = _batch([5, 3])
    assert step.trim_mode.startswith("none") and step.uses_graph
    assert step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges).size(0) == batch.num_nodes


def test_hop_counts_follow_model_trim_and_the_batch():
    batch = _batch([5, 3])
    assert hop_counts(batch, ModelConfig()) == (batch.num_sampled_nodes, batch.num_sampled_edges)
    assert hop_counts(batch, ModelConfig(trim=False)) == (None, None)
    assert hop_counts(object(), ModelConfig()) == (None, None)  # MLP batches carry no hop counts


@pytest.mark.parametrize("add_self_loops", [True, False])
def test_gcn_trim_counts_self_loops_as_gcnconv_does(add_self_loops):
    """A graph with self-loops: GCNConv replaces them with its own (or, add_self_loops=False, counts them)."""
    data, _ = _graph()
    loops = torch.arange(0, data.num_nodes, 3).repeat(2, 1)
    edge_index = torch.cat([data.edge_index, loops], dim=1)
    loader = make_node_loader(data.__class__(x=data.x, edge_index=edge_index, num_nodes=data.num_nodes),
                              data.train_idx[:64], [6, 4, 3], 64, seed=3, csc=build_csc(edge_index, data.num_nodes))
    batch = next(iter(loader))
    assert bool((batch.edge_index[0] == batch.edge_index[1]).any())
    model = build_model(ModelConfig(name="gcn", hidden=32, num_layers=3, kwargs={"add_self_loops": add_self_loops}),
                        16, 8, seed=0).eval()
    with torch.no_grad():
        full = model(batch.x, batch.edge_index)[: batch.batch_size]
        trimmed = ModelStep(model)(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-6)


def test_input_dropout_drops_the_same_features_trimmed_or_not_and_only_in_training():
    batch = _batch([5, 3])
    model = build_model(ModelConfig(name="gcn", hidden=32, dropout=0.0), 16, 8, seed=0)
    step = ModelStep(model, input_dropout=0.5)
    outs = []
    for hops in ((), (batch.num_sampled_nodes, batch.num_sampled_edges)):
        torch.manual_seed(7)
        outs.append(step(batch.x, batch.edge_index, *hops)[: batch.batch_size])
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        plain = model(batch.x, batch.edge_index)[: batch.batch_size]
        assert not torch.allclose(outs[0], plain)  # features were dropped in training
        torch.testing.assert_close(step.eval()(batch.x, batch.edge_index)[: batch.batch_size], plain)
