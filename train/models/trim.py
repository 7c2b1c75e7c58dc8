"""Target trimming for PyG's BasicGNN models: each layer computes only the rows later layers read.

A sampled batch lists its nodes and edges hop by hop (PyG's NeighborLoader and train/graph/sampling/samplers.py:
seeds first, then each hop's new nodes; hop h's edges point into hop h's nodes). Given the per-hop
counts, layer i of L needs outputs only for the nodes within L-1-i hops of the seeds (its targets), from
the nodes one hop further (its sources), over the edges into the targets: for fanouts [25, 10] about 1
in 3 rows in the first layer and only the seeds in the last. PyG's `trim_to_layer` trims a layer's
sources; this also trims its targets, as the exact evaluation does one hop at a time.

How a layer is told its targets depends on the layer:
* a layer that takes a bipartite input `(x_source, x_target)` (SAGEConv, GATConv, GATv2Conv, GINConv,
  GraphConv, EdgeConv) gets `(x, x[:targets])`;
* GCNConv takes one node set and normalises each edge by both ends' degrees, so a source's degree
  must count the edges into it that the layer itself does not use (the next hop's; in the exact
  evaluation the whole graph's): they are added as one weighted edge per such source, from node 0,
  which changes the source's degree and nothing the targets read.
The seeds' outputs equal those of PyG's own forward on every row (tests/test_model_trim.py).
Models this does not cover (other layers, a forward of their own, per-graph norms) are called with
PyG's `num_sampled_nodes_per_hop` instead: BasicGNN's forward then uses `trim_to_layer`.
"""

from __future__ import annotations

import torch
import torch_geometric.nn.conv as convs
from torch import Tensor, nn
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torch_geometric.nn.norm import BatchNorm, LayerNorm

# the layers that take (x_source, x_target)
BIPARTITE = ("SAGEConv", "GATConv", "GATv2Conv", "GINConv", "GINEConv", "GraphConv", "EdgeConv")
DEGREE_NORMALISED = ("GCNConv",)  # one node set; each edge normalised by its source's and target's degree
ROW_WISE_NORMS = (nn.Identity, nn.LayerNorm, nn.BatchNorm1d)  # plus PyG's BatchNorm and LayerNorm(mode="node")


def _conv_kinds() -> tuple[tuple[type, ...], tuple[type, ...]]:
    return tuple(getattr(convs, n) for n in BIPARTITE), tuple(getattr(convs, n) for n in DEGREE_NORMALISED)


def _row_wise(norm: nn.Module) -> bool:
    """Whether a norm's output for a row depends on that row alone (BatchNorm: with its running statistics)."""
    if isinstance(norm, LayerNorm):
        return norm.mode == "node"
    if isinstance(norm, BatchNorm):
        norm = norm.module
    if isinstance(norm, nn.BatchNorm1d):
        return norm.track_running_stats
    return isinstance(norm, ROW_WISE_NORMS)


def unsupported(model: nn.Module) -> str | None:
    """Why target trimming cannot run `model` exactly as its own forward does, or None when it can."""
    if not isinstance(model, BasicGNN):
        return f"{type(model).__name__} is not one of PyG's BasicGNN models"
    if type(model).forward is not BasicGNN.forward:
        return f"{type(model).__name__} has a forward of its own"
    bipartite, degree = _conv_kinds()
    for conv in model.convs:
        if not isinstance(conv, bipartite + degree):
            return f"its layer {type(conv).__name__} is not one of {', '.join(BIPARTITE + DEGREE_NORMALISED)}"
        if getattr(conv, "flow", "source_to_target") != "source_to_target":
            return f"its layer {type(conv).__name__} has flow={conv.flow!r}"
        if isinstance(conv, degree) and getattr(conv, "improved", False):
            # PyG fills self-loops with 2 only when given edge weights, which its own forward does not pass
            return f"its {type(conv).__name__}(improved=True) would weigh self-loops otherwise with the degree filler"
    for norm in model.norms:
        if not _row_wise(norm):
            return f"its norm {type(norm).__name__} mixes rows (not per node)"
    return None


