"""Link prediction's figures, exact across ranks: the figure one process would get, whatever the world size.

Two families, each from what the evaluation adds to one `LinkTally` per split on each rank:

- AUC and AP over scored pairs (score, label 1 for an edge, 0 for a negative): every rank's pairs of a split are
  gathered (train/loop/targets.py `gather_rows`) and computed on every rank. AUC is targets.py's rank-based
  `rocauc` (ties share their mean rank, as sklearn's roc_auc_score); AP is sklearn's average_precision_score
  (one threshold per distinct score, so tied pairs count together), over a sort, in float64, its terms summed
  exactly (`math.fsum`), so neither the order nor the split of the pairs over ranks changes a bit. This holds the
  split's pairs (2 floats each) on every rank while it is computed.
- MRR and Hits@K under OGB's protocol (ogbl-citation2: each positive against its own 1,000 given negatives):
  each positive's rank is taken where its scores are, as OGB's Evaluator does for MRR: the mean of the optimistic
  rank (negatives scored above it) and the pessimistic one (negatives scored at least as high), plus 1; a hit
  at K is a rank of at most K. Only the ranks travel (twice the rank, a whole number, one float per positive); the
  MRR is summed from their histogram, so it too is one process's figure. OGB's evaluator averages in float32,
  this in float64: the two agree to float32's rounding.

A figure without a meaning (no pairs, pairs of one class, no positives ranked, a score that is NaN) is NaN, and
`LinkFigures.notes` says why, in words, for the log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from train.loop.targets import SPLITS, gather_rows, rocauc

HITS_AT = (1, 3, 10)  # the Hits@K that OGB's Evaluator reports beside the MRR (ogbl-citation2)
UNRANKED = 0  # the doubled rank of a positive scored NaN, or against a negative scored NaN (a rank is at least 1)


class LinkTally:
    """One split's share on this rank: scored pairs for AUC and AP, and positives ranked against their own
    negatives (twice OGB's rank, so a whole number) for MRR and Hits@K."""

    def __init__(self):
        self.pairs: list[Tensor] = []  # [n, 2]: score, label (1.0 or 0.0)
        self.doubled_ranks: list[Tensor] = []  # [m]: 2 x rank, from 2 (first) to 2 K + 2 (after all K negatives)

    def add_pairs(self, scores: Tensor, labels: Tensor) -> None:
        """A batch of scored pairs: `scores` [n] and `labels` [n] (1 or True for an edge, 0 or False for a
        negative)."""
        if scores.dim() != 1 or scores.shape != labels.shape:
            raise ValueError(f"scores and labels must be two vectors of one length, not {tuple(scores.shape)} and "
                             f"{tuple(labels.shape)}")
        positive = (labels.float() > 0.5).float()
        self.pairs.append(torch.stack([scores.detach().float(), positive], dim=1).cpu())

    def add_ranked(self, pos_scores: Tensor, neg_scores: Tensor) -> None:
        """A batch of positives, each against its own negatives: `pos_scores` [M], `neg_scores` [M, K]. Ranked
        where the scores are (one small vector leaves the device)."""
        if pos_scores.dim() != 1 or neg_scores.dim() != 2 or neg_scores.size(0) != pos_scores.size(0):
            raise ValueError(f"pos_scores must be [M] and neg_scores [M, K], not {tuple(pos_scores.shape)} and "
                             f"{tuple(neg_scores.shape)}")
        self.doubled_ranks.append(doubled_ranks(pos_scores.detach(), neg_scores.detach()).cpu())


@dataclass(frozen=True)
class LinkFigures:
    """The figures of every split, the same on every rank, and why any of them is NaN."""

    values: dict[str, float]  # val_auc, val_ap, test_auc, test_ap (+ val_mrr, val_hits@K, ... where ranked)
    notes: list[str] = field(default_factory=list)


def doubled_ranks(pos_scores: Tensor, neg_scores: Tensor) -> Tensor:
    """Twice OGB's rank of each positive among its negatives (ogb/linkproppred/evaluate.py `_eval_mrr`): the
    optimistic rank (negatives scored higher) plus the pessimistic one (negatives scored at least as high) plus
    2; a long tensor [M]. UNRANKED where the positive or one of its negatives scored NaN (OGB's comparisons would
    rank such a positive first)."""
    pos = pos_scores.view(-1, 1)
    doubled = (neg_scores > pos).sum(dim=1) + (neg_scores >= pos).sum(dim=1) + 2
    return doubled.masked_fill(torch.isnan(pos.view(-1)) | torch.isnan(neg_scores).any(dim=1), UNRANKED)


def average_precision(scores: Tensor, positive: Tensor) -> float:
    """sklearn's average_precision_score of one set of pairs with at least one positive: the sum, over the
    distinct scores from the highest, of the recall gained there times the precision at that threshold (tied
    pairs enter together). Counts are exact integers, each term a float64, summed exactly: the order of the pairs
    changes nothing."""
    values, group = torch.unique(scores, sorted=True, return_inverse=True)
    size = values.numel()
    at = torch.zeros(size, dtype=torch.long).index_add_(0, group, torch.ones_like(group))
    hits = torch.zeros(size, dtype=torch.long).index_add_(0, group, positive.long())
    at, hits = at.flip(0), hits.flip(0)  # from the highest score
    precision = torch.cumsum(hits, 0).double() / torch.cumsum(at, 0).double()
    gained = hits > 0
    terms = hits[gained].double() * precision[gained]
    return math.fsum(terms.tolist()) / int(hits.sum())


def pair_figures(split: str, pairs: Tensor) -> tuple[dict[str, float], list[str]]:
    """AUC and AP of one split's gathered pairs [n, 2] (score, label), and why either is NaN."""
    unscored = int(torch.isnan(pairs[:, 0]).sum()) if pairs.numel() else 0
    if unscored:  # a NaN has no place in the order: no figure, rather than one that depends on where it sorts
        return ({f"{split}_auc": float("nan"), f"{split}_ap": float("nan")},
                [f"{split}_auc and {split}_ap are NaN: {unscored:,} of the split's {pairs.size(0):,} scores are NaN"])
    positive = pairs[:, 1] > 0.5 if pairs.numel() else torch.zeros(0, dtype=torch.bool)
    pos = int(positive.sum())
    neg = positive.numel() - pos
    if pos and neg:
        return {f"{split}_auc": rocauc(pairs[:, 0], positive), f"{split}_ap": average_precision(pairs[:, 0],
                                                                                               positive)}, []
    if pos:  # AP is defined (1.0, as sklearn gives it); AUC needs both classes
        return ({f"{split}_auc": float("nan"), f"{split}_ap": average_precision(pairs[:, 0], positive)},
                [f"{split}_auc is NaN: all {pos:,} scored pairs of the split are edges, none a negative "
                 "(the AUC needs both)"])
    why = f"all {neg:,} scored pairs of the split are negatives, none an edge" if neg else \
        "the split has no scored pairs"
    return {f"{split}_auc": float("nan"), f"{split}_ap": float("nan")}, [f"{split}_auc and {split}_ap are NaN: {why}"]


def ranking_figures(split: str, doubled: Tensor, hits_at: tuple[int, ...]) -> tuple[dict[str, float], list[str]]:
    """MRR and Hits@K of one split's gathered doubled ranks [m]: OGB's mean of 1 / rank, and the share of ranks
    of at most K. Summed from the histogram of the ranks, so their order changes nothing."""
    keys = [f"{split}_mrr", *(f"{split}_hits@{k}" for k in hits_at)]
    if doubled.numel() == 0:
        return dict.fromkeys(keys, float("nan")), [f"{', '.join(keys)} are NaN: the split has no ranked positives"]
    counts = torch.bincount(doubled.long())
    if counts[UNRANKED]:
        return dict.fromkeys(keys, float("nan")), [
            f"{', '.join(keys)} are NaN: {int(counts[UNRANKED]):,} of the split's {doubled.numel():,} positives or "
            "their negatives scored NaN"]
    seen = counts.nonzero().view(-1)
    total = doubled.numel()
    mrr = math.fsum((counts[seen].double() * 2.0 / seen.double()).tolist()) / total
    result = {f"{split}_mrr": mrr}
    for k in hits_at:
        result[f"{split}_hits@{k}"] = int(counts[: 2 * k + 1].sum()) / total
    return result, []


def _gathered(parts: list[Tensor], width: int, device: torch.device) -> Tensor:
    """Every rank's rows of one kind for one split, in rank order, on every rank. Collective."""
    mine = torch.cat(parts) if parts else torch.empty(0, width)
    return gather_rows(mine.view(-1, width), device)


def figures(tallies: dict[str, LinkTally], device: torch.device,
            hits_at: tuple[int, ...] = HITS_AT) -> LinkFigures:
    """The figures of the splits (SPLITS: val, test) over all ranks: `{split}_auc` and `{split}_ap` always, and
    `{split}_mrr` and `{split}_hits@{k}` when any rank ranked positives in any split. The same on every rank;
    collective over all ranks (every rank calls it, an empty share included)."""
    ranked = torch.tensor([sum(t.numel() for t in tallies[s].doubled_ranks) for s in SPLITS], dtype=torch.float64,
                          device=device)
    dist.all_reduce(ranked)
    values: dict[str, float] = {}
    notes: list[str] = []
    for split in SPLITS:
        found, why = pair_figures(split, _gathered(tallies[split].pairs, 2, device))
        values.update(found)
        notes += why
    if bool(ranked.sum() > 0):
        for split in SPLITS:
            doubled = _gathered([r.float() for r in tallies[split].doubled_ranks], 1, device).view(-1)
            found, why = ranking_figures(split, doubled, hits_at)
            values.update(found)
            notes += why
    return LinkFigures(values, notes)
