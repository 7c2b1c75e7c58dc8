"""A link task's split is made where the graph is loaded (train/graph/link_split.py split_on_loading), once per node
under data.share=node: exactly the split RandomLinkSplit gives called directly (as every rank once called it, so
the GAE figures stay), carried in link_fields.py's fields through the node-shared files, and on 2 real ranks the
sampler's CSC of the message-passing graph and the split are mappings of the node's one shared segment."""

from __future__ import annotations

import hashlib
import json
import os
import random

import pytest
import torch
from torch_geometric.data import Data

from tests.harness.localjob import run_local_job
from tests.harness.workers.link_maps import RESULT
from train.config import Config, load_config
from train.errors import UserError
from train.graph.datasets.synthetic import synthetic_graph
from train.graph.form import HETEROGENEOUS
from train.graph.link_fields import LINK_FIELDS, UNDIRECTED
from train.graph.link_split import split_of, split_on_loading
from train.graph.seeds import derive_seed
from train.graph.sharing.shared_graph import (
    csc_index_dtype,
    graph_csc,
    graph_from_tensors,
    graph_tensors,
    map_tensors,
    write_tensors,
)
from train.graph.typed_csc import build_csc

LINK = ["data.num_nodes=300", "task.name=link"]


def direct_split(data: Data, config: Config) -> tuple[Data, Data, Data]:
    """PyG's RandomLinkSplit called directly on the loaded graph's edges, as link_split.py called it on every rank
    before the split moved to the loading: the same arguments, the globals seeded with derive_seed(seed, 3)."""
    from torch_geometric.transforms import RandomLinkSplit
    from torch_geometric.utils import is_undirected

    edges, task, state = data.edge_index, config.task, random.getstate()
    undirected = is_undirected(edges, num_nodes=data.num_nodes)
    split = RandomLinkSplit(num_val=task.val_fraction, num_test=task.test_fraction, is_undirected=undirected,
                            add_negative_train_samples=False)
    seed = derive_seed(config.trainer.seed, 3)
    try:
        with torch.random.fork_rng(devices=[]):
            random.seed(seed)
            torch.manual_seed(seed)
            return split(Data(edge_index=edges, num_nodes=data.num_nodes))
    finally:
        random.setstate(state)


def loaded(config: Config, directed: bool) -> Data:
    """The tiny synthetic graph (undirected), or its edges of a smaller source than target only (directed)."""
    data = synthetic_graph(config.data)
    if directed:
        data.edge_index = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    return data


def shared_copy(data: Data, tmp_path) -> Data:
    """`data` as a node's ranks get it: written as the node-shared graph's files and mapped back."""
    tensors, _size = graph_tensors(data)
    write_tensors(tmp_path, tensors, {})
    return graph_from_tensors(map_tensors(tmp_path))


@pytest.mark.parametrize("directed", [False, True])
def test_the_split_made_on_loading_is_exactly_random_link_splits_and_survives_the_node_shared_files(directed, tmp_path):
    config = load_config("tiny", LINK)
    train, val, test = direct_split(loaded(config, directed), config)
    data = split_on_loading(loaded(config, directed), config)
    assert torch.equal(data.edge_index, train.edge_index)  # the message-passing graph: the training edges only
    assert torch.equal(data.x, loaded(config, directed).x) and torch.equal(data.y, loaded(config, directed).y)
    colptr, row, _perm = build_csc(train.edge_index, config.data.num_nodes)
    ids = csc_index_dtype(config.data.num_nodes, row.numel())
    mapped = shared_copy(split_on_loading(loaded(config, directed), config), tmp_path)
    assert {name for name in LINK_FIELDS if name in mapped} == {name for name in LINK_FIELDS if name in data}
    shared_colptr, shared_row, _ = graph_csc(mapped)
    assert torch.equal(shared_colptr, colptr.to(ids)) and torch.equal(shared_row, row.to(ids))
    for split in (split_of(data), split_of(mapped)):
        assert torch.equal(split.train, train.edge_label_index)
        for ours, theirs in ((split.val, val), (split.test, test)):
            assert torch.equal(ours.pairs, theirs.edge_label_index) and ours.ranked_negatives is None
            assert torch.equal(ours.labels, theirs.edge_label.float())
        assert split.undirected is (not directed) and split.source == "RandomLinkSplit"


