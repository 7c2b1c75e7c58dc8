"""The model of a run, as the loop sees it: built from `model.name` (train/loop/models/), called through
`ModelStep`, and given a sampled batch's per-hop counts when model.trim is on."""

from __future__ import annotations

from train.config import ModelConfig
from train.loop.models.layerwise import LayerWise, layerwise
from train.loop.models.spec import ModelSpec, build_model, parameter_count, resolve
from train.loop.models.step import ModelStep

__all__ = ["LayerWise", "ModelSpec", "ModelStep", "build_model", "hop_counts", "layerwise", "parameter_count",
           "resolve"]


def hop_counts(batch, config: ModelConfig) -> tuple[list[int] | None, list[int] | None]:
    """The batch's per-hop node and edge counts for `ModelStep.forward` when model.trim is on, else (None, None)."""
    if not config.trim:
        return None, None
    return getattr(batch, "num_sampled_nodes", None), getattr(batch, "num_sampled_edges", None)
