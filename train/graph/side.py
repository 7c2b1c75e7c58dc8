"""What the project keeps beside a PyG `Data`, outside its store, in one home: the graph's side.

PyG copies a `Data`'s store into every batch, and `batch.to()` / `pin_memory()` move or pin all of it. So the
sampler's CSC, the edges' values in CSC order, a typed graph's segments and `HeteroMeta`, the feature store and
the mark of a graph that holds one node's rows are kept on one plain attribute instead: a `GraphSide`, the
`GraphStore`-like object of issue 40 (PyG's `FeatureStore` is train/graph/sharing/feature_store.py).

Each field has one writer and one reader, the accessors next to what they hold (train/graph/form.py's
`attach_csc`/`graph_csc`, `attach_edge_rows`/`graph_edge_rows`, `graph_segments`; train/graph/typed_meta.py's
`attach_meta`/`graph_meta`; feature_store.py's `attach_features`/`features_of`; feature_shards.py's
`mark_own_rows`). A `GraphSide` is frozen and `keep` replaces it: a shallow copy of a graph shares its side, and a
later `keep` on the copy must not change the original's (torch-free: typed_meta.py, read on the login node,
imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

SIDE = "graph_side"  # the one plain attribute of a Data that holds its GraphSide
UNSET = object()  # edge_rows not attached yet (None is a kept answer: a graph without edge values)


@dataclass(frozen=True)
class GraphSide:
    """The graph's side, as `keep` last left it.

    Args:
        csc: the sampler's ``(colptr, row, perm)`` (perm None on the node-shared graph), or None: not built yet.
        edge_rows: the edges' values and ids (train/graph/edge_rows.py's `EdgeRows`), None for a graph without
            any, or `UNSET`: not attached yet.
        segments: a typed graph's CSC segments (train/graph/typed_csc.py's `TypedSegments`), or None.
        meta: a heterogeneous graph's `HeteroMeta`, or None: a homogeneous graph.
        features: the graph's feature store (feature_store.py's `GraphFeatures`), or None: its x is every row.
        own_rows: ``(ownership state, part)`` of a graph whose x a loader read as one node's rows, or None.
    """

    csc: Any = None
    edge_rows: Any = UNSET
    segments: Any = None
    meta: Any = None
    features: Any = None
    own_rows: Any = None


EMPTY = GraphSide()


def side_of(data) -> GraphSide:
    """The side kept beside `data` (an empty one where none was kept; anything that is not a graph has none)."""
    return getattr(data, "__dict__", {}).get(SIDE, EMPTY)


def keep(data, **fields):
    """Keep `fields` (GraphSide's) beside `data`, the other fields as they were; returns `data`."""
    object.__setattr__(data, SIDE, replace(side_of(data), **fields))
    return data
