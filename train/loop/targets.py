"""What the model's outputs are trained and scored against: one class per node, or several binary tasks per node.

The graph's labels decide (train/graph/labels.py: y of [N] or [N, T]); `targets_for` picks the kind once per
run, and the loop (train/loop/fit.py) and the evaluation (train/loop/evaluate.py) ask it, never y's shape:

- the loss of a batch: cross-entropy over the classes, or BCE-with-logits over the labelled tasks (a NaN task
  counts nothing, as OGB's examples train ogbn-proteins);
- the accuracy's counts of a batch (correct, scored): the argmax against the class, or each labelled task
  predicted positive where its logit is above 0;
- a split's figures from the logits of its nodes over all ranks: the accuracy (summed counts), and for several
  tasks the mean ROC-AUC over tasks, OGB's evaluator for ogbn-proteins (a task whose labelled nodes in the
  split are all of one class is left out). The ROC-AUC is exact: every rank's logits and labels of the split are
  gathered, and the rank-based AUC (ties share their mean rank) is computed from them on every rank, so it is
  the figure one process would get, whatever the world size. This holds the split's logits and labels
  (2 x nodes x tasks floats) on every rank while it is computed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from train.graph.form import GraphForm

SPLITS = ("val", "test")


class Tally:
    """One split's share on this rank: the accuracy's counts, and the logits and labels where the figures need
    them (several tasks)."""

    def __init__(self):
        self.correct, self.scored = 0, 0
        self.logits: list[Tensor] = []
        self.labels: list[Tensor] = []


class Targets(ABC):
    """One kind of labels: the loss, the accuracy's counts and a split's figures."""

    metric: str  # the figure that picks the best epoch: val_<metric> (train/loop/scores.py)

    @abstractmethod
    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        """The mean loss of a batch (what backward runs on)."""

    @abstractmethod
    def counts(self, logits: Tensor, labels: Tensor) -> tuple[int, int]:
        """(correct, scored) of a batch: what the accuracy sums."""

    def add(self, tally: Tally, logits: Tensor, labels: Tensor) -> None:
        """A batch of a split's nodes into the split's tally."""
        correct, scored = self.counts(logits, labels.to(logits.device))
        tally.correct += correct
        tally.scored += scored

    def figures(self, tallies: dict[str, Tally], device: torch.device) -> dict[str, float]:
        """{"val_acc", "test_acc", ...}, the same on every rank; collective over all ranks."""
        totals = torch.tensor([c for split in SPLITS for c in (tallies[split].correct, tallies[split].scored)],
                              dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        result = {}
        for i, split in enumerate(SPLITS):
            correct, scored = float(totals[2 * i]), float(totals[2 * i + 1])
            result[f"{split}_acc"] = correct / scored if scored else float("nan")
        return result


class SingleLabel(Targets):
    """One class per node: cross-entropy, accuracy by the argmax."""

    metric = "acc"

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        return F.cross_entropy(logits, labels)

    def counts(self, logits: Tensor, labels: Tensor) -> tuple[int, int]:
        return int((logits.argmax(-1) == labels).sum()), labels.numel()


class MultiLabel(Targets):
    """Several binary tasks per node (0, 1, NaN unlabelled): BCE over the labelled tasks, ROC-AUC per task."""

    metric = "rocauc"

    def loss(self, logits: Tensor, labels: Tensor) -> Tensor:
        labelled = ~torch.isnan(labels)
        # Weighted, not indexed: the loss keeps every logit in the graph (DDP reduces every gradient), and a
        # batch without a labelled task is a loss of 0 with gradients of 0.
        summed = F.binary_cross_entropy_with_logits(logits, torch.nan_to_num(labels), weight=labelled.to(logits.dtype),
                                                    reduction="sum")
        return summed / labelled.sum().clamp(min=1)

    def counts(self, logits: Tensor, labels: Tensor) -> tuple[int, int]:
        labelled = ~torch.isnan(labels)
        correct = ((logits > 0) == (labels > 0.5)) & labelled
        counted = torch.stack([correct.sum(), labelled.sum()]).tolist()  # one synchronisation
        return int(counted[0]), int(counted[1])

    def add(self, tally: Tally, logits: Tensor, labels: Tensor) -> None:
        super().add(tally, logits, labels)
        tally.logits.append(logits.detach().float().cpu())
        tally.labels.append(labels.float().cpu())

    def figures(self, tallies: dict[str, Tally], device: torch.device) -> dict[str, float]:
        result = super().figures(tallies, device)
        for split in SPLITS:
            tally = tallies[split]
            mine = torch.cat([torch.cat(tally.logits), torch.cat(tally.labels)], dim=1) if tally.logits else \
                torch.empty(0, 0)  # this rank's share of the split is empty
            both = gather_rows(mine, device)
            result[f"{split}_rocauc"] = mean_rocauc(both[:, : both.size(1) // 2], both[:, both.size(1) // 2 :])
        return result


def gather_rows(rows: Tensor, device: torch.device) -> Tensor:
    """Every rank's `rows` ([n_rank, W], n_rank may differ and be 0), stacked in rank order on the host, on every
    rank. A rank with no rows may not know W: it takes the width of the others'. Collective."""
    world = dist.get_world_size()
    shape = torch.tensor([rows.size(0), rows.size(1)], dtype=torch.long, device=device)
    shapes = [torch.empty_like(shape) for _ in range(world)]
    dist.all_gather(shapes, shape)
    counts = [int(s[0]) for s in shapes]
    width = max(int(s[1]) for s in shapes)
    padded = torch.zeros(max(counts), width, dtype=torch.float32, device=device)
    padded[: rows.size(0), : rows.size(1)] = rows.to(device)
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([part[:count].cpu() for part, count in zip(parts, counts)])


def rocauc(scores: Tensor, positive: Tensor) -> float:
    """The area under the ROC curve of one task (both classes present): the Mann-Whitney statistic, ties between
    scores sharing their mean rank (as sklearn's roc_auc_score counts them). The ranks are half-integers summed
    in float64 (exact below 2**52 nodes), so the order of the nodes does not change the result."""
    order = torch.argsort(scores)
    _values, group, sizes = torch.unique_consecutive(scores[order], return_inverse=True, return_counts=True)
    ends = torch.cumsum(sizes, 0).double()
    ranks = (ends - (sizes.double() - 1) / 2)[group]  # 1-based, ties at their mean
    chosen = positive[order]
    pos = int(chosen.sum())
    neg = chosen.numel() - pos
    return float((ranks[chosen].sum() - pos * (pos + 1) / 2) / (pos * neg))


def mean_rocauc(scores: Tensor, labels: Tensor) -> float:
    """OGB's ROC-AUC for multi-label nodes: per task over its labelled nodes, leaving out a task whose labelled
    nodes are all of one class; the mean over the others (NaN when none is left)."""
    aucs = []
    for task in range(labels.size(1)):
        labelled = ~torch.isnan(labels[:, task])
        positive = labels[labelled, task] > 0.5
        if bool(positive.any()) and not bool(positive.all()):
            aucs.append(rocauc(scores[labelled, task], positive))
    return sum(aucs) / len(aucs) if aucs else float("nan")


def targets_for(form: GraphForm, graph) -> Targets:
    """The graph's kind of labels (train/graph/labels.py)."""
    return MultiLabel() if form.multilabel(graph) else SingleLabel()
