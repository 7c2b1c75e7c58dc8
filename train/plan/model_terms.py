"""A built-in model's own intermediates per edge, in one layer of a training step: what the plan's training-batch
term (train/plan/terms.py forward_bytes) adds to the rows and messages every model has (issue 41 §3).

Per edge, a layer holds two kinds of floats: those autograd keeps for the backward pass (every layer's, until the
step's backward: `kept`) and those alive only while the layer's messages pass (`passing`: the largest layer's
count, with its gradient in the backward pass). Read from the layers' own code:
* SAGEConv, GINConv, RGCNConv (per relation), HeteroConv of SAGEConv: each edge gathers its source's input row
  (`passing`: the input width); a sum or mean's backward needs only the index;
* GCNConv: transforms first, so each edge gathers its source's output row;
* GINEConv: each edge's features projected to the input width, added to the source's row, ReLU: the projection,
  the sum and the ReLU's output are kept;
* GATConv (and HeteroConv of GATConv): transforms first; each edge keeps its source's heads x channels row and, per
  head, the logit, its leaky ReLU, its softmax and the product's operand; GATv2Conv also keeps the sum of both ends'
  rows and its leaky ReLU (heads x channels each), and with edge features their projection;
* R-GAT (train/models/rgat.py): as GATConv per edge; per input row, its (relation, source) pairs' input rows and
  their transforms (`source_floats`).

Layers that run one relation at a time (`Relations`): RGCNConv (PyG's loop over relations, where pyg-lib's
segment_matmul is not used) and HeteroConv's (hetero-sage, hetero-gat). Only the largest relation's messages are alive
at once, but each relation keeps its own aggregate for the backward pass: RGCNConv's mean per relation is a [targets,
in] tensor (zero in the rows of other types) that its `h @ weight[r]` keeps; HeteroConv's SAGEConv keeps each
relation's mean over its destination type's targets (for lin_l), and its GATConv each relation's transform of its
source and destination types' rows; HeteroConv holds every relation's output and their stack at once as it sums them,
and with PyG's trim_to_layer each layer outputs a row for every node it reads (`rows_of_last_hop`). A mean
(SAGEConv's, RGCNConv's default aggr) holds its sum beside it while it divides (torch_geometric.utils.scatter). The
relations' shares follow the batch's planned mix (train/plan/hops.py): the seeds draw the fanout per relation into the
target type, later hops per relation into each type as the graph's nodes are mixed.

A user's model is not read: its own intermediates are counted as SAGEConv's, and `python -m train plan` says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from train.builtin_models import BUILTINS
from train.config import Config
from train.graph.sizes import GraphSize

GATHERS_OUTPUT = {"gcn"}  # transform, then gather the output row per edge
ATTENTION = {"gat", "hetero-gat", "rgat"}  # heads x channels rows and per-head scalars per edge
HEAD_SCALARS = 4  # per edge and head: the logit, its leaky ReLU, its softmax, the product's operand
SELF_LOOPS = {"gcn", "gat"}  # GCNConv's, GATConv's and GATv2Conv's add_self_loops, True unless the kwargs say not
MEANS = {"sage", "rgcn", "hetero-sage"}  # aggregate by their aggr kwarg, whose default is a mean
WHOLE_AGGREGATE = {"rgcn"}  # each relation's aggregate spans every target (RGCNConv's propagate over them all)
HETERO_CONV = {"hetero-sage", "hetero-gat"}  # one conv per relation over its own types (HeteroConv)


@dataclass(frozen=True)
class EdgeFloats:
    kept: int  # floats per edge kept for the backward pass
    passing: int  # floats per edge alive while the layer's messages pass
    # the per-edge rows depend on the layer's weights (transformed before they pass), so the backward pass makes
    # their gradient in every layer, the first too (a gathered input row has none there: the features need none)
    weighted: bool = False
    # it transforms its inputs before they pass (GCNConv, the attention layers), so what its targets aggregate is
    # output-wide (counted in its rows); a layer that aggregates first (SAGEConv, GINConv) holds input-wide sums
    transforms_first: bool = False


def ends_in_head(config: Config) -> bool:
    """Whether the model's convs all give model.hidden and a Linear head gives the classes: jumping knowledge
    (jk, gine's default: train/builtin_models.py) or HeteroConv's stack (train/models/heteroconv.py)."""
    builtin = BUILTINS.get(config.model.name)
    if builtin is None:
        return False
    jk = {**builtin.defaults, **config.model.kwargs}.get("jk")
    return jk is not None or builtin.class_name in ("HeteroSAGE", "HeteroGAT")


def attention_heads(config: Config, last: bool) -> tuple[int, int]:
    """(heads, per-head channels factor): the layer's heads, and by how much its heads widen its output
    (concatenated heads: 1, the width split among them; averaged heads on the last layer: heads)."""
    kwargs = config.model.kwargs
    heads = int(kwargs.get("heads", 1))
    if last and not ends_in_head(config):
        heads = int(kwargs.get("out_heads", heads)) if config.model.name == "gat" else heads
        return heads, heads
    return heads, 1


def edge_floats(config: Config, size: GraphSize, width_in: int, width_out: int, last: bool) -> EdgeFloats:
    """One layer's floats per edge (module docstring), for a layer of these widths."""
    name = config.model.name
    if name in ATTENTION:
        heads, widen = attention_heads(config, last)
        rows = width_out * widen  # heads x channels
        kept = rows + HEAD_SCALARS * heads
        if name == "gat" and config.model.kwargs.get("v2"):
            kept += 2 * rows + (rows if config.model.kwargs.get("edge_dim") else 0)
        return EdgeFloats(kept, rows, weighted=True, transforms_first=True)
    if name in GATHERS_OUTPUT:
        return EdgeFloats(0, width_out, transforms_first=True)
    return EdgeFloats(3 * edge_projection_width(config, size, width_in), width_in)


def source_floats(config: Config, size: GraphSize, width_in: int, width_out: int, last: bool) -> int:
    """Floats per input row a layer keeps beside its edges: R-GAT's (relation, source) pairs, each pair's input row
    and its transform (train/models/rgat.py), at most one pair per relation out of the row's type (the most any
    type has); 0 for the other layers."""
    if config.model.name != "rgat" or size.meta is None:
        return 0
    heads, widen = attention_heads(config, last)
    out_of = [sum(1 for edge in size.meta.edge_types if edge[0] == t) for t in size.meta.node_types]
    return max(out_of) * (width_in + width_out * widen)


def edge_projection_width(config: Config, size: GraphSize, width_in: int) -> int:
    """Floats per edge of GINEConv's projection of the edges' features to the layer's input width (gine); 0 for a
    layer that reads no edge features this way."""
    builtin = BUILTINS.get(config.model.name)
    return width_in if builtin is not None and "GINEConv" in builtin.convs and size.edge_features else 0


def one_input(config: Config, size: GraphSize) -> bool:
    """Whether a typed model's input is one tensor of every node's row that takes a gradient (the relational
    models' TypeInputs with a featureless type's embedding in it); a dict model's per-type inputs take one only
    in the featureless types' rows."""
    builtin = BUILTINS.get(config.model.name)
    relational = builtin is not None and builtin.module == "train.models.relational"
    return relational and size.meta is not None and 0 in size.meta.widths


def rows_of_last_hop(config: Config, size: GraphSize) -> int:
    """Hops beyond its targets' whose rows a trimmed layer still outputs: PyG's trim_to_layer (HeteroConv's, the
    layer's trim) drops a hop's nodes only the layer after its edges, so each layer gives a row to every node it
    reads (1); the relational models trim to the rows later layers read (0)."""
    return 1 if size.meta is not None and config.model.name in HETERO_CONV else 0


def typed_edge_ids(config: Config, size: GraphSize) -> int:
    """int64 ids per edge a typed model keeps beside the batch's: a dict model's edge_index_dict (each relation's
    edges in its types' local ids: train/models/hetero.py typed_dicts) and RGCNConv's per-relation edge_index
    (masked_edge_index, kept for each relation's propagate), 2 each; 0 on an untyped graph or for R-GAT's layer."""
    builtin = BUILTINS.get(config.model.name)
    if size.meta is None or (builtin is not None and builtin.class_name == "RGAT"):
        return 0
    return 2


def counts_own_intermediates(config: Config) -> bool:
    """Whether the plan reads the model's own intermediates (a built-in), or takes them as SAGEConv's (a user's)."""
    return config.model.name in BUILTINS


@dataclass(frozen=True)
class Relations:
    """A layer's rows and edges as its relations split them (module docstring); for a layer over every edge at once:
    one aggregate row per target, every edge passing, no relation's transform."""

    aggregated: float  # input-wide aggregate rows kept, over every relation
    passing: float  # edges whose messages are alive at once: the largest relation's, or every edge (and self-loops)
    summed: float  # input-wide target rows of a mean's sum beside it, at once (0: not a mean)
    transformed: float  # rows of the relations' own transforms kept (HeteroConv's GATConv: sources and targets)
    edges: float  # edges whose per-edge floats are kept: the layer's, and a self-loop per target where it adds them
    grouped: float = 0  # output-wide rows of every relation's output and their stack (HeteroConv's group), at once
    index_bytes: int = 0  # the layer's own edge_index with its self-loops (2 int64 ids per edge), kept
    transformed_at_once: float = 0  # of `transformed`, one relation's (without autograd, each freed after it)


def relations(config: Config, size: GraphSize, seeds: int, targets: int, sources: int, first_edges: int,
              edges: int) -> Relations:
    """How a layer of `targets` (the first `seeds` of them in the target type), reading `sources` rows over `edges`
    (`first_edges` of them into the seeds) splits by relation (module docstring)."""
    name = config.model.name
    mean = name in MEANS and config.model.kwargs.get("aggr", "mean") == "mean"
    meta = size.meta
    if meta is None or (name not in WHOLE_AGGREGATE and name not in HETERO_CONV):
        # GCNConv and GATConv remove the graph's self-loops and add one per target: their own edge_index, its
        # messages and per-edge floats (GCNConv's norm; GATConv's attention) span edges + targets
        loops = targets if name in SELF_LOOPS and config.model.kwargs.get("add_self_loops", True) else 0
        return Relations(targets, edges + loops, targets if mean else 0, 0, edges + loops,
                         index_bytes=2 * (edges + loops) * 8 if loops else 0)
    nodes = max(sum(meta.counts), 1)
    into = meta.relations_into
    # later hops' edges per relation: its destination type's share of the relations into the graph's nodes
    largest_share = max(meta.counts[meta.node_types.index(dst)] for _, _, dst in meta.edge_types) / max(
        meta.segments, 1)
    passing = first_edges / max(into[meta.target_index], 1) + (edges - first_edges) * largest_share
    if name in WHOLE_AGGREGATE:
        rows = len(meta.edge_types) * targets
        return Relations(rows, passing, targets if mean else 0, 0, edges)
    others = targets - seeds  # of the graph's mix of types
    per_target = seeds * into[meta.target_index] + others * meta.segments / nodes  # a relation's row per target
    largest_type = seeds + others * max(meta.counts) / nodes
    grouped = 2 * per_target  # each relation's output rows, and their stack, before HeteroConv sums them
    if name == "hetero-sage":
        return Relations(per_target, passing, largest_type if mean else 0, 0, edges, grouped)
    out_of = sum(meta.counts[meta.node_types.index(src)] for src, _, _ in meta.edge_types) / nodes
    return Relations(0, passing, 0, math.ceil(per_target + sources * out_of), edges, grouped,
                     transformed_at_once=largest_type + sources * max(meta.counts) / nodes)
