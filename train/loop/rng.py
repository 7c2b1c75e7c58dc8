"""This process's random number generators as one part of a checkpoint (`state_dict` / `load_state_dict`).

Every rank saves its own (torch, CUDA, numpy, python), so a resumed run draws what an
uninterrupted one would have drawn.
"""

from __future__ import annotations


def rng_state() -> dict:
    """Every RNG of this process that the run draws from (numpy's as a tensor: weights_only)."""
    import random

    import numpy as np
    import torch

    kind, key, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class ProcessRng:
    """The process-wide RNGs, as a checkpoint part."""

    def state_dict(self) -> dict:
        return rng_state()

    def load_state_dict(self, state: dict) -> None:
        set_rng_state(state)
