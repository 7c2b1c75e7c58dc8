"""The graph's per-edge values (PyG's `edge_attr` and `edge_weight`) and edge ids, kept beside the sampler's CSC.

A batch's edges are CSC positions (the sampler's `edge` output). `EdgeRows` turns them into what PyG's
`NeighborLoader` gives a batch: `e_id`, each edge's id in the user's edge order (the column of `edge_index`
it came from), and the rows of `edge_attr` and `edge_weight` of those edges, aligned with the batch's
`edge_index`. The values are stored once: in the user's order in a rank's own graph (data.share=process,
read through the CSC's permutation, as PyG's loader reads them), in the CSC's order in the node-shared
graph (each node's in-edges side by side, beside `row`; its `perm` then kept only to give `e_id`).
They go where the features go: on the GPU when the features are placed there (train/graph/sampling/device_plan.py),
else gathered on the host, into pinned memory when the batch goes to a GPU.
A typed graph (a heterogeneous one: train/graph/typed_graph.py) keeps each edge's `edge_type` here too, stored
as the values are, so every batch carries `edge_type` aligned with its `edge_index`. It is kept apart from the
values a model's forward takes by name (EDGE_VALUES): a model reads it through the batch (issue 27).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

EDGE_VALUES = ("edge_attr", "edge_weight")  # PyG's names: [E, F] features, [E] weights
EDGE_TYPE = "edge_type"  # a typed graph's [E] int64 edge types (indices into HeteroMeta.edge_types)


def gather_pinned(source: Tensor, index: Tensor) -> Tensor:
    """``source[index]`` written straight into page-locked memory, ready for a non-blocking copy.

    PyTorch's caching host allocator keeps the block until the copy that reads it has finished.
    """
    out = torch.empty((index.numel(), *source.shape[1:]), dtype=source.dtype, pin_memory=True)
    return torch.index_select(source, 0, index, out=out)


@dataclass(frozen=True)
class EdgeRows:
    """The edges' values by name and their ids. `perm[p]`: the user's id of the edge at CSC position `p`;
    `csc_order`: the values are stored in CSC order (the node-shared graph), else in the user's order; `types`: a
    typed graph's edge types, stored as the values are (None: an untyped graph)."""

    values: dict[str, Tensor]
    perm: Tensor
    csc_order: bool
    types: Tensor | None = None

    @property
    def device(self) -> torch.device:
        return self.perm.device

    @property
    def nbytes(self) -> int:
        return self.perm.nbytes + sum(value.nbytes for value in self.stored.values())

    @property
    def stored(self) -> dict[str, Tensor]:
        """Every per-edge tensor kept, by the batch's names: the values, and `edge_type` where the graph is typed."""
        return {**self.values, **({EDGE_TYPE: self.types} if self.types is not None else {})}

    def to(self, device: torch.device) -> "EdgeRows":
        return EdgeRows({name: value.to(device) for name, value in self.values.items()}, self.perm.to(device),
                        self.csc_order, self.types.to(device) if self.types is not None else None)

    def in_csc_order(self, name: str) -> Tensor:
        """Value `name` (or `edge_type`) for every CSC position, in that order (the exact evaluation's weighted
        in-degrees, a typed model's relations)."""
        value = self.stored[name]
        return value if self.csc_order else value.index_select(0, self.perm.long())

    def at(self, positions: Tensor) -> dict[str, Tensor]:
        """`e_id` and each value's rows of the edges at CSC `positions`, where `positions` are: gathered where
        the values are, into pinned memory and copied without blocking when those are the host and `positions`
        a GPU's."""
        target = positions.device
        positions = positions.to(self.device, torch.long)
        pinned = self.device.type == "cpu" and target.type == "cuda"

        def take(source: Tensor, index: Tensor) -> Tensor:
            return gather_pinned(source, index) if pinned else source.index_select(0, index)

        ids = self.perm.index_select(0, positions).long()
        rows = positions if self.csc_order else ids
        out = {"e_id": take(self.perm, positions), **{name: take(value, rows) for name, value in self.stored.items()}}
        out = {name: tensor.to(target, non_blocking=True) for name, tensor in out.items()}
        out["e_id"] = out["e_id"].long()  # int64, as PyG's e_id (the node-shared perm may be int32)
        return out


def edge_values(graph) -> dict[str, Tensor]:
    """The per-edge values a graph (a PyG `Data`) carries, by PyG's names, in the user's edge order."""
    return {name: graph[name] for name in EDGE_VALUES if getattr(graph, name, None) is not None}
