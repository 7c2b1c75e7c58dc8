"""The synthetic graphs, generated with torch: the default, a stochastic block model in which a GNN must use the
graph to do well, and the heterogeneous default, whose types and sizes (read without torch by the config's checks
and the plan) are train/graph/datasets/hetero_synthetic.py's."""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.utils import to_undirected

from train.config import DataConfig
from train.graph.datasets.hetero_synthetic import (
    AUTHOR_SIGNAL,
    AUTHORS_PER_PAPER,
    RELATIONS,
    TARGET,
    VENUES,
    hetero_synthetic_meta,
)
from train.graph.datasets.own_rows import OwnedRows, normal_rows, place_rows

# The data keys that size and shape the generated graph: a run on a loaded graph records none of them (its
# config.yaml; train/loop/run.py), the graph's own figures are in its log.
GENERATOR_KEYS = ("num_nodes", "num_classes", "num_features", "avg_degree", "homophily", "feature_signal",
                  "edge_features", "edge_signal")


def synthetic_graph(config: DataConfig, owned: OwnedRows | None = None) -> Data:
    """A stochastic block model with noisy class-dependent features, fixed by `config.seed`.

    Features alone separate the classes poorly (`feature_signal` is small against unit
    noise); a node's neighbours mostly share its class (`homophily`), so averaging over
    them denoises the features: a GNN must use the graph to do well. With `edge_features`, each
    edge also carries a noisy signal of its target's class (drawn last, so the graph without them
    is the same graph): with weak features and low homophily, only a model that reads the edges'
    features does well. `owned`: only the node's own rows of x are made, the very rows of the whole graph's
    (train/graph/datasets/own_rows.py), and the rest of the graph is the whole graph's.
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
    if owned is None:
        x = config.feature_signal * centroids[y] + torch.randn(n, config.num_features, generator=gen)
    else:
        rows = owned[""][0]  # the same sum as the whole graph's, in place: two copies of the node's rows at once
        own = centroids[y[rows]].mul_(config.feature_signal).add_(normal_rows(gen, n, config.num_features, rows))
        x = place_rows({"": own}, owned, config.num_features)

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
        **({"num_nodes": n} if owned is not None else {}),  # x holds the node's own rows alone
    )


def _same_class_pick(classes_from: Tensor, pool_classes: Tensor, homophily: float, gen: torch.Generator) -> Tensor:
    """For each entry of `classes_from`, a node of the pool: of the same class with probability `homophily`,
    else of a uniformly random class; uniform within the class."""
    num_classes = int(pool_classes.max()) + 1
    by_class = torch.argsort(pool_classes, stable=True)
    count = torch.bincount(pool_classes, minlength=num_classes)
    start = torch.cumsum(count, 0) - count
    same = torch.rand(classes_from.numel(), generator=gen) < homophily
    wanted = torch.where(same, classes_from, torch.randint(num_classes, classes_from.shape, generator=gen))
    wanted = torch.where(count[wanted] > 0, wanted, pool_classes[0])  # a class with no node here: any node
    offset = (torch.rand(classes_from.numel(), generator=gen) * count[wanted]).long()
    return by_class[start[wanted] + offset]


def hetero_synthetic_graph(config: DataConfig) -> HeteroData:
    """The graph as a PyG `HeteroData`: papers (y and the split), authors, venues, and their relations."""
    return _generate_hetero(config, None)[0]


def hetero_synthetic_rows(config: DataConfig, owned: OwnedRows) -> tuple[HeteroData, dict[str, Tensor]]:
    """The graph without features (each type's num_nodes set) and each featured type's own rows: the very rows of
    the whole graph's x (train/graph/datasets/own_rows.py), never the whole x."""
    return _generate_hetero(config, owned)


def _generate_hetero(config: DataConfig, owned: OwnedRows | None) -> tuple[HeteroData, dict[str, Tensor]]:
    """The graph; with `owned`, its features are only the rows owned, returned beside it."""
    gen = torch.Generator().manual_seed(config.seed)
    papers, classes, width = config.num_nodes, config.num_classes, config.num_features
    authors = hetero_synthetic_meta(config).counts[1]
    paper_class = torch.randint(classes, (papers,), generator=gen)
    author_class = torch.randint(classes, (authors,), generator=gen)
    author_class[:classes] = torch.arange(classes)  # every class has an author

    writer_of = paper_class.repeat_interleave(AUTHORS_PER_PAPER)
    writes = torch.stack([_same_class_pick(writer_of, author_class, config.homophily, gen),
                          torch.arange(papers).repeat_interleave(AUTHORS_PER_PAPER)])
    citing = torch.randint(papers, (int(papers * config.avg_degree / 2),), generator=gen)
    cites = torch.stack([citing, _same_class_pick(paper_class[citing], paper_class, config.homophily, gen)])
    cites = cites[:, cites[0] != cites[1]]
    published = torch.stack([torch.arange(papers), torch.randint(VENUES, (papers,), generator=gen)])

    centroids = torch.randn(classes, width, generator=gen)
    hetero, own = HeteroData(), {}
    for node_type, classes_of, signal in (("paper", paper_class, config.feature_signal),
                                          ("author", author_class, AUTHOR_SIGNAL)):
        count = classes_of.numel()
        if owned is None:
            hetero[node_type].x = signal * centroids[classes_of] + torch.randn(count, width, generator=gen)
        else:
            rows = owned[node_type][0]
            own[node_type] = signal * centroids[classes_of[rows]] + normal_rows(gen, count, width, rows)
            hetero[node_type].num_nodes = count
    hetero["venue"].num_nodes = VENUES
    hetero[TARGET].y = paper_class
    perm = torch.randperm(papers, generator=gen)
    train, val = int(papers * config.train_fraction), int(papers * config.val_fraction)
    hetero["paper"].train_idx = perm[:train].sort().values
    hetero["paper"].val_idx = perm[train:train + val].sort().values
    hetero["paper"].test_idx = perm[train + val:].sort().values
    for (src, rel, dst), edge_index in zip(RELATIONS, (writes, cites, published)):
        hetero[src, rel, dst].edge_index = edge_index
        hetero[dst, f"rev_{rel}", src].edge_index = edge_index.flip(0)
    return hetero, own
