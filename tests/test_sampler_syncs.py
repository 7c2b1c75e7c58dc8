"""The samplers' hops wait for the device less (issue 30) and sample exactly as before: each sampler against a
frozen copy of the algorithm it replaced (four waits per hop: the count of candidates, `nonzero` of the kept
ones, two `masked_select`s in the relabelling), bit for bit on the same generator, and the counts
bench/hop_profile.py reads from torch's profiler."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.sampler import NodeSamplerInput

from bench.hop_profile import count_events, hop_profile
from tests.test_hetero_data import small_hetero
from train.graph.form import HETEROGENEOUS
from train.graph.sampling.in_edges import in_edge_positions
from train.graph.sampling.samplers import _FIRST_SEEN, _UNSEEN, FusedNeighborSampler, TorchNeighborSampler
from train.graph.typed_csc import build_csc
from train.graph.typed_graph import typed_graph

ROOT = Path(__file__).resolve().parents[1]


# ---- the algorithm as it was (the reference; not in train/) --------------------------------------------

def reference_key_positions(colptr, frontier, fanout, generator):
    # Its first lines were the in-edges of the evaluation's chunks, op for op (in_edges.py, the same numbers).
    position, target = in_edge_positions(colptr, frontier)
    if fanout < 0:
        return position, target
    device, num_candidates = frontier.device, position.numel()
    random_bits = 63 - max(int(frontier.numel()).bit_length(), 1)
    keys = torch.randint(0, 1 << random_bits, (num_candidates,), device=device, generator=generator)
    keys |= target << random_bits
    order = torch.sort(keys, stable=True).indices
    rank = position - colptr.index_select(0, frontier).long().index_select(0, target)
    keep = torch.empty(num_candidates, dtype=torch.bool, device=device)
    keep.scatter_(0, order, rank < fanout)
    chosen = torch.nonzero(keep).view(-1)
    return position.index_select(0, chosen), target.index_select(0, chosen)


def reference_assign_new_ids(self, source, num_local):
    device = self.device
    to_local = self._to_local
    unseen = source.masked_select(to_local.index_select(0, source) == _UNSEEN)
    mark = _FIRST_SEEN + torch.arange(unseen.numel(), device=device)
    to_local.scatter_reduce_(0, unseen, mark, "amin")
    new_nodes = unseen.masked_select(to_local.index_select(0, unseen) == mark)
    to_local.scatter_(0, new_nodes, torch.arange(num_local, num_local + new_nodes.numel(), device=device))
    return new_nodes


class ReferenceTorchSampler(TorchNeighborSampler):
    _assign_new_ids = reference_assign_new_ids


class ReferenceFusedSampler(FusedNeighborSampler):
    _assign_new_ids = reference_assign_new_ids

    def _positions(self, colptr, frontier, fanout, generator):
        return reference_key_positions(colptr, frontier, fanout, generator)


PAIRS = pytest.mark.parametrize("sampler_class, reference_class",
                                [(TorchNeighborSampler, ReferenceTorchSampler),
                                 (FusedNeighborSampler, ReferenceFusedSampler)], ids=["floyd", "fused"])


# ---- graphs ---------------------------------------------------------------------------------------------

def mixed_graph(num_nodes: int = 400, seed: int = 0) -> Data:
    """Degrees from 0 (isolated nodes) to about 90, so every fanout below finds nodes under and over it."""
    gen = torch.Generator().manual_seed(seed)
    degree = torch.randint(0, 90, (num_nodes,), generator=gen)
    degree[torch.randperm(num_nodes, generator=gen)[: num_nodes // 10]] = 0
    target = torch.repeat_interleave(torch.arange(num_nodes), degree)
    source = torch.randint(0, num_nodes, (target.numel(),), generator=gen)
    order = torch.randperm(target.numel(), generator=gen)  # CSC order is not the input order
    return Data(edge_index=torch.stack([source, target])[:, order], num_nodes=num_nodes)


def seed_sets(num_nodes: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    batch = torch.randperm(num_nodes, generator=gen)[:64]
    return [batch, torch.cat([batch[:10], batch[:5], batch[3:8]]),  # repeated seeds
            torch.arange(num_nodes), torch.tensor([0]), torch.tensor([], dtype=torch.long)]


def outputs(sampler, seeds: torch.Tensor):
    out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
    return out.node, out.row, out.col, out.edge, out.num_sampled_nodes, out.num_sampled_edges


def assert_same(new, old):
    for mine, theirs in zip(new[:4], old[:4], strict=True):
        assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)
    assert new[4:] == old[4:]


@PAIRS
@pytest.mark.parametrize("fanouts", [[25, 10], [5, -1], [-1, 3], [0, 7], [90, 1, 2], [3]])
@pytest.mark.parametrize("index_dtype", [torch.long, torch.int32], ids=["int64", "int32"])
def test_the_hops_sample_as_the_frozen_algorithm_did(sampler_class, reference_class, fanouts, index_dtype):
    data = mixed_graph()
    colptr, row, perm = build_csc(data.edge_index, data.num_nodes)
    csc = (colptr.to(index_dtype), row.to(index_dtype), perm)  # int32: as the node-shared graph holds them
    new = sampler_class(data, fanouts, seed=11, csc=csc)
    old = reference_class(data, fanouts, seed=11, csc=csc)
    for epoch in (0, 1):
        new.set_epoch(epoch)
        old.set_epoch(epoch)
        for seeds in seed_sets(data.num_nodes):
            assert_same(outputs(new, seeds), outputs(old, seeds))
    unseeded = sampler_class(data, fanouts, csc=csc), reference_class(data, fanouts, csc=csc)
    for sampler in unseeded:  # the global generator, from one state for both
        torch.manual_seed(5)
        sampler.result = outputs(sampler, seed_sets(data.num_nodes)[0])
    assert_same(unseeded[0].result, unseeded[1].result)


@PAIRS
@pytest.mark.parametrize("fanouts", [[4], [2, -1], [3, 3]])
def test_a_typed_graph_samples_as_the_frozen_algorithm_did(sampler_class, reference_class, fanouts):
    data = typed_graph(small_hetero(), "paper")
    kwargs = dict(csc=HETEROGENEOUS.structure(data), segments=HETEROGENEOUS.segments(data), seed=2)
    new, old = sampler_class(data, fanouts, **kwargs), reference_class(data, fanouts, **kwargs)
    for seeds in (torch.arange(20), torch.tensor([3, 3, 7]), torch.arange(data.num_nodes)):
        assert_same(outputs(new, seeds), outputs(old, seeds))


def test_a_torch_without_nonzero_static_on_the_device_samples_the_same(monkeypatch):
    """torch 2.1 to 2.5 have no CUDA `nonzero_static`: the hop takes `nonzero` there, with the same result."""
    data = mixed_graph()
    expected = outputs(FusedNeighborSampler(data, [25, 10], seed=4), seed_sets(data.num_nodes)[0])

    def missing(*args, **kwargs):
        raise NotImplementedError("Could not run 'aten::nonzero_static' with arguments from the 'CUDA' backend")

    monkeypatch.setattr(torch, "nonzero_static", missing)
    assert_same(outputs(FusedNeighborSampler(data, [25, 10], seed=4), seed_sets(data.num_nodes)[0]), expected)
    assert_same(expected, outputs(ReferenceFusedSampler(data, [25, 10], seed=4), seed_sets(data.num_nodes)[0]))


# ---- the counts -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def profiled():
    """Both samplers and their frozen references on a graph of 5,000 nodes, degree 50, at [25, 10]."""
    gen = torch.Generator().manual_seed(0)
    num_nodes, degree = 5_000, 50
    edge_index = torch.stack([torch.randint(0, num_nodes, (num_nodes * degree,), generator=gen),
                              torch.arange(num_nodes).repeat_interleave(degree)])
    data = Data(edge_index=edge_index, num_nodes=num_nodes)
    csc = build_csc(edge_index, num_nodes)
    seeds = torch.randperm(num_nodes, generator=gen)
    return {cls.__name__: hop_profile(cls(data, [25, 10], seed=1, csc=csc), seeds, batch_size=256, batches=2)
            for cls in (TorchNeighborSampler, FusedNeighborSampler, ReferenceTorchSampler, ReferenceFusedSampler)}


def test_the_fused_hop_waits_twice_where_it_waited_four_times(profiled):
    fused, before = profiled["FusedNeighborSampler"], profiled["ReferenceFusedSampler"]
    assert fused["hops"] == 2 and fused["batches"] == 2 and fused["device"] == "cpu"
    assert before["host_syncs"] == 4 * 2
    assert before["syncs_by_op"] == {"_local_scalar_dense": 2, "masked_select": 4, "nonzero": 2}
    assert fused["host_syncs"] == 2 * 2 and fused["syncs_by_op"] == {"masked_select": 2, "tolist": 2}
    assert fused["ops"] < before["ops"]
    # Floyd's CPU hops share the one-wait relabelling
    assert profiled["TorchNeighborSampler"]["host_syncs"] == profiled["ReferenceTorchSampler"]["host_syncs"] - 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_cuda_runtime_sees_the_waits_the_profile_counts():
    """On a GPU the waits torch's sync debug mode reports are the profile's: `nonzero_static` at a known size
    does not wait, nor does the seeds' copy from the host (pinned)."""
    data = mixed_graph(2_000)
    sampler = FusedNeighborSampler(data, [25, 10], seed=1, device="cuda")
    profile = hop_profile(sampler, torch.randperm(data.num_nodes), batch_size=256, batches=2)
    assert profile["host_syncs"] == 4 and profile["cuda_syncs"] == 4, profile


