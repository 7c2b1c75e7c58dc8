"""The per-layer API of the exact evaluation (train/loop/evaluate.py, eval.mode=full).

Layer-wise inference computes every node's output one layer at a time from its full one-hop
neighbourhood, as PyG's `BasicGNN.inference` does; here each layer is computed for a batch's seeds
alone (train/models/trim.py's `layer_rows`), and a GCN's sources keep their degree in the whole
graph, so the result is the model on the whole graph. It exists for PyG's BasicGNN models whose
forward is BasicGNN's own, with every layer one of trim.py's kinds and a jumping-knowledge mode of
None or "last" (the others combine every layer's outputs, which a layer-at-a-time pass does not keep).
The edges' features and weights the layers read come from the graph's copies in the CSC's order
(models/edges.py), sliced with each chunk's in-edges: a graph that has them in no such copy is evaluated
on sampled neighbourhoods. Any other model is evaluated on sampled neighbourhoods (eval.mode=sampled),
and the run says so.

On a heterogeneous graph (a typed one: models/hetero.py), the relational models (rgcn, rgat: models/relational.py)
have the API too (`RelationalLayerWise`): their layers take one node set and each edge's relation, so a chunk's
targets get their layer from their typed in-edges (`edge_type` from the graph's copy in the CSC's order), and the
first layer reads each node type's input (`TypeInputs`: its columns, its projection or its embedding by id) for the
chunk's nodes. A dict model (HeteroConv's, PyG's to_hetero, the user's) is evaluated on sampled neighbourhoods.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

import train.models.trim as trim
from train.config import ModelConfig
from train.graph.typed_meta import HeteroMeta
from train.models.relational import RelationalGNN
from train.models.spec import meta_model
from train.models.step import ModelStep, edge_arguments, widened


class LayerWise:
    """Layer `index` of a BasicGNN for a batch's seeds; the last layer includes the output head."""

    typed = False  # its layers read no node or edge types

    def __init__(self, model: nn.Module):
        self.model = model
        self.edge_arguments = edge_arguments(model)  # the edge tensors its layers read
        self.num_layers = model.num_layers
        # each layer's output width: hidden_channels, then out_channels (after the head, if any)
        self.widths = [model.hidden_channels] * (model.num_layers - 1) + [model.out_channels]

    def source_degree_kind(self, index: int) -> str | None:
        """Whether layer `index` reads each source's in-degree in the whole graph (GCNConv), and which
        in-edges count: None, "without self-loops" or "with self-loops"."""
        return trim.source_degree_kind(self.model, index)

    def rows(self, index: int, x: Tensor, edge_index: Tensor, seeds: int,
             source_degree: tuple[Tensor, Tensor] | None = None, edge_attr: Tensor | None = None,
             edge_weight: Tensor | None = None) -> Tensor:
        edge_attr, edge_weight = (None if t is None else widened(t) for t in (edge_attr, edge_weight))
        out = trim.layer_rows(self.model, index, widened(x), edge_index, seeds, source_degree, edge_attr, edge_weight)
        return trim.head(self.model, [], out) if index == self.num_layers - 1 else out


class RelationalLayerWise:
    """Layer `index` of a relational model (R-GCN, R-GAT) for a chunk's targets on a typed graph: the first layer
    reads each node's type input, each layer its edges' relations; ReLU between layers, as its forward (dropout
    is off in evaluation)."""

    typed = True  # `rows` takes edge_type, and for the first layer node_type and n_id
    edge_arguments = ()  # the relational layers read no edge features or weights

    def __init__(self, model: RelationalGNN):
        self.model = model
        self.num_layers = model.num_layers
        self.widths = model.widths

    def source_degree_kind(self, index: int) -> str | None:
        return None  # no layer reads its sources' degrees in the whole graph

    def rows(self, index: int, x: Tensor, edge_index: Tensor, seeds: int, source_degree=None, *,
             edge_type: Tensor, node_type: Tensor | None = None, n_id: Tensor | None = None) -> Tensor:
        if index == 0:  # the chunk's nodes' features (padded to the widest type) -> each type's input
            x = self.model.inputs(widened(x), node_type, n_id)
        out = self.model.layer(index, x, edge_index, edge_type, seeds)
        return out if index == self.num_layers - 1 else F.relu(out)


def layerwise(step: ModelStep) -> tuple[LayerWise | RelationalLayerWise | None, str]:
    """The model's per-layer API, or None and why the evaluation falls back to sampled neighbourhoods. The edge
    values a model reads need no fallback: the graph keeps them by CSC position (train/graph/edge_rows.py)."""
    model = step.model
    if not step.uses_graph:
        return None, ""  # a feature-only model: evaluated row by row, exactly, without layers
    if isinstance(model, RelationalGNN):
        return RelationalLayerWise(model), ""
    if step.typed_arguments:  # models/hetero.py's TypedModel says which model it holds
        return None, (f"eval.mode=full needs a per-layer API (PyG's BasicGNN models', or the relational rgcn and "
                      f"rgat) and {getattr(model, 'shown', type(model).__name__)} on a heterogeneous graph is a dict "
                      "model, called on whole batches: evaluating on sampled neighbourhoods (eval.mode=sampled) "
                      "instead")
    reason = step.not_target_trimmed
    if reason is None and model.jk_mode not in (None, "last"):
        reason = f"its jumping-knowledge mode {model.jk_mode!r} combines every layer's outputs"
    if reason is not None:
        return None, (f"eval.mode=full needs the per-layer API of PyG's BasicGNN models and {type(model).__name__} "
                      f"does not provide it ({reason}): evaluating on sampled neighbourhoods (eval.mode=sampled) "
                      "instead")
    return LayerWise(model), ""


def evaluates_exactly(config: ModelConfig, in_channels: int, out_channels: int, meta: HeteroMeta | None = None) -> bool:
    """Whether eval.mode=full runs the exact pass for model `config` (not sampled neighbourhoods), as `layerwise`
    decides it for the run, asked of the model built on the meta device: the memory plan's question."""
    step = ModelStep(meta_model(config, in_channels, out_channels, meta), config.input_dropout)
    return not step.uses_graph or layerwise(step)[0] is not None
