"""PyG's native sampler (pyg-lib) on the node-shared graph, which keeps only its CSC, in int32 (tests/test_sharing.py).

Run in the pyg-lib anchor's Python: the graph is written and mapped as a node shares it, the run's sampling plan
takes it, and every batch must hold real edges of the graph, all of a seed's in-edges with fanout -1, and the
same sample again from the same seed. Prints one JSON line on success; any failed check is an AssertionError.
"""

import json
import sys
import tempfile
from pathlib import Path

import torch
import torch_geometric.typing

from train.config import DataConfig, SamplerConfig
from train.graph.datasets.loading import synthetic_graph
from train.graph.form import graph_csc
from train.graph.sampling.device_plan import plan_sampling
from train.graph.sampling.samplers import _SeededNeighborSampler
from train.graph.sharing.shared_graph import graph_from_tensors, graph_tensors, map_tensors, write_tensors


def main() -> None:
    assert torch_geometric.typing.WITH_PYG_LIB, f"{sys.executable} has no pyg-lib"
    config = DataConfig(num_nodes=600, avg_degree=8)
    original = synthetic_graph(config)
    edges = set(map(tuple, original.edge_index.t().tolist()))
    with tempfile.TemporaryDirectory() as folder:
        tensors, _size = graph_tensors(synthetic_graph(config))
        write_tensors(Path(folder), tensors, {})
        shared = graph_from_tensors(map_tensors(Path(folder)))
    assert shared.edge_index is None and graph_csc(shared)[0].dtype == graph_csc(shared)[1].dtype == torch.int32
    plan = plan_sampling(shared, SamplerConfig(), torch.device("cpu"))
    seeds = torch.arange(0, 600, 3)
    batches = 0
    for fanout in ([4, 3], [-1]):
        first = list(plan.loader(seeds, fanout, 64, seed=11))
        again = list(plan.loader(seeds, fanout, 64, seed=11))
        assert isinstance(plan.batch_sampler(), _SeededNeighborSampler)
        for batch, same in zip(first, again, strict=True):
            n_id, (src, dst) = batch.n_id, batch.edge_index
            assert n_id.dtype == batch.edge_index.dtype == torch.long, "pyg-lib's int32 ids reached the batch"
            sampled = set(zip(n_id[src].tolist(), n_id[dst].tolist()))
            assert sampled <= edges, "a batch holds an edge the graph does not have"
            assert torch.equal(batch.x, shared.x[n_id]) and torch.equal(batch.y, shared.y[n_id])
            assert torch.equal(batch.n_id, same.n_id) and torch.equal(batch.edge_index, same.edge_index)
            if fanout == [-1]:
                seed_ids = set(n_id[: batch.batch_size].tolist())
                wanted = {(s, t) for (s, t) in edges if t in seed_ids}
                assert {(s, t) for (s, t) in sampled if t in seed_ids} == wanted
            batches += 1
    print(json.dumps({"batches": batches, "python": sys.executable}), flush=True)


if __name__ == "__main__":
    main()
