"""`model.name=hetero-sage|hetero-gat`: PyG's `HeteroConv` of one SAGEConv or GATConv per relation, per layer.

A dict model (`forward(x_dict, edge_index_dict)`), called on a typed batch through train/models/hetero.py's
`TypedModel`, which gives every node type its input (`TypeInputs`). Each of model.num_layers layers gives every
destination type model.hidden channels, the sum of its relations' outputs (HeteroConv's aggr="sum"; a type that is
no relation's destination keeps its input), with leaky ReLU and dropout between layers; a Linear head then gives
the out_channels. This is MLPerf's R-GAT as the GNN benchmark's reference defines it (GraphLearn-for-PyTorch's
examples/igbh/rgnn.py, model="rgat"): per relation a GATConv of `heads` heads of hidden/heads channels,
concatenated, without self-loops (a relation's source and destination are different node sets).
With model.trim each layer drops the hops no later layer reads (PyG's trim_to_layer, per node and edge type).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import HeteroConv
from torch_geometric.nn.conv import GATConv, SAGEConv
from torch_geometric.utils import trim_to_layer

from train.errors import UserError
from train.graph.typed_meta import HeteroMeta


class HeteroConvGNN(nn.Module):
    """The shared stack; `relation_conv` builds one relation's layer."""

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int,
                 dropout: float = 0.0, *, meta: HeteroMeta, **kwargs):
        super().__init__()
        self.num_layers, self.dropout = num_layers, dropout
        widths = [in_channels] + [hidden_channels] * num_layers
        self.convs = nn.ModuleList(
            HeteroConv({relation: self.relation_conv(widths[index], hidden_channels, **kwargs)
                        for relation in meta.edge_types}, aggr="sum")
            for index in range(num_layers))
        self.lin = nn.Linear(hidden_channels, out_channels)
        self.target = meta.target

    def relation_conv(self, in_channels: int, out_channels: int, **kwargs) -> nn.Module:
        raise NotImplementedError

    def forward(self, x_dict: dict[str, Tensor], edge_index_dict: dict[tuple[str, str, str], Tensor],
                num_sampled_nodes_dict: dict[str, list[int]] | None = None,
                num_sampled_edges_dict: dict[tuple[str, str, str], list[int]] | None = None) -> dict[str, Tensor]:
        """The target type's logits; with the per-type hop counts, each layer first drops the hops no later layer
        reads (PyG's trim_to_layer: the seeds' outputs unchanged)."""
        for index, conv in enumerate(self.convs):
            if num_sampled_nodes_dict is not None and num_sampled_edges_dict is not None:
                x_dict, edge_index_dict, _ = trim_to_layer(index, num_sampled_nodes_dict, num_sampled_edges_dict,
                                                           x_dict, edge_index_dict)
            out = conv(x_dict, edge_index_dict)
            if index < self.num_layers - 1:
                out = {name: F.dropout(F.leaky_relu(h), self.dropout, self.training) for name, h in out.items()}
            x_dict = {**x_dict, **out}  # a type no relation points to keeps its input
        return {self.target: self.lin(x_dict[self.target])}


class HeteroSAGE(HeteroConvGNN):
    """HeteroConv of SAGEConv (model.kwargs: SAGEConv's aggr, normalize, root_weight, project, bias)."""

    def relation_conv(self, in_channels: int, out_channels: int, **kwargs) -> nn.Module:
        return SAGEConv(in_channels, out_channels, **kwargs)


class HeteroGAT(HeteroConvGNN):
    """HeteroConv of GATConv, MLPerf's R-GAT (model.kwargs: heads, negative_slope, edge_dim, ...)."""

    def __init__(self, *args, heads: int = 1, **kwargs):
        self.heads = heads  # read by relation_conv, which the base's constructor calls
        super().__init__(*args, **kwargs)

    def relation_conv(self, in_channels: int, out_channels: int, **kwargs) -> nn.Module:
        if out_channels % self.heads:
            raise UserError(f"model.name=hetero-gat: model.hidden={out_channels} is not a multiple of "
                            f"model.kwargs.heads={self.heads}; each layer concatenates its heads.")
        kwargs.setdefault("add_self_loops", False)
        return GATConv(in_channels, out_channels // self.heads, heads=self.heads, **kwargs)  # one lin, as MLPerf
