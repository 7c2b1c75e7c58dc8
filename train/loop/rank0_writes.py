"""The files only rank 0 writes (checkpoints, metrics.jsonl, summary.json, ...), with every rank told how it went.

A full disk under rank 0 alone would end rank 0 alone: the others would meet a dead peer in their next
collective and end with a different status, or be killed by srun first. So rank 0 writes, and its outcome
(the write's result, or the `StorageError` or OSError that stopped it) goes to every rank, which returns or
raises it alike; a storage fault then ends all of them with one message and EXIT_STORAGE (train/loop/run.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

from train.storage.faults import StorageError

T = TypeVar("T")


def written_by_rank0(is_main: bool, write: Callable[[], T]) -> T:
    """`write()` on rank 0; its result on every rank, or on every rank the OSError or `StorageError` it raised.
    Collective (every rank calls it at the same point)."""
    outcome: list = [None]
    if is_main:
        try:
            outcome[0] = ("written", write())
        except (StorageError, OSError) as exc:
            outcome[0] = ("failed", exc)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(outcome, src=0)
    kind, value = outcome[0]
    if kind == "failed":
        raise value
    return value
