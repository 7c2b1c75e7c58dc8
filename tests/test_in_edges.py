"""The exact evaluation's batches read from the CSC (train/graph/sampling/in_edges.py): the same neighbourhoods as the
sampler with fanout -1, in chunks that respect their bounds."""

from __future__ import annotations

import pytest
import torch

from train.config import DataConfig
from train.graph.datasets.loading import synthetic_graph
from train.graph.sampling.in_edges import ChunkCost, chunk_bounds, in_edge_batch, in_edge_chunks
from train.graph.sampling.samplers import make_node_loader
from train.graph.typed_csc import build_csc


def _graph_with_self_loops():
    data = synthetic_graph(DataConfig(num_nodes=300, num_features=4, num_classes=3, avg_degree=5))
    loops = torch.arange(0, 300, 7)
    data.edge_index = torch.cat([data.edge_index, torch.stack([loops, loops])], dim=1)
    return data


def _global_edges(n_id, edge_index):
    return torch.stack([n_id[edge_index[0]], n_id[edge_index[1]]])


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_a_batch_holds_every_in_edge_of_its_targets_as_the_full_sampler_gives_them(index_dtype):
    data = _graph_with_self_loops()
    colptr, row, _perm = build_csc(data.edge_index, data.num_nodes)
    targets = torch.tensor([5, 0, 299, 14, 77, 140])  # not sorted: the batch keeps their order
    n_id, edge_index, seeds = in_edge_batch(colptr.to(index_dtype), row.to(index_dtype), targets)
    assert seeds == 6 and torch.equal(n_id[:6], targets)
    assert n_id.dtype == edge_index.dtype == torch.long
    assert n_id.unique().numel() == n_id.numel()  # each source once
    sampled = next(iter(make_node_loader(data, targets, [-1], batch_size=6, force_torch_sampler=True)))
    # the same edges in the same order (grouped by target as given, CSC order within): the same sums
    assert torch.equal(_global_edges(n_id, edge_index), _global_edges(sampled.n_id, sampled.edge_index))
    loops = edge_index[0] == edge_index[1]
    assert int(loops.sum()) == 4  # 0, 14, 77 and 140 have a self-loop: their source takes their target slot
    assert set(n_id[edge_index[0][loops]].tolist()) == {0, 14, 77, 140}


def test_targets_without_in_edges_give_an_empty_batch_of_targets():
    colptr = torch.tensor([0, 0, 0, 2])
    row = torch.tensor([0, 1])
    n_id, edge_index, seeds = in_edge_batch(colptr, row, torch.tensor([1, 0]))
    assert seeds == 2 and n_id.tolist() == [1, 0] and edge_index.shape == (2, 0)


def test_chunks_stop_at_the_target_count_and_the_byte_budget():
    cost = ChunkCost(per_target=10, per_edge=100)
    degree = torch.tensor([1, 1, 1, 1, 1, 1, 1])  # 110 bytes per target
    assert chunk_bounds(degree, max_targets=3, cost=cost, budget=10_000) == [0, 3, 6, 7]
    assert chunk_bounds(degree, max_targets=100, cost=cost, budget=330) == [0, 3, 6, 7]
    assert chunk_bounds(degree, max_targets=100, cost=cost, budget=329) == [0, 2, 4, 6, 7]
    # a target whose in-edges alone exceed the budget is a chunk of its own, never skipped
    assert chunk_bounds(torch.tensor([1, 50, 1]), max_targets=100, cost=cost, budget=300) == [0, 1, 2, 3]
    assert chunk_bounds(torch.tensor([], dtype=torch.long), 4, cost) == [0]


def test_every_chunk_of_a_graph_is_within_its_bounds_and_together_they_cover_every_edge():
    data = _graph_with_self_loops()
    colptr, row, _perm = build_csc(data.edge_index, data.num_nodes)
    targets = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))
    cost = ChunkCost.for_layer(in_width=4, out_width=8)
    budget = 40 * cost.per_edge  # a few targets per chunk
    bounds = in_edge_chunks(colptr, targets, 16, cost, budget)
    edges = []
    for start, stop in zip(bounds, bounds[1:]):
        n_id, edge_index, seeds = in_edge_batch(colptr, row, targets[start:stop])
        assert 1 <= seeds <= 16
        assert seeds == 1 or seeds * cost.per_target + edge_index.size(1) * cost.per_edge <= budget
        edges.append(_global_edges(n_id, edge_index))
    assert len(bounds) > data.num_nodes // 16 + 1  # the budget, not only the count, cut chunks
    covered = torch.cat(edges, dim=1)
    assert sorted(map(tuple, covered.t().tolist())) == sorted(map(tuple, data.edge_index.t().tolist()))
