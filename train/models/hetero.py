"""The one adapter between a typed batch and a heterogeneous model (issue 27).

A heterogeneous graph trains as a typed homogeneous graph (train/graph/typed_meta.py): a batch is one PyG `Data`
whose `x` is as wide as the widest type (narrower types zero-padded, featureless types zero), with each node's
`node_type` and global id `n_id` and each edge's `edge_type`, the seeds first and all of the target type. Here:
* `TypeInputs`: each type's input to the first layer: its own feature columns through a Linear of its own, or,
  for a featureless type (width 0), a learned `nn.Embedding` of its nodes by their id within the type
  (`n_id - offsets[type]`);
* `typed_dicts`: the `x_dict` and `edge_index_dict` (each type's nodes numbered in batch order) that PyG's
  `to_hetero` and `HeteroConv` models, and a user's `forward(x_dict, edge_index_dict)`, take; every relation has
  its entry, empty when the batch has none of its edges;
* `TypedModel`: such a dict model called on a typed batch; its output is the target type's rows, in batch order,
  so its first `batch_size` rows are the seeds'; a model whose forward takes `num_sampled_nodes_dict` and
  `num_sampled_edges_dict` gets the batch's hop counts per type (`typed_hop_counts`), for PyG's `trim_to_layer`;
* `with_every_parameter`: DDP-safety: each parameter takes part in every step (a relation or a node type absent
  from one rank's batch would otherwise leave its weights without a gradient there, and DDP stops);
* `initialise_lazy`: a dry forward on a tiny typed batch of the graph's own types, so that lazy layers
  (in_channels=-1) have their shapes before DDP wraps the model.
"""

from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from train.errors import UserError
from train.graph.sampling.samplers import make_node_loader
from train.graph.typed_meta import HeteroMeta

TYPED_INPUTS = ("edge_type", "node_type", "n_id")  # a typed batch's tensors a heterogeneous model reads, by name

