"""The graph's form: what training asks of a graph, answered in one place per form.

The loop, the node-shared graph, the sampler, the evaluation, the model's contract and the memory plan
ask a `GraphForm` instead of reading a PyG `Data`'s fields: how many nodes, how wide the features, how
many classes, a split's nodes, features and labels of given nodes, the tensors a node shares (and the
graph rebuilt from them), the sampler's structure (the CSC kept beside the graph), a batch for a model
that reads no graph, the contract's tiny stand-in graph and a graph of meta tensors of a planned size.

The homogeneous graph (`Data`: x, y, edge_index, the split as index tensors) is the only form today. A
heterogeneous graph (a `HeteroData` of node and edge types, the target type's labels: issue 27) plugs
in as a second form in FORMS; `form_of` picks the form by the graph's type, `form_named` by the name a
planned size (`GraphSize.form`) carries.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

import torch
from torch import Tensor
from torch_geometric.data import Data

from train.graph.edge_rows import EDGE_VALUES, EdgeRows, edge_values
from train.graph.graphsize import GraphSize
from train.graph.labels import is_multilabel, num_outputs
from train.graph.link_split import LINK_FIELDS
from train.graph.sampler import build_csc

SPLITS = ("train_idx", "val_idx", "test_idx")
CSC = tuple[Tensor, Tensor, "Tensor | None"]  # colptr, row, perm (None: the node-shared graph keeps none)
Shared = dict[str, "Tensor | Callable[[], Tensor]"]  # in write order; a callable is made when its turn comes


# ---- the CSC travels beside the Data, not inside it ---------------------------------------------

def attach_csc(data: Data, csc: CSC) -> Data:
    """Keep the sampler's ``(colptr, row, perm)`` on `data` as a plain Python attribute.

    Outside Data's store on purpose: PyG copies the store into every batch, and
    ``batch.to()`` / ``pin_memory()`` would then move or pin the whole CSC each step.
    """
    object.__setattr__(data, "csc", csc)
    return data


def graph_csc(data: Data) -> CSC | None:
    return data.__dict__.get("csc")


def attach_edge_rows(data: Data, rows: EdgeRows | None) -> Data:
    """Keep the edges' values and ids (train/graph/edge_rows.py) beside the CSC, outside Data's store (as the CSC)."""
    object.__setattr__(data, "edge_rows", rows)
    return data


def csc_index_dtype(num_nodes: int, num_edges: int) -> torch.dtype:
    """The ids of the node-shared CSC: int32 where every node id and edge position fits (colptr counts up to
    the number of edges), else int64. Half the bytes per edge; pyg-lib samples either (PyG casts the seeds
    to colptr's dtype), and every reader turns the ids it read to int64 (`.long()`)."""
    limit = torch.iinfo(torch.int32).max
    return torch.int32 if num_nodes <= limit and num_edges <= limit else torch.int64


# ---- the interface ------------------------------------------------------------------------------

class GraphForm(ABC):
    """What training needs of one form of graph. `split` is train, val or test."""

    name: str

    @abstractmethod
    def matches(self, graph) -> bool:
        """Whether `graph` has this form."""

    @abstractmethod
    def num_nodes(self, graph) -> int:
        """The nodes that are classified (their rows in the evaluation's layers)."""

    @abstractmethod
    def feature_width(self, graph) -> int:
        """The model's in_channels."""

    @abstractmethod
    def num_classes(self, graph) -> int:
        """The model's out_channels: the classes, or the tasks of a multi-label graph (train/graph/labels.py)."""

    @abstractmethod
    def multilabel(self, graph) -> bool:
        """Whether each node has several binary tasks (train/graph/labels.py), not one class."""

    @abstractmethod
    def split_nodes(self, graph, split: str) -> Tensor:
        """The ids of the split's nodes."""

    @abstractmethod
    def features(self, graph, nodes: Tensor) -> Tensor:
        """The input features of `nodes`."""

    @abstractmethod
    def labels(self, graph, nodes: Tensor) -> Tensor:
        """The labels of `nodes`."""

    @abstractmethod
    def structure(self, graph) -> CSC:
        """The sampler's structure, built once and kept beside the graph."""

    @abstractmethod
    def edge_rows(self, graph) -> EdgeRows | None:
        """The edges' values and ids by CSC position (None: the graph has no edge values), kept beside the CSC."""

    @abstractmethod
    def shared_tensors(self, graph) -> tuple[Shared, int]:
        """What a node shares (data.share=node), in write order, and its size in bytes."""

    @abstractmethod
    def from_tensors(self, tensors: Mapping[str, Tensor]):
        """The graph again from the tensors `shared_tensors` gave (mapped from the node's shared files)."""

    @abstractmethod
    def feature_batch(self, graph, nodes: Tensor):
        """A batch of `nodes` alone, for a model that reads no graph (the MLP)."""

    @abstractmethod
    def tiny(self, num_nodes: int, features: int, generator: torch.Generator):
        """A small random graph of this form: the stand-in the model's contract samples a batch from."""

    @abstractmethod
    def planned(self, size: GraphSize):
        """A graph of meta tensors of `size` (nothing allocated): what the memory plan measures."""


class Homogeneous(GraphForm):
    """One node type, one edge type: a PyG `Data` with x, y, edge_index and the split as index tensors, and the
    edges' values (edge_attr, edge_weight) where the graph has them."""

    name = "homogeneous"

    def matches(self, graph) -> bool:
        return isinstance(graph, Data)

    def num_nodes(self, graph: Data) -> int:
        return int(graph.num_nodes)

    def feature_width(self, graph: Data) -> int:
        return int(graph.num_features)

    def num_classes(self, graph: Data) -> int:
        return num_outputs(graph.y) if graph.y is not None else 0  # no labels: a graph for link prediction only

    def multilabel(self, graph: Data) -> bool:
        return is_multilabel(graph.y)

    def split_nodes(self, graph: Data, split: str) -> Tensor:
        nodes = graph.get(f"{split}_idx")  # none: a graph for link prediction only, whose seeds are edges
        return nodes if nodes is not None else torch.empty(0, dtype=torch.long)

    def features(self, graph: Data, nodes: Tensor) -> Tensor:
        return graph.x[nodes]

    def labels(self, graph: Data, nodes: Tensor) -> Tensor:
        return graph.y[nodes]

    def structure(self, graph: Data) -> CSC:
        csc = graph_csc(graph)
        if csc is None:
            csc = build_csc(graph.edge_index, graph.num_nodes)
            attach_csc(graph, csc)
        return csc

    def edge_rows(self, graph: Data) -> EdgeRows | None:
        """Built once: a rank's own graph keeps its values in the user's order, read through the CSC's perm."""
        if "edge_rows" not in graph.__dict__:
            values = edge_values(graph)
            attach_edge_rows(graph, EdgeRows(values, self.structure(graph)[2], csc_order=False) if values else None)
        return graph.__dict__["edge_rows"]

    def shared_tensors(self, graph: Data) -> tuple[Shared, int]:
        """The features, labels and splits, then the CSC, then (where the graph has them) the CSC's perm and the
        edges' values in CSC order. The CSC is built while writing, from ``graph.edge_index``, which it then drops
        from `graph` (local rank 0's private copy) to lower the peak; ``row`` is written from the CSC just built,
        each edge value permuted into CSC order when its turn comes (and dropped from `graph`)."""
        num_nodes, num_edges = graph.num_nodes, graph.edge_index.size(1)
        index_dtype = csc_index_dtype(num_nodes, num_edges)
        values = edge_values(graph)
        built: dict[str, Tensor] = {}

        def colptr() -> Tensor:
            ptr, row, perm = build_csc(graph.edge_index, num_nodes)
            del graph.edge_index
            built["row"] = row.to(index_dtype)
            if values:
                built["perm"] = perm
            del row, perm
            return ptr.to(index_dtype)

        def in_csc_order(name: str, last: bool) -> Callable[[], Tensor]:
            def permuted() -> Tensor:
                perm = built.pop("perm") if last else built["perm"]
                out = values.pop(name).index_select(0, perm)
                delattr(graph, name)
                return out
            return permuted

        # the labels and node splits where the graph has them, and a graph's own link split (graph/link_split.py)
        kept = ("x", "y", *SPLITS, *LINK_FIELDS)
        tensors: Shared = {name: graph[name] for name in kept if graph.get(name) is not None}
        tensors["colptr"] = colptr
        tensors["row"] = lambda: built.pop("row")
        index_bytes = index_dtype.itemsize
        size = sum(t.nbytes for t in tensors.values() if isinstance(t, Tensor)) + (num_nodes + 1) * index_bytes + \
            num_edges * index_bytes
        if values:
            tensors["perm"] = lambda: built["perm"].to(index_dtype)
            size += num_edges * index_bytes + sum(value.nbytes for value in values.values())
        for number, name in enumerate(list(values)):
            tensors[name] = in_csc_order(name, last=number == len(values) - 1)
        return tensors, size

    def from_tensors(self, tensors: Mapping[str, Tensor]) -> Data:
        """Features, labels and splits in the Data, its structure only in the CSC beside it, and the edges' values
        (in CSC order) and ids beside that."""
        data = Data(**{name: tensors[name] for name in ("x", "y", *SPLITS, *LINK_FIELDS) if name in tensors})
        values = {name: tensors[name] for name in EDGE_VALUES if name in tensors}
        attach_edge_rows(data, EdgeRows(values, tensors["perm"], csc_order=True) if "perm" in tensors else None)
        return attach_csc(data, (tensors["colptr"], tensors["row"], None))

    def feature_batch(self, graph: Data, nodes: Tensor) -> Data:
        return Data(x=graph.x[nodes], y=graph.y[nodes], n_id=nodes, edge_index=torch.empty(2, 0, dtype=torch.long),
                    batch_size=nodes.numel())

    def tiny(self, num_nodes: int, features: int, generator: torch.Generator) -> Data:
        edge_index = torch.randint(0, num_nodes, (2, num_nodes * 4), generator=generator)
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
        data = Data(x=torch.randn(num_nodes, features, generator=generator), edge_index=edge_index,
                    num_nodes=num_nodes)
        self.structure(data)
        return data

    def planned(self, size: GraphSize) -> Data:
        data = Data(x=torch.empty(size.nodes, size.features, device="meta"),
                    y=torch.empty(size.nodes, dtype=torch.long, device="meta"),
                    edge_index=torch.empty(2, size.edges, dtype=torch.long, device="meta"),
                    **{split: torch.empty(n, dtype=torch.long, device="meta") for split, n in zip(SPLITS, size.split)})
        if size.edge_features:
            data.edge_attr = torch.empty(size.edges, size.edge_features, device="meta")
        if size.edge_weight:
            data.edge_weight = torch.empty(size.edges, device="meta")
        return data


HOMOGENEOUS = Homogeneous()
FORMS: dict[str, GraphForm] = {form.name: form for form in (HOMOGENEOUS,)}


def form_of(graph) -> GraphForm:
    """The form of a loaded graph."""
    for form in FORMS.values():
        if form.matches(graph):
            return form
    raise TypeError(f"a graph of type {type(graph).__name__} has no form here; the forms are: {', '.join(FORMS)}")


def form_named(name: str) -> GraphForm:
    """The form a planned size names (GraphSize.form)."""
    if name not in FORMS:
        raise KeyError(f"graph form {name!r} is not known; the forms are: {', '.join(FORMS)}")
    return FORMS[name]
