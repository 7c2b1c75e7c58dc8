"""Edge features and weights through the model (issue 31 §3): a model gets the batch's `edge_attr` and `edge_weight`
by the names its forward takes; trim keeps the seeds' outputs of PyG's own forward with them; the exact
evaluation's layers read them from the graph's copies in the CSC's order; edge_dim is checked, and edge
parameters get gradients under DDP."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch_geometric.data import Data

from tests.harness.gloo_ranks import join_gloo
from train.cluster.distenv import free_port
from train.config import ModelConfig, load_config
from train.errors import UserError
from train.graph.datasets.loading import synthetic_graph
from train.graph.edge_rows import EdgeRows
from train.graph.form import attach_edge_rows
from train.graph.sampling.in_edges import in_edge_batch
from train.graph.sampling.samplers import make_node_loader
from train.graph.typed_csc import build_csc
from train.loop.evaluate import GraphAt, in_degree
from train.models import (
    ModelStep,
    build_model,
    edge_inputs,
    graph_edge_values,
    graph_edge_width,
    layerwise,
    resolve,
)
from train.models.contract import check_model

EDGE_DIM = 3


@functools.cache
def _graph(self_loops: bool = True) -> Data:
    """A synthetic graph with self-loops on every 5th node (GCN treats them apart), edge features and weights."""
    data = synthetic_graph(load_config("synthetic", ["data.num_nodes=600", "data.num_features=8",
                                                     "data.avg_degree=6"]).data)
    if self_loops:
        loops = torch.arange(0, data.num_nodes, 5)
        data.edge_index = torch.cat([data.edge_index, torch.stack([loops, loops])], dim=1)
    generator = torch.Generator().manual_seed(5)
    edges = data.edge_index.size(1)
    data.edge_attr = torch.randn(edges, EDGE_DIM, generator=generator)
    data.edge_weight = torch.rand(edges, generator=generator) * 2 + 0.1
    return data


def _batch(fanouts, batch_size=32):
    """A sampled batch with its edges' features and weights, aligned with its edge_index (as the sampler will
    give them, by edge id: here from the graph's own rows through the batch's CSC positions)."""
    data = _graph()
    colptr, row, perm = build_csc(data.edge_index, data.num_nodes)
    loader = make_node_loader(data, data.train_idx[:batch_size], fanouts, batch_size, seed=3,
                              csc=(colptr, row, perm), force_torch_sampler=True)
    batch = next(iter(loader))
    # a batch edge (n_id[s] -> n_id[t]) is some graph edge s->t: take the first such (the synthetic graph's edges
    # are distinct pairs), so the rows are a real edge's
    key = data.edge_index[0] * data.num_nodes + data.edge_index[1]
    order = torch.argsort(key)
    wanted = batch.n_id[batch.edge_index[0]] * data.num_nodes + batch.n_id[batch.edge_index[1]]
    e_id = order[torch.searchsorted(key[order], wanted)]
    assert torch.equal(key[e_id], wanted)
    batch.edge_attr, batch.edge_weight = data.edge_attr[e_id], data.edge_weight[e_id]
    return batch


EDGE_MODELS = [("gat", {"heads": 2, "edge_dim": EDGE_DIM}), ("gat", {"heads": 2, "v2": True, "edge_dim": EDGE_DIM}),
               ("gine", {"edge_dim": EDGE_DIM}), ("gine", {"edge_dim": EDGE_DIM, "jk": "last", "train_eps": True}),
               ("gcn", {}), ("gcn", {"add_self_loops": False}), ("gcn", {"normalize": False})]
IDS = [f"{n}-{'-'.join(map(str, k.values()))}" for n, k in EDGE_MODELS]


@pytest.mark.parametrize("fanouts", [[4, 3], [3, 3, 2]])
@pytest.mark.parametrize("name,kwargs", EDGE_MODELS, ids=IDS)
def test_trimmed_forward_with_edge_tensors_gives_the_seeds_pygs_own_outputs(name, kwargs, fanouts):
    batch = _batch(fanouts)
    model = build_model(ModelConfig(name=name, hidden=16, num_layers=len(fanouts), kwargs=kwargs), 8, 5, seed=0)
    step = ModelStep(model.eval())
    assert step.not_target_trimmed is None
    read = "edge_weight" if name == "gcn" else "edge_attr"
    assert step.edge_arguments == (read,)
    with torch.no_grad():
        full = model(batch.x, batch.edge_index, **{read: batch[read]})[: batch.batch_size]
        trimmed = step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
                       **edge_inputs(batch))
        untrimmed = step(batch.x, batch.edge_index, **edge_inputs(batch))[: batch.batch_size]
        without = model(batch.x, batch.edge_index)[: batch.batch_size] if name != "gine" else None
    torch.testing.assert_close(trimmed, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(untrimmed, full, rtol=1e-5, atol=1e-5)
    if without is not None:  # the edges' tensors changed the outputs: they were read, not dropped on the way
        assert not torch.allclose(full, without, atol=1e-3)


def test_16_bit_edge_features_are_widened_as_the_features_are():
    """data.feature_dtype may keep edge features in 16 bits; the model computes on them in float32."""
    batch = _batch([4, 3])
    model = build_model(ModelConfig(name="gat", hidden=8, kwargs={"edge_dim": EDGE_DIM}), 8, 5, seed=0).eval()
    half = batch.edge_attr.bfloat16()
    with torch.no_grad():
        got = ModelStep(model)(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
                               edge_attr=half)
        want = model(batch.x, batch.edge_index, edge_attr=half.float())[: batch.batch_size]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_model_gets_the_edge_tensors_its_forward_names_and_no_others():
    seen = {}

    class Weighted(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x, edge_index, edge_weight=None):
            seen["edge_weight"] = edge_weight
            return self.lin(x)

    class Plain(Weighted):
        def forward(self, x, edge_index):  # a batch with edge tensors still calls it as before
            seen["plain"] = True
            return self.lin(x)

    batch = Data(x=torch.randn(5, 4), edge_index=torch.tensor([[1, 2], [0, 0]]), edge_attr=torch.randn(2, 3),
                 edge_weight=torch.tensor([0.5, 2.0]))
    assert set(edge_inputs(batch)) == {"edge_attr", "edge_weight"}
    assert edge_inputs(Data(x=batch.x, edge_index=batch.edge_index)) == {}
    step = ModelStep(Weighted())
    assert step.edge_arguments == ("edge_weight",)
    step(batch.x, batch.edge_index, **edge_inputs(batch))
    assert torch.equal(seen["edge_weight"], batch.edge_weight)
    assert ModelStep(Plain()).edge_arguments == ()
    ModelStep(Plain())(batch.x, batch.edge_index, **edge_inputs(batch))
    assert seen["plain"]
    # PyG's models: what their layers read (GCN: weights; GAT: features; SAGE: neither)
    shown = {name: ModelStep(build_model(ModelConfig(name=name, **({"kwargs": {"edge_dim": 2}} if name == "gine"
                                                                  else {})), 4, 2, seed=0)).edge_arguments
             for name in ("sage", "gcn", "gat", "gin", "gine", "mlp")}
    assert shown == {"sage": (), "gcn": ("edge_weight",), "gat": ("edge_attr",), "gin": (), "gine": ("edge_attr",),
                     "mlp": ()}


# ---- the exact evaluation: one layer at a time over full in-neighbourhoods read from the CSC ----------------

@pytest.mark.parametrize("csc_order", [False, True], ids=["user-order", "csc-order"])
@pytest.mark.parametrize("name,kwargs", EDGE_MODELS[::2] + [("gcn", {"add_self_loops": False})],
                         ids=IDS[::2] + ["gcn-False"])
def test_layer_by_layer_with_the_edge_values_by_csc_position_is_the_model_on_the_whole_graph(name, kwargs, csc_order):
    """The values kept as a rank's own graph keeps them (the user's order, read through the perm) or as the node-shared
    graph does (the CSC's order): either way each chunk reads its in-edges' own rows."""
    data = _graph()
    model = build_model(ModelConfig(name=name, hidden=16, num_layers=2, kwargs=kwargs), 8, 5, seed=1).eval()
    colptr, row, perm = build_csc(data.edge_index, data.num_nodes)
    values = {"edge_attr": data.edge_attr, "edge_weight": data.edge_weight}
    if csc_order:
        values = {key: value[perm] for key, value in values.items()}
    api, why = layerwise(ModelStep(model))
    assert api is not None, why
    graph = GraphAt((colptr, row, perm), data.x, data.x.device, EdgeRows(values, perm, csc_order))
    h = data.x
    with torch.no_grad():
        for index in range(api.num_layers):
            kind = api.source_degree_kind(index)
            degree = None if kind is None else in_degree(
                data, self_loops=kind == "with self-loops", chunk=333, csc=graph.csc, edge_weight=graph.csc_weight(api))
            rows = []
            for targets in torch.arange(data.num_nodes).split(97):
                n_id, edge_index, seeds = in_edge_batch(colptr, row, targets)
                sources = None if degree is None else (torch.arange(seeds, n_id.numel()), degree[n_id[seeds:]])
                rows.append(api.rows(index, h[n_id], edge_index, seeds, sources,
                                     **graph.chunk_edges(api, targets, torch.device("cpu"))))
            h = torch.cat(rows)
        read = "edge_weight" if name == "gcn" else "edge_attr"
        torch.testing.assert_close(h, model(data.x, data.edge_index, **{read: data[read]}), rtol=1e-4, atol=1e-5)


def test_weighted_in_degree_counts_a_self_loop_beyond_gcnconvs_own():
    """GCNConv replaces a node's self-loop by its own, keeping the loop's weight: the degree a source is normalised
    by is its in-edges' weights, a self-loop's less the 1 GCNConv adds itself unless add_self_loops=False."""
    edge_index = torch.tensor([[1, 2, 3, 3, 0], [0, 0, 0, 3, 1]])
    weight = torch.tensor([0.5, 2.0, 1.5, 4.0, 3.0])
    colptr, row, perm = build_csc(edge_index, 4)
    data = Data(num_nodes=4)
    assert in_degree(data, csc=(colptr, row, perm), edge_weight=weight[perm], chunk=2).tolist() == [4.0, 3.0, 0, 3.0]
    assert in_degree(data, self_loops=True, csc=(colptr, row, perm), edge_weight=weight[perm]).tolist() == \
        [4.0, 3.0, 0, 4.0]


# ---- bad input: one message each ----------------------------------------------------------------------------

class _SwallowsEdgeDim(nn.Module):
    """A user's model whose constructor takes anything (**kwargs) and whose forward reads no edge features."""

    def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout, **kwargs):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels)

    def forward(self, x, edge_index, edge_attr=None):
        return self.lin(x)


