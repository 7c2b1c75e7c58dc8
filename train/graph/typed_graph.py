"""A heterogeneous graph (PyG's `HeteroData`) as the typed homogeneous `Data` that training reads (issue 27).

The nodes of all types are numbered in type order (`HeteroMeta.offsets`); `node_type` [N] and `edge_type` [E]
(int64) name each node's and edge's type; the edges are concatenated in edge-type order, so an edge's global id
is its type's offset plus its column in that type's `edge_index` (the CSC sorted by target is then also sorted by
edge type within each target: train/graph/typed_csc.py). `x` is as wide as the widest type, a narrower type's rows
zero-padded and a featureless type's rows zero (the model side gives a featureless type a learned embedding,
read from `HeteroMeta.widths == 0`; `data.featureless=degree` gives it one column, log(1 + in-degree), instead).
`y` holds the target type's labels and -1 for every other node, and the split names target nodes only (as
global ids). Every problem is a UserError naming the type, relation or id and what would be valid.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torch_geometric.data import Data

from train.errors import UserError
from train.graph.typed_meta import EdgeType, HeteroMeta, attach_meta, check_target

SPLITS = ("train", "val", "test")
UNLABELED = -1


def relation_name(edge_type: EdgeType) -> str:
    """`src__rel__dst`: IGB's folder name of a relation, and how messages name one."""
    return "__".join(edge_type)


def check_relation(edge_type: EdgeType, edge_index: Tensor, counts: Mapping[str, int], source: str) -> None:
    """edge_index is 2 x E of ids within each end's node type: the first bad id named with the type's count."""
    name = relation_name(edge_type)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise UserError(f"{source}: relation {name} has edge_index of shape {tuple(edge_index.shape)}; expected "
                        "2 x num_edges (source ids in row 0, destination ids in row 1).")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool:
        raise UserError(f"{source}: relation {name} has edge_index of dtype {edge_index.dtype}; expected integers.")
    for row, end in ((0, edge_type[0]), (1, edge_type[2])):
        if end not in counts:
            raise UserError(f"{source}: relation {name} names node type {end!r}, which has no nodes here; the node "
                            f"types are: {', '.join(counts)}.")
        ids = edge_index[row]
        if not ids.numel():
            continue
        bad = (ids < 0) | (ids >= counts[end])
        if bool(bad.any()):
            first = int(bad.nonzero()[0])
            raise UserError(f"{source}: relation {name} names {end} id {int(ids[first])} (edge {first}), but node "
                            f"type {end!r} has {counts[end]} nodes (ids 0 to {counts[end] - 1}).")


def _split(store, split: str, count: int, target: str, source: str) -> Tensor:
    idx, mask = store.get(f"{split}_idx"), store.get(f"{split}_mask")
    if idx is None and mask is None:
        raise UserError(f"{source}: node type {target!r} has no {split}_idx or {split}_mask; give the split on the "
                        f"target type (index tensors or boolean masks of its {count} nodes).")
    if mask is not None:
        if mask.dtype != torch.bool or mask.dim() != 1 or mask.numel() != count:
            raise UserError(f"{source}: {target}.{split}_mask has shape {tuple(mask.shape)} and dtype {mask.dtype}; "
                            f"expected a boolean mask of the {count} {target} nodes.")
        return mask.nonzero().view(-1)
    idx = idx.long().view(-1)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= count):
        raise UserError(f"{source}: {target}.{split}_idx holds ids outside 0 to {count - 1} ({count} {target} "
                        "nodes).")
    return idx


def _labels(store, target: str, count: int, source: str) -> Tensor:
    """The target type's labels: one class per node ([N], or [N, 1]; whole numbers saved as floats, as IGB's, taken
    as classes), or several tasks per node ([N, T]: train/graph/labels.py)."""
    y = store.get("y")
    if y is None:
        raise UserError(f"{source}: the target node type {target!r} has no y; give its labels as "
                        f"data[{target!r}].y (one class per node, -1 for a node outside every split).")
    y = y.view(-1) if y.dim() == 2 and y.size(1) == 1 else y
    classes = y.dim() == 1 and (not y.is_floating_point() or bool((y == y.round()).all()))
    if y.size(0) != count or not (classes or y.dim() == 2):
        raise UserError(f"{source}: {target}.y has shape {tuple(y.shape)} and dtype {y.dtype}; expected {count} "
                        "integer labels (one per node).")
    return y.long() if classes else y


def node_count(store, node_type: str) -> int:
    x = store.get("x")
    if x is not None:
        return int(x.size(0))
    if store.get("num_nodes") is not None:
        return int(store["num_nodes"])
    raise UserError(f"node type {node_type!r} has neither x nor num_nodes; give data[{node_type!r}].num_nodes.")


def typed_graph(hetero, target: str, featureless: str = "zeros", source: str = "the graph") -> Data:
    """The typed homogeneous `Data` of a PyG `HeteroData` (module docstring), with its `HeteroMeta` attached
    (train/graph/form.py `attach_meta`). `target`: the node type classified."""
    node_types = tuple(hetero.node_types)
    check_target(node_types, target, source)
    counts = {t: node_count(hetero[t], t) for t in node_types}
    edge_types = tuple(tuple(t) for t in hetero.edge_types)
    for edge_type in edge_types:
        check_relation(edge_type, hetero[edge_type].edge_index, counts, source)
    offsets, total = {}, 0
    for t in node_types:
        offsets[t], total = total, total + counts[t]
    index = [hetero[e].edge_index.long() + torch.tensor([[offsets[e[0]]], [offsets[e[2]]]]) for e in edge_types]
    edge_index = torch.cat(index, 1) if index else torch.empty(2, 0, dtype=torch.long)
    edge_type = torch.cat([torch.full((i.size(1),), n, dtype=torch.long) for n, i in enumerate(index)]) \
        if index else torch.empty(0, dtype=torch.long)
    widths = {t: int(hetero[t].x.size(1)) if hetero[t].get("x") is not None else 0 for t in node_types}
    if featureless == "degree":
        degree = torch.bincount(edge_index[1], minlength=total).float()
        feats = {t: (hetero[t].x if widths[t] else torch.log1p(degree[offsets[t]:offsets[t] + counts[t]]).view(-1, 1))
                 for t in node_types}
        widths = {t: feats[t].size(1) for t in node_types}
    else:
        feats = {t: hetero[t].get("x") for t in node_types}
    x = torch.zeros(total, max(max(widths.values()), 1))
    for t in node_types:
        if widths[t]:
            x[offsets[t]:offsets[t] + counts[t], :widths[t]] = feats[t].float()
    store = hetero[target]
    labels = _labels(store, target, counts[target], source)
    y = torch.full((total, *labels.shape[1:]), UNLABELED, dtype=labels.dtype)
    y[offsets[target]:offsets[target] + counts[target]] = labels
    splits = {f"{s}_idx": _split(store, s, counts[target], target, source) + offsets[target] for s in SPLITS}
    node_type = torch.repeat_interleave(torch.arange(len(node_types)), torch.tensor([counts[t] for t in node_types]))
    data = Data(x=x, y=y, edge_index=edge_index, edge_type=edge_type, node_type=node_type, **splits)
    meta = HeteroMeta(node_types, edge_types, tuple(counts[t] for t in node_types),
                      tuple(widths[t] for t in node_types), target)
    return attach_meta(data, meta)
