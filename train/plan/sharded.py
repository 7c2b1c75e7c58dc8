"""The memory plan under data.features=sharded: per node, its own feature rows, the structure's one copy and the
fetch buffers, beside the plan's copy-per-node figures (train/plan/terms.py), and the layout data.features=auto
takes from them (train/graph/sharing/feature_layout.py: one decision for the run and the plan).

A node owns about 1/N of each node type's rows (a typed graph is balanced per type); the structure (CSC, labels,
splits, a typed graph's types) stays whole on every node, and sampling stays local. A batch's rows that other
nodes own are fetched by all-to-all: their ids go out and come in (the others' requests), their rows come in and go
out, for the batch being computed and the one prefetched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from train.cluster.memory_limit import node_limit
from train.config import Config
from train.graph.datasets.lookup import dataset_kind
from train.graph.sharing.feature_layout import LayoutChoice, resolved_layout
from train.graph.sharing.segments import shares_graph
from train.graph.sizes import FLOAT, INDEX, GraphSize
from train.loop.killed_rank import memory_words
from train.plan.held import loader_kind, loading_bytes, shared_graph_bytes
from train.plan.hops import batch_seeds, full_neighbourhood, sampled_hops
from train.plan.terms import (
    GIB,
    Plan,
    Setting,
    batch_host_bytes,
    eval_chunk_targets,
    evaluation_sampled,
    make_plan,
)

# Loaders that read a downloaded set whole and keep their own rows after (Planetoid, OGB: small enough to).
WHOLE_LOADERS = ("ogb", "pyg")
SHARDED = "sharded"  # the plan's rows under data.features=sharded (Plan.rows[SHARDED])
MOST_NODES = 2**16  # the most nodes "what is needed" looks at
FETCH_ON_GPU = "fetch buffers per GPU (NCCL; not in the node's peak)"


def shard_rows(size: GraphSize, nodes: int) -> int:
    """The most feature rows one node owns: ceil(1/N) of each node type's (one type: of all)."""
    counts = size.meta.counts if size.meta is not None else (size.nodes,)
    return sum(math.ceil(count / nodes) for count in counts)


def features_bytes(size: GraphSize) -> int:
    """The whole feature matrix (float32, as the loaders give it and the node-shared graph holds it)."""
    return size.nodes * size.features * FLOAT


def structure_bytes(size: GraphSize) -> int:
    """What every node holds whatever the layout: the node-shared graph but its features."""
    return shared_graph_bytes(size) - features_bytes(size)


def _narrowed(size: GraphSize, nodes: int) -> GraphSize:
    """The graph with x's bytes those of one node's shard: every loader's peak is linear in x's bytes, so the loading
    of a node's own rows is planned as the loading of a graph whose rows are as much narrower."""
    return replace(size, features=math.ceil(size.features * shard_rows(size, nodes) / max(size.nodes, 1)))


@dataclass(frozen=True)
class Batches:
    """What a rank's batches hold of feature rows, the part of the plan's rank terms the layout changes."""

    rows: int  # feature rows of the batches in flight at once: training's (with the prefetched) or an evaluation's
    host_features: int  # bytes of features in the plan's host batches of a GPU job (0 on the CPU: they stay there)


def batches_of(plan: Plan, config: Config, loaded: GraphSize) -> Batches:
    """The rows a rank's batches read at once: a training batch and the sampler.prefetch ones prepared beside it
    (train/loop/prefetch.py), or one evaluation batch (sampled, or the exact pass's chunk neighbourhood, whose first
    layer reads the features); and, on GPUs, the features the plan's host batches hold (batch_host_bytes: their
    bytes less those of the same batches without features), which under sharded come over NCCL to the GPU."""
    size = plan.size
    train = sampled_hops(batch_seeds(config), config.sampler.num_neighbors, size)
    evaluation = None
    if evaluation_sampled(config, size):
        fanouts = list(config.eval.fanouts or config.sampler.num_neighbors)
        evaluation = sampled_hops(batch_seeds(config, evaluation=True), fanouts, size)
        evaluation_rows = evaluation.total_nodes
    else:
        first = eval_chunk_targets(config, size, size.features, config.model.hidden)
        evaluation_rows = full_neighbourhood(first, size).total_nodes
    rows = max(train.total_nodes * (1 + config.sampler.prefetch), evaluation_rows)
    if not plan.rows["GPU"]:
        return Batches(rows, 0)
    per_node = plan.ranks_per_node
    setting = Setting(config, plan.nodes * per_node, per_node, True, shares_graph(config.data.share, per_node),
                      plan.placement, loaded if loaded is not size else None)
    bare = replace(size, features=0)
    host = sum(batch_host_bytes(setting, size, hops) - batch_host_bytes(setting, bare, hops)
               for hops in (train, evaluation) if hops is not None)
    return Batches(rows, host)


