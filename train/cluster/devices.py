"""Which GPU each rank uses, and the refusal when two tasks would share one (one home for `fit` and the doctor).

`choose_device_index` decides from what one rank sees (GPUs visible, CUDA_VISIBLE_DEVICES, its local
rank, its node's number of tasks). What it cannot see alone, two tasks that each see "their" one GPU
while it is the same GPU (`--gpus-per-node=1` with four tasks: NCCL fails with "Duplicate GPU
detected" and names no task), `shared_gpus` finds by GPU UUID through the rendezvous store, before
the process group exists, so every rank refuses at once with the srun line to use.
"""

from __future__ import annotations

import datetime

from train.errors import UserError


def one_gpu_per_task(tasks_per_node: int) -> str:
    """What to run instead, as srun options (the project's jobs use the same: jobs/train.sbatch)."""
    n = max(tasks_per_node, 1)
    return (f"give every task a GPU of its own: srun --ntasks-per-node={n} --gpus-per-task=1 --gpu-bind=none "
            f"... (each task then sees the node's GPUs and takes cuda:LOCAL_RANK), or run fewer tasks per node "
            "than it has GPUs")


def _shown(cuda_visible_devices: str | None) -> str:
    return "<unset>" if cuda_visible_devices is None else repr(cuda_visible_devices)


def choose_device_index(local_rank: int, visible_gpus: int, cuda_visible_devices: str | None,
                        local_world_size: int = 1) -> int:
    """The CUDA device index for this local rank, or a UserError that every rank of the node reaches alike.

    With `--gpu-bind=none` (the seed) every task sees all GPUs of its node: `cuda:{LOCAL_RANK}`.
    With one GPU bound to each task by SLURM (`--gpus-per-task=1` and default binding) a task sees
    one GPU: `cuda:0` (whether the tasks' GPUs differ is for `shared_gpus`). Refused: no GPU; fewer
    GPUs than tasks on the node (some would share or have none); one GPU that every task of the node
    sees with CUDA_VISIBLE_DEVICES unset (the node has one GPU and several tasks).
    """
    shown = _shown(cuda_visible_devices)
    if visible_gpus < 1:
        raise UserError(f"a CUDA device was asked for, but no GPU is visible (CUDA_VISIBLE_DEVICES={shown}).")
    if visible_gpus == 1:
        if local_world_size > 1 and cuda_visible_devices is None:
            raise UserError(f"{local_world_size} tasks on this node all see its one GPU (CUDA_VISIBLE_DEVICES "
                            f"unset): NCCL refuses two ranks on one GPU. {one_gpu_per_task(local_world_size)}.")
        return 0
    if visible_gpus < local_world_size or local_rank >= visible_gpus:
        raise UserError(
            f"{max(local_world_size, local_rank + 1)} tasks on this node but {visible_gpus} GPUs visible to each "
            f"(CUDA_VISIBLE_DEVICES={shown}): local rank {max(local_rank, visible_gpus)} would have no GPU of its "
            f"own. {one_gpu_per_task(max(local_world_size, local_rank + 1))}."
        )
    return local_rank


def gpu_identity(index: int) -> dict:
    """Name, memory, PCI bus id and UUID of CUDA device `index` (the UUID tells two tasks' GPUs apart)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    bus_id = (f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
              if bus is not None else None)
    return {"index": index, "name": props.name, "memory": props.total_memory, "bus_id": bus_id,
            "uuid": str(getattr(props, "uuid", "") or "")}


def _arrive(store, name: str, world_size: int, timeout: datetime.timedelta) -> None:
    """Wait until all `world_size` ranks have arrived at `name` (a barrier in the store, O(1) requests per rank)."""
    if store.add(f"{name}/arrived", 1) == world_size:
        store.set(f"{name}/all", "1")
    store.wait([f"{name}/all"], timeout)


def shared_gpus(store, rank: int, world_size: int, gpu: str, where: str, timeout: datetime.timedelta) -> list[str]:
    """The GPUs that more than one rank would use, as "ranks 0, 1 on <where>"; the same list on every rank.

    `gpu` identifies this rank's GPU across the job (its UUID, else host and bus id); `where` names it in
    the message. Collective over all ranks, through `store` (the rendezvous store; give a fresh prefix).
    """
    store.append(f"users/{gpu}", f"{rank} ")
    _arrive(store, "listed", world_size, timeout)
    users = sorted(int(r) for r in store.get(f"users/{gpu}").decode().split())
    if len(users) > 1 and users[0] == rank:  # the lowest rank of each shared GPU reports it, once
        store.append("shared", f"ranks {', '.join(map(str, users))} on {where};")
    _arrive(store, "reported", world_size, timeout)
    if not store.check(["shared"]):
        return []
    return [part for part in store.get("shared").decode().split(";") if part]


def refuse_shared_gpus(shared: list[str], tasks_per_node: int) -> None:
    if shared:
        raise UserError(f"two tasks would use the same GPU ({'; '.join(shared)}); NCCL refuses that "
                        f"(\"Duplicate GPU detected\"). {one_gpu_per_task(tasks_per_node)}.")
