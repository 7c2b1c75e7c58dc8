"""The typed CSC: each node's in-edges grouped by edge type, so the sampler draws `k` per (destination, edge type),
as PyG's heterogeneous sampler draws num_neighbors per edge type.

The CSC of a typed graph (train/graph/typed_graph.py) is sorted by target, then by edge type (stably: the user's
order within a type), so it still is the homogeneous CSC every other reader takes (colptr, row, perm). Beside it,
`TypedSegments.ptr` splits each node's in-edges into one segment per relation that ends at the node's type:
node `v` of type `t` (its `i`-th node) owns segments `first[t] + i * relations[t] + r`, r the relation's rank among
the edge types whose destination is `t`, in edge-type order. A node type no relation ends at owns none. The
sampler (train/graph/sampling/samplers.py) turns a frontier into its segments (`of`) and samples each segment as it
samples
a node: uniform, without replacement, at most k edges, seeded per batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler.utils import to_csc
from torch_geometric.utils.sparse import index2ptr

from train.graph.typed_meta import HeteroMeta


def build_csc(edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Return ``(colptr, row, perm)`` exactly as PyG's samplers build them.

    Edges are sorted by target, so the in-neighbours of ``v`` are
    ``row[colptr[v]:colptr[v + 1]]`` and ``perm`` maps a CSC position back to
    the column of ``edge_index`` it came from.
    """
    colptr, row, perm = to_csc(Data(edge_index=edge_index, num_nodes=num_nodes))
    if perm is None:  # to_csc always sorts here, but keep the contract explicit
        perm = torch.arange(row.numel(), device=row.device)
    return colptr, row, perm


@dataclass(frozen=True)
class TypedSegments:
    """`ptr` [S + 1]: CSC positions where each (destination, relation) segment starts; the small per-node-type
    tables say which segments a node owns."""

    ptr: Tensor
    offsets: Tensor  # the global id of each node type's first node
    first: Tensor  # the first segment of each node type's first node
    relations: Tensor  # segments per node of each node type: the relations that end at the type

    @classmethod
    def of_meta(cls, meta: HeteroMeta, ptr: Tensor) -> "TypedSegments":
        relations = torch.tensor(meta.relations_into, dtype=torch.long)
        sizes = torch.tensor(meta.counts, dtype=torch.long) * relations
        first = torch.cumsum(sizes, 0) - sizes
        return cls(ptr, torch.tensor(meta.offsets, dtype=torch.long), first, relations)

    @property
    def nbytes(self) -> int:
        return self.ptr.nbytes

    def to(self, device: torch.device) -> "TypedSegments":
        return TypedSegments(self.ptr.to(device), self.offsets.to(device), self.first.to(device),
                             self.relations.to(device))

    def of(self, nodes: Tensor) -> tuple[Tensor, Tensor]:
        """The segments of `nodes` (in node order, relation order within a node) and each one's index in `nodes`."""
        node_type = torch.bucketize(nodes, self.offsets, right=True) - 1
        count = self.relations.index_select(0, node_type)
        start = self.first.index_select(0, node_type) + (nodes - self.offsets.index_select(0, node_type)) * count
        total = int(count.sum())
        owner = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), count, output_size=total)
        slot_start = torch.cumsum(count, 0) - count
        rank = torch.arange(total, device=nodes.device) - slot_start.index_select(0, owner)
        return start.index_select(0, owner) + rank, owner


def segment_ids(meta: HeteroMeta, target: Tensor, edge_type: Tensor) -> Tensor:
    """The segment of each edge, from its target (global id) and its edge type."""
    segments = TypedSegments.of_meta(meta, torch.zeros(1, dtype=torch.long))
    rank_of = torch.zeros(len(meta.edge_types), dtype=torch.long)  # an edge type's rank at its destination type
    for number, edge in enumerate(meta.edge_types):
        rank_of[number] = sum(1 for e in meta.edge_types[:number] if e[2] == edge[2])
    node_type = torch.bucketize(target, segments.offsets, right=True) - 1
    local = target - segments.offsets.index_select(0, node_type)
    return (segments.first.index_select(0, node_type) + local * segments.relations.index_select(0, node_type)
            + rank_of.index_select(0, edge_type))


def build_typed_csc(edge_index: Tensor, edge_type: Tensor, meta: HeteroMeta
                    ) -> tuple[tuple[Tensor, Tensor, Tensor], TypedSegments]:
    """`(colptr, row, perm)` sorted by target then edge type (stable), and the segments' `ptr` over it."""
    num_nodes = sum(meta.counts)
    target = edge_index[1].long()
    key = target * max(len(meta.edge_types), 1) + edge_type.long()
    perm = torch.sort(key, stable=True).indices
    row = edge_index[0].index_select(0, perm)
    sorted_target = target.index_select(0, perm)
    colptr = index2ptr(sorted_target, num_nodes)
    segment = segment_ids(meta, sorted_target, edge_type.long().index_select(0, perm))
    ptr = index2ptr(segment, meta.segments)
    return (colptr, row, perm), TypedSegments.of_meta(meta, ptr)
