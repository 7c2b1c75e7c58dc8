"""One R-GAT layer (Busbridge et al., "Relational Graph Attention Networks") whose memory grows with the nodes and
edges, not with the edges times a weight matrix.

PyG's `RGATConv` gathers each edge's relation weight (`index_select(weight, 0, edge_type)`, then a bmm), so it holds
edges x in x out floats: on a citation graph of 1,433 features and 100k edges, tens of GB. The layer's maths does
not need it: an edge's value is its source's row through its relation's weight, and its attention logit is
`(x_i W_r) q + (x_j W_r) k`. So, as PyG's `RGCNConv` and the MLPerf reference's per-relation `GATConv` do, the
nodes are transformed once per relation (each relation's distinct sources only), the logits come from per-node
scalars (`x W_r q`, one per head), and per edge and head only a scalar and an `out`-wide row remain.
PyG has no such layer, hence this one. It keeps `RGATConv`'s parameters (`weight` or `att` and `basis` or
block-diagonal `weight`, `q`, `k`, `bias`), their initialisation and its outputs for `mod=None` and `dim=1`
(tests/test_rgat.py holds the two equal); those two options are refused, naming why.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import softmax

from train.errors import UserError

MECHANISMS = ("across-relation", "within-relation")  # softmax over a target's in-edges, or per relation
MODES = ("additive-self-attention", "multiplicative-self-attention")


def _glorot(tensor: Tensor) -> None:
    """PyG's glorot (torch_geometric.nn.inits), as RGATConv initialises its weights."""
    bound = math.sqrt(6.0 / (tensor.size(-2) + tensor.size(-1)))
    nn.init.uniform_(tensor, -bound, bound)


