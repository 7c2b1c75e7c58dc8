"""The graph's form: what training asks of a graph, answered in one place per form.

The loop, the node-shared graph, the sampler, the evaluation, the model's contract and the memory plan
ask a `GraphForm` instead of reading a PyG `Data`'s fields: how many nodes, how wide the features, how
many classes, a split's nodes, features and labels of given nodes, the tensors a node shares (and the
graph rebuilt from them), the sampler's structure (the CSC kept beside the graph), a batch for a model
that reads no graph, the contract's tiny stand-in graph and a graph of meta tensors of a planned size.

Two forms: the homogeneous graph (`Data`: x, y, edge_index, the split as index tensors) and the heterogeneous
one, which trains as a typed homogeneous `Data` (train/graph/typed_graph.py: `node_type`, `edge_type`, the target
type's labels and split) with its `HeteroMeta` kept beside it (`attach_meta`, `graph_meta`), its CSC sorted by
target and edge type with the typed segments beside it (train/graph/typed_csc.py), and its `edge_type` kept with
the edges' values (train/graph/edge_rows.py), so every batch carries `edge_type` and `node_type`. `form_of` picks
the form of a graph, `form_named` by the name a planned size (`GraphSize.form`) carries.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

from train.graph.edge_rows import EDGE_TYPE, EDGE_VALUES, EdgeRows, edge_values
from train.graph.labels import is_multilabel, num_outputs
from train.graph.link_fields import LINK_FIELDS, pos_edges_key
from train.graph.side import UNSET, keep, side_of
from train.graph.sizes import GraphSize
from train.graph.typed_csc import TypedSegments, build_csc, build_typed_csc
from train.graph.typed_graph import typed_graph
from train.graph.typed_meta import HeteroMeta, attach_meta, graph_meta  # noqa: F401 (reached through the form)

SPLITS = ("train_idx", "val_idx", "test_idx")
CSC = tuple[Tensor, Tensor, "Tensor | None"]  # colptr, row, perm (None: the node-shared graph keeps none)
Shared = dict[str, "Tensor | Callable[[], Tensor]"]  # in write order; a callable is made when its turn comes


# ---- the CSC travels beside the Data, not inside it ---------------------------------------------

def attach_csc(data: Data, csc: CSC) -> Data:
    """Keep the sampler's ``(colptr, row, perm)`` beside `data` (train/graph/side.py: outside Data's store, which
    PyG copies into every batch and ``batch.to()`` / ``pin_memory()`` would move or pin each step)."""
    return keep(data, csc=csc)


def graph_csc(data: Data) -> CSC | None:
    return side_of(data).csc


def graph_features(data):
    """The feature store kept beside `data` (None: none attached; its x is then every row)."""
    return side_of(data).features


def attach_edge_rows(data: Data, rows: EdgeRows | None) -> Data:
    """Keep the edges' values and ids (train/graph/edge_rows.py) beside the CSC, outside Data's store (as the CSC)."""
    return keep(data, edge_rows=rows)


def edge_rows_attached(data) -> bool:
    """Whether attach_edge_rows has run on `data` (it may have kept None: a graph without edge values)."""
    return side_of(data).edge_rows is not UNSET


def graph_edge_rows(data) -> EdgeRows | None:
    """The EdgeRows attach_edge_rows kept beside `data`'s CSC (None: none kept, or not attached yet)."""
    rows = side_of(data).edge_rows
    return None if rows is UNSET else rows


def graph_segments(data) -> TypedSegments | None:
    """The typed CSC's segments kept beside a typed graph (None: untyped, or its CSC not built yet)."""
    return side_of(data).segments


def csc_index_dtype(num_nodes: int, num_edges: int) -> torch.dtype:
    """The ids of the node-shared CSC: int32 where every node id and edge position fits (colptr counts up to
    the number of edges), else int64. Half the bytes per edge; pyg-lib samples either (PyG casts the seeds
    to colptr's dtype), and every reader turns the ids it read to int64 (`.long()`)."""
    limit = torch.iinfo(torch.int32).max
    return torch.int32 if num_nodes <= limit and num_edges <= limit else torch.int64


# ---- the interface ------------------------------------------------------------------------------