def fetch_bytes(size: GraphSize, rows: int, nodes: int) -> int:
    """One rank's fetch buffers for `rows` feature rows in flight: the rows other nodes own ((N-1)/N of them), their
    ids and rows, sent (the others' requests, as many on average) and received."""
    remote = math.ceil(rows * (nodes - 1) / nodes)
    return remote * 2 * (INDEX + size.features * FLOAT)


def sharded_loading_bytes(config: Config, size: GraphSize, loaded: GraphSize, nodes: int) -> int:
    """The loading peak of a node that reads only its own rows (a downloaded set is read whole, then cut)."""
    source = loader_kind(config.data.name)
    if source in WHOLE_LOADERS:
        return loading_bytes(size, source, loaded if loaded is not size else None)
    narrow_loaded = _narrowed(loaded, nodes) if loaded is not size else None
    return loading_bytes(_narrowed(size, nodes), source, narrow_loaded)


def sharded_rows(plan: Plan, config: Config, loaded: GraphSize, nodes: int,
                 batches: Batches | None = None) -> dict[str, int]:
    """A node's bytes under data.features=sharded over `nodes` nodes of the plan's ranks per node: its shard, the
    structure, the loading of its own rows, and its ranks (the plan's own rank terms less any private copy of the
    graph) with their fetch: on the CPU its buffers in host memory; on GPUs over NCCL in GPU memory (the item
    FETCH_ON_GPU, not in the node's peak), the host gathering from its shard the rows it serves and its own, in
    place of the features of its host batches. `batches`: batches_of, where the caller has it already."""
    size, per_node, rank = plan.size, plan.ranks_per_node, plan.rows["rank"]
    batches = batches or batches_of(plan, config, loaded)
    runtime = sum(v for k, v in rank.items() if k.startswith("runtime"))
    private = sum(v for k, v in rank.items() if k.startswith("graph and CSC of its own"))
    fetch = fetch_bytes(size, batches.rows, nodes)
    served = batches.rows * size.features * FLOAT if plan.rows["GPU"] else 0
    steady = rank["while training and evaluating"] - private - batches.host_features + served
    shard = shard_rows(size, nodes) * size.features * FLOAT
    structure = structure_bytes(size)
    loading = per_node * runtime + sharded_loading_bytes(config, size, loaded, nodes)
    host_fetch = 0 if plan.rows["GPU"] else per_node * fetch
    training = per_node * steady + host_fetch
    rows = {f"features: its shard, {shard_rows(size, nodes):,} of {size.nodes:,} rows": shard,
            "structure (CSC, labels, splits), one copy per node": structure,
            f"fetch buffers: {per_node} rank(s) x {batches.rows:,} rows": host_fetch,
            f"rows gathered from it: {per_node} rank(s) x {batches.rows:,}": per_node * served,
            f"while loading: {per_node} runtimes + 1 loading of its own rows": loading,
            f"while training: {per_node} rank(s) x {steady / GIB:.2f} GiB{', fetch' if host_fetch else ''}": training,
            "peak": shard + structure + max(loading, training)}
    if plan.rows["GPU"]:
        rows[FETCH_ON_GPU] = fetch
    return rows


def layout_of(plan: Plan, config: Config, loaded: GraphSize, limit: int | None, source: str) -> LayoutChoice:
    """data.features for the plan's job on a node that may hold `limit` bytes (from `source`): the plan's rows under
    sharded (kept in plan.rows[SHARDED]) and its copy-per-node peak, weighed by the one decision."""
    plan.rows[SHARDED] = sharded_rows(plan, config, loaded, plan.nodes)
    return resolved_layout(config.data.features, plan.nodes, features_bytes(plan.size), structure_bytes(plan.size),
                           plan.node_peak, plan.rows[SHARDED]["peak"], limit, source)


def run_layout(config: Config, loaded: GraphSize, nodes: int, ranks: int, gpus: bool, limit: int | None,
               source: str) -> LayoutChoice:
    """The run's data.features on its node: the plan of this very job (as `python -m train plan` makes it) weighed
    against the node's own limit (train/cluster/memory_limit.py node_limit)."""
    return layout_of(make_plan(config, loaded, nodes, ranks, gpus=gpus), config, loaded, limit, source)


