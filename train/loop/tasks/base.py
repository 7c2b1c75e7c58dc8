"""The `Task` interface: what the training loop (train/loop/fit.py) asks of the task it trains for.

The loop owns what every task shares (DDP, the optimizer, per-step seeding, Join, the records, checkpoints);
a task answers the rest: the model it trains (an encoder from the plug-in, and a head where it has one), the
epoch's seeds and their batches, a batch's loss and counts, and the evaluation's figures.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch_geometric.data import Data

from train.cluster.distenv import DistEnv
from train.config import Config
from train.graph.form import GraphForm
from train.graph.sampling.device_plan import SamplingPlan
from train.graph.seeds import epoch_order, rank_shard
from train.loop.timing import PhaseTimer
from train.models import ModelSpec, ModelStep, layerwise


@dataclass(frozen=True)
class TaskParts:
    """What a task is built from: the run's config, this rank, the graph and its form."""

    config: Config
    env: DistEnv
    device: torch.device
    data: Data
    form: GraphForm


@dataclass(frozen=True)
class BatchResult:
    """A training batch's forward: the loss backward runs on, and what the epoch's counts read."""

    loss: Tensor
    logits: Tensor  # the scored outputs (the seeds' logits; a link batch's edge scores)
    target: Tensor  # what they are scored against
    seeds: int  # what the batch counts as: its seed nodes, or its positive edges


class Task(ABC):
    """One kind of training (its row in train/builtin_tasks.py names the class): what the loop asks of it.

    A subclass sets `name` (its `task.name`, the row's key) and answers the abstract methods; the loop owns the
    rest (DDP, the optimizer, seeding, Join, records, checkpoints). Node classification (`NodeTask`) and link
    prediction (`LinkTask`) are the two built in; CONTRIBUTING.md ("Adding a task") adds a third.

    Args:
        parts: the run's config, this rank's environment and device, the graph and its form (`TaskParts`).

    Example::

        class SmoothedNodeTask(NodeTask):
            name = "node-smoothed"

            def forward(self, ddp, batch):
                plain = super().forward(ddp, batch)
                loss = functional.cross_entropy(plain.logits, plain.target, label_smoothing=0.1)
                return BatchResult(loss, plain.logits, plain.target, plain.seeds)
    """

    name: str
    # Whether a batch of one seed can be one row of the model's output (a node: yes; an edge: its two ends at least):
    # a norm that cannot train on one row (batch norm) then needs the loop to leave such a batch out (train/loop/fit.py)
    seed_is_one_row = False

    def __init__(self, parts: TaskParts):
        self.config, self.env, self.device = parts.config, parts.env, parts.device
        self.data, self.form = parts.data, parts.form

    # ---- the model ----------------------------------------------------------------------------
    @abstractmethod
    def build_model(self, spec: ModelSpec, width: int) -> nn.Module:
        """The module the run trains.

        Args:
            spec: the resolved model (`model.name` and its arguments).
            width: the graph's feature width (the model's in_channels).

        Returns:
            The module checkpoints save (every parameter in its state_dict).
        """

    @abstractmethod
    def describe_model(self, spec: ModelSpec, width: int) -> dict:
        """What a checkpoint records of the model (a resume with another is refused)."""

    @classmethod
    def model_from_record(cls, spec: ModelSpec, in_channels, out_channels: int, meta, description: dict) -> nn.Module:
        """The model from a checkpoint's record alone (`describe_model`'s dict; train/loop/finished_run.py), as
        `build_model` builds it on the graph: the plug-in's model with the recorded widths and types."""
        return spec.build(in_channels, out_channels, meta=meta)

    def encoder(self, model: nn.Module) -> nn.Module:
        """The plug-in's model inside `model`: what `ModelStep` calls on a batch."""
        return model

    def ddp_module(self, step: ModelStep, model: nn.Module) -> nn.Module:
        """The module DDP wraps: every parameter of `model` takes part in its forward."""
        return step

    @property
    def graph(self) -> Data:
        """The graph batches are sampled from (the message-passing graph)."""
        return self.data

    # ---- training -----------------------------------------------------------------------------
    @abstractmethod
    def epoch_items(self) -> Tensor:
        """What an epoch goes over before its shuffle: the training nodes, or the training edges' ids."""

    def epoch_shard(self, epoch: int) -> Tensor:
        """This rank's part of the epoch's shuffle: every item once over all ranks."""
        order = epoch_order(self.epoch_items(), self.config.trainer.seed, epoch)
        return rank_shard(order, self.env.rank, self.env.world_size)

    @abstractmethod
    def batches(self, seeds: Tensor, epoch: int, sampling: SamplingPlan, step: ModelStep,
                timer: PhaseTimer) -> Iterator[Data]:
        """The batches of this rank's part of an epoch.

        Args:
            seeds: this rank's shard of the epoch's items (`epoch_shard`).
            epoch: the epoch, for the sampler's seed.
            sampling: where batches are sampled and gathered from (train/graph/sampling/device_plan.py).
            step: how a batch reaches the model (`step.uses_graph`: whether it needs neighbours).
            timer: the phases a batch's time is counted in (sample, gather).

        Returns:
            The batches, in order, on the host (or where the sampler put them).
        """

    @abstractmethod
    def forward(self, ddp: nn.Module, batch: Data) -> BatchResult:
        """A batch through the model.

        Args:
            ddp: the module DDP wraps (`ddp_module`).
            batch: one of `batches`, on the device.

        Returns:
            Its loss, the scored outputs, their targets and the seeds it counts as (`BatchResult`).
        """

    @abstractmethod
    def counts(self, result: BatchResult) -> tuple[int, int]:
        """(correct, scored) of a batch: what the epoch's train_acc sums."""

    # ---- evaluation ---------------------------------------------------------------------------
    def eval_note(self, step: ModelStep) -> str:
        """Why the evaluation samples although eval.mode=full ('' where it runs as asked): a model without the
        per-layer API of the exact pass (train/loop/evaluate.py's LayerWisePass, which both tasks use)."""
        return layerwise(step)[1] if self.config.eval.mode == "full" else ""

    @abstractmethod
    def evaluate(self, step: ModelStep, model: nn.Module, sampling: SamplingPlan) -> dict[str, float]:
        """The evaluation after an epoch; collective over all ranks.

        Args:
            step: how a batch reaches the model.
            model: the module `build_model` made (its weights as trained so far).
            sampling: where batches are sampled (eval.mode=sampled, or a model without the per-layer API).

        Returns:
            The val and test figures by name (e.g. val_acc, test_acc), the same on every rank.
        """
