"""`ModelStep`: the module DDP wraps, and the one place that says how a batch reaches the model.

The contract a model meets (README, "Your own model"):
* `forward(x, edge_index, ...)` returns one row of `out_channels` logits per node, at least for the
  seeds (the first `batch_size` rows of a sampled batch);
* if its forward takes `edge_attr` or `edge_weight` (as PyG's BasicGNN.forward does), a batch's edge
  features and weights are passed by those names (models/edges.py); a batch without them passes nothing more;
* if its forward takes `num_sampled_nodes_per_hop` and `num_sampled_edges_per_hop` (as PyG's
  BasicGNN.forward does), a sampled batch's per-hop counts are passed by those names (model.trim);
* a forward without an `edge_index` parameter (PyG's MLP) is fed the features alone, and its
  batches carry no neighbours;
* if its forward takes `edge_type`, `node_type` and `n_id` (a heterogeneous graph's models: models/hetero.py), a
  typed batch's are passed by those names.
PyG's BasicGNN models (the built-ins, and a user's subclass that keeps BasicGNN's forward) are run
with target trimming instead (train/models/trim.py): the same outputs for the seeds, less work.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torch_geometric.nn.norm import BatchNorm

import train.models.trim as trim
from train.config import ModelConfig
from train.models.edges import EDGE_ARGUMENTS
from train.models.hetero import TYPED_INPUTS, untyped_as_target

HOP_ARGUMENTS = ("num_sampled_nodes_per_hop", "num_sampled_edges_per_hop")
HALF_FEATURES = (torch.bfloat16, torch.float16)  # data.feature_dtype's storage forms, widened before the model


def widened(x: Tensor) -> Tensor:
    """Features (and edge features) as the model computes on them: data.feature_dtype stores them in 16 bits, the
    model in float32. Every way into the model (the training step, the layer-wise evaluation) widens them here."""
    return x.float() if x.dtype in HALF_FEATURES else x


def forward_parameters(forward) -> tuple[set[str], bool]:
    """The names `forward` takes and whether it takes **kwargs (a bound method or a class's function)."""
    params = inspect.signature(forward).parameters.values()
    return {p.name for p in params}, any(p.kind == p.VAR_KEYWORD for p in params)


def reads_graph(forward) -> bool:
    """Whether a model reads the graph: its forward takes edge_index (or **kwargs). False: a feature-only model (PyG's
    MLP), fed the features alone, whose batches carry no neighbours and whose fanouts count nothing. The one rule:
    ModelStep, the memory plan and the fanout check (train/config/checks.py's check_layer_fanouts) ask it. A model of a
    heterogeneous graph's dicts (forward(x_dict, edge_index_dict)) reads it too."""
    named, open_ended = forward_parameters(forward)
    return "edge_index" in named or "edge_index_dict" in named or open_ended


def edge_arguments(model: nn.Module) -> tuple[str, ...]:
    """Which of EDGE_ARGUMENTS `model` reads: a BasicGNN what its layers take, any other model what its forward
    names (not **kwargs: a model is given what it asks for by name)."""
    if isinstance(model, BasicGNN):
        return tuple(name for name, read in (("edge_attr", model.supports_edge_attr),
                                             ("edge_weight", model.supports_edge_weight)) if read)
    named, _ = forward_parameters(model.forward)
    return tuple(name for name in EDGE_ARGUMENTS if name in named)


BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)  # batch statistics in training


