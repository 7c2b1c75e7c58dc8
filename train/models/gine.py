"""`model.name=gine`: PyG's GIN with GINEConv layers, which add each edge's features to its message.

PyG ships GINEConv but no BasicGNN model of it; this is PyG's GIN with its one layer class swapped, so
BasicGNN's forward, jumping knowledge, norms and trimming are PyG's. Every layer gets `edge_dim`
(model.kwargs.edge_dim, the width of the graph's edge features), so each projects them to its own width.
"""

from __future__ import annotations

from typing import Final

from torch_geometric.nn.conv import GINEConv, MessagePassing
from torch_geometric.nn.models import MLP
from torch_geometric.nn.models.basic_gnn import BasicGNN


class GINE(BasicGNN):
    """GIN (Xu et al.) with edge features, as Hu et al. ("Strategies for Pre-training GNNs") define GINEConv."""

    supports_edge_weight: Final[bool] = False
    supports_edge_attr: Final[bool] = True
    supports_norm_batch: Final[bool]

    def init_conv(self, in_channels: int, out_channels: int, **kwargs) -> MessagePassing:
        mlp = MLP([in_channels, out_channels, out_channels], act=self.act, act_first=self.act_first,
                  norm=self.norm, norm_kwargs=self.norm_kwargs)  # as PyG's GIN builds its layers' MLP
        return GINEConv(mlp, **kwargs)
