"""TorchNeighborSampler must behave like PyG's NeighborSampler, through real PyG loaders."""

from __future__ import annotations

import itertools
import json
import pickle

import pytest
import torch
import torch_geometric.typing
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.nn import SAGEConv
from torch_geometric.sampler import NeighborSampler, NodeSamplerInput

from train.graph.sampling.device_plan import batch_source
from train.graph.sampling.gpu_hop import key_positions
from train.graph.sampling.samplers import (
    FusedNeighborSampler,
    SampledNodeLoader,
    TorchNeighborSampler,
    _floyd_positions,
    _random_key_positions,
    _seeded_cpu_rng,
    build_csc,
    have_native_sampler,
    make_node_loader,
)

NUM_NODES = 600
# Both hop algorithms keep one contract: Floyd's picks (the CPU) and random keys with one sort (the GPU).
SAMPLERS = pytest.mark.parametrize("sampler_class", [TorchNeighborSampler, FusedNeighborSampler],
                                   ids=["floyd", "fused"])
HUBS_20 = torch.arange(0, 20)  # in-degree exactly 20
HUBS_80 = torch.arange(20, 30)  # in-degree exactly 80
ISOLATED = torch.arange(30, 40)  # in-degree 0
BATCH_KEYS = {
    "x", "y", "edge_index", "edge_attr", "n_id", "e_id", "input_id",
    "batch_size", "num_sampled_nodes", "num_sampled_edges",
}


def _hub_edges(hubs: torch.Tensor, degree: int, gen: torch.Generator) -> torch.Tensor:
    sources = [torch.randperm(NUM_NODES, generator=gen)[:degree] for _ in hubs]
    return torch.stack([torch.cat(sources), hubs.repeat_interleave(degree)])


@pytest.fixture(scope="module")
def data() -> Data:
    """Random graph plus hubs of known degree, edge columns shuffled so CSC order != input order."""
    gen = torch.Generator().manual_seed(0)
    random_edges = torch.stack([
        torch.randint(0, NUM_NODES, (4000,), generator=gen),
        torch.randint(40, NUM_NODES, (4000,), generator=gen),  # hubs keep their exact degree
    ])
    edge_index = torch.cat(
        [random_edges, _hub_edges(HUBS_20, 20, gen), _hub_edges(HUBS_80, 80, gen)], dim=1
    )
    edge_index = edge_index[:, torch.randperm(edge_index.size(1), generator=gen)]
    return Data(
        x=torch.randn(NUM_NODES, 16, generator=gen),
        y=torch.randint(0, 4, (NUM_NODES,), generator=gen),
        edge_index=edge_index,
        edge_attr=torch.randn(edge_index.size(1), 3, generator=gen),
    )


def in_degree(data: Data) -> torch.Tensor:
    return torch.bincount(data.edge_index[1], minlength=data.num_nodes)


def check_batch(batch: Data, data: Data, seeds: torch.Tensor, fanouts: list[int]) -> None:
    """Everything NeighborLoader guarantees for a directed, non-disjoint sample."""
    batch = batch.to("cpu")
    assert set(batch.keys()) == BATCH_KEYS
    assert batch.batch_size == seeds.numel() == batch.input_id.numel()
    assert torch.equal(batch.n_id[: batch.batch_size], seeds)
    assert torch.equal(batch.x, data.x[batch.n_id]) and torch.equal(batch.y, data.y[batch.n_id])

    num_nodes, num_edges = batch.num_sampled_nodes, batch.num_sampled_edges
    assert isinstance(num_nodes, list) and isinstance(num_edges, list)
    assert len(num_nodes) == len(fanouts) + 1 and len(num_edges) == len(fanouts)
    assert num_nodes[0] == seeds.numel()
    assert sum(num_nodes) == batch.n_id.numel() == batch.num_nodes
    assert sum(num_edges) == batch.edge_index.size(1) == batch.e_id.numel()

    # Every sampled edge is that very edge of the original graph, at most once per
    # target slot (a seed given twice samples twice, as in pyg-lib).
    assert batch.edge_index.dtype == batch.e_id.dtype == torch.long
    assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
    assert torch.equal(batch.edge_attr, data.edge_attr[batch.e_id])
    slot_and_edge = torch.stack([batch.edge_index[1], batch.e_id])
    assert slot_and_edge.unique(dim=1).size(1) == batch.e_id.numel()

    degree = in_degree(data)
    node_bounds = [0, *itertools.accumulate(num_nodes)]
    edge_bounds = [0, *itertools.accumulate(num_edges)]
    for hop, fanout in enumerate(fanouts):
        source, target = batch.edge_index[:, edge_bounds[hop] : edge_bounds[hop + 1]]
        frontier = torch.arange(node_bounds[hop], node_bounds[hop + 1])
        # Hop h only adds in-edges of the nodes first reached at hop h-1 ...
        assert bool(((target >= node_bounds[hop]) & (target < node_bounds[hop + 1])).all())
        expected = degree[batch.n_id[frontier]]
        if fanout >= 0:
            expected = expected.clamp(max=fanout)
        counts = torch.bincount(target - node_bounds[hop], minlength=frontier.numel())
        # ... exactly min(fanout, degree) of them per node.
        assert torch.equal(counts, expected)
        # New nodes get ids in order of first appearance as a source in this hop.
        seen = set(batch.n_id[: node_bounds[hop + 1]].tolist())
        first_seen = []
        for node in batch.n_id[source].tolist():
            if node not in seen:
                seen.add(node)
                first_seen.append(node)
        assert batch.n_id[node_bounds[hop + 1] : node_bounds[hop + 2]].tolist() == first_seen
        assert bool((source < node_bounds[hop + 2]).all())