def test_a_graph_with_its_own_split_is_kept_as_it_is_and_passes_messages_both_ways():
    config = load_config("tiny", LINK)
    data = loaded(config, directed=False)
    own = {"train_pos_edge_index": data.edge_index[:, :50], "val_pos_edge_index": data.edge_index[:, 50:60],
           "test_pos_edge_index": data.edge_index[:, 60:70], "val_neg_dst": torch.zeros(10, 3, dtype=torch.long),
           "test_neg_dst": torch.ones(10, 3, dtype=torch.long)}
    for name, tensor in own.items():
        data[name] = tensor
    assert split_on_loading(data, config) is data and UNDIRECTED not in data
    split = split_of(data)
    assert split.undirected and split.source == "the dataset's own"
    assert torch.equal(split.train, own["train_pos_edge_index"])
    assert torch.equal(split.test.ranked_negatives, own["test_neg_dst"]) and split.test.labels.tolist() == [1.0] * 10


def test_a_link_task_on_a_heterogeneous_graph_is_refused_where_the_graph_is_loaded():
    typed = HETEROGENEOUS.tiny(40, 3, torch.Generator().manual_seed(0))
    with pytest.raises(UserError, match=r"task.name=link predicts the edges of a homogeneous graph, but "
                                        r"data.name='synthetic' is heterogeneous \(node types a, b\)"):
        split_on_loading(typed, load_config("tiny", LINK))


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def test_a_link_run_on_two_ranks_maps_the_message_passing_csc_and_the_split_from_the_nodes_one_segment():
    """Each rank's sampler CSC (of the training edges) and split are the node's shared files, as RandomLinkSplit
    called directly gives them; no rank splits or builds a CSC of its own."""
    config = load_config("tiny", ["task.name=link"])
    job = run_local_job(["data.share=node"], world_size=2, job_id=f"8{os.getpid()}1",
                        module="tests.harness.workers.link_maps")
    assert job.returncodes == [0, 0], "\n".join(job.outputs)
    rows = json.loads(next(line for line in job.outputs[0].splitlines() if line.startswith(RESULT))[len(RESULT):])
    train, val, test = direct_split(synthetic_graph(config.data), config)
    colptr, row, _perm = build_csc(train.edge_index, config.data.num_nodes)
    ids = csc_index_dtype(config.data.num_nodes, row.numel())
    want = {"colptr": _digest(colptr.to(ids)), "row": _digest(row.to(ids)), "train": _digest(train.edge_label_index),
            "train_pos_edge_index": _digest(train.edge_label_index)}
    for name, part in (("val", val), ("test", test)):
        positive = part.edge_label > 0.5
        want[f"{name}_pos_edge_index"] = _digest(part.edge_label_index[:, positive])
        want[f"{name}_neg_edge_index"] = _digest(part.edge_label_index[:, ~positive])
    want[UNDIRECTED] = _digest(torch.tensor(True))
    held_out = {name: [_digest(part.edge_label_index), _digest(part.edge_label.float())]
                for name, part in (("val", val), ("test", test))}
    for seen in rows:
        assert {name: t["digest"] for name, t in seen["tensors"].items()} == want, seen["rank"]
        assert [name for name, t in seen["tensors"].items() if not t["mapped"]] == [], seen["rank"]
        assert seen["held_out"] == held_out and seen["undirected"], seen["rank"]


def test_the_split_keeps_each_training_edges_own_values_in_either_direction():
    """synthetic-edges' features tell the target's class, so an edge and its reverse differ: each message-passing
    edge keeps its own (RandomLinkSplit's would give a reverse edge its edge's)."""
    from train.graph.datasets.loading import load_graph

    config = load_config("synthetic-edges", ["task.name=link", "data.num_nodes=500"])
    graph = load_graph(config.data)
    data = split_on_loading(graph, config)
    position = {edge: i for i, edge in enumerate(zip(*graph.edge_index.tolist()))}
    rows = torch.tensor([position[edge] for edge in zip(*data.edge_index.tolist())])
    assert data.edge_index.size(1) < graph.edge_index.size(1) and torch.equal(data.edge_attr, graph.edge_attr[rows])
    reverse = torch.tensor([position[(b, a)] for a, b in zip(*data.edge_index.tolist())])
    assert not torch.equal(graph.edge_attr[reverse], graph.edge_attr[rows])  # the direction matters in this graph


