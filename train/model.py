"""Models: GraphSAGE as in PyG's multi-node example, and a feature-only MLP baseline.

Both take `(x, edge_index)` so the training loop treats them alike; `layer` lets the
evaluation run one layer at a time over the whole graph (layer-wise inference).
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

    def layer(self, index: int, x: Tensor, edge_index: Tensor) -> Tensor:
        """Layer `index` alone, with the activation that follows it (none after the last)."""
        conv = self.layers[index]
        x = conv(x, edge_index) if self.uses_graph else conv(x)
        if index < len(self.layers) - 1:
            x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
        return x

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for index in range(len(self.layers)):
            x = self.layer(index, x, edge_index)
        return x


def build_model(config: ModelConfig, in_channels: int, out_channels: int, seed: int) -> GNN:
    """Same seed, same initial weights on every rank (as the seed's `torch.manual_seed(12345)`)."""
    torch.manual_seed(seed)
    return GNN(in_channels, config.hidden, out_channels, config.num_layers, config.dropout, config.name)
