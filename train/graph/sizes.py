"""A graph's size without loading it: what the memory plan reads (train/plan/terms.py), and what each dataset
kind answers (train/graph/datasets/kinds.py). Free of torch: `python -m train` imports the plan to build its parser."""

from __future__ import annotations

from dataclasses import dataclass

from train.graph.typed_meta import HeteroMeta

FLOAT = 4  # bytes of a float32 feature / activation
INDEX = 8  # bytes of an int64 node or edge id


@dataclass(frozen=True)
class GraphSize:
    nodes: int
    edges: int  # directed edges as training sees them (both directions of an undirected edge)
    features: int
    classes: int
    split: tuple[int, int, int]  # train, val, test nodes
    form: str = "homogeneous"  # the graph's form, whose tensors these are (train/graph/form.py FORMS)
    edge_features: int = 0  # edge_attr's width (0: none)
    edge_weight: bool = False  # whether the graph has edge_weight
    meta: HeteroMeta | None = None  # a heterogeneous graph's types (form "heterogeneous"); None: untyped
    multilabel: bool = False  # y of [N, classes] float32 binary tasks (train/graph/labels.py), not [N] int64 classes
    link_ids: int = 0  # int64 ids of a link split's fields beside the graph (train/graph/link_fields.py)

    @property
    def type_bytes(self) -> int:
        """Bytes of a node's `node_type` and of an edge's `edge_type` (int64) in a typed graph; 0 when untyped."""
        return INDEX if self.meta is not None else 0

    @property
    def segment_ids(self) -> int:
        """Entries of the typed CSC's segment pointer (S + 1); 0 when untyped."""
        return self.segments + 1 if self.meta is not None else 0

    @property
    def segments(self) -> int:
        """The typed CSC's (destination, relation) segments (train/graph/typed_csc.py); 0 for an untyped graph."""
        return self.meta.segments if self.meta is not None else 0

    @property
    def edge_floats(self) -> int:
        """Floats per edge of its values (edge_attr's row and its weight); 0 for a graph without."""
        return self.edge_features + int(self.edge_weight)

    @property
    def degree(self) -> float:
        return self.edges / max(self.nodes, 1)

    @property
    def label_bytes(self) -> int:
        """Bytes of a node's label: one int64 class, or a float32 per task of a multi-label graph."""
        return self.classes * FLOAT if self.multilabel else INDEX

    @property
    def feature_bytes(self) -> int:
        return self.nodes * (self.features * FLOAT + self.label_bytes + self.type_bytes)  # x, y (and node_type)
