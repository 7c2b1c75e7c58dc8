"""What this process's torch sees of its GPUs: a device's identity, the view `invisible_gpus` judges, and `fit`'s
refusal of allocated GPUs torch cannot see. The decisions themselves, without torch: train/cluster/devices.py."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from train.cluster.devices import invisible_gpus
from train.errors import UserError


def gpu_identity(index: int) -> dict:
    """Name, memory, PCI bus id and UUID of CUDA device `index` (the UUID tells two tasks' GPUs apart)."""
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    bus_id = (f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
              if bus is not None else None)
    return {"index": index, "name": props.name, "memory": props.total_memory, "bus_id": bus_id,
            "uuid": str(getattr(props, "uuid", "") or "")}


def torch_gpu_view() -> dict:
    """What this process's torch sees, as `invisible_gpus` takes it (the side effect at the edge)."""
    return {"torch_version": torch.__version__, "torch_cuda": torch.version.cuda,
            "device_count": torch.cuda.device_count()}


def refuse_invisible_gpus(allocation: Sequence[tuple[str, str]], cuda_visible_devices: str | None) -> None:
    """`fit` before the rendezvous: a UserError when SLURM's GPUs are not visible to torch."""
    refusal = invisible_gpus(allocation, cuda_visible_devices, **torch_gpu_view())
    if refusal is not None:
        raise UserError(refusal)
