"""The edges link prediction trains and is scored on: split once where the graph is loaded, read by every rank.

A graph that brings its own edge split (OGB's ogbl-citation2) gives it as tensors beside its edges, named by
train/graph/link_fields.py: the positive training, validation and test edges, and per positive its own negative
targets (OGB's protocol: each positive ranked against its K negatives); its edges are the message-passing
graph. Any other graph is split by PyG's `RandomLinkSplit` (task.val_fraction, task.test_fraction; undirected
where the graph is, as for Planetoid), seeded by trainer.seed, where the graph is loaded (`split_on_loading`: a
node's local rank 0 under data.share=node, each process under data.share=process): its training edges become the
message-passing graph, the validation and test edges never appear in it, and each of those splits gets as many
negative pairs as positives (RandomLinkSplit's), all carried in link_split.py's fields. So the node shares that
graph's CSC and the split once, as it does a dataset's own, and every rank reads the split from the fields
(`link_split`). A graph without edges to predict, or of several node types, is refused where it is loaded.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import RandomLinkSplit
from torch_geometric.utils import is_undirected

from train.config import Config
from train.errors import UserError
from train.graph.edge_keys import edge_keys
from train.graph.edge_rows import edge_values
from train.graph.form import SPLITS
from train.graph.link_fields import (
    HELD_OUT_SPLITS,
    UNDIRECTED,
    has_link_split,
    messages_both_ways,
    neg_dst,
    neg_edges,
    neg_edges_key,
    pos_edges,
    pos_edges_key,
)
from train.graph.seeds import derive_seed
from train.graph.typed_meta import graph_meta


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
    """The positive training edges and the val and test splits of a graph whose edges are the message-passing graph
    (the training edges only)."""

    train: Tensor  # [2, E_train] positive training edges (one direction of an undirected graph)
    val: EdgeSplit
    test: EdgeSplit
    undirected: bool  # a seed edge is left out of its batch in both directions
    source: str  # "RandomLinkSplit" or "the dataset's own"


def _refuse_edgeless(config: Config, count: int, what: str) -> None:
    if count == 0:
        raise UserError(f"task.name=link needs edges to predict, but data.name={config.data.name!r} has {what}; "
                        "give a graph with edges, or task.name=node to classify its nodes.")


def _refuse_typed(data: Data, config: Config) -> None:
    """A heterogeneous graph (a `files` graph of types): its edges are of several relations, and which one to
    predict is not built (issue 27)."""
    meta = graph_meta(data)
    if meta is not None:
        raise UserError(f"task.name=link predicts the edges of a homogeneous graph, but data.name={config.data.name!r} "
                        f"is heterogeneous (node types {', '.join(meta.node_types)}); use task.name=node with "
                        "data.target_node_type, or a homogeneous graph for link prediction.")


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


@dataclass(frozen=True)
class SplitInputs:
    """Every setting RandomLinkSplit's split of a graph reads (`random_split` reads them from here alone), so what
    keys a split graph (bench/accuracy.py's graph_key) follows when an input is added."""

    val_fraction: float  # task.val_fraction
    test_fraction: float  # task.test_fraction
    seed: int  # trainer.seed


def split_inputs(config: Config) -> SplitInputs:
    return SplitInputs(config.task.val_fraction, config.task.test_fraction, config.trainer.seed)


def random_split(data: Data, config: Config) -> Data:
    """PyG's RandomLinkSplit of the graph's edges (seeded by trainer.seed): the graph's nodes (features, labels,
    node split) with the training edges as its edges, each with its own values (edge_attr, edge_weight:
    `values_of_edges`), and the split in link_split.py's fields. It reads the config's `split_inputs` (and
    data.name, to name a graph it refuses)."""
    edges = data.edge_index
    _refuse_edgeless(config, edges.size(1), "no edges")
    undirected = is_undirected(edges, num_nodes=data.num_nodes)
    inputs = split_inputs(config)
    split = RandomLinkSplit(num_val=inputs.val_fraction, num_test=inputs.test_fraction, is_undirected=undirected,
                            add_negative_train_samples=False)
    with _seeded_globals(derive_seed(inputs.seed, 3)):
        train, val, test = split(Data(edge_index=edges, num_nodes=data.num_nodes))
    _refuse_edgeless(config, train.edge_label_index.size(1), "too few edges to keep any for training")
    fields = {pos_edges_key("train"): train.edge_label_index, UNDIRECTED: torch.tensor(undirected)}
    for name, held_out in zip(HELD_OUT_SPLITS, (val, test)):
        positive = held_out.edge_label > 0.5  # RandomLinkSplit's pairs: its positives, then as many negatives
        fields[pos_edges_key(name)] = held_out.edge_label_index[:, positive]
        fields[neg_edges_key(name)] = held_out.edge_label_index[:, ~positive]
    nodes = {name: data[name] for name in ("x", "y", *SPLITS) if data.get(name) is not None}
    values = values_of_edges(data, train.edge_index)
    return Data(**nodes, edge_index=train.edge_index, **values, num_nodes=data.num_nodes, **fields)


def values_of_edges(data: Data, edges: Tensor) -> dict[str, Tensor]:
    """The graph's values (edge_attr, edge_weight) of `edges`, each an edge of the graph, looked up by its ends.
    Not RandomLinkSplit's own: of an undirected graph it keeps one direction of each edge and gives the reverse the
    same values, where a graph's values may depend on the direction (synthetic-edges: the target's class)."""
    values = edge_values(data)
    if not values:
        return {}
    keys = edge_keys(data.edge_index, data.num_nodes)
    order = torch.argsort(keys)
    rows = order[torch.searchsorted(keys[order], edge_keys(edges, data.num_nodes))]
    return {name: value[rows] for name, value in values.items()}


def split_on_loading(data: Data, config: Config) -> Data:
    """The graph a link task trains on, made where the graph is loaded (once per node): the dataset's own split
    where it has one, else RandomLinkSplit's."""
    _refuse_typed(data, config)
    if has_link_split(data):
        _refuse_edgeless(config, pos_edges(data, "train").size(1), "no training edges in its own split")
        return data
    return random_split(data, config)


def _held_out(data: Data, name: str) -> EdgeSplit:
    """A scored split from its fields: each positive with its own negatives, or the positives and negative pairs
    (positives first, as RandomLinkSplit gives them)."""
    positives = pos_edges(data, name)
    negatives = neg_edges(data, name)
    if negatives is None:
        return EdgeSplit(positives, torch.ones(positives.size(1)), neg_dst(data, name))
    return EdgeSplit(torch.cat([positives, negatives], dim=1),
                     torch.cat([torch.ones(positives.size(1)), torch.zeros(negatives.size(1))]))


def split_of(data: Data) -> LinkSplit:
    """The split a loaded graph carries (its own, or `split_on_loading`'s), as every rank reads it: from the
    fields, with no copy of the graph."""
    if not has_link_split(data):
        raise ValueError("the graph carries no link split: a link task's graph is split where it is loaded "
                         "(split_on_loading)")
    random_pairs = neg_edges(data, HELD_OUT_SPLITS[0]) is not None
    return LinkSplit(pos_edges(data, "train"), _held_out(data, "val"), _held_out(data, "test"),
                     undirected=messages_both_ways(data),
                     source="RandomLinkSplit" if random_pairs else "the dataset's own")