@pytest.mark.parametrize("name,kwargs,needle", [
    ("gine", {}, r"model.name=gine \(GINE\) needs model.kwargs.edge_dim: the width of the graph's edge features"),
    ("sage", {"edge_dim": 4}, r"model.kwargs.edge_dim is not an argument of model.name=sage \(GraphSAGE\).*"
                              r"The built-in models that read edge features \(edge_dim\): gat, gine\."),
    (f"{__name__}:_SwallowsEdgeDim", {"edge_dim": 4},
     r"model.kwargs.edge_dim=4 is set, but model.name=\S+ never reads the edges' features \(edge_attr"),
])
def test_edge_dim_for_a_model_that_reads_no_edge_features_is_refused(name, kwargs, needle):
    with pytest.raises(UserError, match=needle):
        check_model(ModelConfig(name=name, kwargs=kwargs))


def test_edge_dim_must_be_the_graphs_edge_feature_width():
    spec = resolve(ModelConfig(name="gat", kwargs={"edge_dim": 4}))
    with pytest.raises(UserError, match=r"model.kwargs.edge_dim=4 for model.name=gat, but the graph's edge "
                                        r"features \(edge_attr\) have 3 columns; set model.kwargs.edge_dim=3\."):
        kept = attach_edge_rows(Data(), EdgeRows({"edge_attr": torch.zeros(5, 3)}, torch.arange(5), csc_order=True))
        spec.check_edges(graph_edge_width(kept))  # the node-shared graph keeps its values beside the CSC alone
    with pytest.raises(UserError, match=r"model.kwargs.edge_dim=4 is set for model.name=gat, but the graph has no "
                                        r"edge features"):
        spec.check_edges(graph_edge_width(Data(x=torch.zeros(3, 2))))
    spec.check_edges(graph_edge_width(Data(edge_attr=torch.zeros(5, 4))))  # the right width: accepted
    resolve(ModelConfig(name="gat")).check_edges(3)  # no edge_dim: the model reads no edge features, accepted