def sample(sampler: TorchNeighborSampler, seeds: torch.Tensor):
    return sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))


def same_sample(a, b) -> bool:
    return all(torch.equal(getattr(a, key), getattr(b, key)) for key in ("node", "row", "col", "edge"))


@SAMPLERS
def test_loader_batches_match_neighbor_loader_contract(data, sampler_class):
    some_nodes = torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(1))[:150]
    input_nodes = torch.cat([HUBS_80, ISOLATED, some_nodes, HUBS_20])  # repeats some seeds
    loader = NodeLoader(data, node_sampler=sampler_class(data, [5, 3], seed=0), input_nodes=input_nodes,
                        batch_size=64)
    seen_seeds, offset = [], 0
    for batch in loader:
        seeds = batch.n_id[: batch.batch_size]
        check_batch(batch, data, seeds, [5, 3])
        assert torch.equal(batch.input_id, torch.arange(offset, offset + seeds.numel()))
        seen_seeds.append(seeds)
        offset += seeds.numel()
    assert torch.equal(torch.cat(seen_seeds), input_nodes)  # given order, last batch kept


@SAMPLERS
def test_three_hops_and_large_fanout_path(data, sampler_class):
    seeds = torch.cat([HUBS_80, HUBS_20[:5], torch.tensor([100, 200, 300])])
    sampler = sampler_class(data, [70, 2, 1], seed=7)
    out = sample(sampler, seeds)
    loader = NodeLoader(data, node_sampler=sampler, input_nodes=seeds, batch_size=seeds.numel())
    check_batch(next(iter(loader)), data, seeds, [70, 2, 1])
    others = int(in_degree(data)[[100, 200, 300]].clamp(max=70).sum())
    assert out.num_sampled_edges[0] == 10 * 70 + 5 * 20 + others  # 80 -> 70 via random keys


@SAMPLERS
def test_full_neighbourhood_with_minus_one(data, sampler_class):
    seeds = torch.cat([HUBS_20[:3], HUBS_80[:2], torch.tensor([50, 51])])
    loader = NodeLoader(data, node_sampler=sampler_class(data, [-1, -1]), input_nodes=seeds,
                        batch_size=seeds.numel())
    batch = next(iter(loader))
    check_batch(batch, data, seeds, [-1, -1])
    hop1 = batch.e_id[: batch.num_sampled_edges[0]]
    expected = torch.nonzero(torch.isin(data.edge_index[1], seeds)).view(-1)
    assert torch.equal(hop1.sort().values, expected)


@SAMPLERS
def test_fanout_zero_isolated_and_repeated_seeds(data, sampler_class):
    sampler = sampler_class(data, [0, 4], seed=1)
    out = sample(sampler, torch.tensor([5, 6]))
    assert out.num_sampled_nodes == [2, 0, 0] and out.num_sampled_edges == [0, 0] and out.edge.numel() == 0

    out = sample(sampler_class(data, [3, 3], seed=1), ISOLATED)
    assert out.num_sampled_nodes == [ISOLATED.numel(), 0, 0] and out.num_sampled_edges == [0, 0]

    seeds = torch.tensor([60, 61, 60, 62, 61])
    loader = NodeLoader(data, node_sampler=sampler_class(data, [3, 2], seed=1), input_nodes=seeds, batch_size=5)
    check_batch(next(iter(loader)), data, seeds, [3, 2])