def test_the_docs_quote_the_counts(profiled):
    """docs/training.md says how often a hop waits, before and after; the line follows the profile."""
    text = (ROOT / "docs" / "training.md").read_text()
    quoted = re.search(r"waits for the GPU (\d+) times per hop \(it waited (\d+) times\)", text)
    assert quoted, "docs/training.md lost its line on the fused hop's waits"
    hops = profiled["FusedNeighborSampler"]["hops"]
    assert int(quoted[1]) == profiled["FusedNeighborSampler"]["host_syncs"] / hops
    assert int(quoted[2]) == profiled["ReferenceFusedSampler"]["host_syncs"] / hops


def test_the_count_skips_views_nested_ops_and_the_hosts_own_reads():
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.arange(10)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        int(x.sum())  # outside the scope: not counted
        with record_function("scope"):
            x.masked_select(x > 3)  # one sync, whatever it calls inside
            x.sum().tolist()  # a read without an op of its own
            torch.repeat_interleave(x, x)  # sizes itself by reading its counts: syncs inside
            torch.repeat_interleave(x, x, output_size=45)  # told its size: no wait
            x.view(2, 5)  # a view launches nothing
            torch.nonzero_static(x > 3, size=6)
    counts = count_events(prof.events(), "scope")
    assert counts["syncs_by_op"]["masked_select"] == 1 and counts["syncs_by_op"]["tolist"] == 1
    assert counts["syncs_by_op"]["_local_scalar_dense"] >= 1  # repeat_interleave's own reads
    assert "nonzero" not in counts["syncs_by_op"] and "nonzero_static" not in counts["syncs_by_op"]
    # gt, masked_select, sum, 2 repeat_interleave, gt, nonzero_static (tolist's marks and the view launch nothing)
    assert counts["ops"] == 7


def test_hop_profile_refuses_no_seeds():
    sampler = FusedNeighborSampler(mixed_graph(), [3], seed=1)
    with pytest.raises(ValueError, match="no seeds to sample from: 0 seeds"):
        hop_profile(sampler, torch.tensor([], dtype=torch.long))
