"""The synthetic heterogeneous default (`data.name=hetero-synthetic`): papers whose class shows only through their
typed relations, so a relational model beats a feature-only one by a wide margin (the suite's bound).

Papers (the target type) carry a weak, noisy signal of their class (`data.feature_signal` against unit noise: a
feature-only model reads little); each author has a class and features that show it clearly, and writes papers
mostly of that class (`data.homophily`); papers cite papers mostly of their own class; venues have no features and
no signal (a featureless type: the model's learned embedding). A model that reads the authors of a paper through
(author, writes, paper) reads its class. Every relation has its reverse (`rev_<relation>`), as PyG's
`ToUndirected` gives, so messages flow both ways. Fixed by `data.seed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from train.config import DataConfig
from train.graph.typed_meta import HeteroMeta

if TYPE_CHECKING:  # torch and PyG on use: the config's checks read its types (hetero_synthetic_meta) without them
    import torch
    from torch import Tensor
    from torch_geometric.data import HeteroData

    from train.graph.datasets.own_rows import OwnedRows

AUTHORS_PER_PAPER = 3
AUTHOR_SIGNAL = 2.0  # author features: class centroid strength against unit noise
VENUES = 16
TARGET = "paper"
RELATIONS = (("author", "writes", "paper"), ("paper", "cites", "paper"), ("paper", "published_in", "venue"))


def edge_types() -> tuple[tuple[str, str, str], ...]:
    """Each relation, then its reverse, in the order the graph holds them."""
    return tuple(t for src, rel, dst in RELATIONS for t in ((src, rel, dst), (dst, f"rev_{rel}", src)))


def hetero_synthetic_meta(config: DataConfig) -> HeteroMeta:
    """Its types and sizes, for the plan without generating it."""
    counts = {"paper": config.num_nodes, "author": max(config.num_nodes // 2, config.num_classes), "venue": VENUES}
    widths = {"paper": config.num_features, "author": config.num_features, "venue": 0}
    return HeteroMeta(tuple(counts), edge_types(), tuple(counts.values()), tuple(widths.values()), TARGET)


def _same_class_pick(classes_from: Tensor, pool_classes: Tensor, homophily: float, gen: torch.Generator) -> Tensor:
    """For each entry of `classes_from`, a node of the pool: of the same class with probability `homophily`,
    else of a uniformly random class; uniform within the class."""
    import torch

    num_classes = int(pool_classes.max()) + 1
    by_class = torch.argsort(pool_classes, stable=True)
    count = torch.bincount(pool_classes, minlength=num_classes)
    start = torch.cumsum(count, 0) - count
    same = torch.rand(classes_from.numel(), generator=gen) < homophily
    wanted = torch.where(same, classes_from, torch.randint(num_classes, classes_from.shape, generator=gen))
    wanted = torch.where(count[wanted] > 0, wanted, pool_classes[0])  # a class with no node here: any node
    offset = (torch.rand(classes_from.numel(), generator=gen) * count[wanted]).long()
    return by_class[start[wanted] + offset]


def hetero_synthetic(config: DataConfig) -> HeteroData:
    """The graph as a PyG `HeteroData`: papers (y and the split), authors, venues, and their relations."""
    return _generate(config, None)[0]


def hetero_synthetic_rows(config: DataConfig, owned: OwnedRows) -> tuple[HeteroData, dict[str, Tensor]]:
    """The graph without features (each type's num_nodes set) and each featured type's own rows: the very rows of
    the whole graph's x (train/graph/datasets/own_rows.py), never the whole x."""
    return _generate(config, owned)


def _generate(config: DataConfig, owned: OwnedRows | None) -> tuple[HeteroData, dict[str, Tensor]]:
    """The graph; with `owned`, its features are only the rows owned, returned beside it."""
    import torch
    from torch_geometric.data import HeteroData

    from train.graph.datasets.own_rows import normal_rows

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


def hetero_synthetic_edges(config: DataConfig) -> int:
    """Its directed edges, for the plan without generating it (an upper bound: self-citations are dropped)."""
    papers = config.num_nodes
    return 2 * (papers * AUTHORS_PER_PAPER + int(papers * config.avg_degree / 2) + papers)
