"""`model.name=rgcn|rgat`: PyG's RGCNConv, and R-GAT's layer (train/models/rgat.py), stacked on a typed batch
(x, edge_index, edge_type).

Each node type gets its input (train/models/hetero.py's `TypeInputs.common`: features of one width as they
are, of several widths each type's through a Linear of its own to model.hidden, a featureless type's a learned
embedding); then model.num_layers relational layers, ReLU and
dropout between them, the last one giving out_channels. RGAT's hidden layers concatenate `heads` heads of
hidden/heads channels, its last layer averages them; each RGAT layer adds a Linear of the target's own input (the
root weight RGCNConv has; R-GAT's layer has none, so a node whose sampled neighbourhood is empty would lose itself).
R-GAT's layer is PyG's RGATConv re-written to transform nodes, not edges (RGATConv holds a weight matrix per edge:
edges x in x out floats, tens of GB on a citation graph of 1,433 features).

Trim: given the batch's per-hop counts, layer i computes only the nodes within L-1-i hops of the seeds, over the
edges into them (as train/models/trim.py does for the homogeneous models): each target's output depends only
on its in-edges and its own row, so the seeds' outputs are those of the untrimmed forward.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.conv import RGCNConv

from train.errors import UserError
from train.graph.typed_meta import HeteroMeta
from train.models.hetero import TypeInputs, with_every_parameter
from train.models.rgat import NodeWiseRGATConv

TRIM_MODE = "target trimming (each relational layer computes only the rows later layers read)"


class RelationalGNN(nn.Module):
    """The shared stack: per-type inputs, relational layers (`init_conv`), per-hop trimming."""

    trim_mode = TRIM_MODE

    def __init__(self, in_channels: int, hidden_channels: int, num_layers: int, out_channels: int,
                 dropout: float = 0.0, *, meta: HeteroMeta, **kwargs):
        super().__init__()
        self.meta, self.num_layers, self.dropout = meta, num_layers, dropout
        self.inputs = TypeInputs.common(meta, hidden_channels)
        self.widths = [hidden_channels] * (num_layers - 1) + [out_channels]  # each layer's output width
        self.convs = nn.ModuleList(
            self.init_conv(self.inputs.width if index == 0 else hidden_channels, self.widths[index],
                           last=index == num_layers - 1, **kwargs)
            for index in range(num_layers))

    def init_conv(self, in_channels: int, out_channels: int, last: bool, **kwargs) -> nn.Module:
        raise NotImplementedError

    def layer(self, index: int, x: Tensor, edge_index: Tensor, edge_type: Tensor, targets: int) -> Tensor:
        """Layer `index`'s output for the first `targets` rows of `x`, over `edge_index` (the edges into them)."""
        return self.convs[index]((x, x[:targets]), edge_index, edge_type)

    def forward(self, x: Tensor, edge_index: Tensor, edge_type: Tensor, node_type: Tensor, n_id: Tensor,
                num_sampled_nodes_per_hop: list[int] | None = None,
                num_sampled_edges_per_hop: list[int] | None = None) -> Tensor:
        """Every row's logits; with the per-hop counts, the seeds' rows alone (the same values)."""
        h = self.inputs(x, node_type, n_id)
        trimmed = num_sampled_nodes_per_hop is not None and num_sampled_edges_per_hop is not None
        for index in range(self.num_layers):
            hops = self.num_layers - 1 - index  # this layer's outputs feed nodes up to this many hops from the seeds
            targets, edges = h.size(0), edge_index.size(1)
            if trimmed:
                targets = sum(num_sampled_nodes_per_hop[: hops + 1])
                edges = sum(num_sampled_edges_per_hop[: hops + 1])  # the edges into those targets
            h = self.layer(index, h, edge_index[:, :edges], edge_type[:edges], targets)
            if index < self.num_layers - 1:
                h = F.dropout(F.relu(h), self.dropout, self.training)
        return with_every_parameter(h, self)


class RGCN(RelationalGNN):
    """Schlichtkrull et al.'s R-GCN: PyG's RGCNConv (its own root weight; model.kwargs: num_bases, num_blocks,
    aggr, root_weight, bias, ...)."""

    def init_conv(self, in_channels: int, out_channels: int, last: bool, **kwargs) -> nn.Module:
        return RGCNConv(in_channels, out_channels, len(self.meta.edge_types), **kwargs)


class RGAT(RelationalGNN):
    """Busbridge et al.'s R-GAT: train/models/rgat.py's layer with `heads` heads (model.kwargs: heads,
    attention_mechanism, attention_mode, num_bases, num_blocks, ...), plus a root Linear per layer."""

    def __init__(self, *args, heads: int = 1, **kwargs):
        self.heads = heads  # read by init_conv, which the base's constructor calls
        super().__init__(*args, **kwargs)
        self.roots = nn.ModuleList(nn.Linear(conv.in_channels, width) for conv, width in zip(self.convs, self.widths))

    def init_conv(self, in_channels: int, out_channels: int, last: bool, **kwargs) -> nn.Module:
        if not last and out_channels % self.heads:
            raise UserError(f"model.name=rgat: model.hidden={out_channels} is not a multiple of "
                            f"model.kwargs.heads={self.heads}; each hidden layer concatenates its heads.")
        per_head = out_channels if last else out_channels // self.heads
        return NodeWiseRGATConv(in_channels, per_head, len(self.meta.edge_types), heads=self.heads,
                                concat=not last, **kwargs)

    def layer(self, index: int, x: Tensor, edge_index: Tensor, edge_type: Tensor, targets: int) -> Tensor:
        out = self.convs[index](x, edge_index, edge_type, targets)  # the targets come first: their rows alone
        return out + self.roots[index](x[:targets])
