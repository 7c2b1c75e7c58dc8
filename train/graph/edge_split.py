"""The edges link prediction trains and is scored on, computed alike on every rank from the loaded graph.

A graph that brings its own edge split (OGB's ogbl-citation2) gives it as tensors beside its edges, named by
train/graph/link_split.py: the positive training, validation and test edges, and per positive its own negative
targets (OGB's protocol: each positive ranked against its K negatives); its edges are the message-passing
graph. Any other graph is split by PyG's `RandomLinkSplit`
(task.val_fraction, task.test_fraction; undirected where the graph is, as for Planetoid), seeded by
trainer.seed, so every rank computes the same split: its training edges become the message-passing graph,
the validation and test edges never appear in it, and each of those splits gets as many negative pairs as
positives (RandomLinkSplit's). A graph without edges to predict is refused.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from train.config import Config
from train.errors import UserError
from train.graph.epoch_split import derive_seed
from train.graph.form import graph_csc
from train.graph.hetero_meta import graph_meta
from train.graph.link_split import RANKED_SPLITS, has_link_split, neg_dst, pos_edges
from train.graph.shared_graph import csc_targets


@dataclass(frozen=True)
class EdgeSplit:
    """One evaluation split: pairs to score and their labels (1: an edge, 0: a negative), and where the split
    gives each positive its own negatives, those ([positives, K] targets of the positive's source)."""

    pairs: Tensor  # [2, P] (with ranked negatives: the positives alone)
    labels: Tensor  # [P] float
    ranked_negatives: Tensor | None = None  # [positives, K]: OGB's MRR and Hits@K

    @property
    def positives(self) -> Tensor:
        return self.pairs[:, self.labels > 0.5]


@dataclass(frozen=True)
class LinkSplit:
    """The message-passing graph, the positive training edges, and the val and test splits."""

    graph: Data  # what batches are sampled from: the training edges only
    train: Tensor  # [2, E_train] positive training edges (one direction of an undirected graph)
    val: EdgeSplit
    test: EdgeSplit
    undirected: bool  # a seed edge is left out of its batch in both directions
    source: str  # "RandomLinkSplit" or "the dataset's own"


def graph_edges(data: Data) -> Tensor:
    """The graph's edges [2, E]: its edge_index, or rebuilt from the CSC where the node shares only that."""
    if data.edge_index is not None:
        return data.edge_index
    colptr, row, _perm = graph_csc(data)
    return torch.stack([row.long(), csc_targets(colptr)])


def _refuse_edgeless(config: Config, count: int, what: str) -> None:
    if count == 0:
        raise UserError(f"task.name=link needs edges to predict, but data.name={config.data.name!r} has {what}; "
                        "give a graph with edges, or task.name=node to classify its nodes.")


def own_split(data: Data, config: Config) -> LinkSplit:
    """The dataset's own split (train/graph/link_split.py's fields): the graph itself is the message-passing graph.
    A seed edge leaves its batch in both directions: such a graph passes messages both ways (ogbl-citation2's
    training citations, made undirected as OGB's examples do), and the reverse of an edge tells the edge."""
    train = pos_edges(data, "train")
    _refuse_edgeless(config, train.size(1), "no training edges in its own split")
    splits = {}
    for name in RANKED_SPLITS:
        positives = pos_edges(data, name)  # each scored against its own negatives (the evaluation pairs them)
        splits[name] = EdgeSplit(positives, torch.ones(positives.size(1)), neg_dst(data, name))
    return LinkSplit(data, train, splits["val"], splits["test"], undirected=True, source="the dataset's own")


@contextlib.contextmanager
def _seeded_globals(seed: int) -> Iterator[None]:
    """RandomLinkSplit draws from torch's global generator, its negatives from Python's `random`: both seeded for
    the split alone, and restored after it (the run's own draws go on as without it)."""
    state = random.getstate()
    random.seed(seed)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        random.setstate(state)


def random_split(data: Data, config: Config) -> LinkSplit:
    """PyG's RandomLinkSplit of the graph's edges, the same on every rank (seeded by trainer.seed)."""
    from torch_geometric.transforms import RandomLinkSplit
    from torch_geometric.utils import is_undirected

    edges = graph_edges(data)
    _refuse_edgeless(config, edges.size(1), "no edges")
    undirected = is_undirected(edges, num_nodes=data.num_nodes)
    task = config.task
    split = RandomLinkSplit(num_val=task.val_fraction, num_test=task.test_fraction, is_undirected=undirected,
                            add_negative_train_samples=False)
    with _seeded_globals(derive_seed(config.trainer.seed, 3)):
        train, val, test = split(Data(edge_index=edges, num_nodes=data.num_nodes))
    _refuse_edgeless(config, train.edge_label_index.size(1), "too few edges to keep any for training")
    graph = Data(x=data.x, y=data.y, edge_index=train.edge_index, num_nodes=data.num_nodes)
    return LinkSplit(graph, train.edge_label_index, EdgeSplit(val.edge_label_index, val.edge_label.float()),
                     EdgeSplit(test.edge_label_index, test.edge_label.float()), undirected, "RandomLinkSplit")


def link_split(data: Data, config: Config) -> LinkSplit:
    """The dataset's own split where it has one, else RandomLinkSplit's. A heterogeneous graph (a `files` graph of
    types) is refused: its edges are of several relations, and which one to predict is not built (issue 27)."""
    meta = graph_meta(data)
    if meta is not None:
        raise UserError(f"task.name=link predicts the edges of a homogeneous graph, but data.name={config.data.name!r} "
                        f"is heterogeneous (node types {', '.join(meta.node_types)}); use task.name=node with "
                        "data.target_node_type, or a homogeneous graph for link prediction.")
    if has_link_split(data):
        return own_split(data, config)
    return random_split(data, config)
