"""A node's own feature rows under data.features=sharded: read from the memory-mapped file, drawn by the generator,
or cut from a graph loaded whole, so that no node ever holds the whole feature matrix, not even while loading.

Which rows a node owns is given as plain values, per node type ("" for a graph of one type): (the rows of that
type's features the node owns, where they go in its shard), as train/graph/sharing/ownership.py's
`Ownership.type_slices(part)` gives them. A kind's `load_rows` (train/graph/datasets/kinds.py) returns the graph
whole but for `x`, which holds the node's shard (its rows in shard order; a typed graph's zero-padded to the widest
type, as its whole x is); `num_nodes` stays the whole graph's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import Tensor

from train.errors import UserError
from train.graph.typed_graph import typed_graph
from train.graph.typed_meta import attach_meta, graph_meta

OwnedRows = Mapping[str, tuple[slice, slice]]  # node type ("" untyped) -> (its rows owned, their place in the shard)
# torch's CPU normal sampler fills 16 values at a time from the generator's stream (its tail recomputes the last 16):
# drawn in pieces of a multiple of 16 values, every piece but the last, the stream is the one whole draw would give.
NORMAL_BLOCK = 16
DRAW_BYTES = 16 * 2**20  # drawn at once while generating a node's own rows (then its own rows kept)


def shard_length(owned: OwnedRows) -> int:
    """Rows of the node's shard: past the last place any type's rows go."""
    return max((int(place.stop) for _rows, place in owned.values()), default=0)


def picked(rows: slice, count: int) -> int:
    """How many of `count` rows the slice takes."""
    return len(range(*rows.indices(count)))


def check_feature_rows(held: int, nodes: int, what: str, counted: str) -> None:
    """A feature file of fewer rows than the graph has nodes is refused, naming it, its rows and the nodes: a node
    reading its own rows of it would otherwise read short."""
    if held < nodes:
        raise UserError(f"{what} holds {held:,} feature rows, but the graph has {nodes:,} nodes ({counted}); give "
                        "one row of features per node.")


def take_rows(x: Tensor, rows: slice) -> Tensor:
    """The rows of `x` (memory-mapped, read in place) the slice takes, copied as float32: the copy is the node's rows
    alone; the mapped file's pages are the page cache's, never a copy of the whole matrix."""
    return x[rows].to(torch.float32, copy=True)


def check_finite(x: Tensor, rows: slice, what: str) -> None:
    """The node's own rows are finite (each node checks its own, so every row is checked once); the first bad one
    is named by its row in the file."""
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        bad = (~finite).nonzero().view(-1)
        first = (rows.start or 0) + int(bad[0]) * (rows.step or 1)
        raise UserError(f"{what} holds NaN or infinite values (first: row {first}); fill or drop them before "
                        "training.")


def normal_rows(generator: torch.Generator, count: int, width: int, rows: slice) -> Tensor:
    """The rows `rows` of torch.randn(count, width, generator=generator), drawn piece by piece (NORMAL_BLOCK), so
    that the generator ends where the whole draw leaves it and no piece holds much more than DRAW_BYTES."""
    if count * width < NORMAL_BLOCK:
        return torch.randn(count, width, generator=generator)[rows].clone()
    start, stop, step = rows.indices(count)
    out = torch.empty(picked(rows, count), width)
    piece = max(DRAW_BYTES // (4 * width) // NORMAL_BLOCK, 1) * NORMAL_BLOCK  # rows: a multiple of 16 values
    first = 0
    while first < count:
        last = min(first + piece, count)
        if (count - last) * width < NORMAL_BLOCK:  # a last piece under 16 values would draw otherwise: join it
            last = count
        drawn = torch.randn(last - first, width, generator=generator)
        taken_first = max(0, -(-(first - start) // step))  # the first of `rows` at or after `first`, as its index
        row, end = start + taken_first * step, min(last, stop)
        if row < end:
            taken = drawn[row - first:end - first:step]
            out[taken_first:taken_first + taken.size(0)] = taken
        first = last
    return out


def place_rows(parts: Mapping[str, Tensor], owned: OwnedRows, width: int) -> Tensor:
    """The node's shard: each type's own rows at their place, zero-padded to `width` (a featureless type's stay
    zero, as in the whole typed x)."""
    length = shard_length(owned)
    if len(parts) == 1 and len(owned) == 1:  # one type whose rows fill the shard: they are the shard
        (node_type, rows), = parts.items()
        if owned[node_type][1] == slice(0, length) and tuple(rows.shape) == (length, width):
            return rows
    shard = torch.zeros(length, width)
    for node_type, rows in parts.items():
        place = owned[node_type][1]
        shard[place, :rows.size(1)] = rows
    return shard


def keep_own_rows(graph, owned: OwnedRows):
    """A graph loaded whole (a small downloaded set) cut to the node's own rows: its x becomes the node's shard."""
    meta, x = graph_meta(graph), graph.x
    offsets = dict(zip(meta.node_types, meta.offsets)) if meta is not None else {"": 0}
    counts = dict(zip(meta.node_types, meta.counts)) if meta is not None else {"": int(x.size(0))}
    parts = {}
    for node_type, (rows, _place) in owned.items():
        start, stop, step = rows.indices(counts[node_type])
        parts[node_type] = x[offsets[node_type] + start:offsets[node_type] + stop:step]
    graph.num_nodes = int(x.size(0))
    graph.x = place_rows(parts, owned, int(x.size(1)))
    return graph


def typed_own_rows(hetero, parts: Mapping[str, Tensor], widths: Mapping[str, int], owned: OwnedRows, target: str,
                   featureless: str, source: str):
    """The typed graph (train/graph/typed_graph.py) of a `HeteroData` whose types hold no x (their num_nodes set),
    with x the node's shard: each type's own rows (`parts`; `widths`: each type's feature width, 0 or absent for a
    featureless type, whose rows stay zero or, with data.featureless=degree, take log(1 + in-degree) as the whole
    graph's do). The typed graph is built without features (a column of zeros a node, then dropped)."""
    data = typed_graph(hetero, target, "zeros", source)
    meta = graph_meta(data)
    widths = {t: int(widths.get(t, 0)) for t in meta.node_types}
    parts = dict(parts)
    if featureless == "degree":
        degree = torch.bincount(data.edge_index[1], minlength=sum(meta.counts)).float()
        for node_type, offset, count in zip(meta.node_types, meta.offsets, meta.counts):
            if not widths[node_type]:
                start, stop, step = owned[node_type][0].indices(count)
                parts[node_type] = torch.log1p(degree[offset + start:offset + stop:step]).view(-1, 1)
                widths[node_type] = 1
    data.x = place_rows(parts, owned, max(max(widths.values()), 1))
    data.num_nodes = sum(meta.counts)
    return attach_meta(data, replace(meta, widths=tuple(widths[t] for t in meta.node_types)))


def hetero_own_rows(hetero, owned: OwnedRows, target: str, featureless: str, source: str):
    """A `HeteroData` read from files (x memory-mapped) as the typed graph with the node's shard: each type's own
    rows read in place, checked (a type's x of fewer rows than its labels is refused first), then its x dropped."""
    parts, widths = {}, {}
    store = hetero[target]
    if store.get("x") is not None and store.get("y") is not None:
        check_feature_rows(int(store.x.size(0)), int(store.y.size(0)), f"{source}: {target}'s x",
                           f"{target}.y holds {int(store.y.size(0)):,} labels")
    for node_type in hetero.node_types:
        x = hetero[node_type].get("x")
        if x is None:
            continue
        rows = owned[node_type][0]
        parts[node_type] = take_rows(x, rows)
        check_finite(parts[node_type], rows, f"{source}: {node_type}'s x")
        widths[node_type] = int(x.size(1))
        hetero[node_type].num_nodes = int(x.size(0))
        del hetero[node_type].x
    return typed_own_rows(hetero, parts, widths, owned, target, featureless, source)
