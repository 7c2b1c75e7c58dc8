"""`data.features=sharded`: the structure one copy per node as before, the feature rows about 1/N per node (issue 40).

Each node keeps the rows it owns (train/graph/sharing/ownership.py: striped, row id on node id % N) in its
node-shared segment (train/graph/sharing/shared_graph.py: written once by local rank 0, mapped by every rank of the
node), in data.feature_dtype; the labels, splits, node types and edge values stay with the structure (they are per
node or per edge, not 1024 columns per node). Every rank fetches the other nodes' rows through its `ShardedFeatures`
(train/graph/sharing/feature_store.py) on a process group of the fetch's own, made here once by every rank.

A loader that reads only its node's rows (the files and synthetic kinds) marks the graph it returns with
`mark_own_rows`; any other graph is loaded whole by local rank 0 and cut to its rows (`keep_own_rows`) before
anything is written, so the segment never holds more than the node's share.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch_geometric.data import Data

from train.cluster.distenv import DistEnv
from train.config import DataConfig
from train.errors import UserError
from train.graph.datasets.lookup import dataset_kind
from train.graph.form import graph_csc
from train.graph.sharing.feature_layout import LayoutChoice
from train.graph.sharing.feature_store import ShardedFeatures, attach_features, servers_of
from train.graph.sharing.ownership import Ownership
from train.graph.sharing.row_exchange import RowExchange, fetch_group
from train.graph.sharing.shared_graph import obtain_shared_or_private
from train.graph.side import keep, side_of
from train.graph.typed_meta import graph_meta

LoadOwn = Callable[[DataConfig, dict], Data]  # (data config, {node type: (its rows, their place)}) -> graph


def ownership_of(data: Data, parts: int) -> Ownership:
    """The graph's ownership over `parts` nodes: per node type where the graph is typed (its HeteroMeta)."""
    meta = graph_meta(data)
    if meta is not None:
        return Ownership.of_types(parts, dict(zip(meta.node_types, meta.counts)))
    csc = graph_csc(data)
    num_nodes = int(csc[0].numel()) - 1 if csc is not None else int(data.num_nodes)
    return Ownership(parts, num_nodes)


def planned_ownership(config: DataConfig, parts: int) -> Ownership | None:
    """The ownership a loader that reads only its own rows is given before it loads, from the graph's size as its
    kind knows it without loading (published, computed, or from the files' headers); None for a kind whose graph
    is loaded whole and then cut (a downloaded set: train/graph/datasets/loading.py own_rows_of). A size that
    differs from the graph loaded is refused by `keep_own_rows`, naming both."""
    kind = dataset_kind(config)
    if kind.in_data_root:
        return None
    size = kind.plan_size(config)
    if size.meta is not None:
        return Ownership.of_types(parts, dict(zip(size.meta.node_types, size.meta.counts)))
    return Ownership(parts, size.nodes)


def mark_own_rows(data: Data, ownership: Ownership, part: int) -> Data:
    """For a loader that read only node `part`'s rows into `data.x` (in Ownership's local order): say so, so that
    `keep_own_rows` keeps them as they are. `data.num_nodes` must then be set (x no longer counts the nodes)."""
    return keep(data, own_rows=(ownership.state_dict(), part))


def keep_own_rows(data: Data, parts: int, part: int, dtype: torch.dtype) -> Data:
    """`data` with only node `part`'s feature rows in x, in `dtype` (data.feature_dtype); num_nodes set, as x no
    longer counts the nodes. A graph marked by `mark_own_rows` is checked, not cut again."""
    ownership = ownership_of(data, parts)
    marked = side_of(data).own_rows
    if marked is not None:
        if marked != (ownership.state_dict(), part):
            raise UserError(f"the loader read the rows of {marked}, but node {part} owns those of "
                            f"{ownership.describe()}")
        shard = data.x
    else:
        shard = data.x.index_select(0, ownership.owned_ids(part))
    data.num_nodes = ownership.num_nodes
    data.x = shard.to(dtype)
    return data


