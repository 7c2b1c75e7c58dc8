"""The batches' edge values against PyG's own NeighborLoader (pyg-lib), run in the anchor's Python
(tests/test_edge_values.py).

A graph whose edge_attr rows are (source, target, column) and edge_weight source * 1000 + target. With fanouts
-1 PyG's NeighborLoader (on the graph as the user saved it, gathering the rows itself through its CSC's perm)
and the run's loaders (a rank's own graph; the node-shared graph, sampled by pyg-lib in place) sample the same
edges: each batch's (source, target, edge_attr, edge_weight, e_id) rows must be the same. With fanouts [4, 3] the
node-shared graph's batches, sampled by pyg-lib, must carry each edge's own rows. Prints one JSON line on success.
"""

import json
import sys

import torch
import torch_geometric.typing
from torch_geometric.data import Data
from torch_geometric.loader import NeighborLoader

from train.config import SamplerConfig
from train.graph.sampling.device_plan import plan_sampling
from train.graph.sampling.samplers import _SeededNeighborSampler
from train.graph.sharing.shared_graph import graph_from_tensors, graph_tensors

NODES, EDGES = 300, 2400


def meaningful_graph() -> Data:
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, NODES, (2, EDGES), generator=gen)
    src, dst = edge_index
    return Data(x=torch.randn(NODES, 4, generator=gen), y=torch.randint(0, 3, (NODES,), generator=gen),
                edge_index=edge_index, edge_attr=torch.stack([src, dst, torch.arange(EDGES)], dim=1).float(),
                edge_weight=(src * 1000 + dst).float(), train_idx=torch.arange(0, NODES, 2),
                val_idx=torch.arange(1, NODES, 4), test_idx=torch.arange(3, NODES, 4))


def rows(batch) -> list[tuple]:
    src, dst = batch.n_id[batch.edge_index]
    table = torch.cat([torch.stack([src, dst, batch.e_id], 1).double(), batch.edge_attr.double(),
                       batch.edge_weight[:, None].double()], dim=1)
    return sorted(map(tuple, table.tolist()))


def main() -> None:
    assert torch_geometric.typing.WITH_PYG_LIB, f"{sys.executable} has no pyg-lib"
    data = meaningful_graph()
    tensors, _size = graph_tensors(data.clone())
    shared = graph_from_tensors({name: value() if callable(value) else value for name, value in tensors.items()})
    seeds = torch.arange(0, NODES, 7)
    pyg = [rows(b) for b in NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=seeds, batch_size=16)]
    compared = 0
    for graph in (data, shared):
        plan = plan_sampling(graph, SamplerConfig(), torch.device("cpu"))
        ours = [rows(b) for b in plan.loader(seeds, [-1, -1], 16, seed=1)]
        assert ours == pyg, "the run's batches differ from PyG's NeighborLoader with fanouts -1"
        compared += len(ours)
    plan = plan_sampling(shared, SamplerConfig(), torch.device("cpu"))
    sampled = 0
    for batch in plan.loader(seeds, [4, 3], 16, seed=2):
        assert isinstance(plan.batch_sampler(), _SeededNeighborSampler)
        for src, dst, e_id, *attr, weight in rows(batch):
            assert attr == [src, dst, e_id] and weight == src * 1000 + dst, "an edge carries another edge's rows"
            sampled += 1
    print(json.dumps({"compared": compared, "sampled": sampled, "python": sys.executable}), flush=True)


if __name__ == "__main__":
    main()