def test_the_graphs_edge_values_are_read_through_the_forms_accessor(monkeypatch):
    """graph_edge_values reads the rows kept beside the CSC as attach_edge_rows keeps them, whatever the side's
    attribute is named: renamed, they are still found (read by name elsewhere, they would silently read as none)."""
    import train.graph.form as form
    import train.graph.side as side

    monkeypatch.setattr(side, "SIDE", "renamed_side")
    kept = attach_edge_rows(Data(), EdgeRows({"edge_weight": torch.ones(5)}, torch.arange(5), csc_order=True))
    assert "graph_side" not in kept.__dict__ and form.edge_rows_attached(kept)
    assert torch.equal(graph_edge_values(kept)["edge_weight"], torch.ones(5))
    assert graph_edge_values(Data(edge_attr=torch.zeros(5, 4))).keys() == {"edge_attr"}  # the graph's own
    assert graph_edge_values(attach_edge_rows(Data(), None)) == {}  # a graph without edge values


# ---- on 2 ranks: GAT(edge_dim) under DDP (the failure) and the exact evaluation with edge tensors ----

EVALUATED = {"gat": ["model.name=gat", f"model.kwargs.edge_dim={EDGE_DIM}", "model.kwargs.heads=2"],
             "gine": ["model.name=gine", f"model.kwargs.edge_dim={EDGE_DIM}"],
             "gcn": ["model.name=gcn"]}