def _check_shard(shard: torch.Tensor, ownership: Ownership, part: int) -> None:
    """The mapped shard holds exactly node `part`'s rows; else the segment is not what was written."""
    if shard.dim() != 2 or shard.size(0) != ownership.rows_of(part):
        raise UserError(f"node {part}: the feature shard (x.bin of its shared graph) has shape {tuple(shard.shape)}, "
                        f"but the node owns "
                        f"{ownership.rows_of(part)} ({ownership.describe()}); the node's shared graph was changed or "
                        "truncated: start the job again.")


def sharded_graph(config: DataConfig, env: DistEnv, load: Callable[[DataConfig], Data], *,
                  collective_timeout_seconds: float, dtype: torch.dtype, load_own: LoadOwn | None = None) -> Data:
    """The graph with the structure one copy per node and the features sharded over the nodes. Collective over ALL
    ranks: the nodes are counted and the fetch's own group is made here, once."""
    node_of_rank: list = [None] * env.world_size
    dist.all_gather_object(node_of_rank, env.node_rank)
    nodes = sorted(set(node_of_rank))
    parts, part = len(nodes), nodes.index(env.node_rank)
    backend = dist.get_backend()
    group = fetch_group(collective_timeout_seconds, backend)  # before loading: every rank reaches it alike
    planned = planned_ownership(config, parts) if load_own is not None else None

    def load_node(data_config: DataConfig) -> Data:
        if planned is None:  # a downloaded set (or a loader of whole graphs): loaded whole, then cut
            return keep_own_rows(load(data_config), parts, part, dtype)
        own = load_own(data_config, planned.type_slices(part))  # never the whole matrix, not even while loading
        return keep_own_rows(mark_own_rows(own, planned, part), parts, part, dtype)

    data = obtain_shared_or_private(config, env, load_node)
    ownership = ownership_of(data, parts)
    shard = data.x
    _check_shard(shard, ownership, part)
    del data.x
    data.num_nodes = ownership.num_nodes
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    exchange = RowExchange(group, env.world_size, device)
    attach_features(data, ShardedFeatures(shard, ownership, part, exchange, servers_of(node_of_rank, env.rank)))
    if env.is_main:
        print(f"data.features=sharded: {ownership.describe()}; node {part} holds {shard.size(0)} rows "
              f"({shard.nbytes / 2**30:.2f} GiB in {str(dtype).removeprefix('torch.')}); the others' rows are "
              "fetched by all-to-all", flush=True)
    return data


def agreed_layout(choice: LayoutChoice, env: DistEnv) -> LayoutChoice:
    """The layout every rank takes: each node decided from its own limit (plan/sharded.py node_layout), and nodes
    whose limits differ could decide apart, which would hang the first fetch; so where any rank shards, all do, with
    that rank's reason. Collective over all ranks (where there are several)."""
    if env.world_size == 1:
        return choice
    choices: list = [None] * env.world_size
    dist.all_gather_object(choices, (choice.layout, choice.reason))
    sharded = [rank for rank, (layout, _reason) in enumerate(choices) if layout == "sharded"]
    if not sharded or len(sharded) == env.world_size:
        return choice
    return LayoutChoice("sharded", f"{choices[sharded[0]][1]} (rank {sharded[0]}'s node; every node takes it)")


def obtain_graph_with_features(config: DataConfig, env: DistEnv, load: Callable[[DataConfig], Data],
                               choice: LayoutChoice, *, collective_timeout_seconds: float, dtype: torch.dtype,
                               load_own: LoadOwn | None = None) -> Data:
    """The graph as `data.share` and `data.features` say: `choice` is the node's layout (train/plan/sharded.py
    node_layout decides auto from the node's limit, by the plan's figures), agreed over all ranks. `load_own(config,
    owned)`: the graph with x only the rows `owned` (load_graph's owned=), where its kind can read only those."""
    choice = agreed_layout(choice, env)
    if env.is_main and (choice.layout == "sharded" or (config.features == "auto" and env.num_nodes > 1)):
        print(f"data.features: {choice.reason}", file=sys.stderr, flush=True)
    if choice.layout == "sharded" and env.world_size > 1 and env.num_nodes > 1:
        return sharded_graph(config, env, load, collective_timeout_seconds=collective_timeout_seconds, dtype=dtype,
                             load_own=load_own)
    return obtain_shared_or_private(config, env, load)