class GraphForm(ABC):
    """What training needs of one form of graph: homogeneous (`HOMOGENEOUS`), or a heterogeneous graph's typed
    one (`Heterogeneous`). The loop, the evaluation, the model's contract, node sharing and the memory plan ask the
    form (`form_of(graph)`), never the graph's attributes, so a new form is one subclass.

    Every method takes the graph as loaded (a PyG `Data`); `split` is train, val or test.

    Example::

        >>> form = form_of(data)                      # the form `data` has
        >>> seeds = form.split_nodes(data, "train")   # the training nodes' ids
        >>> x = form.features(data, seeds[:4])        # their input features
        >>> colptr, row, perm = form.structure(data)  # the CSC the sampler reads (built once)
    """

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
        """The split's nodes.

        Args:
            graph: the graph as loaded.
            split: train, val or test.

        Returns:
            The ids of the split's nodes (int64), in the node ids batches and the CSC use.
        """

    @abstractmethod
    def features(self, graph, nodes: Tensor) -> Tensor:
        """The input features of `nodes`."""

    @abstractmethod
    def labels(self, graph, nodes: Tensor) -> Tensor:
        """The labels of `nodes`."""

    @abstractmethod
    def structure(self, graph) -> CSC:
        """The sampler's structure, built once and kept beside the graph.

        Returns:
            (colptr, row, perm) as PyG's samplers build them (train/graph/typed_csc.py build_csc): the in-edges
            of node v are row[colptr[v]:colptr[v + 1]]; perm maps a CSC position to its column of edge_index
            (None: the node-shared graph keeps none, its edges already in CSC order).
        """

    @abstractmethod
    def edge_rows(self, graph) -> EdgeRows | None:
        """The edges' values and ids by CSC position (None: the graph has no edge values), kept beside the CSC."""

    def segments(self, graph) -> TypedSegments | None:
        """The typed CSC's segments (train/graph/typed_csc.py) the sampler draws k per edge type from; None: the
        graph has one edge type."""
        return None

    def node_values(self, graph) -> dict[str, Tensor]:
        """Per-node tensors besides x and y that each batch gathers by its n_id (a typed graph's node_type)."""
        return {}

    @abstractmethod
    def shared_tensors(self, graph) -> tuple[Shared, int]:
        """What a node shares (data.share=node).

        Returns:
            The tensors, by name in write order, and their size in bytes; `from_tensors` makes the graph again.
        """

    @abstractmethod
    def from_tensors(self, tensors: Mapping[str, Tensor]):
        """The graph again from the node's shared files.

        Args:
            tensors: the tensors `shared_tensors` gave, by name, mapped from the shared files.

        Returns:
            The graph, as `load` made it (its CSC and edge rows attached).
        """

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
        store = graph_features(graph)  # where the features are sharded, the Data holds none
        return store.width if store is not None else int(graph.num_features)

    def num_classes(self, graph: Data) -> int:
        return num_outputs(graph.y) if graph.y is not None else 0  # no labels: a graph for link prediction only

    def multilabel(self, graph: Data) -> bool:
        return graph.y is not None and is_multilabel(graph.y)  # no labels: a graph for link prediction only

    def split_nodes(self, graph: Data, split: str) -> Tensor:
        nodes = graph.get(f"{split}_idx")  # none: a graph for link prediction only, whose seeds are edges
        return nodes if nodes is not None else torch.empty(0, dtype=torch.long)

    def features(self, graph: Data, nodes: Tensor) -> Tensor:
        """Through the graph's feature store where it has one (collective where the features are sharded)."""
        store = graph_features(graph)
        return store.rows(nodes, nodes.device) if store is not None else graph.x[nodes]

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
        if not edge_rows_attached(graph):
            values = edge_values(graph)
            attach_edge_rows(graph, EdgeRows(values, self.structure(graph)[2], csc_order=False) if values else None)
        return graph_edge_rows(graph)

    def shared_tensors(self, graph: Data) -> tuple[Shared, int]:
        """The features, labels and splits (and the form's other node tensors), then the CSC (and what the form
        keeps beside it), then (where the graph has them) the CSC's perm and the edges' values in CSC order. The
        CSC is built while writing, from ``graph.edge_index``, which it then drops from `graph` (local rank 0's
        private copy) to lower the peak; ``row`` is written from the CSC just built, each edge value permuted into
        CSC order when its turn comes (and dropped from `graph`)."""
        num_nodes, num_edges = graph.num_nodes, graph.edge_index.size(1)
        index_dtype = csc_index_dtype(num_nodes, num_edges)
        values = self._edge_stored(graph)
        built: dict[str, Tensor] = {}

        def colptr() -> Tensor:
            ptr, row, perm, beside = self._shared_csc(graph)
            del graph.edge_index
            built["row"] = row.to(index_dtype)
            built.update({name: tensor.to(index_dtype) for name, tensor in beside.items()})
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

        def beside_tensor(name: str) -> Callable[[], Tensor]:
            return lambda: built.pop(name)

        # the labels and node splits where the graph has them, and a link task's split (graph/link_fields.py)
        kept = ("x", "y", *SPLITS, *LINK_FIELDS)
        tensors: Shared = {name: graph[name] for name in kept if graph.get(name) is not None}
        tensors.update(self._node_shared(graph))  # a typed graph's node_type (and what else its nodes share)
        tensors["colptr"] = colptr
        tensors["row"] = lambda: built.pop("row")
        beside_ids = self._beside_ids(graph)
        for name in beside_ids:
            tensors[name] = beside_tensor(name)
        index_bytes = index_dtype.itemsize
        size = (sum(t.nbytes for t in tensors.values() if isinstance(t, Tensor))
                + (sum(beside_ids.values()) + num_nodes + 1 + num_edges) * index_bytes)
        if values:
            tensors["perm"] = lambda: built["perm"].to(index_dtype)
            size += num_edges * index_bytes + sum(value.nbytes for value in values.values())
        for number, name in enumerate(list(values)):
            tensors[name] = in_csc_order(name, last=number == len(values) - 1)
        return tensors, size

    def _edge_stored(self, graph: Data) -> dict[str, Tensor]:
        """The per-edge tensors a node shares in CSC order, by name."""
        return edge_values(graph)

    def _node_shared(self, graph: Data) -> dict[str, Tensor]:
        """The per-node (and per-graph) tensors a node shares besides x, y and the splits."""
        return {}

    def _beside_ids(self, graph: Data) -> dict[str, int]:
        """What the form keeps beside the CSC, by name, and its ids (in the CSC's index dtype)."""
        return {}

    def _shared_csc(self, graph: Data) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
        """The CSC a node shares, and the tensors kept beside it (`_beside_ids`)."""
        return (*build_csc(graph.edge_index, graph.num_nodes), {})

    def from_tensors(self, tensors: Mapping[str, Tensor]) -> Data:
        """Features, labels and splits in the Data, its structure only in the CSC beside it, and the edges' values
        (in CSC order) and ids beside that."""
        data = Data(**{name: tensors[name] for name in ("x", "y", *SPLITS, *LINK_FIELDS) if name in tensors})
        values = {name: tensors[name] for name in EDGE_VALUES if name in tensors}
        attach_edge_rows(data, EdgeRows(values, tensors["perm"], csc_order=True) if "perm" in tensors else None)
        return attach_csc(data, (tensors["colptr"], tensors["row"], None))

    def feature_batch(self, graph: Data, nodes: Tensor) -> Data:
        return Data(x=self.features(graph, nodes), y=graph.y[nodes], n_id=nodes,
                    edge_index=torch.empty(2, 0, dtype=torch.long), batch_size=nodes.numel())

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
        if size.link_ids:  # the split's fields, counted as one tensor
            data[pos_edges_key("train")] = torch.empty(size.link_ids, dtype=torch.long, device="meta")
        return data


