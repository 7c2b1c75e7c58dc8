"""How big one batch is, in expected nodes and edges per hop: what the memory plan's terms (train/plan/terms.py)
size a training step and an evaluation by, from the config and the graph's size alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

from train.builtin_tasks import task_row
from train.config import Config
from train.graph.sizes import GraphSize


@dataclass(frozen=True)
class Hops:
    """A sampled batch's size: new nodes per hop (seeds first) and sampled edges per hop, expected upper bounds."""

    nodes: tuple[int, ...]
    edges: tuple[int, ...]

    @property
    def total_nodes(self) -> int:
        return sum(self.nodes)

    @property
    def total_edges(self) -> int:
        return sum(self.edges)


def batch_seeds(config: Config, evaluation: bool = False) -> int:
    """The seed nodes of one training (or sampled evaluation) batch: its nodes, or a link batch's endpoints (each
    positive's 2 and its negatives', 2 per binary pair, 1 per triplet target; an evaluation's pairs 2 each), at most."""
    size = config.sampler.eval_batch_size if evaluation else config.sampler.batch_size
    if task_row(config.task.name).seeds == "nodes":
        return size
    task = config.task
    return 2 * size if evaluation else size * (2 + (2 if task.neg_sampling == "binary" else 1) * task.neg_ratio)


def sampled_hops(seeds: int, fanouts: list[int], size: GraphSize) -> Hops:
    """Expected nodes and edges of one batch. The seeds are uniform over the split, so the first hop takes
    min(fanout, mean degree) each; later frontiers are reached along edges (higher degrees), so they take the
    whole fanout. A fanout of -1 takes every neighbour. New nodes per hop are at most the nodes not yet seen. A
    typed graph draws the fanout per edge type (train/graph/typed_csc.py): its seeds up to that many per relation
    into the target type, later frontiers per relation into a node of the graph's mix of types (the relations into
    a node, averaged over the nodes: a frontier of the type with the most would take that many; measured on
    hetero-synthetic's [15, 10, 5] batches, 1.3 x the edges sampled)."""
    frontier = min(seeds, size.nodes)
    nodes, edges, seen = [frontier], [], frontier
    meta = size.meta
    first = meta.relations_into[meta.target_index] if meta is not None else 1
    mean = meta.segments / max(sum(meta.counts), 1) if meta is not None else 1
    for hop, fanout in enumerate(fanouts):
        per_node = size.degree if fanout < 0 else min(fanout * first, size.degree) if hop == 0 else fanout * mean
        sampled = math.ceil(frontier * per_node)
        frontier = min(sampled, size.nodes - seen)
        edges.append(sampled)
        nodes.append(frontier)
        seen += frontier
    return Hops(tuple(nodes), tuple(edges))


def full_neighbourhood(seeds: int, size: GraphSize) -> Hops:
    """One batch of the full evaluation: the seeds' whole in-neighbourhood, one hop (train/loop/evaluate.py)."""
    return sampled_hops(seeds, [-1], size)
