"""What each rank tells rank 0 (`RankRecord`), typed: the checks (checks.py) and the table (table.py) read these
fields, never a dict by string keys. A record travels through the store as JSON (`to_json`, `from_json`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from train.cluster.distenv import DistEnv


@dataclass(frozen=True)
class Device:
    """The device a rank would train on, and the CPU cores it is bound to."""

    type: str = "cpu"  # cpu | cuda
    cpus: list[int] = field(default_factory=list)  # the cores it may run on (sched_getaffinity)
    ncpus: int = 0
    threads: int = 1  # torch's intra-op threads
    error: str | None = None  # the refusal `fit` would meet (a GPU it cannot see, two tasks on one GPU)
    index: int | None = None  # cuda: the device index, and its identity (train/cluster/devices.py gpu_identity)
    name: str | None = None
    memory: int | None = None
    bus_id: str | None = None
    uuid: str | None = None
    free: int | None = None  # cuda: its free memory now (torch.cuda.mem_get_info): a stray process on it shows here

    def gpu_key(self) -> str:
        """What tells two ranks' GPUs apart: the UUID, else the PCI bus, else the index."""
        return self.uuid or self.bus_id or str(self.index)


@dataclass(frozen=True)
class Network:
    """How this rank reaches the master, and what NCCL and gloo would use."""

    master_ips: list[str] = field(default_factory=list)  # what MASTER_ADDR resolves to here
    probe: str | None = None  # what the connection probe found
    interfaces: list[str] = field(default_factory=list)
    route_addr: str | None = None  # the source address towards the master
    route_iface: str | None = None
    nccl_ifaces: list[str] = field(default_factory=list)
    gloo_ifaces: list[str] = field(default_factory=list)
    gloo_addr: str | None = None  # where gloo would listen (None: the interfaces GLOO_SOCKET_IFNAME names)
    gloo_missing: list[str] = field(default_factory=list)  # GLOO_SOCKET_IFNAME's names that are no interface here

    def missing(self, variable: str) -> list[str]:
        """The interfaces `variable` (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) names that this node lacks."""
        return self.gloo_missing if variable == "GLOO_SOCKET_IFNAME" else []


@dataclass(frozen=True)
class Hca:
    """One active InfiniBand/RoCE port ("mlx5_0:1") and its rate in Gb/s."""

    name: str
    gbps: float


@dataclass(frozen=True)
class Links:
    """What NCCL could use between nodes, as one rank sees its node (train/doctor/hcas.py probes it,
    train/doctor/links.py judges it)."""

    hcas: list[Hca] = field(default_factory=list)  # the active ports
    devices: bool = False  # whether the HCAs' device files are in the container (/dev/infiniband)
    iface: str | None = None  # the interface that reaches the master, and its speed in Mb/s (None: unknown)
    iface_mbps: int | None = None
    nccl_net: str | None = None  # NCCL_NET, NCCL_IB_HCA, NCCL_IB_DISABLE=1: what steers NCCL's choice
    ib_hca: str | None = None
    ib_disable: bool = False

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Links:
        """The links `dataclasses.asdict` gave (its HCAs as dicts)."""
        return cls(**{**raw, "hcas": [Hca(**h) for h in raw["hcas"]]})


@dataclass(frozen=True)
class DataState:
    """The dataset as the rank finds it (its kind's probe, train/graph/datasets/base.py), never downloaded."""

    name: str
    state: str  # generated | missing | unreadable | present
    detail: str = ""
    root: str = "-"
    dir: str = "-"
    fix: str = ""  # what to do where the kind knows better than `make data`
    bytes: int = 0


@dataclass(frozen=True)
class RunDir:
    """Whether the run directory could be written, and its room."""

    path: str
    writable: bool
    free: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Shm:
    """The node's share directory (/dev/shm, or node-local disk) and its room (None where unknown), and what
    data.share=node would keep there (`need`: 0 where nothing is shared)."""

    path: str = "/dev/shm"
    total: int | None = None
    free: int | None = None
    need: int = 0


@dataclass(frozen=True)
class RankRecord:
    """Everything rank 0 needs to judge one rank: where it sits in the job (its DistEnv), its host, device,
    network, software, data and folders."""

    job: DistEnv  # where it sits in the job, and which variable gave each value (`sources`)
    host: str
    pid: int
    backend: str
    device: Device
    network: Network
    data: DataState
    run_dir: RunDir
    shm: Shm = field(default_factory=Shm)
    links: Links = field(default_factory=Links)
    variables: dict[str, str] = field(default_factory=dict)  # the environment variables shown (probes.ENV_SHOWN)
    versions: dict[str, str | None] = field(default_factory=dict)  # python, torch, ..., cuda, nccl, driver
    cpu_count: int = 0
    config_digest: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (the job's `sources` as a dict: DistEnv.to_dict)."""
        parts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**parts, "job": self.job.to_dict(),
                **{name: dataclasses.asdict(part) for name, part in parts.items() if dataclasses.is_dataclass(part)
                   and name != "job"}}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RankRecord:
        """The record `to_json` gave (through the store)."""
        parts = {"device": Device, "network": Network, "data": DataState, "run_dir": RunDir, "shm": Shm}
        job = raw["job"]  # JSON has no tuples: DistEnv's are made again
        job = DistEnv(**{**job, "node_tmpdirs": tuple(job["node_tmpdirs"]),
                         "gpu_allocation": tuple(map(tuple, job["gpu_allocation"]))})
        made = {name: kind(**raw[name]) for name, kind in parts.items()}
        return cls(**{**raw, "job": job, **made, "links": Links.from_json(raw["links"])})  # nested: its HCAs
