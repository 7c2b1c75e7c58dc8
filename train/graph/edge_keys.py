"""One int64 key per edge, `src * num_nodes + dst`: the one home of how an edge (its two ends) becomes a number to
find it by (link_split.values_of_edges: sorted and searched; link_batches.without_edges: `isin`).

Keys of a graph of N nodes run to N * N - 1, which fits int64 while N <= MAX_KEYED_NODES (isqrt(2**63 - 1) =
3,037,000,499 nodes); a larger graph is refused, never keyed with wrapped (colliding) keys. The ends are taken as
int64 first: an int32 edge tensor (the node-shared graph's ids may be) would wrap at 2**31.
"""

from __future__ import annotations

import math

from torch import Tensor

from train.errors import UserError

MAX_KEYED_NODES = math.isqrt(2**63 - 1)  # the most nodes whose keys (up to N * N - 1) fit int64


def edge_keys(edges: Tensor, num_nodes: int) -> Tensor:
    """[E] int64: `edges[0] * num_nodes + edges[1]` of [2, E] node ids below `num_nodes`, one distinct key per
    (src, dst) pair; a graph too large for int64 keys refused (UserError naming its count and the bound)."""
    if num_nodes > MAX_KEYED_NODES:
        raise UserError(f"a graph of {num_nodes:,} nodes is too large to find its edges by their ends: an edge's key "
                        f"(src * nodes + dst) fits int64 only for at most {MAX_KEYED_NODES:,} nodes.")
    return edges[0].long() * num_nodes + edges[1].long()
