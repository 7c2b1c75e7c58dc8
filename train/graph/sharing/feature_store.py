"""The seam between a graph and its node features: one object with PyG's `FeatureStore` interface (issue 40).

Every reader of a graph's features (each batch's x: sampling.device_plan `SamplingPlan.complete`; the exact
evaluation's first layer; a feature-only model's rows) asks the graph's store for the rows of some node ids,
`store.rows(ids, device)`, or through PyG's own door, `store.get_tensor(attr_name="x", index=ids)` /
`multi_get_tensor`. Two implementations:

* `NodeFeatures` (`data.features=node`): the whole matrix, the node's one copy (train/graph/sharing/shared_graph.py)
  or a process's own; a gather. Its `whole()` is what the loader's workers gather from, as before.
* `ShardedFeatures` (`data.features=sharded`): the rows this node owns (train/graph/sharing/ownership.py) in its
  node-shared segment; the others' rows fetched from their owners with all_to_all (row_exchange.py). Collective:
  each fetch is a round every rank makes, inside a session (`session`, `release`: row_exchange.RowExchange).

A third (cuGraph-PyG's WholeFeatureStore, where the image has it) is one more subclass: `rows` and `width`.
The store sits beside the `Data` (`attach_features`), outside its store, as the CSC does: PyG copies a Data's
store into every batch. `features_of(data)` gives a graph's store (a `NodeFeatures` of its x unless one is attached).
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Iterator

import torch
from torch import Tensor
from torch_geometric.data import FeatureStore, TensorAttr

from train.graph.edge_rows import gather_pinned
from train.graph.sharing.ownership import Ownership
from train.graph.sharing.row_exchange import RowExchange
from train.graph.side import keep, side_of

ATTR = "x"  # the one tensor a graph's store holds (a typed graph's x holds every type's rows: typed_graph.py)


def _index(index, num_nodes: int) -> Tensor:
    """PyG's index forms (a tensor, an array, a slice, None: all) as an int64 tensor of ids."""
    if index is None:
        return torch.arange(num_nodes)
    if isinstance(index, slice):
        return torch.arange(num_nodes)[index]
    return torch.as_tensor(index).long()


class GraphFeatures(FeatureStore):
    """A graph's node features behind PyG's FeatureStore: read-only, one tensor ("x", group None)."""

    layout = ""  # data.features: node or sharded

    def __init__(self, num_nodes: int, width: int, dtype: torch.dtype):
        super().__init__()
        self.num_nodes, self.width, self.dtype = int(num_nodes), int(width), dtype

    @abstractmethod
    def rows(self, ids: Tensor, device: torch.device) -> Tensor:
        """The features of some nodes: the store's one question.

        Args:
            ids: global node ids (int64), in the order wanted; may repeat, may be empty.
            device: where the rows go (the batch's device).

        Returns:
            [len(ids), width] rows in the store's dtype, in the order of `ids`. Collective where the rows are spread
            over the nodes (sharded): every rank calls it as often as the others, inside a `session()`.
        """

    def whole(self) -> Tensor | None:
        """The whole matrix where this process maps it (a loader's workers gather from it), else None."""
        return None

    def layout_state(self) -> dict | None:
        """The layout the checkpoint's fingerprint keeps (None: a copy per node)."""
        return None

    @contextlib.contextmanager
    def session(self) -> Iterator["GraphFeatures"]:
        """A run of fetches whose number may differ between ranks (row_exchange.RowExchange); nothing to agree on
        where each process holds every row."""
        yield self

    def release(self) -> None:
        """This rank fetches nothing more in the session (it keeps answering the others'): the batches' end."""

    # ---- PyG's FeatureStore -------------------------------------------------------------------------
    def _check(self, attr: TensorAttr) -> None:
        if attr.attr_name != ATTR or attr.group_name is not None:
            raise KeyError(f"the graph's feature store holds one tensor, (group None, {ATTR!r}); asked for "
                           f"({attr.group_name!r}, {attr.attr_name!r})")

    def _get_tensor(self, attr: TensorAttr) -> Tensor:
        self._check(attr)
        ids = _index(attr.index, self.num_nodes)
        return self.rows(ids, ids.device)

    def _multi_get_tensor(self, attrs: list[TensorAttr]) -> list[Tensor]:
        """Every attr's rows in one fetch (one round where sharded, not one per attr)."""
        for attr in attrs:
            self._check(attr)
        indices = [_index(attr.index, self.num_nodes) for attr in attrs]
        if not indices:
            return []
        rows = self.rows(torch.cat([ids.cpu() for ids in indices]), indices[0].device)
        return list(rows.split([ids.numel() for ids in indices]))

    def _put_tensor(self, tensor: Tensor, attr: TensorAttr) -> bool:
        return False  # read-only: the node's ranks share the pages

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        return False

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, int]:
        self._check(attr)
        return (self.num_nodes, self.width)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        return [TensorAttr(group_name=None, attr_name=ATTR)]


