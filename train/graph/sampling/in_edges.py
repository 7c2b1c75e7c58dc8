"""Full in-neighbourhoods read straight from the CSC, in chunks of bounded size: the exact evaluation's batches.

The layer-wise evaluation (train/loop/evaluate.py) needs, for a run of target nodes, every edge into them
and the rows of their sources. A sampler with fanout -1 gives that, at a sampler's cost (a loader, per-hop
bookkeeping, a host round trip when the graph is on the GPU); here it is a handful of tensor operations on
whatever device holds the CSC: the in-edges of targets ``t`` are CSC positions ``colptr[t]..colptr[t+1]``.

A batch has the sampler's layout with fanout -1 (what the layer-wise code reads): ``n_id`` starts with the
targets, then each other source once; ``edge_index`` holds local (source, target) ids, grouped by target in
the order given and, per target, in CSC order, so each target sums its messages in the sampler's order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# The working set of one chunk beyond the layer's rows (its ids, gathered rows and per-edge messages), in
# bytes: chunks stop short of it, unless one target's in-edges alone need more (such a target is a chunk).
CHUNK_BYTES = 1 << 28
ID_BYTES_PER_EDGE = 6 * 8  # CSC position, source id, local source and target, and unique's sort keys (int64)
FLOAT_BYTES = 4


@dataclass(frozen=True)
class ChunkCost:
    """Bytes of one chunk: each target's output row plus, per in-edge, its ids, its source's row and its message."""

    per_target: int
    per_edge: int

    @classmethod
    def for_layer(cls, in_width: int, out_width: int) -> "ChunkCost":
        widest = max(in_width, out_width)
        return cls(per_target=FLOAT_BYTES * (in_width + out_width),
                   per_edge=ID_BYTES_PER_EDGE + 2 * FLOAT_BYTES * widest)


def chunk_bounds(degree: Tensor, max_targets: int, cost: ChunkCost, budget: int = CHUNK_BYTES) -> list[int]:
    """Boundaries ``[0, b1, ..., len(degree)]`` of consecutive targets (in-degrees `degree`, on the host): each
    chunk at most `max_targets` targets and `budget` bytes by `cost`, and at least one target."""
    count = degree.numel()
    if count == 0:
        return [0]
    per_target = degree.to("cpu", torch.long) * cost.per_edge + cost.per_target
    spent = torch.cumsum(per_target, 0)  # bytes of targets 0..i
    bounds = [0]
    while bounds[-1] < count:
        start = bounds[-1]
        before = int(spent[start - 1]) if start else 0
        fits = int(torch.searchsorted(spent, before + budget, right=True))  # targets 0..fits-1 fit from start
        bounds.append(min(max(fits, start + 1), start + max_targets, count))
    return bounds


def in_edge_positions(colptr: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """The CSC positions of the in-edges of `targets` (grouped by target as given, CSC order within) and each
    one's target as its index in `targets`: the rows of anything kept in the CSC's order beside `row` (the
    edges' features and weights) that `in_edge_batch`'s edges read, in its edge order."""
    device = colptr.device
    targets = targets.to(device, torch.long)
    start = colptr.index_select(0, targets).long()  # int64: the node-shared CSC may hold int32 ids
    degree = colptr.index_select(0, targets + 1).long() - start
    num_edges = int(degree.sum())
    target_local = torch.repeat_interleave(torch.arange(targets.numel(), device=device), degree,
                                           output_size=num_edges)
    first_slot = torch.cumsum(degree, 0) - degree
    position = torch.arange(num_edges, device=device) + (start - first_slot).index_select(0, target_local)
    return position, target_local


def in_edge_batch(colptr: Tensor, row: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, int]:
    """``(n_id, edge_index, len(targets))``: the targets' in-edges in local ids, on the CSC's device.

    `targets` must be distinct. A source that is also a target takes that target's slot (so a self-loop
    stays a self-loop); the other sources follow in ascending id order.
    """
    device = colptr.device
    targets = targets.to(device, torch.long)
    num_targets = targets.numel()
    position, target_local = in_edge_positions(colptr, targets)
    source = row.index_select(0, position).long()
    unique, inverse = torch.unique(torch.cat([targets, source]), return_inverse=True)
    slot = torch.full((unique.numel(),), -1, dtype=torch.long, device=device)
    slot[inverse[:num_targets]] = torch.arange(num_targets, device=device)
    other = slot < 0  # each other source once, after the targets, in ascending id order
    slot = torch.where(other, num_targets - 1 + torch.cumsum(other, 0), slot)
    n_id = torch.empty(num_targets + int(other.sum()), dtype=torch.long, device=device)
    n_id[slot] = unique
    edge_index = torch.stack([slot.index_select(0, inverse[num_targets:]), target_local])
    return n_id, edge_index, num_targets


def in_edge_chunks(colptr: Tensor, targets: Tensor, max_targets: int, cost: ChunkCost,
                   budget: int = CHUNK_BYTES) -> list[int]:
    """`chunk_bounds` for `targets` of this CSC (their in-degrees read from `colptr` on its device)."""
    index = targets.to(colptr.device, torch.long)
    degree = colptr.index_select(0, index + 1).long() - colptr.index_select(0, index).long()
    return chunk_bounds(degree.cpu(), max_targets, cost, budget)
