"""Models: GraphSAGE as in PyG's multi-node example, and a feature-only MLP baseline.

Both take `(x, edge_index)` so the training loop treats them alike; `layer` lets the
evaluation run one layer at a time over the whole graph (layer-wise inference).

A sampled batch lists its nodes and edges hop by hop (PyG's NeighborLoader and train/graph/sampler.py:
seeds first, then each hop's new nodes; hop h's edges point into hop h's frontier). Given the
per-hop counts, layer i of L needs outputs only for the nodes within L-1-i hops of the seeds, so
`forward` computes just those rows: for fanouts [25, 10] about 1 in 3 rows in the first layer and
only the seeds in the last. PyG's `trim_to_layer` trims a layer's inputs; this also trims its
targets, as the exact evaluation does (train/loop/evaluate.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from train.config import ModelConfig


class GNN(nn.Module):
    """A stack of SAGEConv (or Linear for the MLP) layers with ReLU and dropout in between."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int, dropout: float, kind: str):
        super().__init__()
        self.kind = kind
        self.dropout = dropout
        sizes = [in_channels] + [hidden] * (num_layers - 1) + [out_channels]
        self.sizes = sizes  # input width, then each layer's output width
        make = (lambda i, o: SAGEConv(i, o)) if kind == "sage" else (lambda i, o: nn.Linear(i, o))
        self.layers = nn.ModuleList(make(i, o) for i, o in zip(sizes[:-1], sizes[1:]))

    @property
    def uses_graph(self) -> bool:
        return self.kind == "sage"

    def layer(self, index: int, x: Tensor | tuple[Tensor, Tensor], edge_index: Tensor) -> Tensor:
        """Layer `index` alone, with the activation that follows it (none after the last)."""
        conv = self.layers[index]
        x = conv(x, edge_index) if self.uses_graph else conv(x)
        if index < len(self.layers) - 1:
            x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
        return x

    def forward(self, x: Tensor, edge_index: Tensor, num_sampled_nodes: list[int] | None = None,
                num_sampled_edges: list[int] | None = None) -> Tensor:
        """Every row of `x`, or with a batch's hop counts only the seeds' rows (the first
        num_sampled_nodes[0]), computing in each layer only the rows that later layers read."""
        if num_sampled_nodes is None or num_sampled_edges is None or not self.uses_graph:
            for index in range(len(self.layers)):
                x = self.layer(index, x, edge_index)
            return x
        last = len(self.layers) - 1
        for index in range(len(self.layers)):
            hops = last - index  # this layer's outputs feed nodes up to this many hops from the seeds
            targets = sum(num_sampled_nodes[: hops + 1])
            edges = sum(num_sampled_edges[: hops + 1])  # the edges into those targets
            x = self.layer(index, (x, x[:targets]), edge_index[:, :edges])
        return x


def build_model(config: ModelConfig, in_channels: int, out_channels: int, seed: int) -> GNN:
    """Same seed, same initial weights on every rank (as the seed's `torch.manual_seed(12345)`)."""
    torch.manual_seed(seed)
    return GNN(in_channels, config.hidden, out_channels, config.num_layers, config.dropout, config.name)


def hop_counts(batch, config: ModelConfig) -> tuple[list[int] | None, list[int] | None]:
    """The batch's per-hop node and edge counts for `GNN.forward` when model.trim is on, else (None, None)."""
    if not config.trim:
        return None, None
    return getattr(batch, "num_sampled_nodes", None), getattr(batch, "num_sampled_edges", None)