@SAMPLERS
def test_uniform_over_neighbours_degree_20_fanout_5(data, sampler_class):
    """Marginal and pairwise frequencies of the picks through the public sampler."""
    sampler = sampler_class(data, [5], seed=1234)
    colptr = sampler.colptr
    picked = []
    for epoch in range(200):  # 200 epochs x 20 hubs = 4000 draws
        sampler.set_epoch(epoch)
        out = sample(sampler, HUBS_20)
        position = out.edge - colptr[out.node[out.col]]
        picked.append(position.view(-1, 5))
    picked = torch.cat(picked)
    hits = torch.zeros(len(picked), 20).scatter_(1, picked, 1.0)
    assert bool((hits.sum(1) == 5).all())
    draws = hits.size(0)
    marginal = hits.sum(0)
    chi2 = ((marginal - draws / 4) ** 2 / (draws / 4)).sum()
    assert chi2 < 43.8, chi2  # chi-square(19) 0.999 quantile
    # Every pair equally likely too, which e.g. "a random window of 5" would fail.
    pairs = hits.t() @ hits
    upper = pairs[torch.triu_indices(20, 20, 1).unbind()]
    expected = draws * (5 * 4) / (20 * 19)
    chi2 = ((upper - expected) ** 2 / expected).sum()
    assert chi2 < 254.8, chi2  # chi-square(189) 0.999 quantile


@pytest.mark.parametrize("pick", [_floyd_positions, _random_key_positions])
def test_position_pickers_are_uniform_and_distinct(pick):
    gen = torch.Generator().manual_seed(99)
    degree = torch.tensor([9, 12] * 5000)
    picks = pick(degree, 8, gen)
    assert picks.shape == (10000, 8)
    assert bool((picks >= 0).all()) and bool((picks < degree.unsqueeze(1)).all())
    assert bool((picks.sort(1).values.diff(dim=1) > 0).all())  # distinct within a node
    for value in (9, 12):
        rows = picks[degree == value]
        freq = torch.bincount(rows.view(-1), minlength=value).double()
        expected = rows.size(0) * 8 / value
        chi2 = ((freq - expected) ** 2 / expected).sum()
        assert chi2 < 30.0, (value, chi2)  # chi-square(11) 0.999 quantile is 31.3


def test_key_positions_are_uniform_distinct_and_in_csc_order():
    """The fused hop alone: min(degree, fanout) distinct picks per target, each position equally likely,
    grouped by target in frontier order and ascending (CSC order) within a target."""
    gen = torch.Generator().manual_seed(99)
    degree = torch.tensor([9, 12, 3] * 4000)
    colptr = torch.cat([torch.zeros(1, dtype=torch.long), degree.cumsum(0)])
    frontier = torch.randperm(degree.numel(), generator=gen)
    position, target = key_positions(colptr, frontier, 8, gen)
    take = degree[frontier].clamp(max=8)
    assert torch.equal(target, torch.repeat_interleave(torch.arange(frontier.numel()), take))
    local = position - colptr[frontier][target]  # position within the target's in-edges
    assert bool((local >= 0).all()) and bool((local < degree[frontier][target]).all())
    same_target = target[1:] == target[:-1]
    assert bool((local[1:][same_target] > local[:-1][same_target]).all())  # distinct, ascending
    for value in (9, 12):
        picks = local[degree[frontier][target] == value]
        freq = torch.bincount(picks, minlength=value).double()
        expected = picks.numel() / value
        chi2 = ((freq - expected) ** 2 / expected).sum()
        assert chi2 < 30.0, (value, chi2)  # chi-square(11) 0.999 quantile is 31.3
    everything, _ = key_positions(colptr, frontier, -1, gen)
    assert torch.equal(everything.sort().values, torch.arange(int(degree.sum())))


@SAMPLERS
def test_same_seed_epoch_batch_is_identical_and_epoch_changes_it(data, sampler_class):
    seeds = torch.cat([HUBS_20[:8], torch.tensor([77, 88, 99])])
    first = sample(sampler_class(data, [5, 3], seed=11), seeds)
    again = sampler_class(data, [5, 3], seed=11)
    sample(again, HUBS_20[:1])  # a reused sampler must leave no trace of earlier batches
    assert same_sample(first, sample(again, seeds))
    again.set_epoch(1)
    assert not torch.equal(first.edge, sample(again, seeds).edge)
    assert not torch.equal(first.edge, sample(sampler_class(data, [5, 3], seed=12), seeds).edge)
    # Survives pickling, as for workers started with 'spawn'.
    again.set_epoch(0)
    assert same_sample(first, sample(pickle.loads(pickle.dumps(again)), seeds))