def _shared_graph() -> Data:
    """`_graph()` as the node-shared graph holds it: the sampler's CSC, and the edge values in its order beside
    `row`, kept as the CSC is (outside Data's store, which no longer has them)."""
    from train.graph.form import attach_csc

    data = _graph().clone()
    csc = build_csc(data.edge_index, data.num_nodes)
    attach_csc(data, csc)
    attach_edge_rows(data, EdgeRows({"edge_attr": data.edge_attr[csc[2]], "edge_weight": data.edge_weight[csc[2]]},
                                    csc[2], csc_order=True))
    del data.edge_attr, data.edge_weight
    return data


def _train_two_steps(rank: int, classes: int) -> dict:
    """Two steps of GAT(edge_dim) under DDP, each rank on its own batch: its edge parameters get gradients
    (before, its edge features never reached it: DDP stopped with "Expected to have finished reduction")."""
    model = build_model(ModelConfig(name="gat", hidden=8, num_layers=2, kwargs={"edge_dim": EDGE_DIM}), 8, classes,
                        seed=0)
    ddp = nn.parallel.DistributedDataParallel(ModelStep(model))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    without_grad = []
    for step in range(2):
        batch = _batch([4, 3], batch_size=16 + 8 * rank + step)
        optimizer.zero_grad(set_to_none=True)
        out = ddp(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
                  **edge_inputs(batch))[: batch.batch_size]
        torch.nn.functional.cross_entropy(out, batch.y[: batch.batch_size]).backward()
        without_grad += [name for name, p in model.named_parameters() if p.grad is None]
        optimizer.step()
    return {"without_grad": without_grad, "edge": [name for name, _ in model.named_parameters() if "edge" in name],
            "checksum": float(sum(p.double().sum() for p in model.parameters()))}


