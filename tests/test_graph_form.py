"""The graph's form (train/graph/form.py): the homogeneous form's answers, and every place that needs to know a
graph's shape asking the form instead of reading a `Data`: what a heterogeneous form (issue 27) plugs into."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data, HeteroData

from tests.harness.localjob import free_port
from train.config import load_config
from train.graph.datasets.loading import num_classes, synthetic_graph
from train.graph.form import FORMS, HOMOGENEOUS, GraphForm, Homogeneous, form_named, form_of, graph_csc
from train.graph.sharing.shared_graph import graph_from_tensors, graph_tensors
from train.graph.sizes import GraphSize
from train.graph.typed_csc import build_csc
from train.models.contract import tiny_batch
from train.plan.terms import shared_graph_bytes


class Recording(Homogeneous):
    """The homogeneous form under another name, noting each question asked of it."""

    name = "recording"

    def __init__(self):
        self.asked: set[str] = set()

    def __getattribute__(self, attribute):
        if attribute in GraphForm.__abstractmethods__:
            object.__getattribute__(self, "asked").add(attribute)
        return object.__getattribute__(self, attribute)


@pytest.fixture
def recording(monkeypatch):
    """A Recording form in FORMS, ahead of the homogeneous one: every `form_of(Data)` finds it."""
    form = Recording()
    monkeypatch.setattr("train.graph.form.FORMS", {form.name: form, **FORMS})
    return form


def tiny_graph() -> Data:
    return synthetic_graph(load_config("tiny").data)


def test_a_pyg_data_is_homogeneous_and_another_graph_is_named():
    assert form_of(tiny_graph()) is HOMOGENEOUS and form_named("homogeneous") is HOMOGENEOUS
    # a HeteroData trains as its typed Data (train/graph/typed_graph.py), which is the heterogeneous form
    with pytest.raises(TypeError, match="a graph of type HeteroData has no form here; the forms are: heterogeneous, "
                                        "homogeneous"):
        form_of(HeteroData())
    with pytest.raises(KeyError, match="graph form 'typed' is not known; the forms are: heterogeneous, homogeneous"):
        form_named("typed")


def test_the_homogeneous_form_answers_from_the_data():
    data = tiny_graph()
    form = HOMOGENEOUS
    assert form.num_nodes(data) == data.num_nodes and form.feature_width(data) == data.x.size(1)
    assert form.num_classes(data) == int(data.y.max()) + 1 == num_classes(data)
    nodes = form.split_nodes(data, "val")
    assert torch.equal(nodes, data.val_idx)
    assert torch.equal(form.features(data, nodes), data.x[nodes])
    assert torch.equal(form.labels(data, nodes), data.y[nodes])
    batch = form.feature_batch(data, nodes[:5])
    assert torch.equal(batch.x, data.x[nodes[:5]]) and batch.batch_size == 5 and batch.edge_index.shape == (2, 0)
    colptr, row, perm = form.structure(data)
    expected = build_csc(data.edge_index, data.num_nodes)
    assert torch.equal(colptr, expected[0]) and torch.equal(row, expected[1]) and graph_csc(data)[0] is colptr


def test_shared_tensors_give_the_graph_back_with_its_structure_alone():
    data = tiny_graph()
    colptr, row, _perm = build_csc(data.edge_index, data.num_nodes)
    tensors, size = HOMOGENEOUS.shared_tensors(data)
    made = {name: value() if callable(value) else value for name, value in tensors.items()}
    assert size == sum(t.nbytes for t in made.values())
    again = HOMOGENEOUS.from_tensors(made)
    assert torch.equal(again.x, data.x) and torch.equal(again.test_idx, data.test_idx)
    assert torch.equal(graph_csc(again)[0].long(), colptr) and torch.equal(graph_csc(again)[1].long(), row)
    assert "edge_index" not in again  # the structure travels in the CSC beside it


def test_a_planned_graph_of_meta_tensors_shares_what_the_real_one_does():
    data = tiny_graph()
    size = GraphSize(data.num_nodes, data.edge_index.size(1), data.x.size(1), 8,
                     tuple(data[f"{s}_idx"].numel() for s in ("train", "val", "test")))
    planned = HOMOGENEOUS.planned(size)
    assert planned.x.device.type == "meta"
    assert HOMOGENEOUS.shared_tensors(planned)[1] == HOMOGENEOUS.shared_tensors(data)[1] == shared_graph_bytes(size)


def test_node_sharing_the_contract_and_the_plan_ask_the_form(recording):
    data = tiny_graph()
    tensors, _size = graph_tensors(data)
    made = {name: value() if callable(value) else value for name, value in tensors.items()}
    graph_from_tensors(made, recording)
    batch = tiny_batch(2, recording)
    assert batch.batch_size == 4 and batch.x.size(1) == 6
    size = GraphSize(100, 400, 4, 3, (50, 25, 25), form="recording")
    assert shared_graph_bytes(size) == HOMOGENEOUS.shared_tensors(HOMOGENEOUS.planned(size))[1]
    num_classes(data)
    assert recording.asked >= {"shared_tensors", "from_tensors", "tiny", "structure", "planned", "num_classes"}


def test_the_loop_and_the_evaluation_ask_the_form(recording, tmp_path):
    """One rank (world size 1, in this process): a graph model and a feature-only one, an epoch each, evaluated."""
    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph

    settings = ["trainer.epochs=1", "dist.backend=gloo", "output.progress=lines"]
    config = load_config("tiny", settings)
    env = resolve({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    with process_group(env, config.dist) as (_backend, device), shared_graphs():
        data = obtain_graph(config, env)
        for model in ("sage", "mlp"):
            out = tmp_path / model
            out.mkdir()
            Trainer(load_config("tiny", [*settings, f"model.name={model}"]), env, device, data, out).fit()
    # the model's in_channels and out_channels, the sampler's CSC, the epoch's seeds, the MLP's batches,
    # the evaluation's rows, splits, features and labels
    assert recording.asked >= {"feature_width", "num_classes", "structure", "split_nodes", "feature_batch",
                               "num_nodes", "features", "labels"}, recording.asked
