"""Node classification (`task.name=node`, the default): the seeds are the training nodes, each batch their sampled
neighbourhoods, the loss and counts those of the graph's labels (train/loop/targets.py: one class or several tasks
per node), the figures those of train/loop/evaluate.py."""

from __future__ import annotations

from collections.abc import Iterator

from torch import Tensor, nn
from torch_geometric.data import Data

from train.graph.sampling.device_plan import SamplingPlan
from train.graph.seeds import derive_seed
from train.graph.typed_meta import graph_meta
from train.loop.evaluate import evaluate
from train.loop.targets import targets_for
from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.timing import PhaseTimer
from train.models import ModelSpec, ModelStep, edge_inputs, hop_counts


class NodeTask(Task):
    """Each training node a seed; the model's logits of the seeds against their labels."""

    name = "node"
    seed_is_one_row = True

    def __init__(self, parts: TaskParts):
        super().__init__(parts)
        self.targets = targets_for(self.form, self.data)  # one class or several tasks per node: loss and scores

    def build_model(self, spec: ModelSpec, width: int) -> nn.Module:
        return spec.build(width, self.form.num_classes(self.data), self.config.trainer.seed, meta=graph_meta(self.data))

    def describe_model(self, spec: ModelSpec, width: int) -> dict:
        return spec.describe(width, self.form.num_classes(self.data), meta=graph_meta(self.data))

    def epoch_items(self) -> Tensor:
        return self.form.split_nodes(self.data, "train")

    def batches(self, seeds: Tensor, epoch: int, sampling: SamplingPlan, step: ModelStep,
                timer: PhaseTimer) -> Iterator[Data]:
        cfg = self.config.sampler
        if not step.uses_graph:  # a feature-only model (the MLP) needs no neighbours
            for chunk in seeds.split(cfg.batch_size):
                with timer.phase("gather"):
                    batch = self.form.feature_batch(self.data, chunk)
                yield batch
            return
        loader = sampling.loader(seeds, cfg.num_neighbors, cfg.batch_size,
                                 seed=derive_seed(self.config.trainer.seed, 1), epoch=epoch)  # the run's one sampler
        for batch in timer.iterate(timer.wrap_loader(loader), "sample"):
            with timer.phase("gather"):
                batch = sampling.complete(batch, self.device)
            yield batch

    def forward(self, ddp: nn.Module, batch: Data) -> BatchResult:
        out = ddp(batch.x, batch.edge_index, *hop_counts(batch, self.config.model),
                  **edge_inputs(batch))[: batch.batch_size]
        target = batch.y[: batch.batch_size]
        return BatchResult(self.targets.loss(out, target), out, target, batch.batch_size)

    def counts(self, result: BatchResult) -> tuple[int, int]:
        return self.targets.counts(result.logits.detach(), result.target)

    def evaluate(self, step: ModelStep, model: nn.Module, sampling: SamplingPlan) -> dict[str, float]:
        return evaluate(step, self.data, self.config, self.env, self.device, sampling)