# The typed stand-in the contract checks a heterogeneous model on when the graph is not known yet: three types
# (one narrower, one featureless), every type a destination, a relation within the target type.
STAND_IN = HeteroMeta(
    node_types=("paper", "author", "field"),
    edge_types=(("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "written_by", "author"),
                ("field", "has", "paper"), ("paper", "about", "field")),
    counts=(40, 30, 10), widths=(6, 4, 0), target="paper")


def typed_inputs(batch) -> dict[str, Tensor]:
    """A typed batch's `edge_type`, `node_type` and `n_id` by name; nothing for a homogeneous batch."""
    if getattr(batch, "node_type", None) is None or getattr(batch, "edge_type", None) is None:
        return {}
    return {name: batch[name] for name in TYPED_INPUTS}


def untyped_as_target(meta: HeteroMeta, x: Tensor, edge_index: Tensor) -> dict[str, Tensor]:
    """Types for a batch that carries none (train/loop/run.py's one-node dummy that settles DDP's gradient
    buckets before the first step): every node of the target type, numbered from the type's first, every edge of
    relation 0."""
    nodes = torch.arange(x.size(0), device=x.device)
    return {"edge_type": torch.zeros(edge_index.size(1), dtype=torch.long, device=x.device),
            "node_type": torch.full_like(nodes, meta.target_index), "n_id": nodes + meta.offsets[meta.target_index]}


def type_rows(node_type: Tensor, types: int) -> list[Tensor]:
    """For each node type, the batch rows of its nodes, in batch order."""
    return [(node_type == index).nonzero().view(-1) for index in range(types)]


class TypeInputs(nn.Module):
    """Each node type's input: its own feature columns (the first `widths[t]` of the padded `x`), projected to
    `channels` by a Linear of its own unless `channels` is None; a featureless type's learned embedding of width
    `embedding` (its nodes by their id within the type)."""

    def __init__(self, meta: HeteroMeta, channels: int | None, embedding: int):
        super().__init__()
        self.meta = meta
        self.width = channels or embedding  # every type's input width, when one (channels, or one common width)
        self.project = nn.ModuleDict()  # keyed by type index: a type's name may hold characters a key may not
        self.embed = nn.ModuleDict()
        for index, (width, count) in enumerate(zip(meta.widths, meta.counts)):
            if width == 0:
                self.embed[str(index)] = nn.Embedding(count, embedding)
            elif channels is not None:
                self.project[str(index)] = nn.Linear(width, channels)

    @classmethod
    def common(cls, meta: HeteroMeta, hidden: int) -> "TypeInputs":
        """The built-in models' inputs, all of one width: types of one feature width as they are (IGBH's 1024 each,
        as MLPerf's reference takes them), a featureless type's embedding of that width; types of several widths
        each projected to `hidden`."""
        widths = {width for width in meta.widths if width}
        if len(widths) <= 1:
            return cls(meta, None, widths.pop() if widths else hidden)
        return cls(meta, hidden, hidden)

    def widths(self) -> dict[str, int]:
        """Each type's input width, by name: what a dict model's in_channels are."""
        return {name: (self.embed[str(i)].embedding_dim if str(i) in self.embed else
                       self.project[str(i)].out_features if str(i) in self.project else width)
                for i, (name, width) in enumerate(zip(self.meta.node_types, self.meta.widths))}

    def per_type(self, x: Tensor, node_type: Tensor, n_id: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """(rows, inputs): each type's batch rows and its input for them."""
        rows = type_rows(node_type, len(self.meta.node_types))
        inputs = []
        for index, (width, offset) in enumerate(zip(self.meta.widths, self.meta.offsets)):
            key = str(index)
            if key in self.embed:
                inputs.append(self.embed[key](n_id[rows[index]] - offset))
                continue
            own = x[rows[index], :width]
            inputs.append(self.project[key](own) if key in self.project else own)
        return rows, inputs

    def forward(self, x: Tensor, node_type: Tensor, n_id: Tensor) -> Tensor:
        """Every row's input, in batch order (every type projected to one width)."""
        rows, inputs = self.per_type(x, node_type, n_id)
        order = torch.cat(rows)
        return torch.cat(inputs)[torch.argsort(order)]


def typed_dicts(meta: HeteroMeta, rows: list[Tensor], inputs: list[Tensor], edge_index: Tensor, edge_type: Tensor
                ) -> tuple[dict[str, Tensor], dict[tuple[str, str, str], Tensor]]:
    """`x_dict` and `edge_index_dict` of a typed batch: each type's nodes numbered in batch order within the type,
    every relation present (empty when the batch has none of its edges)."""
    local = torch.empty(sum(r.numel() for r in rows), dtype=torch.long, device=edge_index.device)
    for type_rows_ in rows:
        local[type_rows_] = torch.arange(type_rows_.numel(), device=edge_index.device)
    x_dict = dict(zip(meta.node_types, inputs))
    edge_index_dict = {}
    for index, relation in enumerate(meta.edge_types):
        edges = edge_index[:, edge_type == index]
        edge_index_dict[relation] = local[edges]
    return x_dict, edge_index_dict


HOP_DICTS = ("num_sampled_nodes_dict", "num_sampled_edges_dict")  # PyG's names of the per-type hop counts


def typed_hop_counts(meta: HeteroMeta, rows: list[Tensor], edge_type: Tensor, nodes_per_hop: list[int],
                     edges_per_hop: list[int]) -> tuple[dict[str, list[int]], dict[tuple[str, str, str], list[int]]]:
    """The batch's per-hop counts per node type and per relation, as PyG's `trim_to_layer` takes them: a batch lists
    its nodes and edges hop by hop, and each type's rows (each relation's edges) keep that order in the dicts."""
    device = edge_type.device
    node_hop = torch.repeat_interleave(torch.arange(len(nodes_per_hop), device=device),
                                       torch.tensor(nodes_per_hop, device=device))
    edge_hop = torch.repeat_interleave(torch.arange(len(edges_per_hop), device=device),
                                       torch.tensor(edges_per_hop, device=device))
    nodes = {name: torch.bincount(node_hop[type_rows_], minlength=len(nodes_per_hop)).tolist()
             for name, type_rows_ in zip(meta.node_types, rows)}
    edges = {relation: torch.bincount(edge_hop[edge_type == index], minlength=len(edges_per_hop)).tolist()
             for index, relation in enumerate(meta.edge_types)}
    return nodes, edges


def with_every_parameter(out: Tensor, module: nn.Module) -> Tensor:
    """`out` unchanged in value, with every (initialised) parameter of `module` in its graph: a relation or node
    type absent from this rank's batch still gives its weights a (zero) gradient, so DDP's reduction completes."""
    touched = [p.reshape(-1)[:1] for p in module.parameters()
               if p.requires_grad and not isinstance(p, nn.parameter.UninitializedParameter) and p.numel()]
    if not touched:
        return out
    return out + torch.cat(touched).sum() * 0


class TypedModel(nn.Module):
    """A dict model (`forward(x_dict, edge_index_dict)`: to_hetero, HeteroConv, the user's) on a typed batch."""

    def __init__(self, inputs: TypeInputs, model: nn.Module, name: str, shown: str = ""):
        super().__init__()
        self.inputs = inputs
        self.model = model
        self.name = name  # model.name, for messages
        self.shown = shown or type(model).__name__  # the model in the log's words (to_hetero(GraphSAGE))
        self.takes_hop_dicts = set(HOP_DICTS) <= set(inspect.signature(model.forward).parameters)
        self.trim_mode = ("PyG's trim_to_layer per node and edge type (the model's forward takes "
                          "num_sampled_nodes_dict): each layer drops the hops later layers do not read"
                          if self.takes_hop_dicts else
                          "none (its forward takes no num_sampled_nodes_dict: every sampled row in every layer)")

    @property
    def meta(self) -> HeteroMeta:
        return self.inputs.meta

    def forward(self, x: Tensor, edge_index: Tensor, edge_type: Tensor, node_type: Tensor, n_id: Tensor,
                num_sampled_nodes_per_hop: list[int] | None = None,
                num_sampled_edges_per_hop: list[int] | None = None) -> Tensor:
        """The target type's logits; with the per-hop counts, a model that takes them per type gets them."""
        rows, inputs = self.inputs.per_type(x, node_type, n_id)
        hops = {}
        if self.takes_hop_dicts and num_sampled_nodes_per_hop is not None and num_sampled_edges_per_hop is not None:
            hops = dict(zip(HOP_DICTS, typed_hop_counts(self.meta, rows, edge_type, list(num_sampled_nodes_per_hop),
                                                        list(num_sampled_edges_per_hop))))
        out = self.model(*typed_dicts(self.meta, rows, inputs, edge_index, edge_type), **hops)
        target = self.meta.target
        if not isinstance(out, dict) or not isinstance(out.get(target), Tensor):
            got = f"a dict of {', '.join(map(repr, out))}" if isinstance(out, dict) else f"a {type(out).__name__}"
            raise UserError(f"model.name={self.name}: forward(x_dict, edge_index_dict) returned {got}; expected a "
                            f"dict of logits by node type, with the target type {target!r}'s [nodes, out_channels].")
        return with_every_parameter(out[target], self)


def tiny_typed_batch(meta: HeteroMeta, num_layers: int, seeds: int = 4, fanout: int = 3,
                     per_type: int = 12) -> Data:
    """A batch as training samples it (seeds of the target type first, then each hop; hop counts attached) from a
    small random graph of `meta`'s types and relations: each type's first `per_type` nodes (kept at their global
    ids, so that an embedding reads its own rows), features of each type's width, every relation's edges."""
    generator = torch.Generator().manual_seed(0)
    sizes = [min(count, per_type) for count in meta.counts]
    starts = [sum(sizes[:index]) for index in range(len(sizes))]
    width = max(meta.widths + (1,))
    x = torch.zeros(sum(sizes), width)
    for index, (size, start, own) in enumerate(zip(sizes, starts, meta.widths)):
        x[start:start + size, :own] = torch.randn(size, own, generator=generator)
    node_type = torch.cat([torch.full((size,), index) for index, size in enumerate(sizes)])
    n_id = torch.cat([torch.arange(size) + offset for size, offset in zip(sizes, meta.offsets)])
    parts, kinds = [], []
    for index, (source, _, target) in enumerate(meta.edge_types):
        s, t = meta.node_types.index(source), meta.node_types.index(target)
        count = 3 * max(sizes[s], sizes[t])
        parts.append(torch.stack([torch.randint(sizes[s], (count,), generator=generator) + starts[s],
                                  torch.randint(sizes[t], (count,), generator=generator) + starts[t]]))
        kinds.append(torch.full((count,), index))
    graph = Data(x=x, edge_index=torch.cat(parts, dim=1), num_nodes=sum(sizes))
    target = meta.target_index
    loader = make_node_loader(graph, torch.arange(seeds) + starts[target], [fanout] * num_layers, seeds, seed=0)
    batch = next(iter(loader))
    batch.edge_type = torch.cat(kinds)[batch.e_id]
    batch.node_type = node_type[batch.n_id]
    batch.n_id = n_id[batch.n_id]
    batch.y = torch.zeros(batch.num_nodes, dtype=torch.long)
    return batch


def initialise_lazy(model: nn.Module, meta: HeteroMeta, num_layers: int, name: str) -> None:
    """A dry forward on a tiny typed batch of the graph's own types (no gradients, the RNG as it was), so that lazy
    layers take their shapes before DDP wraps the model; `UserError` naming the model when it fails, or when a
    parameter is still uninitialised. A model without lazy layers needs none (and may be on the meta device)."""
    if not any(isinstance(p, nn.parameter.UninitializedParameter) for p in model.parameters()):
        return
    batch = tiny_typed_batch(meta, num_layers)
    was_training = model.training
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            model.eval()
            model(batch.x, batch.edge_index, **typed_inputs(batch))
    except UserError:
        raise
    except Exception as exc:  # the model's (or PyG's) code on the graph's own types: name it, no traceback
        raise UserError(f"model.name={name}: a first forward on a tiny batch of the graph's types "
                        f"({', '.join(meta.node_types)}) failed: {type(exc).__name__}: {exc}") from None
    finally:
        model.train(was_training)
    lazy = [n for n, p in model.named_parameters() if isinstance(p, nn.parameter.UninitializedParameter)]
    if lazy:
        raise UserError(f"model.name={name}: parameter {lazy[0]} is still uninitialised after a first forward on "
                        "every node and edge type: a lazy layer (in_channels=-1) its forward never calls; DDP "
                        "cannot wrap it. Give it its in_channels, or remove it.")
