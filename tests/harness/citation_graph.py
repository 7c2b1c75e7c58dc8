"""A typed citation-like graph as issue 41 met it: papers of 1,433 bag-of-words features (Cora's width), a featureless
second type linked to the papers both ways, some 100k edges in all; classes that the papers' terms decide. Drawn
here (not read from ../shared) so that every machine builds the same graph without the files."""

from __future__ import annotations

import torch
from torch_geometric.data import HeteroData

PAPERS, TERMS, FEATURES, CLASSES = 2708, 1433, 1433, 7
CITES, USES = 5429, 50000  # Cora's citations; paper -> term links, and the same reversed


def citation_graph(seed: int = 0) -> HeteroData:
    """papers (target: 1,433 sparse 0/1 features, 7 classes), terms (featureless); cites, uses and used_by."""
    gen = torch.Generator().manual_seed(seed)
    graph = HeteroData()
    y = torch.randint(0, CLASSES, (PAPERS,), generator=gen)
    graph["paper"].x = (torch.rand(PAPERS, FEATURES, generator=gen) < 0.0127).float()  # Cora's 18 words per paper
    graph["paper"].y = y
    order = torch.randperm(PAPERS, generator=gen)
    graph["paper"].train_idx, graph["paper"].val_idx, graph["paper"].test_idx = order[:1708], order[1708:2208], \
        order[2208:]
    graph["term"].num_nodes = TERMS
    paper = torch.randint(0, PAPERS, (USES,), generator=gen)
    # each class uses its own block of terms, with noise: the class is read through the terms
    term = (y[paper] * (TERMS // CLASSES) + torch.randint(0, TERMS // CLASSES, (USES,), generator=gen)) % TERMS
    noise = torch.rand(USES, generator=gen) < 0.3
    term = torch.where(noise, torch.randint(0, TERMS, (USES,), generator=gen), term)
    graph["paper", "cites", "paper"].edge_index = torch.randint(0, PAPERS, (2, CITES), generator=gen)
    graph["paper", "uses", "term"].edge_index = torch.stack([paper, term])
    graph["term", "used_by", "paper"].edge_index = torch.stack([term, paper])
    return graph
