"""The GPU sampler's hop (`FusedNeighborSampler`, train/graph/sampling/samplers.py): a fixed handful of
whole-frontier ops.

`TorchNeighborSampler` (train/graph/sampling/samplers.py) picks a high-degree node's neighbours by Floyd's method: one
step per pick, so a hop of fanout k launches k rounds of small kernels. On the CPU that is cheap (O(k^2) per
node, whatever its degree); on a GPU the launches dominate (issue 30: 50.7M sampled edges/s on an H200).

Here a hop gives every in-edge of the frontier one random key, with its target's index in the high bits, and
sorts the keys once: each target's edges come out together, in random order, and the first
min(degree, k) of them are a uniform sample without replacement. One sort, one random draw and a few
gathers per hop, whatever k is, and one wait for the device: the draw's and the output's sizes, read
together (the kept edges are then selected at a known size, `nonzero_static`). The work is O(sum of the
frontier's in-degrees) per hop, against Floyd's O(k^2) per node: on a GPU a sort of millions of keys costs
less than k rounds of launches; on the CPU Floyd stays (make run's weights come from it).

The contract is `TorchNeighborSampler`'s: the same output layout and relabelling (it keeps that class's
node map), seeded per batch by (seed, epoch, first seed node), and each target's sampled edges in CSC
order. Only which neighbours a seed draws differs (another algorithm on the same generator). Keys tie with
probability below degree^2 / 2^(63 - bits of the frontier's size) per target; a tie is broken by position,
a bias far below what any test of uniformity can see.
"""

from __future__ import annotations

import torch
from torch import Tensor


def key_positions(colptr: Tensor, frontier: Tensor, fanout: int,
                  generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """CSC positions of the sampled in-edges of `frontier` (without replacement, at most `fanout` each; all of
    them for fanout -1) and the index in `frontier` of each one's target, grouped by target in frontier order,
    CSC order within a target. One wait for the device: the candidates' and the kept edges' counts, together."""
    device = frontier.device
    # Each target's (start, end) in one gather from overlapping pairs of colptr; int64: the node-shared CSC
    # may hold int32 ids.
    bounds = colptr.unfold(0, 2, 1).index_select(0, frontier).long()
    start = bounds[:, 0]
    degree = bounds[:, 1] - start
    if fanout < 0:
        num_candidates = num_kept = int(degree.sum())
    else:  # the sizes of the draw and of the output, read in one transfer: min(degree, fanout) are kept
        num_candidates, num_kept = torch.stack((degree, degree.clamp(max=fanout))).sum(1).tolist()
    target = torch.repeat_interleave(torch.arange(frontier.numel(), device=device), degree,
                                     output_size=num_candidates)
    first = torch.cumsum(degree, 0) - degree  # each target's first candidate
    rank = torch.arange(num_candidates, device=device) - first.index_select(0, target)  # its rank in CSC order
    position = rank + start.index_select(0, target)
    if fanout < 0:
        return position, target
    random_bits = 63 - max(int(frontier.numel()).bit_length(), 1)
    keys = torch.randint(0, 1 << random_bits, (num_candidates,), device=device, generator=generator)
    keys |= target << random_bits
    order = torch.sort(keys, stable=True).indices  # targets stay in their places, their edges shuffled
    # Sorted by target first, slot i holds a candidate of target[i], of rank i - first[target[i]] there: `rank`.
    keep = torch.empty(num_candidates, dtype=torch.bool, device=device)
    keep.scatter_(0, order, rank < fanout)  # back to CSC order
    chosen = _true_indices(keep, num_kept)
    return position.index_select(0, chosen), target.index_select(0, chosen)


def _true_indices(mask: Tensor, count: int) -> Tensor:
    """The indices of `mask`'s `count` True entries, in order: at a known size no wait for the device, where torch
    has `nonzero_static` there (CUDA: torch 2.6 and newer; the project takes torch 2.1 on)."""
    try:
        return torch.nonzero_static(mask, size=count).view(-1)
    except NotImplementedError:  # an older torch on this device: `nonzero` counts them again, and waits
        return torch.nonzero(mask).view(-1)
