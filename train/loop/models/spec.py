"""One model, resolved: its class and every constructor argument, to build it, record it and compare it.

The workflow builds every model alike, as PyG's BasicGNN takes its arguments, all by name:

    cls(in_channels=<features>, hidden_channels=model.hidden, num_layers=model.num_layers,
        out_channels=<classes>, dropout=model.dropout, **model.kwargs)

after `torch.manual_seed(trainer.seed)`, so every rank starts from the same weights. A checkpoint
records `describe()` (class and arguments); resuming with another is refused naming what differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from train.config import ModelConfig
from train.errors import UserError
from train.loop.models.builtin import BUILTINS, builtin_arguments, out_heads_gat
from train.loop.models.edges import check_edge_dim
from train.loop.models.step import reads_graph
from train.loop.models.user import import_model_class, user_arguments


@dataclass(frozen=True)
class ModelSpec:
    name: str  # model.name
    cls: type[nn.Module]
    config: ModelConfig
    kwargs: dict[str, Any]  # checked model.kwargs, with the built-in's defaults

    def arguments(self, in_channels: int, out_channels: int) -> dict[str, Any]:
        return {"in_channels": in_channels, "hidden_channels": self.config.hidden,
                "num_layers": self.config.num_layers, "out_channels": out_channels,
                "dropout": self.config.dropout, **self.kwargs}

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

    def describe(self, in_channels: int, out_channels: int) -> dict[str, Any]:
        """What a checkpoint records of the model: its class and its constructor's arguments."""
        return {"name": self.name, "class": self.class_path, "arguments": self.arguments(in_channels, out_channels)}

    def build(self, in_channels: int, out_channels: int, seed: int | None = None, context: str = "") -> nn.Module:
        """The model; `UserError` naming the model when its constructor refuses the arguments
        (`context`: where the sizes came from, for the message)."""
        if seed is not None:
            torch.manual_seed(seed)  # same seed, same initial weights on every rank (the seed's manual_seed(12345))
        arguments = self.arguments(in_channels, out_channels)
        try:
            model = self.cls(**arguments)
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


def build_model(config: ModelConfig, in_channels: int, out_channels: int, seed: int) -> nn.Module:
    """The model a run trains: same seed, same initial weights on every rank."""
    return resolve(config).build(in_channels, out_channels, seed)


def parameter_count(config: ModelConfig, in_channels: int, out_channels: int) -> int:
    """The model's real number of parameters, built on the meta device (no memory, no initialisation cost)."""
    spec = resolve(config)
    try:
        with torch.device("meta"):
            model = spec.build(in_channels, out_channels)
    except UserError:
        model = spec.build(in_channels, out_channels)  # a constructor that cannot run on meta tensors
    return sum(p.numel() for p in model.parameters())
