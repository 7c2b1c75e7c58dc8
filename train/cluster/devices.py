"""Which GPU each rank uses, and the refusals when two tasks would share one or SLURM's GPUs are invisible
(one home for `fit` and the doctor).

`choose_device_index` decides from what one rank sees (GPUs visible, CUDA_VISIBLE_DEVICES, its local
rank, its node's number of tasks). What it cannot see alone, two tasks that each see "their" one GPU
while it is the same GPU (`--gpus-per-node=1` with four tasks: NCCL fails with "Duplicate GPU
detected" and names no task), `shared_gpus` finds by GPU UUID through the rendezvous store, before
the process group exists, so every rank refuses at once with the srun line to use.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

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


def arrive(store, name: str, world_size: int, timeout: datetime.timedelta) -> None:
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
    arrive(store, "listed", world_size, timeout)
    users = sorted(int(r) for r in store.get(f"users/{gpu}").decode().split())
    if len(users) > 1 and users[0] == rank:  # the lowest rank of each shared GPU reports it, once
        store.append("shared", f"ranks {', '.join(map(str, users))} on {where};")
    arrive(store, "reported", world_size, timeout)
    if not store.check(["shared"]):
        return []
    return [part for part in store.get("shared").decode().split(";") if part]


def refuse_shared_gpus(shared: list[str], tasks_per_node: int) -> None:
    if shared:
        raise UserError(f"two tasks would use the same GPU ({'; '.join(shared)}); NCCL refuses that "
                        f"(\"Duplicate GPU detected\"). {one_gpu_per_task(tasks_per_node)}.")


def gpus_counted(name: str, value: str) -> int:
    """How many GPUs one SLURM variable gives: a list of indices (SLURM_JOB_GPUS, SLURM_STEP_GPUS: "0,1"),
    else counts as "[type:]count" parts ("2", "h200:1", "a100:1,v100:2"); what does not parse counts 0."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    if name.endswith(("_JOB_GPUS", "_STEP_GPUS")):
        return len(parts)
    counts = [part.rsplit(":", 1)[-1] for part in parts]
    return sum(int(count) for count in counts if count.isdigit())


def invisible_gpus(allocation: Sequence[tuple[str, str]], cuda_visible_devices: str | None, torch_version: str,
                   torch_cuda: str | None, device_count: int) -> str | None:
    """The refusal when SLURM allocated GPUs to this task but torch sees none, else None (pure: facts in).

    `allocation`: SLURM's GPU variables that are set, as (name, value) (train/cluster/jobfacts.py);
    the rest is what torch says: its version, `torch.version.cuda` (None: a CPU build), and
    `torch.cuda.device_count()`. Training on the CPU there would burn the GPU allocation without a word.
    """
    given = [(name, value) for name, value in allocation if gpus_counted(name, value) > 0]
    if not given or device_count > 0:
        return None
    slurm = ", ".join(f"{name}={value}" for name, value in given)
    if torch_cuda is None:
        cause = ("this torch is a CPU build: a CPU wheel installed over the image's CUDA torch (e.g. `pip install "
                 "torch` without the image's constraints, or a requirements file that pins torch); use the image's "
                 "torch")
    else:
        cause = (f"this torch is built for CUDA {torch_cuda} but finds no device: enroot's "
                 "NVIDIA hook is off in the container (the image lacks NVIDIA_VISIBLE_DEVICES or "
                 "enroot's hooks/98-nvidia.sh is disabled), or the driver (libcuda.so, /dev/nvidia*) is not "
                 "mounted into it; `nvidia-smi` inside the container tells which")
    return (f"SLURM allocated GPUs to this task ({slurm}; CUDA_VISIBLE_DEVICES={_shown(cuda_visible_devices)}) "
            f"but torch sees none (torch {torch_version}, torch.version.cuda {torch_cuda}, "
            f"torch.cuda.device_count() {device_count}): likely {cause}. Training on the CPU would leave the "
            "allocated GPUs idle, so this run is refused. For a CPU job ask for no GPUs: GPUS_PER_TASK=0 "
            "(make submit ... GPUS_PER_TASK=0).")