def node_layout(config: Config, env, gpus: bool) -> LayoutChoice:
    """data.features on this node of a running job (`env`: its DistEnv): the plan of the job, from the graph's size
    as the plan reads it (never loading it), weighed against this node's own limit. What the run calls; every node
    of a job takes the same layout where their limits agree (one limit per job: its --mem, its nodes' memory)."""
    loaded = dataset_kind(config.data).plan_size(config.data)
    limit = node_limit(env.mem_per_node, planned=env.planned_node_memory)
    return run_layout(config, loaded, env.num_nodes, env.world_size, gpus, *limit)


def nodes_needed(plan: Plan, config: Config, loaded: GraphSize, limit: int) -> int | None:
    """The fewest nodes (of the plan's ranks per node) whose sharded peak fits `limit`; None where even MOST_NODES
    would not (the structure and the ranks alone are too large). The peak falls as nodes are added."""
    batches = batches_of(plan, config, loaded)

    def fits(nodes: int) -> bool:
        return sharded_rows(plan, config, loaded, nodes, batches)["peak"] <= limit

    if fits(plan.nodes):
        return plan.nodes
    low, high = plan.nodes, max(2 * plan.nodes, 2)  # low does not fit
    while not fits(high):
        if high >= MOST_NODES:
            return None
        low, high = high, min(2 * high, MOST_NODES)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def layout_lines(plan: Plan, choice: LayoutChoice) -> list[str]:
    """The plan table's per-node bytes under sharded (under node: the "per node" rows above it), the two peaks side
    by side, and the layout data.features takes."""
    def line(head: str, item: str, value: int) -> str:
        return f"{head:<9} {item:<56} {memory_words(value):>11}"

    rows = plan.rows[SHARDED]
    lines = [f"per node, sharded over {plan.nodes} node(s) (data.features=sharded):"]
    lines += [line("", item, value) for item, value in rows.items() if value]
    lines += [line("layout", "per node, a copy of the features on each (node)", plan.node_peak),
              line("", f"per node, sharded over {plan.nodes} node(s) (sharded)", rows["peak"]),
              f"data.features: {choice.reason}"]
    return lines


def node_refusal(plan: Plan, config: Config, loaded: GraphSize, choice: LayoutChoice) -> str | None:
    """Why a node of the plan's capacity cannot hold the job in the layout it takes: its need, whether more nodes
    would hold less (not with a copy of the graph on each), and the other layout's need; None where it fits or the
    capacity is unknown. What would fit is the advice's (train/plan/advice.py), each change checked."""
    cap, source = plan.node_capacity
    sharded, copy = plan.rows[SHARDED]["peak"], plan.node_peak
    peak = sharded if choice.layout == SHARDED else copy
    if cap is None or peak <= cap:
        return None
    over = f"{plan.nodes} node(s)"
    if plan.nodes == 1:
        how = "on one node, where sharding the features changes nothing"
    elif choice.layout == SHARDED:
        how = f"with the features sharded over {over} ({memory_words(copy)} with a copy on each)"
    else:
        how = (f"with a copy of the features on each: every node holds the whole graph, so more nodes do not help "
               f"({memory_words(sharded)} sharded over {over})")
    said = f"a node needs {memory_words(peak)} at its peak but has {memory_words(cap)} ({source}), {how}"
    if plan.nodes > 1 and nodes_needed(plan, config, loaded, cap) is None:
        floor = sharded_rows(plan, config, loaded, MOST_NODES)["peak"]
        said += (f"; no number of nodes fits sharded: what is not sharded (the structure, its loading, "
                 f"{plan.ranks_per_node} rank(s)) needs {memory_words(floor)} a node")
    return said


def node_need(plan: Plan, choice: LayoutChoice) -> int:
    """What a node holds at its peak in the layout taken."""
    return plan.rows[SHARDED]["peak"] if choice.layout == SHARDED else plan.node_peak


def gpu_need(plan: Plan, choice: LayoutChoice) -> int:
    """What a GPU holds in the layout taken: the plan's GPU total, and under sharded the fetch buffers."""
    extra = plan.rows[SHARDED].get(FETCH_ON_GPU, 0) if choice.layout == SHARDED else 0
    return plan.gpu_total + extra