def degree_filler(edge_index: Tensor, nodes: Tensor, counts: Tensor,
                  edge_weight: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """`edge_index` plus one edge from node 0 into each of `nodes` weighted by its `counts`, and the weights
    (`edge_weight`, else 1, for the real edges): the in-degree GCNConv computes for `nodes` is then theirs in the
    full computation."""
    keep = counts != 0
    nodes, counts = nodes[keep], counts[keep]
    filler = torch.stack([torch.zeros_like(nodes), nodes])
    dtype = edge_weight.dtype if edge_weight is not None else torch.float32
    weight = torch.ones(edge_index.size(1) + nodes.numel(), dtype=dtype, device=edge_index.device)
    if edge_weight is not None:
        weight[: edge_index.size(1)] = edge_weight
    weight[edge_index.size(1):] = counts.to(weight.dtype)
    return torch.cat([edge_index, filler], dim=1), weight


def degree_beyond(edge_index: Tensor, edge_weight: Tensor | None, kind: str, first: int, count: int
                  ) -> tuple[Tensor, Tensor]:
    """(nodes, counts) for `degree_filler`: the in-degree that edges `edge_index` (into nodes first..first+count)
    give them, as GCNConv counts it. Weighted by `edge_weight` when given; "without self-loops": GCNConv
    replaces a node's self-loop by one of its own, weighted 1 or the node's self-loop's weight, so a self-loop
    counts its weight beyond that 1 (nothing, unweighted)."""
    device = edge_index.device
    weight = torch.ones(edge_index.size(1), device=device) if edge_weight is None else edge_weight.float()
    if kind == "without self-loops":
        weight = weight - (edge_index[0] == edge_index[1]).to(weight.dtype)
    counts = torch.zeros(count, dtype=weight.dtype, device=device).index_add_(0, edge_index[1] - first, weight)
    return torch.arange(first, first + count, device=device), counts


def layer_edges(model: nn.Module, edge_attr: Tensor | None, edge_weight: Tensor | None) -> dict[str, Tensor]:
    """The edge tensors BasicGNN.forward passes its layers: those they read (`supports_edge_*`), when given."""
    edges = {}
    if model.supports_edge_attr and edge_attr is not None:
        edges["edge_attr"] = edge_attr
    if model.supports_edge_weight and edge_weight is not None:
        edges["edge_weight"] = edge_weight
    return edges


def after_conv(model: nn.Module, index: int, x: Tensor) -> Tensor:
    """BasicGNN.forward's steps after layer `index`'s conv: activation, norm, dropout (none after the last
    layer unless a jumping-knowledge mode is set)."""
    if index == model.num_layers - 1 and model.jk_mode is None:
        return x
    if model.act is not None and model.act_first:
        x = model.act(x)
    x = model.norms[index](x)
    if model.act is not None and not model.act_first:
        x = model.act(x)
    return model.dropout(x)


def layer_rows(model: nn.Module, index: int, x: Tensor, edge_index: Tensor, targets: int,
               source_degree: tuple[Tensor, Tensor] | None = None, edge_attr: Tensor | None = None,
               edge_weight: Tensor | None = None) -> Tensor:
    """Layer `index` of a BasicGNN for the first `targets` rows of `x`, from every row of `x` over the edges
    into the targets (with their `edge_attr` and `edge_weight` rows, when given). `source_degree`: (nodes,
    counts) of in-edges the sources have beyond `edge_index` (read by degree-normalised layers only)."""
    conv = model.convs[index]
    _, degree = _conv_kinds()
    edges = layer_edges(model, edge_attr, edge_weight)
    if isinstance(conv, degree):
        if source_degree is not None:
            edge_index, edges["edge_weight"] = degree_filler(edge_index, *source_degree, edges.get("edge_weight"))
        out = conv(x, edge_index, **edges)[:targets]
    else:
        out = conv((x, x[:targets]), edge_index, **edges)
    return after_conv(model, index, out)


def source_degree_kind(model: nn.Module, index: int) -> str | None:
    """None when layer `index` does not read its sources' degrees; else which in-edges count:
    "without self-loops" (GCNConv replaces them with its own) or "with self-loops" (add_self_loops=False)."""
    conv = model.convs[index]
    if not isinstance(conv, _conv_kinds()[1]):
        return None
    return "without self-loops" if conv.add_self_loops else "with self-loops"


def head(model: nn.Module, xs: list[Tensor], x: Tensor) -> Tensor:
    """BasicGNN's output head: jumping knowledge over every layer's rows `xs`, then its final Linear."""
    if hasattr(model, "jk"):
        x = model.jk(xs)
    return model.lin(x) if hasattr(model, "lin") else x


def trimmed_forward(model: nn.Module, x: Tensor, edge_index: Tensor, nodes_per_hop: list[int],
                    edges_per_hop: list[int], edge_attr: Tensor | None = None,
                    edge_weight: Tensor | None = None) -> Tensor:
    """The seeds' rows of `model(x, edge_index, edge_attr=..., edge_weight=...)` (the first nodes_per_hop[0]),
    each layer computing only the rows later layers read, from the edges (and their rows of the edge tensors)
    it keeps. `model` must pass `unsupported(model) is None`."""
    edge_weight = edge_weight if model.supports_edge_weight else None  # read only by layers that take it
    last = model.num_layers - 1
    seeds = nodes_per_hop[0]
    xs = []
    for index in range(model.num_layers):
        hops = last - index  # this layer's outputs feed nodes up to this many hops from the seeds
        targets = sum(nodes_per_hop[: hops + 1])
        edges = sum(edges_per_hop[: hops + 1])  # the edges into those targets
        degree = None
        kind = source_degree_kind(model, index)
        if kind is not None and hops + 1 < len(edges_per_hop):
            # the next hop's edges point into this layer's outermost sources (rows targets..len(x))
            beyond = slice(edges, edges + edges_per_hop[hops + 1])
            degree = degree_beyond(edge_index[:, beyond], None if edge_weight is None else edge_weight[beyond],
                                   kind, targets, x.size(0) - targets)
        x = layer_rows(model, index, x, edge_index[:, :edges], targets, degree,
                       None if edge_attr is None else edge_attr[:edges],
                       None if edge_weight is None else edge_weight[:edges])
        if hasattr(model, "jk"):
            xs.append(x[:seeds])
    return head(model, xs, x[:seeds])
