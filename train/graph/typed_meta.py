"""What a heterogeneous graph's types are, for the parts that turn its typed homogeneous form back into types.

A heterogeneous graph (PyG's `HeteroData`, issue 27) trains as one typed homogeneous graph, so the sampler, the
node-shared graph, the plan and the loop serve it as they serve any graph: the nodes of all types numbered in
type order (a type's nodes are the ids `offsets[t]` to `offsets[t] + counts[t] - 1`), each node's `node_type`
and each edge's `edge_type` (an index into `node_types` and `edge_types`), and one feature matrix as wide as the
widest type's features, a narrower type's rows zero-padded and a featureless type's rows zero. `HeteroMeta` is
what is needed to undo that: the models (train/models) build `x_dict` and `edge_index_dict` from a batch
with it, and give a featureless type its learned embedding by the type's own ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from train.errors import UserError
from train.graph.side import keep, side_of

EdgeType = tuple[str, str, str]  # (source type, relation, destination type), as PyG names an edge type


@dataclass(frozen=True)
class HeteroMeta:
    """The types of a heterogeneous graph, in the order their indices number them."""

    node_types: tuple[str, ...]
    edge_types: tuple[EdgeType, ...]
    counts: tuple[int, ...]  # nodes of each node type
    widths: tuple[int, ...]  # feature columns of each node type; 0: the type has no features
    target: str  # the node type whose nodes are classified (data.target_node_type)

    @property
    def offsets(self) -> tuple[int, ...]:
        """The global id of each node type's first node."""
        starts, total = [], 0
        for count in self.counts:
            starts.append(total)
            total += count
        return tuple(starts)

    @property
    def relations_into(self) -> tuple[int, ...]:
        """The edge types that end at each node type: the typed CSC's segments per node (train/graph/typed_csc.py)."""
        return tuple(sum(1 for edge in self.edge_types if edge[2] == t) for t in self.node_types)

    @property
    def segments(self) -> int:
        """One typed-CSC segment per node and edge type that ends at its type."""
        return sum(count * into for count, into in zip(self.counts, self.relations_into))

    @property
    def target_index(self) -> int:
        return self.node_types.index(self.target)

    def metadata(self) -> tuple[list[str], list[EdgeType]]:
        """PyG's `HeteroData.metadata()`: what `to_hetero` and `HeteroConv` are built from."""
        return list(self.node_types), list(self.edge_types)

    def to_dict(self) -> dict:
        """Plain values (checkpoints, summary.json)."""
        return {"node_types": list(self.node_types), "edge_types": [list(t) for t in self.edge_types],
                "counts": list(self.counts), "widths": list(self.widths), "target": self.target}

    @classmethod
    def from_dict(cls, values: dict) -> "HeteroMeta":
        return cls(tuple(values["node_types"]), tuple(tuple(t) for t in values["edge_types"]),
                   tuple(values["counts"]), tuple(values["widths"]), values["target"])


def attach_meta(data, meta: HeteroMeta):
    """Keep a heterogeneous graph's `HeteroMeta` on its typed `Data`, outside Data's store (as its CSC: PyG copies
    the store into every batch); train/graph/form.py's heterogeneous form reads it back."""
    return keep(data, meta=meta)


def graph_meta(data) -> HeteroMeta | None:
    """The `HeteroMeta` of a typed graph (None: a homogeneous graph): what the models build x_dict from."""
    return side_of(data).meta


def check_target(node_types: tuple[str, ...], target: str, source: str) -> None:
    """data.target_node_type against the graph's node types (torch-free: the login node's config check asks it)."""
    if target not in node_types:
        raise UserError(f"{source}: data.target_node_type={target!r} is not a node type of this graph; its node "
                        f"types are: {', '.join(node_types)}.")
