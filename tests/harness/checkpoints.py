"""Small checkpoint payloads for the tests and their workers (workers/crash_writer.py)."""
from __future__ import annotations

import torch

from train.config import load_config
from train.loop import checkpoint as ck
from train.loop.rng import rng_state


def payload(epoch: int, step: int = 0, world_size: int = 1, config=None, value: float = 1.0) -> dict:
    """A checkpoint payload as Checkpointer.save builds it, small."""
    config = config or load_config("tiny")
    return {
        "format": ck.FORMAT_VERSION, "epoch": epoch, "position_step": step,
        "ranks": [{"step": step, "stats": {}, "rng": rng_state()} for _ in range(world_size)],
        "model": {"w": torch.full((3, 2), value)}, "optimizer": {"state": {}, "param_groups": []},
        "history": [{"epoch": e} for e in range(epoch)], "config": config.to_dict(),
        "world_size": world_size, "data": {"num_nodes": 10}, "reason": "test", "saved_at": 0.0,
    }