def test_unseeded_sampler_follows_global_rng(data):
    sampler = TorchNeighborSampler(data, [5, 3])
    torch.manual_seed(3)
    first = sample(sampler, HUBS_20)
    torch.manual_seed(3)
    assert same_sample(first, sample(sampler, HUBS_20))


@SAMPLERS
def test_batch_order_and_workers_do_not_change_samples(data, sampler_class):
    blocks = list(torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(5))[:90].split(30))

    def batches(order, num_workers=0):
        nodes = torch.cat([blocks[i] for i in order])
        sampler = sampler_class(data, [4, 2], seed=21)
        sampler.set_epoch(2)
        loader = NodeLoader(data, node_sampler=sampler, input_nodes=nodes, batch_size=30, num_workers=num_workers)
        return {int(b.n_id[0]): b for b in loader}

    forward, backward = batches([0, 1, 2]), batches([2, 1, 0])
    in_workers = batches([1, 2, 0], num_workers=2)
    for key, batch in forward.items():
        for other in (backward[key], in_workers[key]):
            assert torch.equal(batch.n_id, other.n_id) and torch.equal(batch.e_id, other.e_id)
            assert torch.equal(batch.edge_index, other.edge_index)


def test_precomputed_csc_is_used_without_copy(data):
    csc = build_csc(data.edge_index, data.num_nodes)
    for tensor in csc:
        tensor.share_memory_()
    sampler = TorchNeighborSampler(data, [5, 3], seed=4, csc=csc)
    held = (sampler.colptr, sampler.row, sampler.edge_permutation)
    assert all(a.data_ptr() == b.data_ptr() for a, b in zip(held, csc))
    assert same_sample(sample(sampler, HUBS_20), sample(TorchNeighborSampler(data, [5, 3], seed=4), HUBS_20))
    seeds = torch.arange(100, 140)
    check_batch(next(iter(make_node_loader(data, seeds, [5, 3], 40, seed=4, csc=csc))), data, seeds, [5, 3])


def test_make_node_loader_feeds_two_layer_sage(data):
    torch.manual_seed(0)
    convs = torch.nn.ModuleList([SAGEConv(16, 32), SAGEConv(32, 4)])
    loader = make_node_loader(data, torch.arange(200, 330), [10, 5], batch_size=50, seed=0)
    sizes = []
    for batch in loader:
        h = convs[0](batch.x, batch.edge_index).relu()
        logits = convs[1](h, batch.edge_index)[: batch.batch_size]
        loss = torch.nn.functional.cross_entropy(logits, batch.y[: batch.batch_size])
        loss.backward()
        assert torch.isfinite(loss)
        sizes.append(batch.batch_size)
    assert sizes == [50, 50, 30]


def test_have_native_sampler_matches_pyg():
    assert have_native_sampler() == bool(
        torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE
    )


def test_loader_route_without_native_sampler(data, monkeypatch):
    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", False)
    monkeypatch.setattr(torch_geometric.typing, "WITH_TORCH_SPARSE", False)
    loader = make_node_loader(data, torch.arange(10), [2], batch_size=5, seed=0)
    assert type(loader) is SampledNodeLoader and isinstance(loader.node_sampler, TorchNeighborSampler)


def test_loader_route_with_native_sampler(data, monkeypatch):
    """Only construction is checked here: sampling itself would need the real extension."""
    monkeypatch.setattr(torch_geometric.typing, "WITH_PYG_LIB", True)
    assert have_native_sampler()
    native = make_node_loader(data, torch.arange(10), [2], batch_size=5)
    assert type(native) is SampledNodeLoader and isinstance(native.node_sampler, NeighborSampler)
    seeded = make_node_loader(data, torch.arange(10), [2], batch_size=5, seed=3, epoch=1)
    assert isinstance(seeded.node_sampler, NeighborSampler) and seeded.node_sampler.epoch == 1
    csc = build_csc(data.edge_index, data.num_nodes)
    for loader in (
        make_node_loader(data, torch.arange(10), [2], batch_size=5, force_torch_sampler=True),
        make_node_loader(data, torch.arange(10), [2], batch_size=5, csc=csc),
    ):
        assert type(loader) is SampledNodeLoader and isinstance(loader.node_sampler, TorchNeighborSampler)
    # A CSC without a permutation (the node-shared graph, which has no edge_index) goes to the native
    # sampler too, which samples from that CSC in place (its sampling: tests/test_sharing.py, with pyg-lib).
    colptr, row, _ = build_csc(data.edge_index, data.num_nodes)
    shared = make_node_loader(batch_source(torch.device("cpu"), x=data.x, y=data.y), torch.arange(10), [2],
                              batch_size=5, seed=1, csc=(colptr, row, None))
    assert isinstance(shared.node_sampler, NeighborSampler)
    assert shared.node_sampler.colptr is colptr and shared.node_sampler.row is row
    assert shared.node_sampler.perm is None and shared.node_sampler.num_nodes == data.num_nodes


