"""Full-batch training on one process, the same loop for a shipped model and the textbook model it is held
against (tests/test_model_table.py, tests/test_synthetic_edges.py): Adam, every node in every step, the test
accuracy at the best validation epoch, as the Planetoid papers report it."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TextbookGINE(nn.Module):
    """Hu et al.'s GINE as PyG's and OGB's examples write it: GINEConv layers of an MLP [in, h, h] each, ReLU
    between, then a Linear head."""

    def __init__(self, in_channels: int, hidden: int, out_channels: int, edge_dim: int, layers: int = 2):
        from torch_geometric.nn import GINEConv

        super().__init__()
        widths = [in_channels] + [hidden] * layers
        self.convs = nn.ModuleList(
            GINEConv(nn.Sequential(nn.Linear(a, hidden), nn.ReLU(), nn.Linear(hidden, hidden)), edge_dim=edge_dim)
            for a in widths[:-1])
        self.lin = nn.Linear(hidden, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        for conv in self.convs:
            x = F.relu(conv(x, edge_index, edge_attr))
        return self.lin(x)


def accuracy_at_best_val(model: nn.Module, logits: Callable[[nn.Module], Tensor], y: Tensor, splits: dict[str, Tensor],
                  epochs: int, lr: float = 0.01) -> float:
    """Train `model` full batch (`logits(model)`: every node's) for `epochs`; its test accuracy at the best
    validation epoch."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    best = (-1.0, 0.0)
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(logits(model)[splits["train"]], y[splits["train"]]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            predicted = logits(model).argmax(1)
        accuracy = [float((predicted[splits[s]] == y[splits[s]]).float().mean()) for s in ("val", "test")]
        best = max(best, (accuracy[0], accuracy[1]))
    return best[1]