def _worker(rank, world, port, out_dir):
    join_gloo(rank, world, port)
    try:
        from train.graph.sampling.device_plan import plan_sampling
        from train.loop.evaluate import evaluate

        data = _shared_graph()
        classes = int(data.y.max()) + 1
        result = {"ddp": _train_two_steps(rank, classes)}
        env = type("Env", (), {"rank": rank, "world_size": world})()
        for name, overrides in EVALUATED.items():
            config = load_config("tiny", ["sampler.eval_batch_size=64", "model.num_layers=2", *overrides])
            step = ModelStep(build_model(config.model, data.num_features, classes, seed=3))
            sampling = plan_sampling(data, config.sampler, torch.device("cpu"))
            result[name] = {"note": layerwise(step)[1],
                            **evaluate(step, data, config, env, torch.device("cpu"), sampling)}
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@functools.cache
def _two_ranks(out_dir: str) -> list[dict]:
    mp.start_processes(_worker, args=(2, free_port(), out_dir), nprocs=2, start_method="spawn")
    return [json.loads((Path(out_dir) / f"{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return _two_ranks(str(tmp_path_factory.mktemp("edges-2-ranks")))


def test_gat_with_edge_dim_trains_under_ddp_with_every_parameter_given_a_gradient(two_ranks):
    ddp = [r["ddp"] for r in two_ranks]
    assert all(r["without_grad"] == [] for r in ddp)
    assert ddp[0]["edge"] and ddp[0]["edge"] == ddp[1]["edge"]  # GATConv's lin_edge and att_edge
    assert ddp[0]["checksum"] == ddp[1]["checksum"]  # the same weights on both ranks after two steps


@pytest.mark.parametrize("name", list(EVALUATED))
def test_exact_evaluation_with_edge_tensors_equals_the_model_on_the_whole_graph(two_ranks, name):
    """eval.mode=full on 2 ranks, each layer reading its in-edges' features or weights from the CSC-ordered copies,
    gives the accuracies of one process running the model on the whole graph with the edges' tensors."""
    data = _graph()
    config = load_config("tiny", ["model.num_layers=2", *EVALUATED[name]])
    model = build_model(config.model, data.num_features, int(data.y.max()) + 1, seed=3).eval()
    read = ModelStep(model).edge_arguments[0]
    with torch.no_grad():
        pred = model(data.x, data.edge_index, **{read: data[read]}).argmax(-1)
        without = model(data.x, data.edge_index).argmax(-1) if name != "gine" else None
    expected = {f"{s}_acc": int((pred[data[f"{s}_idx"]] == data.y[data[f"{s}_idx"]]).sum()) / data[f"{s}_idx"].numel()
                for s in ("val", "test")}
    assert [{k: r[name][k] for k in expected} for r in two_ranks] == [expected] * 2
    assert two_ranks[0][name]["note"] == ""  # layer by layer, not the sampled fallback
    if without is not None:  # the edges' tensors change predictions here: the comparison can tell them apart
        assert not torch.equal(pred, without)


# ---- a refused fit: exit status 2, one message, nothing written ---------------------------------------------

def test_an_edge_dim_the_graph_cannot_feed_leaves_nothing_behind(tmp_path):
    """It passes the model check (the stand-in batch has edge features) and is refused once the graph is loaded,
    before anything is written."""
    from tests.test_refused_fit import fit, snapshot

    before = snapshot(tmp_path)
    done = fit(f"output.dir={tmp_path / 'run'}", "model.name=gat", "model.kwargs.edge_dim=4", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    named = "model.kwargs.edge_dim=4 is set for model.name=gat, but the graph has no edge features (edge_attr)"
    assert named in done.stderr and done.stderr.count("error:") == 1, done.stderr
    assert snapshot(tmp_path) == before and not (tmp_path / "run").exists()
