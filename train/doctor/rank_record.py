"""What a rank records of itself for the doctor once torch is loaded: its device, its dataset, its versions and
network (`collect_record`). Apart from train/doctor/probes.py, whose probes run before torch loads (`python -m
train --help` imports them)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path

import torch

from train.cluster.devices import choose_device_index, invisible_gpus
from train.cluster.distenv import DistEnv
from train.cluster.torch_gpus import gpu_identity, torch_gpu_view
from train.config import Config, DataConfig
from train.doctor.findings import interface_of, is_loopback, nccl_interfaces
from train.doctor.hcas import probe_links
from train.doctor.probes import (
    can_bind,
    driver_version,
    local_interfaces,
    package_version,
    probe_run_dir,
    probe_share_dir,
    resolve_host,
    route_source,
)
from train.doctor.records import DataState, Device, Network, RankRecord
from train.errors import UserError
from train.graph.datasets.lookup import probe_dataset
from train.storage.faults import format_bytes


def inspect_dataset(data: DataConfig, data_dir: str | None) -> DataState:
    """Is the dataset there and readable? Never downloads (the compute node may have no internet).

    What to look at is the dataset kind's probe (train/graph/datasets/kinds.py), where it lives is the kind's folder:
    the one home of that fact. The files it names are opened here, one byte each."""
    found = probe_dataset(data, data_dir)  # the kind's probe: plain data (train/graph/datasets/base.py)
    counted, opened = found.pop("counted", None), found.pop("opened", None)
    if counted is not None:
        found.update(_readable(counted, found["detail"], opened))
    return DataState(**found)


def _readable(counted: list[Path], kind: str, opened: list[Path] | None = None) -> dict:
    """state/detail/bytes of a dataset's files: unreadable (naming the file) or present."""
    for path in opened or counted:
        try:
            with path.open("rb") as fh:
                fh.read(1)
        except OSError as exc:
            return {"state": "unreadable", "detail": f"cannot read {path}: {exc.strerror}"}
    size = sum(p.stat().st_size for p in counted)
    return {"state": "present", "detail": f"{kind}, {format_bytes(size)}", "bytes": size}


def inspect_device(env: DistEnv, backend: str) -> Device:
    cpus = sorted(os.sched_getaffinity(0))
    out = Device("cpu", cpus, len(cpus), torch.get_num_threads())
    refusal = invisible_gpus(env.gpu_allocation, env.cuda_visible_devices, **torch_gpu_view())
    if refusal is not None:  # the refusal `fit` would meet, on every rank that meets it
        return dataclasses.replace(out, error=refusal)
    if backend != "nccl":
        return out
    out = dataclasses.replace(out, type="cuda")
    try:
        index = choose_device_index(env.local_rank, torch.cuda.device_count(), env.cuda_visible_devices,
                                    env.local_world_size)
    except UserError as exc:
        return dataclasses.replace(out, error=str(exc))
    out = dataclasses.replace(out, **gpu_identity(index))
    try:  # what the run will place its graph by (a stray process on the GPU shows here)
        return dataclasses.replace(out, free=torch.cuda.mem_get_info(index)[0])
    except RuntimeError as exc:  # e.g. busy or unavailable (compute mode exclusive, a fallen-off GPU)
        return dataclasses.replace(out, error=f"cuda:{index} cannot be used: {str(exc).splitlines()[0]}")


ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS",
             "NCCL_NET", "NCCL_IB_HCA", "MELLANOX_VISIBLE_DEVICES",
             "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_CPUS_PER_TASK", "SLURM_GPUS_PER_TASK")


def collect_record(env: DistEnv, config: Config, backend: str, net: Network,
                   environ: Mapping[str, str]) -> RankRecord:
    """Everything rank 0 needs to judge this rank (`net`: what `pre_rendezvous` found of the master)."""
    interfaces = local_interfaces()
    names = list(interfaces)
    master_ip = net.master_ips[0] if net.master_ips else None
    route_addr = route_source(master_ip, env.master_port) if master_ip else None
    nccl_spec, gloo_spec = environ.get("NCCL_SOCKET_IFNAME"), environ.get("GLOO_SOCKET_IFNAME")
    gloo_requested = [s.strip() for s in (gloo_spec or "").split(",") if s.strip()]
    hostname = socket.gethostname()
    if gloo_requested:  # gloo binds the named interfaces
        gloo_ifaces, gloo_addr = [n for n in gloo_requested if n in interfaces], None
    else:  # else the address its hostname resolves to, if this host can bind it, else loopback
        hostname_ips, _ = resolve_host(hostname, 0, 5.0)
        gloo_addr = next((ip for ip in hostname_ips if can_bind(ip) is None), "127.0.0.1")
        gloo_ifaces = [interface_of(gloo_addr, interfaces) or ("lo" if is_loopback(gloo_addr) else "?")]
    network = dataclasses.replace(
        net, interfaces=names, route_addr=route_addr, route_iface=interface_of(route_addr, interfaces),
        nccl_ifaces=nccl_interfaces(nccl_spec, names), gloo_ifaces=gloo_ifaces, gloo_addr=gloo_addr,
        gloo_missing=[n for n in gloo_requested if n not in interfaces])
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "torch_geometric": package_version("torch_geometric", "torch-geometric"),
                "pyg_lib": package_version("pyg_lib", "pyg-lib")}
    if backend == "nccl":
        nccl = torch.cuda.nccl.version()
        versions.update(cuda=torch.version.cuda, driver=driver_version(),
                        nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl))
    data = inspect_dataset(config.data, env.data_dir)
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
    return RankRecord(
        job=env, host=hostname, pid=os.getpid(), backend=backend, device=inspect_device(env, backend), network=network,
        data=data, run_dir=probe_run_dir(config, env), shm=probe_share_dir(config.data, env, data.bytes),
        variables={k: environ[k] for k in ENV_SHOWN if environ.get(k)},
        versions=versions, cpu_count=os.cpu_count() or 0, config_digest=digest,
        links=probe_links(environ, network.route_iface))
