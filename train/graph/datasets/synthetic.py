"""The synthetic default graph: a stochastic block model in which a GNN must use the graph to do well."""

from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from train.config import DataConfig

# The data keys that size and shape the generated graph: a run on a loaded graph records none of them (its
# config.yaml; train/loop/run.py), the graph's own figures are in its log.
GENERATOR_KEYS = ("num_nodes", "num_classes", "num_features", "avg_degree", "homophily", "feature_signal",
                  "edge_features", "edge_signal")


def synthetic_graph(config: DataConfig) -> Data:
    """A stochastic block model with noisy class-dependent features, fixed by `config.seed`.

    Features alone separate the classes poorly (`feature_signal` is small against unit
    noise); a node's neighbours mostly share its class (`homophily`), so averaging over
    them denoises the features: a GNN must use the graph to do well. With `edge_features`, each
    edge also carries a noisy signal of its target's class (drawn last, so the graph without them
    is the same graph): with weak features and low homophily, only a model that reads the edges'
    features does well.
    """
    gen = torch.Generator().manual_seed(config.seed)
    n, c = config.num_nodes, config.num_classes
    y = torch.randint(c, (n,), generator=gen)

    # Nodes grouped by class, so "a random node of class k" is one index lookup.
    by_class = torch.argsort(y, stable=True)
    class_count = torch.bincount(y, minlength=c)
    class_start = torch.cumsum(class_count, 0) - class_count

    num_pairs = int(n * config.avg_degree / 2)
    src = torch.randint(n, (num_pairs,), generator=gen)
    same_class = torch.rand(num_pairs, generator=gen) < config.homophily
    dst_class = torch.where(same_class, y[src], torch.randint(c, (num_pairs,), generator=gen))
    offset = (torch.rand(num_pairs, generator=gen) * class_count[dst_class]).long()
    dst = by_class[class_start[dst_class] + offset]
    edge_index = torch.stack([src, dst])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    edge_index = to_undirected(edge_index, num_nodes=n)

    centroids = torch.randn(c, config.num_features, generator=gen)
    x = config.feature_signal * centroids[y] + torch.randn(n, config.num_features, generator=gen)

    perm = torch.randperm(n, generator=gen)
    num_train = int(n * config.train_fraction)
    num_val = int(n * config.val_fraction)
    edges = {}
    if config.edge_features:
        edge_centroids = torch.randn(c, config.edge_features, generator=gen)
        noise = torch.randn(edge_index.size(1), config.edge_features, generator=gen)
        edges["edge_attr"] = config.edge_signal * edge_centroids[y[edge_index[1]]] + noise
    return Data(
        x=x,
        y=y,
        edge_index=edge_index,
        train_idx=perm[:num_train].sort().values,
        val_idx=perm[num_train : num_train + num_val].sort().values,
        test_idx=perm[num_train + num_val :].sort().values,
        **edges,
    )
