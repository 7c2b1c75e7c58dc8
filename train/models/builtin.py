"""The models `model.name` names: PyG's own classes from `torch_geometric.nn.models`, not re-written here
(GINE: PyG's GIN with GINEConv layers, models/gine.py).

Each takes the common knobs (model.hidden, model.num_layers, model.dropout) as PyG's BasicGNN does
(`in_channels, hidden_channels, num_layers, out_channels, dropout`), and `model.kwargs` for the rest:
the model's own arguments (jk, norm, act, ...; GAT's heads, concat, v2) and those of its layers
(GATConv's negative_slope, GINConv's train_eps, SAGEConv's aggr, ...), which BasicGNN passes on to every
layer. The valid names are read from PyG's signatures, so a PyG upgrade that adds an argument is taken.
The table of the built-in models (names, PyG's classes, defaults, refusals) is train/builtin_models.py.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

import torch_geometric.nn.conv as convs
from torch import nn
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.models import GAT

from train.builtin_models import BUILTINS, Builtin
from train.errors import UserError

# The constructor arguments the workflow passes itself (train/models/spec.py), never through model.kwargs.
COMMON = {"in_channels": "the graph's features", "hidden_channels": "model.hidden", "num_layers": "model.num_layers",
          "out_channels": "the graph's classes", "dropout": "model.dropout"}
# channel_list: MLP's other form; nn: GINConv's MLP; meta, num_relations: a heterogeneous graph's (its HeteroMeta)
_GRAPHS_OWN = {"meta", "num_relations"}
_NOT_ARGUMENTS = {"self", "args", "kwargs", "channel_list", "nn"} | _GRAPHS_OWN


@functools.cache  # one class, however often it is asked for
def out_heads_gat() -> type[nn.Module]:
    """PyG's GAT with `out_heads`: the output layer's number of heads, averaged (Velickovic et al. use 8 heads,
    then 1 output head on Cora; PyG's GAT repeats `heads` in every layer). Only init_conv differs."""
    class OutHeadsGAT(GAT):
        def __init__(self, *args, out_heads: int, **kwargs):
            self.out_heads = out_heads  # read by init_conv, which GAT's constructor calls
            super().__init__(*args, **kwargs)

        def init_conv(self, in_channels, out_channels, **kwargs):
            if getattr(self, "_is_conv_to_out", False):  # the layer that gives out_channels (no jk)
                kwargs["heads"] = self.out_heads
            return super().init_conv(in_channels, out_channels, **kwargs)

    OutHeadsGAT.__qualname__ = OutHeadsGAT.__name__ = "OutHeadsGAT"
    return OutHeadsGAT


def parameter_names(function) -> tuple[set[str], bool]:
    """The named parameters of `function` and whether it takes **kwargs."""
    params = inspect.signature(function).parameters.values()
    named = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return named, any(p.kind == p.VAR_KEYWORD for p in params)


def conv_classes(builtin: Builtin) -> list[type]:
    """The layer classes (in its `conv_module`: PyG's layers, or the workflow's own) whose arguments the built-in
    model passes on."""
    module = convs if builtin.conv_module == convs.__name__ else importlib.import_module(builtin.conv_module)
    return [getattr(module, name) for name in builtin.convs]


def valid_keywords(builtin: Builtin) -> list[str]:
    """Every model.kwargs name the built-in model takes: its own, its layers' and their MessagePassing base's."""
    names, _ = parameter_names(builtin.model_class().__init__)
    names |= set(builtin.own)
    for conv in conv_classes(builtin):
        conv_names, passes_on = parameter_names(conv.__init__)
        names |= conv_names
        if passes_on:
            names |= parameter_names(MessagePassing.__init__)[0]
    return sorted(names - set(COMMON) - _NOT_ARGUMENTS)


def refuse_common(kwargs: dict[str, Any]) -> None:
    """`UserError` for a model.kwargs entry the workflow passes itself (COMMON), for any model."""
    common = [key for key in kwargs if key in COMMON]
    if common:
        raise UserError(f"model.kwargs.{common[0]} is passed by the workflow itself (from {COMMON[common[0]]}); "
                        "remove it from model.kwargs.")


def _edge_hint(key: str) -> str:
    """For edge_dim given to a model that reads no edge features: the built-ins that do."""
    if key != "edge_dim":
        return ""
    readers = [name for name, builtin in BUILTINS.items() if key in valid_keywords(builtin) and not builtin.hetero_only]
    return f" The built-in models that read edge features (edge_dim): {', '.join(readers)}."


def builtin_arguments(name: str, kwargs: dict[str, Any], shown: str = "") -> dict[str, Any]:
    """The built-in model's keyword arguments beyond the common ones; `UserError` naming a bad one.
    `shown`: how the model is named in messages (a user's subclass that keeps PyG's constructor)."""
    builtin = BUILTINS[name]
    shown = shown or f"{name} ({builtin.class_name})"
    refuse_common(kwargs)
    valid = valid_keywords(builtin)
    unknown = [key for key in kwargs if key not in valid and not (builtin.hetero_only and key in _GRAPHS_OWN)]
    if unknown:
        raise UserError(f"model.kwargs.{unknown[0]} is not an argument of model.name={shown}; "
                        f"valid model.kwargs: {', '.join(valid)}.{_edge_hint(unknown[0])}")
    given = [key for key in sorted(_GRAPHS_OWN) if key in kwargs]
    if builtin.hetero_only and given:
        raise UserError(f"model.kwargs.{given[0]} cannot be given to model.name={shown}: the model has one relation "
                        "per edge type of the graph, read from the graph itself; remove it from model.kwargs.")
    if builtin.hetero_only and "edge_dim" in kwargs:
        raise UserError(f"model.kwargs.edge_dim cannot be given to model.name={shown}: a heterogeneous graph's model "
                        "reads each edge's type, not edge features (edge_attr); remove model.kwargs.edge_dim.")
    for key, what in builtin.required.items():
        if kwargs.get(key) is None:
            raise UserError(f"model.name={shown} needs model.kwargs.{key}: {what}.")
    for key, (value, why) in builtin.refused.items():
        if kwargs.get(key) == value:
            raise UserError(f"model.kwargs.{key}={value!r} cannot train model.name={shown} with sampled batches: "
                            f"{why}.")
    return dict(kwargs)
