"""Link prediction (`task.name=link`): does an edge join two nodes?

The split (train/graph/edge_split.py): PyG's RandomLinkSplit of the graph's edges, or the dataset's own, made where
the graph is loaded (tasks.prepared_graph) and carried by it, so a node shares it with its graph. The seeds are
the training edges, reshuffled and sharded over the ranks each epoch as nodes are for node classification; each
batch samples around both endpoints of its edges and of their negatives, with the seed edges taken out of its
message-passing edges (train/loop/tasks/link_batches.py). The model: any model of the plug-in as the encoder (its
out_channels: task.embedding), and a head that scores a pair of embeddings (task.head: dot, or an MLP of their
elementwise product), both in the model's state_dict, so checkpoints and resume hold them. The loss: binary
cross-entropy with logits over the positives and the negatives.

The evaluation scores each split's pairs (each rank its share, in chunks of sampler.eval_batch_size pairs)
on embeddings of the endpoints sampled with eval.fanouts (default: sampler.num_neighbors; -1 for every
neighbour, which is exact), and gives AUC and AP over all ranks' pairs, and MRR and Hits@K where the split gives
each positive its own negatives (train/loop/link_metrics.py); the accuracy reads a logit above 0 as an edge.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from train.graph.edge_split import EdgeSplit, link_split
from train.graph.epoch_split import derive_seed, rank_shard
from train.graph.sampling_plan import SamplingPlan
from train.loop.link_metrics import LinkTally, figures
from train.loop.models import ModelSpec, ModelStep, edge_inputs, hop_counts
from train.loop.targets import SPLITS
from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.tasks.link_batches import LinkBatches, Negatives, pairs_and_labels, sample_around
from train.loop.timing import PhaseTimer


class DotHead(nn.Module):
    """An edge's logit: the dot product of its endpoints' embeddings (GAE's decoder). No parameters."""

    def forward(self, source: Tensor, target: Tensor) -> Tensor:
        return (source * target).sum(dim=-1)


class MlpHead(nn.Module):
    """An edge's logit: a two-layer MLP of the elementwise product of its endpoints' embeddings (symmetric)."""

    def __init__(self, width: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, source: Tensor, target: Tensor) -> Tensor:
        return self.mlp(source * target).squeeze(-1)


HEADS = {"dot": lambda width: DotHead(), "mlp": MlpHead}


class LinkModel(nn.Module):
    """What a link run trains and saves: the plug-in's model (`encoder`) and the `head`, one state_dict."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder, self.head = encoder, head


class LinkStep(nn.Module):
    """What DDP wraps: the encoder through `ModelStep` on a batch, then the head on the batch's pairs (local ids),
    so every parameter takes part in the forward. Without pairs (the buckets' settling pass) it scores node 0
    with itself."""

    def __init__(self, step: ModelStep, head: nn.Module):
        super().__init__()
        self.step, self.head = step, head

    def forward(self, x: Tensor, edge_index: Tensor | None = None, num_sampled_nodes: list[int] | None = None,
                num_sampled_edges: list[int] | None = None, edge_attr: Tensor | None = None,
                edge_weight: Tensor | None = None, pairs: Tensor | None = None) -> Tensor:
        z = self.step(x, edge_index, num_sampled_nodes, num_sampled_edges, edge_attr, edge_weight)
        if pairs is None:
            pairs = torch.zeros(2, 1, dtype=torch.long, device=z.device)
        return self.head(z[pairs[0]], z[pairs[1]])


class LinkTask(Task):
    """Edges as seeds, with negatives; AUC, AP (and MRR, Hits@K) as the figures."""

    name = "link"

    def __init__(self, parts: TaskParts):
        super().__init__(parts)
        self.split = link_split(self.data)  # made where the graph was loaded (the graph: the training edges)
        task = self.config.task
        self.negatives = Negatives(task.neg_sampling, task.neg_ratio, int(self.data.num_nodes))

    def build_model(self, spec: ModelSpec, width: int) -> nn.Module:
        encoder = spec.build(width, self.config.task.embedding, self.config.trainer.seed)
        return LinkModel(encoder, HEADS[self.config.task.head](self.config.task.embedding))

    def describe_model(self, spec: ModelSpec, width: int) -> dict:
        return {**spec.describe(width, self.config.task.embedding), "head": self.config.task.head}

    def encoder(self, model: nn.Module) -> nn.Module:
        return model.encoder

    def ddp_module(self, step: ModelStep, model: nn.Module) -> nn.Module:
        return LinkStep(step, model.head)

    # ---- training -----------------------------------------------------------------------------
    def epoch_items(self) -> Tensor:
        return torch.arange(self.split.train.size(1))

    def _fanouts(self, step: ModelStep, fanouts) -> list[int]:
        return list(fanouts) if step.uses_graph else []  # a feature-only model: the endpoints alone

    def batches(self, seeds: Tensor, epoch: int, sampling: SamplingPlan, step: ModelStep,
                timer: PhaseTimer) -> Iterator[Data]:
        cfg = self.config.sampler
        made = LinkBatches(sampling, self.split.train, self.negatives, self.split.undirected, self.config.trainer.seed)
        fanouts = self._fanouts(step, cfg.num_neighbors)
        for ids in seeds.split(cfg.batch_size):
            with timer.phase("sample"):
                batch = made.batch(ids, fanouts, epoch)
            with timer.phase("gather"):
                batch = sampling.complete(batch, self.device)
            yield batch

    def forward(self, ddp: nn.Module, batch: Data) -> BatchResult:
        pairs, labels = pairs_and_labels(batch)
        scores = ddp(batch.x, batch.edge_index, *hop_counts(batch, self.config.model), **edge_inputs(batch),
                     pairs=pairs)
        labels = labels.to(scores.device, scores.dtype)
        return BatchResult(F.binary_cross_entropy_with_logits(scores, labels), scores, labels, batch.num_positives)

    def counts(self, result: BatchResult) -> tuple[int, int]:
        return int(((result.logits.detach() > 0) == (result.target > 0.5)).sum()), result.target.numel()

    # ---- evaluation ---------------------------------------------------------------------------
    def eval_note(self, step: ModelStep) -> str:
        return ("link prediction is evaluated on sampled neighbourhoods of each pair's endpoints (eval.fanouts, "
                "default sampler.num_neighbors; -1 for every neighbour: exact)")

    def _chunks(self, split: EdgeSplit) -> Iterator[tuple[Tensor, Tensor, int]]:
        """(pairs, labels, ranked positives) of this rank's share of `split`, a chunk at a time: the positives
        and negatives of a split without ranked negatives, else positives, each followed by its own negatives."""
        size, rank, world = self.config.sampler.eval_batch_size, self.env.rank, self.env.world_size
        if split.ranked_negatives is None:
            pairs, labels = split.pairs, split.labels
            for part in rank_shard(torch.arange(labels.numel()), rank, world).split(size):
                yield pairs[:, part], labels[part], 0
            return
        ranked = split.ranked_negatives
        positives = split.positives
        per_chunk = max(1, size // (ranked.size(1) + 1))
        for part in rank_shard(torch.arange(positives.size(1)), rank, world).split(per_chunk):
            sources = positives[0, part].repeat_interleave(ranked.size(1))
            pairs = torch.cat([positives[:, part], torch.stack([sources, ranked[part].reshape(-1)])], dim=1)
            labels = torch.cat([torch.ones(part.numel()), torch.zeros(sources.numel())])
            yield pairs, labels, part.numel()

    def _scores(self, step: ModelStep, head: nn.Module, sampling: SamplingPlan, pairs: Tensor, seed: int) -> Tensor:
        nodes, local = torch.unique(pairs.reshape(-1), return_inverse=True)
        fanouts = self._fanouts(step, self.config.eval.fanouts or self.config.sampler.num_neighbors)
        batch = sample_around(sampling, nodes, fanouts, seed)
        batch = sampling.complete(batch, self.device).to(self.device, non_blocking=True)
        z = step(batch.x, batch.edge_index, *hop_counts(batch, self.config.model), **edge_inputs(batch))
        local = local.view(2, -1).to(self.device)
        return head(z[local[0]], z[local[1]])

    @torch.no_grad()
    def evaluate(self, step: ModelStep, model: nn.Module, sampling: SamplingPlan) -> dict[str, float]:
        was_training = model.training
        model.eval()
        step.eval()
        tallies = {split: LinkTally() for split in SPLITS}
        counts = torch.zeros(2 * len(SPLITS), dtype=torch.float64)  # correct, scored of each split
        try:
            for number, name in enumerate(SPLITS):
                for start, (pairs, labels, ranked) in enumerate(self._chunks(getattr(self.split, name))):
                    seed = derive_seed(self.config.trainer.seed, 2, number, self.env.rank, start)
                    scores = self._scores(step, model.head, sampling, pairs, seed).float().cpu()
                    tallies[name].add_pairs(scores, labels)
                    if ranked:
                        tallies[name].add_ranked(scores[:ranked], scores[ranked:].view(ranked, -1))
                    counts[2 * number] += int(((scores > 0) == (labels > 0.5)).sum())
                    counts[2 * number + 1] += labels.numel()
        finally:
            model.train(was_training)
            step.train(was_training)
        counts = counts.to(self.device)
        dist.all_reduce(counts)
        result = figures(tallies, self.device)
        if self.env.is_main:
            for note in result.notes:  # why a figure is NaN
                print(note, flush=True)
        accuracy = {f"{name}_acc": float(counts[2 * i] / counts[2 * i + 1]) if counts[2 * i + 1] else float("nan")
                    for i, name in enumerate(SPLITS)}
        return {**accuracy, **result.values}