def test_the_memory_plan_counts_a_link_tasks_graph_as_the_node_shares_it_and_the_split_while_loading():
    """The node shares the training edges' CSC and the split's ids (not the loaded graph's edges); the process that
    loads holds the split's arrays at its peak (plan.held LINK_SPLIT_ARRAYS)."""
    from train.cli.plan_run import graph_size
    from train.graph.datasets.kinds import dataset_kind
    from train.graph.datasets.loading import load_graph
    from train.plan.terms import make_plan

    shared = "graph, shared once (/dev/shm or node-local disk)"
    # (config, overrides, the least ratio of the link graph's shared bytes to the node graph's): the split's ids
    # beside the training edges; with edge features (synthetic-edges), the training edges keep theirs
    for name, extra, more in (("tiny", [], 1.5), ("tiny", ["data.num_nodes=20000", "data.avg_degree=20"], 1.5),
                              ("synthetic-edges", ["data.num_nodes=3000"], 1.0)):
        node, link = load_config(name, extra), load_config(name, ["task.name=link", *extra])
        real = graph_tensors(split_on_loading(load_graph(link.data), link))[1]
        planned = make_plan(link, graph_size(link), 1, 2, gpus=False).rows["node"][shared]
        assert real <= planned <= 1.01 * real, (planned, real)  # synthetic sizes count the edges before repeats go
        assert planned > more * make_plan(node, graph_size(node), 1, 2, gpus=False).rows["node"][shared]
    loading = "while loading (local rank 0): graph, CSC build, loader"
    size = dataset_kind("Cora").plan_size(load_config("cora-gcn").data)
    plans = {task: make_plan(load_config("cora-gcn", [f"task.name={task}"]), size, 1, 2, gpus=False)
             for task in ("node", "link")}
    assert plans["link"].rows["rank"][loading] > plans["node"].rows["rank"][loading]


def test_the_memory_plan_counts_the_edge_values_a_link_split_holds_while_loading():
    """With edge features the process that splits holds them as loaded and the training edges' own, beside the
    lookup's index arrays (plan.held LINK_VALUE_ARRAYS): the loading peak is at least that split's."""
    from train.cli.plan_run import graph_size
    from train.plan.held import LINK_SPLIT_ARRAYS, LINK_VALUE_ARRAYS, held_size
    from train.plan.terms import make_plan

    config = load_config("synthetic-edges", ["task.name=link", "data.num_nodes=200000", "data.avg_degree=20"])
    loaded = graph_size(config)
    held = held_size(config, loaded)
    assert held.edge_features == loaded.edge_features == 8 and held.edges < loaded.edges
    split = (loaded.nodes * loaded.features * 4 + (2 + LINK_SPLIT_ARRAYS + LINK_VALUE_ARRAYS) * loaded.edges * 8
             + (loaded.edges + held.edges) * 8 * 4)
    loading = "while loading (local rank 0): graph, CSC build, loader"
    peak = make_plan(config, loaded, 1, 2, gpus=False).rows["rank"][loading]
    assert split <= peak <= 1.05 * split, (peak, split)  # the split sets the peak here: the loader's own is below


# a change of each input RandomLinkSplit's split reads (link_split.SplitInputs), as a config override
SPLIT_INPUT_CHANGES = {"val_fraction": "task.val_fraction=0.07", "test_fraction": "task.test_fraction=0.11",
                       "seed": "trainer.seed=7"}


def test_a_split_graphs_key_follows_every_split_input_and_nothing_else():
    """bench/accuracy.py loads a graph once per key: a link graph's key changes with each input of its split (one
    function, link_split.split_inputs, names them) and stays equal across changes the split does not read."""
    from dataclasses import fields

    from bench.accuracy import graph_key
    from train.graph.link_split import SplitInputs

    assert set(SPLIT_INPUT_CHANGES) == {field.name for field in fields(SplitInputs)}
    base = load_config("cora-link")
    for name, change in SPLIT_INPUT_CHANGES.items():
        assert graph_key(load_config("cora-link", [change])) != graph_key(base), name
    for change in ("optim.lr=0.1", "trainer.epochs=3", "task.neg_ratio=2", "model.hidden=8"):
        assert graph_key(load_config("cora-link", [change])) == graph_key(base), change
    node = load_config("cora-link", ["task.name=node"])
    assert graph_key(load_config("cora-link", ["task.name=node", "trainer.seed=7"])) == graph_key(node)


def test_the_random_split_reads_its_settings_through_split_inputs_alone(monkeypatch):
    """Given another config's split inputs, the split is that config's split, whatever else its own config says:
    it reads the fractions and the seed through link_split_module.split_inputs and nothing else of the config."""
    import train.graph.link_split as link_split_module

    wanted = load_config("tiny", [*LINK, *SPLIT_INPUT_CHANGES.values()])
    other = load_config("tiny", [*LINK, "task.neg_ratio=3", "optim.lr=0.5", "trainer.epochs=9"])
    data = loaded(wanted, directed=False)
    expected = link_split_module.random_split(data, wanted)
    inputs_of = link_split_module.split_inputs
    monkeypatch.setattr(link_split_module, "split_inputs", lambda config: inputs_of(wanted))
    made = link_split_module.random_split(data, other)
    assert set(made.keys()) == set(expected.keys())
    for name in expected.keys():
        assert torch.equal(made[name], expected[name]) if isinstance(expected[name], torch.Tensor) else \
            made[name] == expected[name], name
    monkeypatch.undo()
    assert not torch.equal(link_split_module.random_split(data, other).edge_index, expected.edge_index)
