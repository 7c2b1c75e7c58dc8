"""What one rank sees, before and apart from any rendezvous (side effects: sockets, files, torch).

Nothing here reads the process environment: the entry (train/doctor/cli.py) hands it down.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from train.cluster.distenv import DistEnv
from train.config import Config, DataConfig
from train.doctor.findings import (
    FAIL,
    Finding,
    interface_of,
    is_loopback,
    nccl_interfaces,
)
from train.doctor.hcas import probe_links
from train.errors import UserError
from train.graph.sharing.segments import free_bytes, planned_dir, shares_graph
from train.loop.rundir import decide
from train.storage.faults import format_bytes


def resolve_host(name: str, port: int, timeout: float) -> tuple[list[str], str | None]:
    """IPs of `name` (IPv4 first), bounded by `timeout`: a dead DNS server must not hang the doctor."""
    result: dict = {}

    def work():
        try:
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
            result["ips"] = sorted({i[4][0] for i in infos}, key=lambda ip: (":" in ip, ip))
        except OSError as exc:
            result["error"] = exc.strerror or str(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(max(timeout, 0.1))
    if thread.is_alive():
        return [], f"no answer from DNS within {timeout:.0f} s"
    return result.get("ips", []), result.get("error")


def _family(ip: str) -> int:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def can_bind(ip: str, port: int = 0, reuse: bool = False) -> str | None:
    """None when this host can bind ip:port, else the OS's reason."""
    try:
        with socket.socket(_family(ip), socket.SOCK_STREAM) as sock:
            if reuse:  # as TCPStore does: a port in TIME_WAIT from the last run counts as free
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((ip, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def probe_connect(ip: str, port: int, timeout: float) -> tuple[str, str]:
    """('open'|'refused'|'unreachable', detail). Refused means the host answered: it is reachable."""
    try:
        with socket.create_connection((ip, port), timeout=max(timeout, 0.1)):
            return "open", "accepting connections"
    except ConnectionRefusedError:
        return "refused", "host reachable, port not open yet"
    except TimeoutError:
        return "unreachable", f"no answer within {timeout:.0f} s"
    except OSError as exc:
        return "unreachable", exc.strerror or str(exc)


def route_source(ip: str, port: int) -> str | None:
    """The local address the kernel would use to reach ip (a UDP connect sends nothing)."""
    try:
        with socket.socket(_family(ip), socket.SOCK_DGRAM) as sock:
            sock.connect((ip, port))
            return sock.getsockname()[0]
    except OSError:
        return None


def local_interfaces() -> dict[str, list[str]]:
    """Interface name -> its IP addresses (psutil when present, else names only)."""
    try:
        import psutil

        return {name: [a.address.split("%")[0] for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
                for name, addrs in psutil.net_if_addrs().items()}
    except ImportError:
        return {name: [] for _, name in socket.if_nameindex()}


def pre_rendezvous(env: DistEnv, deadline: float, agent_store: bool) -> tuple[dict, list[Finding]]:
    """What a rank can check alone before the rendezvous; a FAIL here means it would hang."""
    addr, port, host = env.master_addr, env.master_port, socket.gethostname()
    where = f"{addr}:{port}"
    origin = f"from {env.sources.get('master_addr', '?')}, {env.sources.get('master_port', '?')}"
    info: dict = {"master_ips": [], "probe": None}
    ips, error = resolve_host(addr, port, deadline - time.monotonic())
    info["master_ips"] = ips
    if error or not ips:
        return info, [Finding(FAIL, "network", f"rank {env.rank} on {host}: the master address {where} ({origin}) does "
                              f"not resolve ({error}): set MASTER_ADDR to the first node's hostname "
                              "(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1) or its IP.")]
    if env.rank == 0 and not agent_store:
        if all(can_bind(ip) for ip in ips):
            return info, [Finding(FAIL, "network", f"rank 0 runs on {host}, but the master address {where} ({origin}) "
                                  f"resolves to {', '.join(ips)}, not an address of this host, so nobody would listen "
                                  f"at {where}: set MASTER_ADDR to rank 0's node ({host}).")]
        busy = can_bind("0.0.0.0", port, reuse=True)
        if busy:
            return info, [Finding(FAIL, "network", f"port {port} of the master {where} ({origin}) is not free on "
                                  f"{host} "
                                  f"({busy}): another job or a stale process holds it; choose another MASTER_PORT "
                                  "(outside the ephemeral range 32768-60999).")]
        info["probe"] = "free, rank 0 listens here"
    else:
        state, detail = probe_connect(ips[0], port, deadline - time.monotonic())
        info["probe"] = detail
        if state == "unreachable":
            return info, [Finding(FAIL, "network", f"rank {env.rank} on {host} cannot reach the master {where} "
                                  f"({ips[0]}, {origin}): {detail}. Check that MASTER_ADDR names a node of this job "
                                  "that this node can reach (firewall, wrong network) and that MASTER_PORT is the "
                                  "same on every rank.")]
    return info, []


def inspect_dataset(data: DataConfig, data_dir: str | None) -> dict:
    """Is the dataset there and readable? Never downloads (the compute node may have no internet).

    What to look at is the dataset kind's probe (train/graph/datasets/kinds.py), where it lives is the kind's folder:
    the one home of that fact. The files it names are opened here, one byte each."""
    from train.graph.datasets.loading import probe_dataset

    found = probe_dataset(data, data_dir)
    counted, opened = found.pop("counted", None), found.pop("opened", None)
    if counted is None:
        return found
    return {**found, **_readable(counted, found["detail"], opened)}


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


def probe_writable(path: Path) -> dict:
    """Can this process create `path` and write in it? A real write in the nearest existing
    ancestor: access() says yes to root even on a read-only filesystem."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    out = {"path": str(path), "writable": False, "free": None}
    if not existing.is_dir():
        return {**out, "detail": f"{existing} is a file, not a directory"}
    try:
        fd, name = tempfile.mkstemp(dir=existing, prefix=".doctor-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return {**out, "detail": f"cannot create a file in {existing}: {exc.strerror}"}
    return {**out, "writable": True, "free": shutil.disk_usage(existing).free, "detail": f"{existing} writable"}


def probe_run_dir(config: Config, env: DistEnv) -> dict:
    """`probe_writable` on the directory the run would take now (train/loop/rundir.py decides it)."""
    return probe_writable(decide(config.output.dir, env)[0])


def probe_share_dir(config: DataConfig, env: DistEnv, graph_bytes: int,
                    free: Callable[[Path], int] = free_bytes) -> dict:
    """Where this node would keep its shared graph, as the run decides (train/graph/sharing/segments.py): `need` 0
    for a rank
    alone on its node, and the folder the run would take, with its room."""
    need = graph_bytes if shares_graph(config.share, env.local_world_size) else 0
    out = {"path": str(planned_dir(config.share_dir, env.node_tmpdirs, need, free)), "total": None, "free": None}
    with contextlib.suppress(OSError):
        usage = shutil.disk_usage(out["path"])
        out.update(total=usage.total, free=usage.free)
    return {**out, "need": need}


def driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d[\d.]+)", text)
    return match.group(1) if match else None


def package_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def inspect_device(env: DistEnv, backend: str) -> dict:
    import torch

    from train.cluster.devices import choose_device_index, gpu_identity, invisible_gpus, torch_gpu_view

    cpus = sorted(os.sched_getaffinity(0))
    out: dict = {"type": "cpu", "cpus": cpus, "ncpus": len(cpus), "threads": torch.get_num_threads()}
    refusal = invisible_gpus(env.gpu_allocation, env.cuda_visible_devices, **torch_gpu_view())
    if refusal is not None:  # the refusal `fit` would meet, on every rank that meets it
        return {**out, "error": refusal}
    if backend != "nccl":
        return out
    out["type"] = "cuda"
    try:
        index = choose_device_index(env.local_rank, torch.cuda.device_count(), env.cuda_visible_devices,
                                    env.local_world_size)
    except UserError as exc:
        return {**out, "error": str(exc)}
    try:  # what the run will place its graph by (a stray process on the GPU shows here)
        free = torch.cuda.mem_get_info(index)[0]
    except RuntimeError as exc:
        return {**out, **gpu_identity(index), "error": f"cuda:{index} cannot be used: {str(exc).splitlines()[0]}"}
    return {**out, **gpu_identity(index), "free": free}


ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS",
             "NCCL_NET", "NCCL_IB_HCA", "MELLANOX_VISIBLE_DEVICES",
             "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_CPUS_PER_TASK", "SLURM_GPUS_PER_TASK")


def collect_record(env: DistEnv, config: Config, backend: str, net: dict, environ: Mapping[str, str]) -> dict:
    """Everything rank 0 needs to judge this rank, as plain JSON."""
    import torch

    interfaces = local_interfaces()
    names = list(interfaces)
    master_ip = net["master_ips"][0] if net["master_ips"] else None
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
    network = {
        "master_ips": net["master_ips"], "probe": net["probe"], "interfaces": names,
        "route_addr": route_addr, "route_iface": interface_of(route_addr, interfaces),
        "nccl_ifaces": nccl_interfaces(nccl_spec, names), "gloo_ifaces": gloo_ifaces, "gloo_addr": gloo_addr,
        "GLOO_SOCKET_IFNAME_missing": [n for n in gloo_requested if n not in interfaces],
    }
    versions = {"python": platform.python_version(), "torch": torch.__version__,
                "torch_geometric": package_version("torch_geometric", "torch-geometric"),
                "pyg_lib": package_version("pyg_lib", "pyg-lib")}
    if backend == "nccl":
        nccl = torch.cuda.nccl.version()
        versions.update(cuda=torch.version.cuda, driver=driver_version(),
                        nccl=".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl))
    data = inspect_dataset(config.data, env.data_dir)
    shm = probe_share_dir(config.data, env, data.get("bytes", 0))
    data["shm_need"] = shm.pop("need")
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
    return {
        **env.to_dict(), "host": hostname, "pid": os.getpid(), "backend": backend,
        "env": {k: environ[k] for k in ENV_SHOWN if environ.get(k)},
        "cpu_count": os.cpu_count() or 0, "device": inspect_device(env, backend),
        "network": network, "versions": versions, "data": data, "run_dir": probe_run_dir(config, env),
        "shm": shm, "config_digest": digest, "links": probe_links(environ, network["route_iface"]),
    }