def batch_norms(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The norms of `model` that read batch statistics in training mode (PyG's BatchNorm holds one), by name."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, BATCH_NORMS)]


def one_row_norm(model: nn.Module) -> str:
    """The first norm of `model` that cannot train on a batch of one row, by its name in the model ('' when none):
    BatchNorm's batch statistics need two rows in training mode (torch refuses one), unless PyG's BatchNorm is built
    with allow_single_element (model.kwargs.norm_kwargs), which then reads its running statistics."""
    single_allowed = {id(norm.module) for norm in model.modules() if isinstance(norm, BatchNorm)
                      and getattr(norm, "allow_single_element", False)}  # absent from older PyG: never
    return next((name for name, module in batch_norms(model) if id(module) not in single_allowed), "")


class ModelStep(nn.Module):
    """Calls `model` on a batch: features only, every row, or trimmed by the batch's hop counts."""

    def __init__(self, model: nn.Module, input_dropout: float = 0.0):
        super().__init__()
        self.model = model
        self.input_dropout = input_dropout  # model.input_dropout: on the features, before the model
        named, _ = forward_parameters(model.forward)
        self.uses_graph = reads_graph(model.forward)  # False: a feature-only model (PyG's MLP)
        self.not_target_trimmed = trim.unsupported(model)  # None: target trimming applies
        self.takes_hop_counts = all(name in named for name in HOP_ARGUMENTS)
        self.edge_arguments = edge_arguments(model) if self.uses_graph else ()  # which edge tensors it reads
        self.typed_arguments = tuple(name for name in TYPED_INPUTS if name in named)  # a heterogeneous graph's
        self.one_row_norm = one_row_norm(model)  # a norm that cannot train on one row ('' when none)

    @property
    def trim_mode(self) -> str:
        """Which trimming model.trim gives this model, in words for the log and summary.json."""
        if not self.uses_graph:
            return "none (a feature-only model)"
        if isinstance(getattr(self.model, "trim_mode", None), str):  # a heterogeneous graph's model says its own
            return self.model.trim_mode
        if self.not_target_trimmed is None:
            return "target trimming (each layer computes only the rows later layers read)"
        if self.takes_hop_counts:
            return (f"the model's own forward with num_sampled_nodes_per_hop (PyG's trim_to_layer for a BasicGNN): "
                    f"{self.not_target_trimmed}")
        return "none (its forward takes no num_sampled_nodes_per_hop: every sampled row in every layer)"

    def edges(self, edge_attr: Tensor | None, edge_weight: Tensor | None) -> dict[str, Tensor]:
        """The edge tensors the model reads, of those the batch has, by name (16-bit ones widened, as features)."""
        given = {"edge_attr": edge_attr, "edge_weight": edge_weight}
        return {name: widened(given[name]) for name in self.edge_arguments if given[name] is not None}

    def forward(self, x: Tensor, edge_index: Tensor | None = None, num_sampled_nodes: list[int] | None = None,
                num_sampled_edges: list[int] | None = None, edge_attr: Tensor | None = None,
                edge_weight: Tensor | None = None, edge_type: Tensor | None = None, node_type: Tensor | None = None,
                n_id: Tensor | None = None) -> Tensor:
        x = widened(x)
        if self.input_dropout:
            x = F.dropout(x, self.input_dropout, self.training)
        if not self.uses_graph:
            return self.model(x)
        typed = {"edge_type": edge_type, "node_type": node_type, "n_id": n_id}
        if self.typed_arguments and node_type is None:
            typed = untyped_as_target(self.model.meta, x, edge_index)
        edges = {**self.edges(edge_attr, edge_weight), **{name: typed[name] for name in self.typed_arguments}}
        if num_sampled_nodes is None or num_sampled_edges is None:
            return self.model(x, edge_index, **edges)
        if self.not_target_trimmed is None:
            return trim.trimmed_forward(self.model, x, edge_index, list(num_sampled_nodes), list(num_sampled_edges),
                                        **edges)
        if self.takes_hop_counts:
            return self.model(x, edge_index, num_sampled_nodes_per_hop=list(num_sampled_nodes),
                              num_sampled_edges_per_hop=list(num_sampled_edges), **edges)
        return self.model(x, edge_index, **edges)


def hop_counts(batch, config: ModelConfig) -> tuple[list[int] | None, list[int] | None]:
    """The batch's per-hop node and edge counts for `ModelStep.forward` when model.trim is on, else (None, None)."""
    if not config.trim:
        return None, None
    return getattr(batch, "num_sampled_nodes", None), getattr(batch, "num_sampled_edges", None)
