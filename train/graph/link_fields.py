"""The edges a link task predicts, as a loaded graph carries them: the one home of their names and their checks.

A graph with its own link split (ogbl-citation2: train/graph/datasets/ogb_links.py), and any other graph once a
link task has
split it where it is loaded (train/graph/link_split.py: PyG's RandomLinkSplit, once per node), is the homogeneous
`Data` with `x` and `edge_index` (the graph messages pass over, without the held-out edges), and beside them, all
long tensors of node ids:

- `train_pos_edge_index` [2, E]: the positive edges to train on, row 0 the source, row 1 the target;
- `val_pos_edge_index`, `test_pos_edge_index` [2, M]: each split's held-out positive edges;
- `val_neg_dst`, `test_neg_dst` [M, K], where the dataset gives every positive its own negatives (ogbl-citation2:
  K = 1,000 per positive): the j-th negative of positive i is the edge (`{split}_pos_edge_index[0, i]`,
  `{split}_neg_dst[i, j]`); the positive is ranked against its K (train/loop/link_metrics.py: MRR, Hits@K);
- or `val_neg_edge_index`, `test_neg_edge_index` [2, M'], where the split draws negative pairs of its own
  (RandomLinkSplit: as many as positives), each scored as a pair;
- `link_undirected`, a bool of no dimensions, where the split says whether its graph is undirected
  (RandomLinkSplit's: as the loaded graph was; then the positives hold one direction of each pair, the
  message-passing graph both). Without it the graph passes messages both ways (a dataset's own split).

The node-shared graph (train/graph/form.py) shares these beside the features, once per node. A dataset's own
split has no node labels (`y`) and no node split (`train_idx`, ...): its seeds are edges.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor


LINK_SPLITS = ("train", "val", "test")
HELD_OUT_SPLITS = ("val", "test")  # the splits scored: each positive with its own negatives, or negative pairs
UNDIRECTED = "link_undirected"


def pos_edges_key(split: str) -> str:
    return f"{split}_pos_edge_index"


def neg_dst_key(split: str) -> str:
    return f"{split}_neg_dst"


def neg_edges_key(split: str) -> str:
    return f"{split}_neg_edge_index"


def has_link_split(data) -> bool:
    """Whether the graph carries its own link split (else a link task makes one, e.g. PyG's RandomLinkSplit)."""
    return all(pos_edges_key(split) in data for split in LINK_SPLITS)


def pos_edges(data, split: str) -> Tensor:
    """[2, M]: the positive edges of `split`."""
    return data[pos_edges_key(split)]


def neg_dst(data, split: str) -> Tensor | None:
    """[M, K]: each positive's own negative targets in `split`, or None where the dataset gives none."""
    key = neg_dst_key(split)
    return data[key] if key in data else None


def neg_edges(data, split: str) -> Tensor | None:
    """[2, M']: the negative pairs of `split`, or None where its positives come with their own negatives."""
    key = neg_edges_key(split)
    return data[key] if key in data else None


def messages_both_ways(data) -> bool:
    """Whether the split's graph is undirected: a seed edge then leaves its batch in both directions."""
    return bool(data[UNDIRECTED]) if UNDIRECTED in data else True


def pos_edges_problem(edges: Tensor, num_nodes: int) -> str | None:
    """What keeps `edges` from being [2, M] node ids of a graph of `num_nodes` nodes, in words; None if nothing."""
    if edges.dim() != 2 or edges.size(0) != 2:
        return f"has shape {list(edges.shape)}, not [2, M] (sources, targets)"
    return ids_problem(edges, num_nodes)


def neg_dst_problem(negatives: Tensor, positives: int, num_nodes: int) -> str | None:
    """What keeps `negatives` from being [positives, K] node ids, K > 0, in words; None if nothing."""
    if negatives.dim() != 2 or negatives.size(0) != positives or negatives.size(1) == 0:
        return f"has shape {list(negatives.shape)}, not [{positives}, K] (K negatives for each of the positives)"
    return ids_problem(negatives, num_nodes)


def ids_problem(ids: Tensor, num_nodes: int) -> str | None:
    """What keeps `ids` from being ids of nodes 0..num_nodes-1, naming the first node outside; None if nothing."""
    import torch  # on use: the config's checks import this module without torch

    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        return f"holds {ids.dtype}, not node ids (integers)"
    outside = ids[(ids < 0) | (ids >= num_nodes)]
    return f"names node {int(outside[0])}, outside 0..{num_nodes - 1}" if outside.numel() else None


# every field a link split may carry: what the node-shared graph keeps beside the features
LINK_FIELDS = (*map(pos_edges_key, LINK_SPLITS), *map(neg_dst_key, HELD_OUT_SPLITS),
               *map(neg_edges_key, HELD_OUT_SPLITS), UNDIRECTED)


def split_ids(data) -> int:
    """The node ids a graph's link split holds (every field but the flag `link_undirected`): what the memory plan
    counts beside the graph (GraphSize.link_ids)."""
    return sum(data[key].numel() for key in LINK_FIELDS if key != UNDIRECTED and key in data)


def ranked_split_ids(train: int, held_out: tuple[int, ...], negatives: int) -> int:
    """`split_ids` of a dataset's own split with ranked negatives, from its counts: `train` positive pairs, and per
    held-out split its positive pairs, each with `negatives` targets of its own ([M, K] `{split}_neg_dst`)."""
    return 2 * train + sum(positives * (2 + negatives) for positives in held_out)
