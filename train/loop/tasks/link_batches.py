"""Link prediction's batches, with the contract of PyG's `LinkNeighborLoader`, from the project's own sampler.

A batch of B positive edges (src, dst) and their negatives, each batch's negatives drawn from a generator of its
own (seeded by the run's seed, the epoch and the batch's first edge), so a resumed run draws the same:

- `neg_sampling=binary`: B * task.neg_ratio random node pairs; the batch carries `edge_label_index` [2, B + B * r]
  (positives first) and `edge_label` (1, then 0), in local node ids;
- `neg_sampling=triplet`: B * r random targets, r per positive's source; the batch carries `src_index`,
  `dst_pos_index` [B] and `dst_neg_index` ([B] for r = 1, else [B, r]).

Every endpoint is a seed of one node sample (the run's one sampler, seeded per batch like the node task's
batches): the batch's first `batch_size` nodes are the endpoints, in id order. The seed edges are then taken out
of the batch's message-passing edges (in both directions where the graph is undirected), so the model never
reads the edge it predicts; the per-hop edge counts (model.trim) are recounted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from train.graph.edge_keys import edge_keys
from train.graph.edge_rows import EDGE_VALUES
from train.graph.sampling.device_plan import SamplingPlan
from train.graph.seeds import derive_seed


@dataclass(frozen=True)
class Negatives:
    """How negatives are drawn: task.neg_sampling and task.neg_ratio, over `num_nodes` nodes."""

    mode: str  # binary | triplet
    ratio: int
    num_nodes: int

    def draw(self, positives: Tensor, seed: int) -> Tensor:
        """binary: [2, B * r] random pairs; triplet: [B * r] random targets (r per positive, in order)."""
        generator = torch.Generator().manual_seed(seed)
        count = positives.size(1) * self.ratio
        shape = (2, count) if self.mode == "binary" else (count,)
        return torch.randint(0, self.num_nodes, shape, generator=generator)


def pairs_and_labels(batch: Data) -> tuple[Tensor, Tensor]:
    """The batch's scored pairs (local ids) and labels, from either contract: positives first, then negatives."""
    if "edge_label_index" in batch:
        return batch.edge_label_index, batch.edge_label
    dst_neg = batch.dst_neg_index.reshape(batch.src_index.numel(), -1)
    sources = batch.src_index.repeat_interleave(dst_neg.size(1))
    pairs = torch.cat([torch.stack([batch.src_index, batch.dst_pos_index]),
                       torch.stack([sources, dst_neg.reshape(-1)])], dim=1)
    labels = torch.cat([torch.ones(batch.src_index.numel(), device=pairs.device),
                        torch.zeros(sources.numel(), device=pairs.device)])
    return pairs, labels


def sample_around(sampling: SamplingPlan, nodes: Tensor, fanouts, seed: int) -> Data:
    """One batch whose seeds are `nodes` (in order), from the run's one sampler, seeded by `seed`. The sampler is
    called directly, not through a DataLoader's iterator: that would draw a seed from the global generator, which
    the training step's dropout draws from."""
    loader = sampling.loader(nodes, fanouts, max(nodes.numel(), 1), seed=seed, epoch=0)
    out = loader.collate_fn(torch.arange(nodes.numel()))
    return out if loader.filter_per_worker else loader.filter_fn(out)


def without_edges(batch: Data, pairs: Tensor, undirected: bool) -> Data:
    """The batch with its message-passing edges between any of `pairs` (global ids) removed (both directions where
    `undirected`); each edge's values and ids, and the per-hop edge counts, follow."""
    if batch.edge_index.numel() == 0:
        return batch
    size = int(batch.n_id.max()) + 1 if batch.n_id.numel() else 1
    size = max(size, int(pairs.max()) + 1)
    ends = batch.n_id[batch.edge_index]  # [2, E] global ids
    removed = edge_keys(pairs, size)
    if undirected:
        removed = torch.cat([removed, edge_keys(pairs.flip(0), size)])
    keep = ~torch.isin(edge_keys(ends, size), removed.to(ends.device))
    if bool(keep.all()):
        return batch
    batch.edge_index = batch.edge_index[:, keep]
    for name in ("e_id", *EDGE_VALUES):
        if name in batch:
            batch[name] = batch[name][keep]
    if "num_sampled_edges" in batch:
        hops = torch.tensor(batch.num_sampled_edges, dtype=torch.long)
        hop = torch.repeat_interleave(torch.arange(hops.numel()), hops)
        batch.num_sampled_edges = torch.bincount(hop[keep.cpu()], minlength=hops.numel()).tolist()
    return batch


@dataclass(frozen=True)
class LinkBatches:
    """Batches of positive edges with their negatives, sampled around their endpoints."""

    sampling: SamplingPlan
    positives: Tensor  # [2, E]: the training edges the seeds index
    negatives: Negatives
    undirected: bool
    seed: int  # trainer.seed

    def batch(self, ids: Tensor, fanouts, epoch: int) -> Data:
        """The batch of training edges `ids` (positions in `positives`) in `epoch`."""
        first = int(ids[0])
        positives = self.positives[:, ids]
        drawn = self.negatives.draw(positives, derive_seed(self.seed, 4, epoch, first))
        nodes, local = torch.unique(torch.cat([positives.reshape(-1), drawn.reshape(-1)]), return_inverse=True)
        batch = sample_around(self.sampling, nodes, fanouts, derive_seed(self.seed, 5, epoch, first))
        batch = without_edges(batch, positives, self.undirected)
        count = positives.size(1)
        src, dst, rest = local[:count], local[count : 2 * count], local[2 * count :]
        if self.negatives.mode == "binary":
            batch.edge_label_index = torch.cat([torch.stack([src, dst]), rest.view(2, -1)], dim=1)
            batch.edge_label = torch.cat([torch.ones(count), torch.zeros(rest.numel() // 2)])
        else:
            batch.src_index, batch.dst_pos_index = src, dst
            batch.dst_neg_index = rest if self.negatives.ratio == 1 else rest.view(count, -1)
        batch.num_positives = count
        return batch

    def epoch(self, ids: Tensor, fanouts, batch_size: int, epoch: int) -> Iterator[Data]:
        for chunk in ids.split(batch_size):
            yield self.batch(chunk, fanouts, epoch)
