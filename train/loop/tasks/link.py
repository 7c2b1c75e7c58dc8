"""Link prediction (`task.name=link`): does an edge join two nodes?

The split (train/graph/link_split.py): PyG's RandomLinkSplit of the graph's edges, or the dataset's own, made where
the graph is loaded (tasks.prepared_graph) and carried by it, so a node shares it with its graph. The seeds are
the training edges, reshuffled and sharded over the ranks each epoch as nodes are for node classification; each
batch samples around both endpoints of its edges and of their negatives, with the seed edges taken out of its
message-passing edges (train/loop/tasks/link_batches.py). The model: any model of the plug-in as the encoder (its
out_channels: task.embedding), and a head that scores a pair of embeddings (task.head: dot, or an MLP of their
elementwise product), both in the model's state_dict, so checkpoints and resume hold them. The loss: binary
cross-entropy with logits over the positives and the negatives.

The evaluation scores each split's pairs (each rank its share, in chunks of sampler.eval_batch_size pairs). With
eval.mode=full the endpoints' embeddings are exact: train/loop/evaluate.py's LayerWisePass computes the encoder's
hidden layers once per evaluation over the message-passing graph's full neighbourhoods (each rank its shard), then
the last layer for each chunk's endpoints, so the scores are the encoder's on the whole graph, whatever the world
size or the chunks. With eval.mode=sampled, or an encoder without the per-layer API (`eval_note` says why), they
come from a sample around the chunk's endpoints with eval.fanouts (default: sampler.num_neighbors). The figures:
AUC and AP over all ranks' pairs, and MRR and Hits@K where the split gives each positive its own negatives
(train/loop/link_metrics.py); the accuracy reads a logit above 0 as an edge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from train.graph.link_split import EdgeSplit, split_of
from train.graph.sampling.device_plan import SamplingPlan
from train.graph.seeds import derive_seed, rank_shard
from train.loop.evaluate import LayerWisePass
from train.loop.link_metrics import LinkTally, figures
from train.loop.targets import SPLITS
from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.tasks.link_batches import LinkBatches, Negatives, pairs_and_labels, sample_around
from train.loop.timing import PhaseTimer
from train.models import ModelSpec, ModelStep, edge_inputs, hop_counts, layerwise


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
        self.split = split_of(self.data)  # made where the graph was loaded (the graph: the training edges)
        task = self.config.task
        self.negatives = Negatives(task.neg_sampling, task.neg_ratio, int(self.data.num_nodes))

    def build_model(self, spec: ModelSpec, width: int) -> nn.Module:
        encoder = spec.build(width, self.config.task.embedding, self.config.trainer.seed)
        return LinkModel(encoder, HEADS[self.config.task.head](self.config.task.embedding))

    def describe_model(self, spec: ModelSpec, width: int) -> dict:
        return {**spec.describe(width, self.config.task.embedding), "head": self.config.task.head}

    @classmethod
    def model_from_record(cls, spec: ModelSpec, in_channels, out_channels: int, meta, description: dict) -> nn.Module:
        return LinkModel(spec.build(in_channels, out_channels), HEADS[description["head"]](out_channels))

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
    def _parts(self, split: EdgeSplit) -> list[Tensor]:
        """This rank's share of `split`, a chunk's ids at a time: of its pairs (positives and negatives) where the
        split has no ranked negatives, else of its positives, each scored with its own negatives."""
        size, rank, world = self.config.sampler.eval_batch_size, self.env.rank, self.env.world_size
        if split.ranked_negatives is None:
            count, per_chunk = split.labels.numel(), size
        else:
            count, per_chunk = split.positives.size(1), max(1, size // (split.ranked_negatives.size(1) + 1))
        return list(rank_shard(torch.arange(count), rank, world).split(per_chunk))

    @staticmethod
    def _chunk(split: EdgeSplit, positives: Tensor, part: Tensor) -> tuple[Tensor, Tensor, int]:
        """(pairs, labels, ranked positives) of the ids `part` of `split` (`_parts`): its pairs and labels, or its
        `positives` (split.positives, taken once), then each one's own negatives."""
        ranked = split.ranked_negatives
        if ranked is None:
            return split.pairs[:, part], split.labels[part], 0
        sources = positives[0, part].repeat_interleave(ranked.size(1))
        pairs = torch.cat([positives[:, part], torch.stack([sources, ranked[part].reshape(-1)])], dim=1)
        labels = torch.cat([torch.ones(part.numel()), torch.zeros(sources.numel())])
        return pairs, labels, part.numel()

    def _sampled_embeddings(self, step: ModelStep, sampling: SamplingPlan, nodes: Tensor, seed: int) -> Tensor:
        """The encoder's rows of `nodes` on a sample around them with eval.fanouts (none for a feature-only model)."""
        fanouts = self._fanouts(step, self.config.eval.fanouts or self.config.sampler.num_neighbors)
        batch = sample_around(sampling, nodes, fanouts, seed)
        batch = sampling.complete(batch, self.device).to(self.device, non_blocking=True)
        return step(batch.x, batch.edge_index, *hop_counts(batch, self.config.model), **edge_inputs(batch))

    def _rounds(self, parts: list[Tensor], exact: LayerWisePass | None) -> int:
        """How many chunks this rank runs: its own, or in the exact pass the most of any rank's (`last_rows` is
        collective: a rank out of pairs still serves the others' requests)."""
        if exact is None:
            return len(parts)
        rounds = torch.tensor([len(parts)], device=self.device)
        dist.all_reduce(rounds, op=dist.ReduceOp.MAX)
        return int(rounds)

    def _split_scores(self, step: ModelStep, head: nn.Module, sampling: SamplingPlan, number: int,
                      exact: LayerWisePass | None) -> Iterator[tuple[Tensor, Tensor, int]]:
        """(scores on the host, labels, ranked positives) of each chunk of this rank's share of split `number`."""
        split = getattr(self.split, SPLITS[number])
        parts, positives = self._parts(split), split.positives
        # sampled: the ranks' shares differ, so sharded rows are fetched until all are done (the exact pass agrees
        # its rounds and ends its own sessions)
        with sampling.fetch_session() if exact is None else contextlib.nullcontext():
            yield from self._chunk_scores(step, head, sampling, number, exact, split, parts, positives)

    def _chunk_scores(self, step: ModelStep, head: nn.Module, sampling: SamplingPlan, number: int,
                      exact: LayerWisePass | None, split: EdgeSplit, parts: list[Tensor],
                      positives: Tensor) -> Iterator[tuple[Tensor, Tensor, int]]:
        for start in range(self._rounds(parts, exact)):
            if start >= len(parts):
                exact.last_rows(torch.empty(0, dtype=torch.long))
                continue
            pairs, labels, ranked = self._chunk(split, positives, parts[start])
            nodes, local = torch.unique(pairs.reshape(-1), return_inverse=True)
            if exact is not None:
                z = exact.last_rows(nodes).to(self.device)
            else:
                seed = derive_seed(self.config.trainer.seed, 2, number, self.env.rank, start)
                z = self._sampled_embeddings(step, sampling, nodes, seed)
            local = local.view(2, -1).to(self.device)
            yield head(z[local[0]], z[local[1]]).float().cpu(), labels, ranked

    def _exact_pass(self, step: ModelStep, sampling: SamplingPlan) -> LayerWisePass | None:
        """The hidden layers of the exact pass, once per evaluation, where eval.mode=full and the encoder has the
        per-layer API (else None: evaluated on sampled neighbourhoods, as `eval_note` says)."""
        api, _why_not = layerwise(step)
        if self.config.eval.mode != "full" or api is None:
            return None
        return LayerWisePass(api, self.graph, self.config, self.env, self.device, sampling)

    @torch.no_grad()
    def evaluate(self, step: ModelStep, model: nn.Module, sampling: SamplingPlan) -> dict[str, float]:
        was_training = model.training
        model.eval()
        step.eval()
        tallies = {split: LinkTally() for split in SPLITS}
        counts = torch.zeros(2 * len(SPLITS), dtype=torch.float64)  # correct, scored of each split
        try:
            exact = self._exact_pass(step, sampling)
            for number, name in enumerate(SPLITS):
                for scores, labels, ranked in self._split_scores(step, model.head, sampling, number, exact):
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
