"""The memory plan's figures that the words for a killed rank name (train/loop/killed_rank.py): a plan's rank peak,
shared graph and node memory, made from a plan or for a run. Apart from killed_rank, whose words need only the
standard library (the node's own Python reads them in a job)."""

from __future__ import annotations

from train.cluster.memory_limit import physical_memory_bytes as node_memory_bytes
from train.graph.datasets.lookup import dataset_kind
from train.graph.sharing.segments import shares_graph
from train.loop.killed_rank import MemoryFigures
from train.plan.terms import make_plan, shared_graph_bytes


def figures_of_plan(plan, node_memory: int | None) -> MemoryFigures:
    """A memory plan's (train/plan/terms.py's Plan) figures, with the node's memory."""
    shared = shared_graph_bytes(plan.size) if shares_graph(plan.share, plan.ranks_per_node) else 0
    return MemoryFigures(rank_peak=plan.rank_peak, node_memory=node_memory, shared_graph=shared)


def plan_figures(config, nodes: int, ranks: int, gpus: bool) -> MemoryFigures:
    """The memory plan's figures for this run and this machine's memory; unknown where the plan cannot be made
    (it is asked after a failure: it must not fail in turn)."""
    memory = node_memory_bytes()
    try:
        plan = make_plan(config, dataset_kind(config.data).plan_size(config.data), nodes, ranks, gpus=gpus)
        return figures_of_plan(plan, memory)
    except Exception:  # a plan that cannot be made leaves the figures unknown, and the message says so
        return MemoryFigures(node_memory=memory)
