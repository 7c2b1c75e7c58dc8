"""The memory of one GPU of a SLURM partition, from the GPU type its nodes' GRES name (`sinfo --format=%G`:
gpu:h100:4), for the memory plan: never from the machine that runs `make submit`, whose GPU (a login node's small
visualisation card, or none) is not the job's.

A GRES type is the site's own word (slurm.conf's `Gres=gpu:TYPE:N` and gres.conf's `Type=`), so it is read
loosely: a known model's name anywhere in it (h100, nvidia_h100_80gb_hbm3, a100-sxm4-40gb), and a memory it
states (80gb, 40g, MIG's 3g.40gb) choosing among the model's sizes or standing alone. A model of several sizes
whose type states none is planned at its smallest, and the plan says so: too small a figure may refuse a job that
fits (GPU_MEMORY says the size), too large a one lets a job fail out of memory on the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 2**20

# MiB of each size of the common data-centre GPUs, as nvidia-smi's memory.total reports it where it was read
# (H100 80GB HBM3: 81,559; H100 NVL: 95,830; H200: 143,771; A10: 23,028; L4: 23,034; L40S, L40 and A40: 46,068;
# T4: 15,360), else the nominal size of NVIDIA's datasheets in GiB (A100 40/80 GB, V100 16/32 GB, A30 24 GB):
# the datasheets' "GB" of a GPU's memory are GiB, of which the driver shows a little less. Keyed by the model's
# name as GRES types spell it and by the size in GB the datasheet names.
GPU_MODELS: dict[str, dict[int, int]] = {
    "h200": {141: 143_771},
    "h100": {80: 81_559, 94: 95_830},
    "a100": {40: 40_960, 80: 81_920},
    "l40s": {48: 46_068},
    "l40": {48: 46_068},
    "a40": {48: 46_068},
    "v100": {16: 16_384, 32: 32_768},
    "a30": {24: 24_576},
    "a10": {24: 23_028},
    "l4": {24: 23_034},
    "t4": {16: 15_360},
}
_MODEL = re.compile(r"(?<![a-z0-9])(" + "|".join(sorted(GPU_MODELS, key=len, reverse=True)) + r")(?![0-9])")
_STATED = re.compile(r"(?<![0-9])([0-9]{1,4})g(?:b|ib)?(?![a-z])")


@dataclass(frozen=True)
class GpuSize:
    """One GRES type's memory, or why it is not known (bytes None)."""

    gres_type: str
    bytes: int | None
    how: str  # how the figure was found, for the plan's line


def gres_types(gres: str) -> list[str]:
    """The GPU types of one node's GRES (sinfo %G: "gpu:h100:4(S:0-1),tmpdisk:100" -> ["h100"]); a GPU GRES
    without a type ("gpu:4") gives ""."""
    types = []
    for part in gres.split(","):
        fields = re.sub(r"\(.*?\)", "", part).strip().split(":")
        if fields[0] != "gpu" or len(fields) < 2:
            continue
        types.append(fields[1] if len(fields) > 2 or not fields[1].isdigit() else "")
    return types


def gpu_size(gres_type: str) -> GpuSize:
    """The memory of one GPU of `gres_type`, from GPU_MODELS and the size the type states."""
    name = gres_type.lower()
    model = _MODEL.search(name)
    stated = [int(n) for n in _STATED.findall(name[model.end():] if model else name)]
    if model is None:
        if stated:
            return GpuSize(gres_type, stated[-1] * 2**30, f"{stated[-1]} GB as its name states")
        known = ", ".join(GPU_MODELS)
        return GpuSize(gres_type, None, f"not a GPU model the plan knows ({known})")
    sizes = GPU_MODELS[model.group(1)]
    if stated:  # the last stated size: MIG's 3g.40gb names compute slices before the memory
        gb = stated[-1]
        mib = sizes.get(gb, gb * 1024)
        return GpuSize(gres_type, mib * MIB, f"{model.group(1).upper()} {gb} GB")
    smallest = min(sizes)
    if len(sizes) == 1:
        return GpuSize(gres_type, sizes[smallest] * MIB, f"{model.group(1).upper()} {smallest} GB")
    others = " or ".join(f"{gb} GB" for gb in sorted(sizes))
    return GpuSize(gres_type, sizes[smallest] * MIB,
                   f"{model.group(1).upper()} comes with {others} and the type names none: planned at the smallest")


def partition_gpu_memory(gres_lines: list[str]) -> tuple[int | None, str]:
    """The memory of the smallest GPU of a partition's nodes (each line one node's or one group's GRES), and how
    it was found; None where some node's GPU type is missing or unknown (its line then says which)."""
    types = sorted({t for line in gres_lines for t in gres_types(line)})
    if not types:
        return None, "its nodes have no GPU GRES"
    if "" in types:
        return None, "its GPU GRES names no type (gpu:N)"
    sizes = [gpu_size(t) for t in types]
    unknown = [s for s in sizes if s.bytes is None]
    if unknown:
        return None, "; ".join(f"gpu:{s.gres_type}: {s.how}" for s in unknown)
    least = min(sizes, key=lambda s: s.bytes)
    return least.bytes, f"gpu:{least.gres_type}, {least.how}"