def test_seeded_cpu_rng_is_reproducible_and_restores_global_state():
    torch.manual_seed(8)
    expected_next = torch.rand(3)
    torch.manual_seed(8)
    with _seeded_cpu_rng(123):
        inside = torch.rand(4)
    with _seeded_cpu_rng(123):
        assert torch.equal(inside, torch.rand(4))
    assert torch.equal(torch.rand(3), expected_next)


def test_rejects_bad_fanout(data):
    with pytest.raises(ValueError, match="num_neighbors"):
        TorchNeighborSampler(data, [5, -2])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@SAMPLERS
def test_cuda_sampling_keeps_the_contract(data, sampler_class):
    seeds = torch.cat([HUBS_20[:6], HUBS_80[:3], ISOLATED[:2], torch.tensor([400, 401, 402])])
    sampler = sampler_class(data, [5, 70, 3], seed=5, device="cuda")
    assert sampler.colptr.is_cuda and sampler.row.is_cuda and sampler.edge_permutation.is_cuda
    out = sample(sampler, seeds)
    assert out.node.is_cuda and out.row.is_cuda and out.col.is_cuda and out.edge.is_cuda
    assert same_sample(out, sample(sampler_class(data, [5, 70, 3], seed=5, device="cuda"), seeds))
    sampler.set_epoch(1)
    assert not torch.equal(out.edge, sample(sampler, seeds).edge)
    loader = make_node_loader(data, seeds, [5, 70, 3], batch_size=seeds.numel(), seed=5, device="cuda")
    assert type(loader.node_sampler) is FusedNeighborSampler  # sampler.device=cuda samples with the fused hops
    check_batch(next(iter(loader)), data, seeds, [5, 70, 3])


def live_maps(eval_mode: str, *overrides: str) -> list[dict]:
    """Per epoch, the samplers holding a node map, by device (tests/harness/workers/live_maps.py)."""
    import json
    import os
    import subprocess
    import sys

    from tests.harness.localjob import ROOT
    from train.cluster.distenv import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", WORLD_SIZE="1", RANK="0", LOCAL_RANK="0",
               LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-m", "tests.harness.workers.live_maps", eval_mode, *overrides], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("maps "))
    return json.loads(line[len("maps "):])


@pytest.mark.parametrize("eval_mode", ["sampled", "full"])
def test_one_node_map_lives_over_many_epochs_and_evaluations(eval_mode):
    """The run's one sampler serves every epoch and every evaluation: with the garbage collector off (as
    between its rare full runs, when a loader's reference cycles keep old samplers) one map stays alive."""
    assert live_maps(eval_mode) == [{"cpu": 1}] * 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sampler.device=cuda)")
@pytest.mark.parametrize("eval_mode", ["sampled", "full"])
def test_one_node_map_lives_on_the_gpu_over_many_epochs(eval_mode):
    """sampler.device=cuda: one map on the GPU for the whole run (full evaluation reads the CSC, no sampler)."""
    maps = live_maps(eval_mode, "sampler.device=cuda", "dist.backend=nccl")
    assert [m.get("cuda") for m in maps] == [1] * 4 and len({json.dumps(m) for m in maps}) == 1, maps


def test_a_reused_sampler_samples_as_a_fresh_one(data):
    """Reconfiguring one sampler (fanouts, seed, epoch) gives exactly the batches a new sampler gives."""
    from train.graph.sampling.samplers import make_node_sampler

    seeds = torch.arange(0, 60)
    shared = make_node_sampler(data, [5, 3], force_torch_sampler=True)
    for fanouts, seed, epoch in [([5, 3], 1, 0), ([2, 2], 9, 0), ([5, 3], 1, 1), ([-1, -1], None, 0), ([5, 3], 1, 0)]:
        reused = list(make_node_loader(data, seeds, fanouts, 20, sampler=shared, seed=seed, epoch=epoch))
        fresh = list(make_node_loader(data, seeds, fanouts, 20, seed=seed, epoch=epoch, force_torch_sampler=True))
        assert len(reused) == len(fresh) == 3
        for a, b in zip(reused, fresh):
            assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    with pytest.raises(ValueError, match="num_neighbors"):
        make_node_loader(data, seeds, [5, -3], 20, sampler=shared)
