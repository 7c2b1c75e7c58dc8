"""The synthetic heterogeneous default (`data.name=hetero-synthetic`): papers whose class shows only through their
typed relations, so a relational model beats a feature-only one by a wide margin (the suite's bound).

Papers (the target type) carry a weak, noisy signal of their class (`data.feature_signal` against unit noise: a
feature-only model reads little); each author has a class and features that show it clearly, and writes papers
mostly of that class (`data.homophily`); papers cite papers mostly of their own class; venues have no features and
no signal (a featureless type: the model's learned embedding). A model that reads the authors of a paper through
(author, writes, paper) reads its class. Every relation has its reverse (`rev_<relation>`), as PyG's
`ToUndirected` gives, so messages flow both ways. Fixed by `data.seed`.

Its types and sizes, without torch: the config's checks and the plan read them (hetero_synthetic_meta); the graph
itself is generated with torch in train/graph/datasets/synthetic.py (`hetero_synthetic`).
"""

from __future__ import annotations

from train.config import DataConfig
from train.graph.typed_meta import HeteroMeta

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


def hetero_synthetic_edges(config: DataConfig) -> int:
    """Its directed edges, for the plan without generating it (an upper bound: self-citations are dropped)."""
    papers = config.num_nodes
    return 2 * (papers * AUTHORS_PER_PAPER + int(papers * config.avg_degree / 2) + papers)