META_TENSOR = "hetero_meta"  # the node-shared graph's HeteroMeta: its JSON as bytes, a tensor like the others
RELATION_PTR = "relation_ptr"  # the typed CSC's segment pointer (train/graph/typed_csc.py)


def meta_tensor(meta: HeteroMeta) -> Tensor:
    return torch.frombuffer(bytearray(json.dumps(meta.to_dict()).encode()), dtype=torch.uint8)


def meta_of_tensor(tensor: Tensor) -> HeteroMeta:
    return HeteroMeta.from_dict(json.loads(bytes(tensor.tolist()).decode()))


class Heterogeneous(Homogeneous):
    """A heterogeneous graph as its typed homogeneous `Data` (train/graph/typed_graph.py): `node_type` [N] and
    `edge_type` [E] beside x, y, edge_index and the target type's split, its `HeteroMeta` attached (`attach_meta`).
    Its CSC is sorted by target and edge type, with the typed segments beside it; `edge_type` is kept with the
    edges' values (every batch carries it) and `node_type` is gathered for each batch's nodes like the features."""

    name = "heterogeneous"

    def matches(self, graph) -> bool:
        return isinstance(graph, Data) and graph_meta(graph) is not None

    def structure(self, graph: Data) -> CSC:
        csc = graph_csc(graph)
        if csc is None:
            csc, segments = build_typed_csc(graph.edge_index, graph.edge_type, graph_meta(graph))
            keep(graph, csc=csc, segments=segments)
        return csc

    def segments(self, graph: Data) -> TypedSegments:
        self.structure(graph)
        return graph_segments(graph)

    def node_values(self, graph: Data) -> dict[str, Tensor]:
        return {"node_type": graph.node_type}

    def edge_rows(self, graph: Data) -> EdgeRows:
        """The edges' values and types in the user's order (the order of edge_index), read through the CSC's perm."""
        if not edge_rows_attached(graph):
            attach_edge_rows(graph, EdgeRows(edge_values(graph), self.structure(graph)[2], csc_order=False,
                                             types=graph.edge_type))
        return graph_edge_rows(graph)

    def _edge_stored(self, graph: Data) -> dict[str, Tensor]:
        return {**edge_values(graph), EDGE_TYPE: graph.edge_type}

    def _node_shared(self, graph: Data) -> dict[str, Tensor]:
        return {"node_type": graph.node_type, META_TENSOR: meta_tensor(graph_meta(graph))}

    def _beside_ids(self, graph: Data) -> dict[str, int]:
        return {RELATION_PTR: graph_meta(graph).segments + 1}

    def _shared_csc(self, graph: Data) -> tuple[Tensor, Tensor, Tensor, dict[str, Tensor]]:
        (colptr, row, perm), segments = build_typed_csc(graph.edge_index, graph.edge_type, graph_meta(graph))
        return colptr, row, perm, {RELATION_PTR: segments.ptr}

    def from_tensors(self, tensors: Mapping[str, Tensor]) -> Data:
        meta = meta_of_tensor(tensors[META_TENSOR])
        data = Data(x=tensors["x"], y=tensors["y"], node_type=tensors["node_type"],
                    **{split: tensors[split] for split in SPLITS})
        values = {name: tensors[name] for name in EDGE_VALUES if name in tensors}
        attach_edge_rows(data, EdgeRows(values, tensors["perm"], csc_order=True, types=tensors[EDGE_TYPE]))
        keep(data, segments=TypedSegments.of_meta(meta, tensors[RELATION_PTR]))
        attach_meta(data, meta)
        return attach_csc(data, (tensors["colptr"], tensors["row"], None))

    def feature_batch(self, graph: Data, nodes: Tensor) -> Data:
        batch = super().feature_batch(graph, nodes)
        batch.node_type = graph.node_type[nodes]
        batch.edge_type = torch.empty(0, dtype=torch.long)
        return batch

    def tiny(self, num_nodes: int, features: int, generator: torch.Generator) -> Data:
        """Two node types (`a` with features, `b` without) and the four relations between them, random."""
        half = num_nodes // 2
        hetero = HeteroData()
        hetero["a"].x = torch.randn(half, features, generator=generator)
        hetero["a"].y = torch.zeros(half, dtype=torch.long)
        for split in ("train", "val", "test"):
            hetero["a"][f"{split}_idx"] = torch.arange(half)
        hetero["b"].num_nodes = num_nodes - half
        counts = {"a": half, "b": num_nodes - half}
        for src in counts:
            for dst in counts:
                hetero[src, "to", dst].edge_index = torch.stack([
                    torch.randint(0, counts[src], (num_nodes,), generator=generator),
                    torch.randint(0, counts[dst], (num_nodes,), generator=generator)])
        data = typed_graph(hetero, "a")
        self.structure(data)
        return data

    def planned(self, size: GraphSize) -> Data:
        data = super().planned(size)
        data.node_type = torch.empty(size.nodes, dtype=torch.long, device="meta")
        data.edge_type = torch.empty(size.edges, dtype=torch.long, device="meta")
        return attach_meta(data, size.meta)


HOMOGENEOUS = Homogeneous()
HETEROGENEOUS = Heterogeneous()
# In the order `form_of` asks: a typed graph is a `Data` too.
FORMS: dict[str, GraphForm] = {form.name: form for form in (HETEROGENEOUS, HOMOGENEOUS)}


def form_of(graph) -> GraphForm:
    """The form of a loaded graph."""
    for form in FORMS.values():
        if form.matches(graph):
            return form
    raise TypeError(f"a graph of type {type(graph).__name__} has no form here; the forms are: {', '.join(FORMS)}")


def form_of_tensors(tensors: Mapping[str, Tensor]) -> GraphForm:
    """The form whose `shared_tensors` wrote these (the node-shared graph's files): a typed graph shares its meta."""
    return HETEROGENEOUS if META_TENSOR in tensors else HOMOGENEOUS


def form_named(name: str) -> GraphForm:
    """The form a planned size names (GraphSize.form)."""
    if name not in FORMS:
        raise KeyError(f"graph form {name!r} is not known; the forms are: {', '.join(FORMS)}")
    return FORMS[name]
