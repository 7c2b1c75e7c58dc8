"""Where the features live: a whole copy on every node (`node`) or each node's own rows (`sharded`), and the one
decision data.features=auto makes, for the run and for the memory plan alike.

The run weighs the node's own limit (train/cluster/memory_limit.py: the job's cgroup, SLURM's --mem, else the
node's memory); the plan weighs sinfo's (train/cli/plan.py). Both hand the same figures (the memory plan's per-node
bytes under each layout, train/plan/sharded.py) to `resolved_layout`, so they cannot disagree on one node.
Plain values in, plain values out: it imports nothing of the plan or of torch.
"""

from __future__ import annotations

from dataclasses import dataclass

LAYOUTS = ("node", "sharded")  # data.features's layouts; "auto" picks one of them here
GIB = 2**30


@dataclass(frozen=True)
class LayoutChoice:
    """The layout a run takes, and why, in words a user reads in the plan and the run's log."""

    layout: str  # node or sharded
    reason: str


def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def resolved_layout(asked: str, nodes: int, features_bytes: int, structure_bytes: int, copy_need: int,
                    sharded_need: int, limit: int | None, limit_source: str) -> LayoutChoice:
    """data.features as the run takes it: `node` or `sharded` as asked; `auto` keeps a copy per node where a node
    holds it (its whole copy and everything else the plan counts on a node), else shards.

    Args:
        asked: data.features (node, sharded or auto).
        nodes: the job's nodes; one node has nothing to shard over.
        features_bytes, structure_bytes: the whole graph's features and its structure (the CSC, labels, splits).
        copy_need, sharded_need: bytes a node needs at its peak with a copy of the features and with its shard
            (the memory plan's per-node peaks).
        limit: bytes this node may hold (None: unknown, then a copy per node is kept, as before sharding existed).
        limit_source: where `limit` comes from, in words ("the job's cgroup", "sinfo: smallest node").
    Returns:
        The layout and the reason.
    """
    figures = (f"the features ({_gib(features_bytes)}) and structure ({_gib(structure_bytes)}) need "
               f"{_gib(copy_need)} per node with a copy on each")
    if asked in LAYOUTS:
        if asked == "sharded" and nodes == 1:
            return LayoutChoice("sharded", "sharded (data.features=sharded): one node holds every row, so sharding "
                                           "changes nothing here")
        return LayoutChoice(asked, f"{asked} (data.features={asked})")
    if nodes == 1:
        return LayoutChoice("node", f"node: one node, nothing to shard over; {figures}")
    if limit is None:
        return LayoutChoice("node", f"node: {figures}; the node's limit is not known ({limit_source}), so the "
                                    "features are not sharded")
    has = f"the node's limit is {_gib(limit)} ({limit_source})"
    if copy_need <= limit:
        return LayoutChoice("node", f"node: {figures}; {has}")
    return LayoutChoice("sharded", f"sharded: {figures}; {has}; sharded over {nodes} nodes a node needs "
                                   f"{_gib(sharded_need)}")
