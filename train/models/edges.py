"""The edges' tensors a model reads: PyG's `edge_attr` [E, F] and `edge_weight` [E], by the names PyG gives them.

A batch carries them aligned with its `edge_index` (as PyG's NeighborLoader gives them); the graph keeps them
beside its CSC (train/graph/edge_rows.py's `EdgeRows`, by CSC position), from which the exact evaluation reads
each chunk's in-edges. A model gets those its forward takes, by name, as it gets the hop counts (models/step.py);
a batch without them passes nothing more. PyG's BasicGNN models take both names in their forward but pass on
only what their layers read (`supports_edge_attr`, `supports_edge_weight`): those are what they get
(step.py's `edge_arguments`).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from train.errors import UserError
from train.graph.edge_rows import EDGE_VALUES, edge_values
from train.graph.form import graph_edge_rows
from train.models.hetero import typed_inputs

EDGE_ARGUMENTS = EDGE_VALUES  # forward's parameter names, and the batch's attributes: PyG's names, one home
EDGE_DIM = "edge_dim"  # the model.kwargs entry that sizes a model's edge-feature input (GATConv, GINEConv, ...)


def edge_inputs(batch) -> dict[str, Tensor]:
    """The batch's edge tensors by name, for `ModelStep.forward(..., **edge_inputs(batch))`: none, one or both; and
    a typed batch's edge_type, node_type and n_id (a heterogeneous graph's: models/hetero.py's typed_inputs)."""
    return {**{name: value for name in EDGE_ARGUMENTS if (value := getattr(batch, name, None)) is not None},
            **typed_inputs(batch)}


def graph_edge_values(graph) -> dict[str, Tensor]:
    """The graph's edge values by name: its own `edge_attr` / `edge_weight`, or those kept beside its CSC (the
    node-shared graph keeps them there alone: train/graph/form.py's attach_edge_rows)."""
    kept = graph_edge_rows(graph)
    return {**(kept.values if kept is not None else {}), **edge_values(graph)}


def graph_edge_width(graph) -> int | None:
    """The width of the graph's edge features (a model's edge_dim), or None when it has none."""
    attr = graph_edge_values(graph).get("edge_attr")
    if attr is None:
        return None
    return int(attr.size(1)) if attr.dim() > 1 else 1


def check_edge_dim(name: str, kwargs: dict[str, Any], width: int | None) -> None:
    """model.kwargs.edge_dim against the graph's edge features: `UserError` naming both when they differ."""
    edge_dim = kwargs.get(EDGE_DIM)
    if edge_dim is None:
        return
    if width is None:
        raise UserError(f"model.kwargs.edge_dim={edge_dim} is set for model.name={name}, but the graph has no edge "
                        "features (edge_attr); give the graph its edge_attr (docs/data.md), or remove "
                        "model.kwargs.edge_dim.")
    if edge_dim != width:
        raise UserError(f"model.kwargs.edge_dim={edge_dim} for model.name={name}, but the graph's edge features "
                        f"(edge_attr) have {width} columns; set model.kwargs.edge_dim={width}.")
