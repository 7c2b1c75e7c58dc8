"""What a sampler's batch costs a GPU beyond its arithmetic, counted on any device: the ops it launches and the
times it waits for the device (host syncs), from torch's profiler.

For small batches a GPU sampler is bound by these, not by its work (issue 30: 146M sampled edges/s on an H200
for [25, 10], batch 1024): each op is at least one kernel launch, and each host sync drains the queue, so the
launches after it no longer overlap the kernels before it. Both counts depend on the code, not on the device
(but for `.tolist()`'s copy to the host, one more op on a GPU), so the CPU counts them as a GPU would see them;
on CUDA, torch's sync debug mode counts the real waits beside them (`cuda_syncs`), a check of the op-name count.

`python -m bench.hop_profile [--device cuda]` prints both samplers' counts on a synthetic graph; gpu-check can
print `hop_profile(sampler, seeds)` beside its edges/s.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile
from torch_geometric.sampler import NodeSamplerInput

from train.graph.sampling.samplers import SAMPLE_SCOPE

# Ops that read device memory on the host. `_local_scalar_dense` is `int(t)`/`.item()` (also inside ops such as
# `repeat_interleave` without `output_size`); nonzero, masked_select and unique size their output by what they
# found. `.tolist()` reads without an op of its own: it shows as a top-level `resolve_conj`.
SYNC_OPS = frozenset({"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::unique",
                      "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive"})
TOLIST_MARK = "aten::resolve_conj"
# Ops that launch nothing on a GPU: views, allocations, tolist's marks. An `aten::to` launches a copy only
# where it converts (an `_to_copy` inside it).
FREE_OPS = frozenset({"aten::view", "aten::as_strided", "aten::select", "aten::slice", "aten::narrow",
                      "aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::unfold", "aten::t",
                      "aten::transpose", "aten::alias", "aten::detach", "aten::lift_fresh", "aten::empty",
                      "aten::empty_strided", "aten::resolve_conj", "aten::resolve_neg"})


def ancestors(event):
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def _launches(event) -> bool:
    if event.name == "aten::to":
        return any(child.name == "aten::_to_copy" for child in event.cpu_children)
    return event.name not in FREE_OPS


def host_sync(event, outer: list[str]) -> str | None:
    """Which host sync `event` is (an op's name, or `tolist`), where `outer` names the aten ops enclosing it; None
    where it is none: a sync op inside another one (masked_select's own nonzero) is its enclosing op's."""
    if event.name == TOLIST_MARK and not outer:
        return "tolist"
    if event.name in SYNC_OPS and not any(name in SYNC_OPS for name in outer):
        return event.name.removeprefix("aten::")
    return None


def count_events(events, scope: str) -> dict:
    """Ops (aten ops called from Python, not from inside another op, that launch work: FREE_OPS left out) and
    host syncs (a sync op not inside another one: masked_select's own nonzero counts once) among the profiler
    events inside `scope`, by name."""
    ops, syncs = 0, Counter()
    for event in events:
        enclosing = [a.name for a in ancestors(event)]
        if not event.name.startswith("aten::") or scope not in enclosing:
            continue
        outer = [name for name in enclosing if name.startswith("aten::")]
        if not outer:
            ops += _launches(event)
        sync = host_sync(event, outer)
        if sync is not None:
            syncs[sync] += 1
    return {"ops": ops, "host_syncs": sum(syncs.values()), "syncs_by_op": dict(sorted(syncs.items()))}


def _batches(seeds: torch.Tensor, batch_size: int, batches: int) -> list[torch.Tensor]:
    if not seeds.numel() or batch_size < 1 or batches < 1:
        raise ValueError(f"no seeds to sample from: {seeds.numel()} seeds, batch_size {batch_size}, "
                         f"batches {batches} (each needs at least 1)")
    return list(seeds.split(batch_size))[:batches]


def hop_profile(sampler, seeds: torch.Tensor, batch_size: int = 1024, batches: int = 2) -> dict:
    """Per batch of `sampler.sample_from_nodes` (seeds on the host, as a loader passes them; one warm-up batch
    first): the ops and host syncs of its sampling on the sampler's device (SAMPLE_SCOPE: not the host's own
    reads, such as the first seed's id that seeds the batch's generator), which ops synced, and on CUDA the
    syncs torch's sync debug mode reports over the whole call."""
    chunks = _batches(seeds, batch_size, batches)
    sample = sampler.sample_from_nodes
    sample(NodeSamplerInput(input_id=None, node=chunks[0]))  # warm-up: the node map is built on the first batch
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for chunk in chunks:
            sample(NodeSamplerInput(input_id=None, node=chunk))
    counts = count_events(prof.events(), SAMPLE_SCOPE)
    result = {"device": str(sampler.device), "batches": len(chunks), "hops": len(sampler.num_neighbors),
              "ops": counts["ops"] / len(chunks), "host_syncs": counts["host_syncs"] / len(chunks),
              "syncs_by_op": {op: n / len(chunks) for op, n in counts["syncs_by_op"].items()}}
    if sampler.device.type == "cuda":
        result["cuda_syncs"] = _cuda_syncs(sample, chunks)
    return result


def _cuda_syncs(sample, chunks: list[torch.Tensor]) -> float:
    """Syncs per batch as the CUDA runtime sees them: torch's sync debug mode warns at each."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for chunk in chunks:
                sample(NodeSamplerInput(input_id=None, node=chunk))
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return sum("synchroniz" in str(w.message) for w in caught) / len(chunks)


def profile_samplers(device: str, nodes: int, degree: float, fanouts: list[int], batch_size: int,
                     batches: int) -> dict:
    """Both torch samplers' profiles on one synthetic graph (train/graph/datasets/synthetic.py)."""
    from torch_geometric.data import Data

    from train.config import DataConfig
    from train.graph.datasets.loading import synthetic_graph
    from train.graph.sampling.samplers import FusedNeighborSampler, TorchNeighborSampler
    from train.graph.typed_csc import build_csc

    data = synthetic_graph(DataConfig(num_nodes=nodes, avg_degree=degree, num_features=1, num_classes=2))
    csc = tuple(t.to(device) for t in build_csc(data.edge_index, data.num_nodes))
    seeds = data.train_idx[torch.randperm(data.train_idx.numel(), generator=torch.Generator().manual_seed(0))]
    return {sampler_class.__name__: hop_profile(sampler_class(Data(num_nodes=data.num_nodes), fanouts, seed=1,
                                                              csc=csc), seeds, batch_size, batches)
            for sampler_class in (TorchNeighborSampler, FusedNeighborSampler)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.hop_profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--nodes", type=int, default=50_000)
    parser.add_argument("--degree", type=float, default=50.0)
    parser.add_argument("--fanouts", default="25,10", help="comma-separated, e.g. 25,10")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=2)
    args = parser.parse_args(argv)
    fanouts = [int(f) for f in args.fanouts.split(",")]
    print(json.dumps(profile_samplers(args.device, args.nodes, args.degree, fanouts, args.batch_size, args.batches),
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