class NodeWiseRGATConv(nn.Module):
    """R-GAT's layer over one node set: `forward(x, edge_index, edge_type, targets)` gives the first `targets`
    rows (the targets come first, as a trimmed batch lists them). Arguments as PyG's RGATConv's."""

    def __init__(self, in_channels: int, out_channels: int, num_relations: int, num_bases: int | None = None,
                 num_blocks: int | None = None, mod: str | None = None,
                 attention_mechanism: str = "across-relation", attention_mode: str = "additive-self-attention",
                 heads: int = 1, dim: int = 1, concat: bool = True, negative_slope: float = 0.2, bias: bool = True):
        super().__init__()
        _check(mod, dim, attention_mechanism, attention_mode, num_bases, num_blocks)
        self.in_channels, self.out_channels, self.num_relations = in_channels, out_channels, num_relations
        self.heads, self.concat, self.negative_slope = heads, concat, negative_slope
        self.attention_mechanism, self.attention_mode = attention_mechanism, attention_mode
        self.num_bases, self.num_blocks = num_bases, num_blocks
        width = heads * out_channels
        self.q = nn.Parameter(torch.empty(width, heads))
        self.k = nn.Parameter(torch.empty(width, heads))
        self.bias = nn.Parameter(torch.empty(width if concat else out_channels)) if bias else None
        if num_bases is not None:
            self.att = nn.Parameter(torch.empty(num_relations, num_bases))
            self.basis = nn.Parameter(torch.empty(num_bases, in_channels, width))
        elif num_blocks is not None:
            if in_channels % num_blocks or width % num_blocks:
                raise UserError(f"model.kwargs.num_blocks={num_blocks} must divide the layer's input width "
                                f"({in_channels}) and its heads x channels ({width}) for model.name=rgat.")
            self.weight = nn.Parameter(torch.empty(num_relations, num_blocks, in_channels // num_blocks,
                                                   width // num_blocks))
        else:
            self.weight = nn.Parameter(torch.empty(num_relations, in_channels, width))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for tensor in ((self.basis, self.att) if self.num_bases is not None else (self.weight,)) + (self.q, self.k):
            _glorot(tensor)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def relation_weights(self) -> Tensor:
        """Each relation's [in, heads x out] weight, from the bases or the blocks where they are used."""
        width = self.heads * self.out_channels
        if self.num_bases is not None:
            return (self.att @ self.basis.view(self.num_bases, -1)).view(self.num_relations, self.in_channels, width)
        if self.num_blocks is not None:
            return torch.stack([torch.block_diag(*blocks) for blocks in self.weight])
        return self.weight

    def forward(self, x: Tensor, edge_index: Tensor, edge_type: Tensor, targets: int | None = None) -> Tensor:
        targets = x.size(0) if targets is None else targets
        if edge_type.device.type == "cpu":  # a GPU batch is checked by the contract's CPU batch, without a sync
            check_relations(edge_type, self.num_relations)
        relations, heads, channels = self.num_relations, self.heads, self.out_channels
        weights = self.relation_weights()  # [R, in, heads x out]
        source, target = edge_index[0], edge_index[1]
        # attention logits from per-node scalars: (x W_r) q == x (W_r q), per relation and head
        query = (x[:targets] @ _per_relation(weights @ self.q)).view(-1, heads)
        key = (x @ _per_relation(weights @ self.k)).view(-1, heads)
        alpha = _combine(query[target * relations + edge_type], key[source * relations + edge_type],
                         self.attention_mode)
        if self.attention_mode == MODES[0]:
            alpha = F.leaky_relu(alpha, self.negative_slope)
        group, groups = target, targets
        if self.attention_mechanism == MECHANISMS[1]:
            group, groups = target * relations + edge_type, targets * relations  # a target's in-edges per relation
        alpha = softmax(alpha, group, num_nodes=groups)
        values = _source_values(x, weights, source, edge_type, relations)  # [edges, heads x out]
        messages = alpha.unsqueeze(-1) * values.view(-1, heads, channels)
        out = x.new_zeros(targets, heads, channels).index_add_(0, target, messages)
        out = out.reshape(targets, heads * channels) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias


def check_relations(edge_type: Tensor, relations: int) -> None:
    """`UserError` when an edge's relation is not one of the layer's `relations`: a model built for another graph."""
    if edge_type.numel() and (int(edge_type.max()) >= relations or int(edge_type.min()) < 0):
        found = int(edge_type.max()) + 1
        raise UserError(f"model.name=rgat has {relations} relation(s), one per edge type of the graph it was built "
                        f"for, and this batch's edges carry relation ids up to {found - 1} ({found} relations or "
                        "more): build the model for this graph's edge types (train on the graph it was made for).")


def _per_relation(weights: Tensor) -> Tensor:
    """[R, in, k] -> [in, R x k]: one matmul gives every relation's k columns per node, relation-major per node."""
    return weights.permute(1, 0, 2).reshape(weights.size(1), -1)


def _combine(query: Tensor, key: Tensor, mode: str) -> Tensor:
    return query + key if mode == MODES[0] else query * key


def _source_values(x: Tensor, weights: Tensor, source: Tensor, edge_type: Tensor, relations: int) -> Tensor:
    """Each edge's source row through its relation's weight, transforming each (relation, source) pair once:
    every relation's distinct sources, grouped by relation (torch.unique sorts them so), one matmul each."""
    pairs, edge_pair = torch.unique(edge_type * x.size(0) + source, return_inverse=True)
    counts = torch.bincount(torch.div(pairs, x.size(0), rounding_mode="floor"), minlength=relations).tolist()
    rows = x[pairs % x.size(0)]
    transformed = [part @ weights[relation] for relation, part in enumerate(rows.split(counts)) if counts[relation]]
    if not transformed:
        return x.new_zeros(0, weights.size(2))
    return torch.cat(transformed)[edge_pair]


def _check(mod: str | None, dim: int, mechanism: str, mode: str, num_bases: int | None,
           num_blocks: int | None) -> None:
    """`UserError` for an option this layer does not take, naming the valid ones."""
    if mod is not None:
        raise UserError(f"model.kwargs.mod={mod!r} is not available for model.name=rgat: RGATConv's cardinality "
                        "variants are not kept in this R-GAT (it attends per edge without per-edge weights); "
                        "remove model.kwargs.mod.")
    if dim != 1:
        raise UserError(f"model.kwargs.dim={dim} is not available for model.name=rgat: each head has one attention "
                        "score per edge (dim=1); remove model.kwargs.dim.")
    if mechanism not in MECHANISMS:
        raise UserError(f"model.kwargs.attention_mechanism={mechanism!r} for model.name=rgat; valid: "
                        f"{', '.join(MECHANISMS)}.")
    if mode not in MODES:
        raise UserError(f"model.kwargs.attention_mode={mode!r} for model.name=rgat; valid: {', '.join(MODES)}.")
    if num_bases is not None and num_blocks is not None:
        raise UserError("model.kwargs.num_bases and model.kwargs.num_blocks cannot both be set for model.name=rgat: "
                        "choose one decomposition of the relation weights.")
