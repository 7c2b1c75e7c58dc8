"""How seed nodes are spread over ranks: every node once, none dropped, none duplicated.

Pure functions, so the same split can be recomputed anywhere (tests, resume, evaluation).
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, stable across processes and Python versions (unlike hash())."""
    digest = hashlib.sha256(",".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def epoch_order(train_idx: Tensor, seed: int, epoch: int) -> Tensor:
    """The epoch's shuffle of the training nodes, identical on every rank."""
    gen = torch.Generator().manual_seed(derive_seed(seed, epoch))
    return train_idx[torch.randperm(train_idx.numel(), generator=gen)]


def rank_shard(nodes: Tensor, rank: int, world_size: int) -> Tensor:
    """This rank's contiguous part of `nodes`; sizes differ by at most one, nothing dropped.

    The seed's example uses `split(ceil(N / world_size))`, which can leave the last rank
    empty; `tensor_split` spreads the remainder instead.
    """
    return nodes.tensor_split(world_size)[rank]


def shard_sizes(total: int, world_size: int) -> list[int]:
    return [total // world_size + (1 if r < total % world_size else 0) for r in range(world_size)]


def lone_seed_ranks(total: int, world_size: int, batch_size: int) -> list[int]:
    """The ranks whose share of `total` seeds (rank_shard) ends on a batch of one seed."""
    return [rank for rank, size in enumerate(shard_sizes(total, world_size)) if size % batch_size == 1]


def without_lone_seed(shard: Tensor, batch_size: int) -> Tensor:
    """`shard` less its last seed where that seed would be a batch of its own (see lone_seed_ranks)."""
    return shard[:-1] if shard.numel() % batch_size == 1 else shard
