"""Process group and device: the side effects that follow from a resolved `DistEnv`.

`process_group(env, config)` is a context manager that initialises torch.distributed
(always, also for one process, so the training code has a single path) and destroys it
on exit, on error too. Its order: the backend (each rank's own choice), the rank's GPU
(`set_device` before anything touches CUDA), the rendezvous store, the ranks' agreement on
the backend through it (ranks that chose differently would wait in `init_process_group` until
its timeout, none named), two ranks on one GPU refused, then the process group bound to the GPU.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
from collections.abc import Iterator, Mapping

import torch
import torch.distributed as dist

from train.cluster.devices import arrive, choose_device_index, refuse_shared_gpus, shared_gpus
from train.cluster.distenv import DistEnv
from train.cluster.portholder import port_holder
from train.cluster.torch_gpus import gpu_identity
from train.config import DistConfig
from train.errors import UserError


def choose_backend(requested: str, cuda_available: bool) -> str:
    """auto -> nccl when CUDA is available, else gloo."""
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    if requested == "nccl" and not cuda_available:
        raise UserError("dist.backend='nccl' needs a CUDA GPU, and none is visible; use dist.backend=gloo or auto.")
    return requested


def backend_choices(store, rank: int, world_size: int, backend: str, timeout: datetime.timedelta) -> dict[str, list]:
    """Every rank's backend, as {backend: [(rank, host), ...]}: the same on every rank. Collective over all ranks,
    through `store` (the rendezvous store; give a fresh prefix)."""
    store.append("backends", f"{backend} {rank} {socket.gethostname()};")
    arrive(store, "chosen", world_size, timeout)
    choices: dict[str, list] = {}
    for entry in store.get("backends").decode().split(";"):
        if entry.strip():
            name, who, host = entry.split(" ", 2)
            choices.setdefault(name, []).append((int(who), host))
    return {name: sorted(who) for name, who in sorted(choices.items())}


def refuse_split_backends(choices: dict[str, list], requested: str) -> str:
    """The one backend every rank chose, or a UserError naming the ranks (and hosts) of each choice."""
    if len(choices) == 1:
        return next(iter(choices))
    why = {"nccl": "CUDA visible", "gloo": "no CUDA visible" if requested == "auto" else "dist.backend=gloo"}
    parts = []
    for name, who in choices.items():
        hosts = sorted({host for _, host in who})
        ranks = ", ".join(str(r) for r, _ in who)
        parts.append(f"{name} ({why.get(name, 'asked')}) on rank{'s' if len(who) > 1 else ''} {ranks} "
                     f"({', '.join(hosts)})")
    raise UserError(f"the ranks chose different backends with dist.backend={requested}: {'; '.join(parts)}. "
                    "Every rank must see a GPU (check the nodes' drivers and the job's GPU request: `make doctor`), "
                    "or set dist.backend=gloo for a CPU run.")


def agree_on_backend(store, env: DistEnv, backend: str, requested: str, timeout: datetime.timedelta) -> str:
    """`backend` where every rank chose it, else the refusal on every rank at once (refuse_split_backends)."""
    if env.world_size == 1:
        return backend
    scoped = dist.PrefixStore(f"pyg-train/backend/{env.restart_count}", store)
    return refuse_split_backends(backend_choices(scoped, env.rank, env.world_size, backend, timeout), requested)


def select_device(env: DistEnv, backend: str) -> torch.device:
    if backend != "nccl":
        return torch.device("cpu")
    index = choose_device_index(env.local_rank, torch.cuda.device_count(), env.cuda_visible_devices,
                                env.local_world_size)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def check_gpus_not_shared(store, env: DistEnv, device: torch.device, timeout: datetime.timedelta) -> None:
    """Refuse, on every rank at once, when two ranks would use the same GPU (told apart by UUID)."""
    gpu = gpu_identity(device.index)
    where = f"{socket.gethostname()} GPU {device.index} ({gpu['uuid'] or gpu['bus_id']})"
    key = gpu["uuid"] or f"{socket.gethostname()}/{gpu['bus_id'] or device.index}"
    # A prefix per attempt: torchrun's agent store outlives a restart.
    scoped = dist.PrefixStore(f"pyg-train/gpus/{env.restart_count}", store)
    refuse_shared_gpus(shared_gpus(scoped, env.rank, env.world_size, key, where, timeout), env.local_world_size)


def nccl_error_handling(environ: Mapping[str, str]) -> dict[str, str]:
    """What to export before an NCCL process group exists, so a collective that fails or outlasts its timeout
    (dist.collective_timeout_seconds) raises in this rank's own thread, where the failure report runs.

    torch's default (TORCH_NCCL_ASYNC_ERROR_HANDLING=3) has the watchdog abort the whole process, so a
    survivor blocked in a CUDA sync never says which rank died. 2 (CleanUpOnly) aborts the communicators
    only: the blocked sync returns and the rank's next collective raises DistBackendError
    (train/loop/failure_report.py). TORCH_NCCL_BLOCKING_WAIT is not used: it leaves a sync blocked
    behind DDP's all-reduce hanging. A value the user or launcher set (torchrun sets 1) is kept.
    """
    chosen = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
              "NCCL_BLOCKING_WAIT")
    return {} if any(name in environ for name in chosen) else {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}


@contextlib.contextmanager
def process_group(env: DistEnv, config: DistConfig) -> Iterator[tuple[str, torch.device]]:
    """Initialise the default process group for `env`; yields (backend, device)."""
    backend = choose_backend(config.backend, torch.cuda.is_available())
    device = select_device(env, backend)
    timeout = datetime.timedelta(seconds=config.init_timeout_seconds)
    store = _connect_store(env, timeout)
    agree_on_backend(store, env, backend, config.backend, timeout)
    if backend == "nccl" and env.world_size > 1:
        check_gpus_not_shared(store, env, device, timeout)
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
