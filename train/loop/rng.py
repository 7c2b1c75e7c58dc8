"""This process's random number generators as one part of a checkpoint (`state_dict` / `load_state_dict`).

Every rank saves its own (torch, CUDA, numpy, python), so a resumed run draws what an
uninterrupted one would have drawn.

CUDA: a rank saves the generator of its own device only ({"device": index, "state": ...}) and
restores it onto its own device, whatever the index: a checkpoint written with four GPUs visible
to each task (`--gpu-bind=none`, cuda:LOCAL_RANK) resumes with one visible (`--gpus-per-task=1`,
cuda:0), or 2x4 as 4x2, and the other way round. The CUDA calls go through `cuda` (torch.cuda by
default), so the choice is tested on the CPU with a stand-in.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def _torch_cuda():
    return torch.cuda


def own_cuda_state(saved, index: int):
    """The state to restore on device `index` from what a checkpoint holds.

    Holds {"device": i, "state": s}: the saving rank's own generator, restored whatever index this
    rank's device has now. A list (one per visible GPU: torch.cuda.get_rng_state_all(), the format
    before this one): the entry of `index` where the list has one, else its first.
    """
    if isinstance(saved, dict):
        return saved["state"]
    states = list(saved)
    if not states:
        return None
    return states[index] if index < len(states) else states[0]


def cuda_rng_state(cuda=None) -> dict | None:
    """The generator of this rank's current CUDA device, or None when the process uses no GPU."""
    cuda = cuda or _torch_cuda()
    if not (cuda.is_available() and cuda.is_initialized()):
        return None
    index = cuda.current_device()
    return {"device": index, "state": cuda.get_rng_state(index)}


def set_cuda_rng_state(saved, cuda=None) -> None:
    """Restore `saved` (see `own_cuda_state`) onto this rank's current device; nothing without a GPU."""
    cuda = cuda or _torch_cuda()
    if saved is None or not cuda.is_available():
        return
    index = cuda.current_device()
    state = own_cuda_state(saved, index)
    if state is not None:
        cuda.set_rng_state(state, index)


def rng_state(cuda=None) -> dict:
    """Every RNG of this process that the run draws from (numpy's as a tensor: weights_only)."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
    }
    own = cuda_rng_state(cuda)
    if own is not None:
        state["cuda"] = own
    return state


def set_rng_state(state: dict, cuda=None) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    set_cuda_rng_state(state.get("cuda"), cuda)


class ProcessRng:
    """The process-wide RNGs, as a checkpoint part."""

    def state_dict(self) -> dict:
        return rng_state()

    def load_state_dict(self, state: dict) -> None:
        set_rng_state(state)
