"""The torch half of the dataset kinds (train/graph/datasets/kinds.py): everything a kind calls to read or make a
graph, with torch and PyG.

kinds.py says what each kind is without torch (the login node's checks, the doctor's probe and the plan read it);
its methods that read files with torch or make a graph (load, open, origin, a user's files' size) reach these
through `kinds._graphs()`, which imports this module on first use.
"""

from __future__ import annotations

import torch_geometric.datasets as pyg_datasets
from torch_geometric.data import Data
from torch_geometric.utils import coalesce

from train.graph.datasets.graph_files import check_edge_values, check_graph, load_files, read_graph_arrays
from train.graph.datasets.hetero_files import files_target, hetero_size, is_hetero, read_hetero, read_igbh
from train.graph.datasets.ogb_graphs import open_ogb, open_ogbl
from train.graph.datasets.synthetic import hetero_synthetic_graph, synthetic_graph
from train.graph.labels import is_multilabel, num_outputs
from train.graph.typed_graph import typed_graph

__all__ = ["check_edge_values", "check_graph", "files_target", "from_pyg_masks", "hetero_size",
           "hetero_synthetic_graph", "is_hetero", "is_multilabel", "load_files", "num_outputs", "open_ogb", "open_ogbl",
           "pyg_datasets", "read_graph_arrays", "read_hetero", "read_igbh", "synthetic_graph", "typed_graph"]


def from_pyg_masks(data) -> Data:
    """x, y, a coalesced edge_index and the split as indices, from a PyG graph with split masks."""
    out = Data(x=data.x, y=data.y.view(-1), edge_index=coalesce(data.edge_index, num_nodes=data.num_nodes))
    for split in ("train", "val", "test"):
        mask = getattr(data, f"{split}_mask")
        if mask.dim() > 1:  # some datasets ship several splits; use the first
            mask = mask[:, 0]
        out[f"{split}_idx"] = mask.nonzero().view(-1)
    return out