def _gather(source: Tensor, ids: Tensor, device: torch.device) -> Tensor:
    """`source[ids]` onto `device`: from the host through pinned memory (a non-blocking copy) to a GPU."""
    ids = ids.to(source.device)
    if source.device.type == "cpu" and device.type == "cuda":
        return gather_pinned(source, ids).to(device, non_blocking=True)
    return source.index_select(0, ids).to(device)


class NodeFeatures(GraphFeatures):
    """`data.features=node`: every row here (the node's one copy, or the process's own)."""

    layout = "node"

    def __init__(self, x: Tensor):
        super().__init__(x.size(0), x.size(1) if x.dim() > 1 else 1, x.dtype)
        self.x = x

    def rows(self, ids: Tensor, device: torch.device) -> Tensor:
        return _gather(self.x, ids, torch.device(device))

    def whole(self) -> Tensor:
        return self.x


class ShardedFeatures(GraphFeatures):
    """`data.features=sharded`: this node's rows (`shard`, in Ownership's local order) and the others' fetched.

    Args:
        shard: the rows node `part` owns (mapped from its node-shared segment).
        ownership: who owns which row.
        part: this node's part (its index among the job's nodes).
        exchange: the fetch's own group and sessions (row_exchange.RowExchange), over every rank.
        servers: for each part, the rank this rank asks for its rows (`servers_of`).
    """

    layout = "sharded"

    def __init__(self, shard: Tensor, ownership: Ownership, part: int, exchange: RowExchange, servers: Tensor):
        super().__init__(ownership.num_nodes, shard.size(1), shard.dtype)
        if shard.size(0) != ownership.rows_of(part):
            raise ValueError(f"node {part}'s shard has {shard.size(0)} rows, its ownership {ownership.rows_of(part)}")
        self.shard, self.ownership, self.part, self.exchange = shard, ownership, part, exchange
        self.servers = servers.long()
        exchange.serve_with(self._serve, (self.width,), self.dtype)

    def _serve(self, local_rows: Tensor) -> Tensor:
        return self.shard.index_select(0, local_rows.to(self.shard.device))

    def rows(self, ids: Tensor, device: torch.device) -> Tensor:
        """Local rows from the segment, the others' in one round of the exchange. Collective."""
        device = torch.device(device)
        ids = ids.to("cpu", torch.long)
        owner, local = self.ownership.owner(ids), self.ownership.local_row(ids)
        mine = owner == self.part
        here, away = mine.nonzero().squeeze(1), (~mine).nonzero().squeeze(1)
        out = torch.empty(ids.numel(), self.width, dtype=self.dtype, device=device)
        self.exchange.fetch(self.servers[owner[away]], local[away], into=(out, away))
        out.index_copy_(0, here.to(device), _gather(self.shard, local[here], device))
        return out

    def layout_state(self) -> dict:
        return self.ownership.state_dict()

    @contextlib.contextmanager
    def session(self) -> Iterator["ShardedFeatures"]:
        with self.exchange.session():
            yield self

    def release(self) -> None:
        self.exchange.release()


def servers_of(node_of_rank: list[int], rank: int) -> Tensor:
    """For each part (the job's nodes, in node-rank order), the rank `rank` asks for that node's rows: the node's
    ranks share the asking ranks out evenly (the i-th rank of a node asks the (i mod n)-th rank of each node)."""
    nodes = sorted(set(node_of_rank))
    members = {node: [r for r, n in enumerate(node_of_rank) if n == node] for node in nodes}
    mine = members[node_of_rank[rank]].index(rank)
    return torch.tensor([members[node][mine % len(members[node])] for node in nodes], dtype=torch.long)


def attach_features(data, store: GraphFeatures):
    """Keep `store` beside `data` (outside its store: batches must not copy it)."""
    return keep(data, features=store)


def features_of(data) -> GraphFeatures:
    """The graph's feature store: the one attached, else a `NodeFeatures` of its x (attached for the next reader)."""
    store = side_of(data).features
    if store is None:
        store = NodeFeatures(data.x)
        attach_features(data, store)
    return store
