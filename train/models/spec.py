"""One model, resolved: its class and every constructor argument, to build it, record it and compare it.

The workflow builds every model alike, as PyG's BasicGNN takes its arguments, all by name:

    cls(in_channels=<features>, hidden_channels=model.hidden, num_layers=model.num_layers,
        out_channels=<classes>, dropout=model.dropout, **model.kwargs)

after `torch.manual_seed(trainer.seed)`, so every rank starts from the same weights. A checkpoint
records `describe()` (class and arguments); resuming with another is refused naming what differs.

On a heterogeneous graph (`meta`: its train/graph/typed_meta.py HeteroMeta) the model reads a typed batch:
* rgcn, rgat (models/relational.py) take the meta themselves and read (x, edge_index, edge_type);
* hetero-sage, hetero-gat (models/heteroconv.py), and a user's module whose forward takes (x_dict,
  edge_index_dict), are dict models, wrapped in models/hetero.py's `TypedModel` (a user's gets in_channels as
  {node type: width}, and the metadata when its constructor takes `metadata`);
* any other model that reads the graph (the homogeneous built-ins, a user's forward(x, edge_index)) goes through
  PyG's `to_hetero`; a feature-only model (mlp) reads the seeds' own features, as on any graph.
Each is then run once on a tiny batch of the graph's types (lazy layers take their shapes before DDP wraps it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch_geometric.nn import to_hetero

from train.config import ModelConfig
from train.errors import UserError
from train.graph.typed_meta import HeteroMeta
from train.models.builtin import BUILTINS, builtin_arguments, out_heads_gat
from train.models.edges import check_edge_dim
from train.models.hetero import TypedModel, TypeInputs, initialise_lazy
from train.models.step import forward_parameters, reads_graph
from train.models.user import import_model_class, user_arguments


@dataclass(frozen=True)
class ModelSpec:
    name: str  # model.name
    cls: type[nn.Module]
    config: ModelConfig
    kwargs: dict[str, Any]  # checked model.kwargs, with the built-in's defaults

    def arguments(self, in_channels: Any, out_channels: int) -> dict[str, Any]:
        return {"in_channels": in_channels, "hidden_channels": self.config.hidden,
                "num_layers": self.config.num_layers, "out_channels": out_channels,
                "dropout": self.config.dropout, **self.kwargs}

    @property
    def takes_dicts(self) -> bool:
        """Its forward takes (x_dict, edge_index_dict): a model of a heterogeneous graph's per-type dicts."""
        return {"x_dict", "edge_index_dict"} <= forward_parameters(self.cls.forward)[0]

    @property
    def hetero_only(self) -> bool:
        """It trains on a heterogeneous graph only: a built-in of node and edge types, or a dict model."""
        builtin = BUILTINS.get(self.name)
        return builtin.hetero_only if builtin is not None else self.takes_dicts

    @property
    def reads_graph(self) -> bool:
        """Whether the model reads the graph (step.reads_graph on its class's forward), known before it is built."""
        return reads_graph(self.cls.forward)

    def check_edges(self, edge_width: int | None) -> None:
        """`UserError` unless model.kwargs.edge_dim (if set) is the width of the graph's edge features."""
        check_edge_dim(self.name, self.kwargs, edge_width)

    @property
    def class_path(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    def describe(self, in_channels: int, out_channels: int, meta: HeteroMeta | None = None) -> dict[str, Any]:
        """What a checkpoint records of the model: its class and its constructor's arguments (and the graph's types)."""
        described = {"name": self.name, "class": self.class_path,
                     "arguments": self.arguments(in_channels, out_channels)}
        return described if meta is None else {**described, "meta": meta.to_dict()}

    def build(self, in_channels: int, out_channels: int, seed: int | None = None, context: str = "",
              meta: HeteroMeta | None = None) -> nn.Module:
        """The model (for a heterogeneous graph's `meta`, one that reads its typed batches); `UserError` naming the
        model when its constructor refuses the arguments (`context`: where the sizes came from, for the message)."""
        if seed is not None:
            torch.manual_seed(seed)  # same seed, same initial weights on every rank (the seed's manual_seed(12345))
        if meta is None or not self.reads_graph:  # a feature-only model reads the seeds' own (padded) features alike
            if meta is None and self.hetero_only:
                homogeneous = ", ".join(name for name, builtin in BUILTINS.items() if not builtin.hetero_only)
                raise UserError(f"model.name={self.name} trains on a heterogeneous graph (node and edge types), and "
                                f"this graph has one node type; choose a model of homogeneous graphs ({homogeneous}), "
                                "or a heterogeneous graph (docs/models.md).")
            return self.construct(self.arguments(in_channels, out_channels), context)
        model = self.typed(out_channels, meta, context)
        initialise_lazy(model, meta, self.config.num_layers, self.name)
        return model

    def typed(self, out_channels: int, meta: HeteroMeta, context: str) -> nn.Module:
        """The model of a heterogeneous graph's typed batches (the module docstring's three ways)."""
        builtin = BUILTINS.get(self.name)
        if builtin is not None and builtin.not_to_hetero:
            typed = ", ".join(name for name, row in BUILTINS.items() if not row.not_to_hetero)
            raise UserError(f"model.name={self.name} cannot train on a heterogeneous graph through PyG's to_hetero: "
                            f"{builtin.not_to_hetero}; choose one of {typed}.")
        if "edge_type" in forward_parameters(self.cls.forward)[0]:  # rgcn, rgat: the meta is theirs
            return self.construct({**self.arguments(-1, out_channels), "meta": meta}, context)
        if self.takes_dicts and builtin is None:  # the user's dict model: each type's own features
            inputs = TypeInputs(meta, None, self.config.hidden)
            arguments = self.arguments(inputs.widths(), out_channels)
            if "metadata" in forward_parameters(self.cls.__init__)[0]:
                arguments["metadata"] = meta.metadata()
            return TypedModel(inputs, self.construct(arguments, context), self.name)
        inputs = TypeInputs.common(meta, self.config.hidden)
        if self.takes_dicts:  # hetero-sage, hetero-gat
            return TypedModel(inputs, self.construct({**self.arguments(inputs.width, out_channels), "meta": meta},
                                                     context), self.name)
        arguments = self.arguments(inputs.width, out_channels)
        if self.name == "gat":
            arguments.setdefault("add_self_loops", False)  # a relation's source and destination are other node sets
        return TypedModel(inputs, self.to_hetero(self.construct(arguments, context), meta), self.name,
                          shown=f"to_hetero({self.cls.__name__})")

    def to_hetero(self, model: nn.Module, meta: HeteroMeta) -> nn.Module:
        """PyG's to_hetero of `model`: one copy of its layers per relation, summed per destination type."""
        try:
            return to_hetero(model, meta.metadata(), aggr="sum")
        except Exception as exc:  # PyG traces the model's forward: a forward it cannot trace is named, no traceback
            raise UserError(f"model.name={self.name}: PyG's to_hetero could not turn {type(model).__name__} into a "
                            f"model of the graph's types: {type(exc).__name__}: {exc}") from None

    def construct(self, arguments: dict[str, Any], context: str) -> nn.Module:
        """`cls(**arguments)`; `UserError` naming the model when its constructor refuses them."""
        try:
            model = self.cls(**arguments)
        except UserError:
            raise
        except Exception as exc:  # the constructor is the user's (or PyG's) code: name it, no traceback
            shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
            where = f" {context}" if context else ""
            raise UserError(f"model.name={self.name}: {self.cls.__name__}({shown}) failed{where}: "
                            f"{type(exc).__name__}: {exc}") from None
        if not isinstance(model, nn.Module):
            raise UserError(f"model.name={self.name}: {self.cls.__name__}(...) returned a {type(model).__name__}, "
                            "not a torch.nn.Module.")
        return model


def resolve(config: ModelConfig) -> ModelSpec:
    """The model config.name names, with model.kwargs checked; `UserError` naming what is wrong."""
    if config.name in BUILTINS:
        builtin = BUILTINS[config.name]
        kwargs = {**builtin.defaults, **builtin_arguments(config.name, config.kwargs)}
        cls = out_heads_gat() if "out_heads" in kwargs else builtin.model_class()  # else PyG's class itself
        return ModelSpec(config.name, cls, config, kwargs)
    cls = import_model_class(config.name)
    return ModelSpec(config.name, cls, config, user_arguments(config.name, cls, config.kwargs))


def build_model(config: ModelConfig, in_channels: int, out_channels: int, seed: int,
                meta: HeteroMeta | None = None) -> nn.Module:
    """The model a run trains: same seed, same initial weights on every rank."""
    return resolve(config).build(in_channels, out_channels, seed, meta=meta)


def meta_model(config: ModelConfig, in_channels: int, out_channels: int, meta: HeteroMeta | None = None) -> nn.Module:
    """The model built on the meta device (no memory, no initialisation cost): what the memory plan counts and asks."""
    spec = resolve(config)
    try:
        with torch.device("meta"):
            return spec.build(in_channels, out_channels, meta=meta)
    except UserError:
        return spec.build(in_channels, out_channels, meta=meta)  # a constructor that cannot run on meta tensors


def parameter_count(config: ModelConfig, in_channels: int, out_channels: int, meta: HeteroMeta | None = None) -> int:
    """The model's real number of parameters."""
    return sum(p.numel() for p in meta_model(config, in_channels, out_channels, meta).parameters())
