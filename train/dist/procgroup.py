"""Process group and device: the side effects that follow from a resolved `DistEnv`.

`process_group(env, config)` is a context manager that initialises torch.distributed
(always, also for one process, so the training code has a single path) and destroys it
on exit, on error too.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator

import torch
import torch.distributed as dist

from train.config import DistConfig
from train.dist.distenv import DistEnv
from train.dist.portholder import port_holder
from train.errors import UserError


def choose_backend(requested: str, cuda_available: bool) -> str:
    """auto -> nccl when CUDA is available, else gloo."""
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    if requested == "nccl" and not cuda_available:
        raise UserError("dist.backend='nccl' needs a CUDA GPU, and none is visible; use dist.backend=gloo or auto.")
    return requested


def choose_device_index(local_rank: int, visible_gpus: int, cuda_visible_devices: str | None) -> int:
    """The CUDA device index for this local rank.

    With `--gpu-bind=none` (the seed) every task sees all GPUs of its node: use
    `cuda:{LOCAL_RANK}`. With one GPU per task bound by SLURM (`--gpus-per-task=1` and
    default binding) `CUDA_VISIBLE_DEVICES` holds one entry and it is `cuda:0`.
    """
    if visible_gpus < 1:
        raise UserError("a CUDA device was asked for, but no GPU is visible (CUDA_VISIBLE_DEVICES="
                        f"{'<unset>' if cuda_visible_devices is None else cuda_visible_devices!r}).")
    if visible_gpus == 1:
        return 0
    if local_rank >= visible_gpus:
        raise UserError(
            f"local rank {local_rank} has no GPU of its own: only {visible_gpus} are visible "
            f"(CUDA_VISIBLE_DEVICES={'<unset>' if cuda_visible_devices is None else cuda_visible_devices!r}); "
            "run at most one task per GPU (--ntasks-per-node <= GPUs per node)."
        )
    return local_rank


def select_device(env: DistEnv, backend: str) -> torch.device:
    if backend != "nccl":
        return torch.device("cpu")
    index = choose_device_index(env.local_rank, torch.cuda.device_count(), env.cuda_visible_devices)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


@contextlib.contextmanager
def process_group(env: DistEnv, config: DistConfig) -> Iterator[tuple[str, torch.device]]:
    """Initialise the default process group for `env`; yields (backend, device)."""
    backend = choose_backend(config.backend, torch.cuda.is_available())
    device = select_device(env, backend)
    timeout = datetime.timedelta(seconds=config.init_timeout_seconds)
    store = _connect_store(env, timeout)
    dist.init_process_group(
        backend,
        store=store,
        world_size=env.world_size,
        rank=env.rank,
        timeout=datetime.timedelta(seconds=config.collective_timeout_seconds),
        device_id=device if backend == "nccl" else None,
    )
    try:
        yield backend, device
    finally:
        dist.destroy_process_group()


def _connect_store(env: DistEnv, timeout: datetime.timedelta) -> dist.TCPStore:
    """Rendezvous at MASTER_ADDR:MASTER_PORT within `timeout`, or say which address failed."""
    try:
        return dist.TCPStore(
            env.master_addr,
            env.master_port,
            world_size=env.world_size,
            is_master=env.rank == 0 and not env.agent_store,
            timeout=timeout,
            wait_for_workers=True,
        )
    except (RuntimeError, OSError) as exc:
        role = "could not listen on" if env.rank == 0 else "could not reach the master at"
        holder = port_holder(env.master_port) if env.rank == 0 else None
        if holder:
            raise UserError(
                f"rank 0 could not listen on {env.master_addr}:{env.master_port}: the port is held by {holder}, "
                f"e.g. another job whose first node is this one (the port came from {env.sources.get('master_port')}). "
                "Set MASTER_PORT to a free port for this run."
            ) from None
        raise UserError(
            f"rank {env.rank} {role} {env.master_addr}:{env.master_port} within "
            f"{timeout.total_seconds():.0f} s ({str(exc).splitlines()[0]}). Check that MASTER_ADDR names the "
            "first node, that MASTER_PORT is free there, and that every task was started (srun)."
        ) from None
