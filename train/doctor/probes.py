"""What one rank sees, before and apart from any rendezvous (side effects: sockets, files, torch).

Nothing here reads the process environment: the entry (train/doctor/cli.py) hands it down.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from train.cluster.distenv import DistEnv
from train.config import Config, DataConfig
from train.doctor.findings import (
    FAIL,
    Finding,
)
from train.doctor.records import Network, RunDir, Shm
from train.graph.sharing.segments import free_bytes, planned_dir, shares_graph
from train.loop.rundir import decide


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


def pre_rendezvous(env: DistEnv, deadline: float, agent_store: bool) -> tuple[Network, list[Finding]]:
    """What a rank can check alone before the rendezvous: the master's addresses and the probe's answer (the rest of
    its `Network` is filled by `collect_record`); a FAIL here means it would hang."""
    addr, port, host = env.master_addr, env.master_port, socket.gethostname()
    where = f"{addr}:{port}"
    origin = f"from {env.sources.get('master_addr', '?')}, {env.sources.get('master_port', '?')}"
    ips, error = resolve_host(addr, port, deadline - time.monotonic())
    info = Network(master_ips=ips)
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
        info = dataclasses.replace(info, probe="free, rank 0 listens here")
    else:
        state, detail = probe_connect(ips[0], port, deadline - time.monotonic())
        info = dataclasses.replace(info, probe=detail)
        if state == "unreachable":
            return info, [Finding(FAIL, "network", f"rank {env.rank} on {host} cannot reach the master {where} "
                                  f"({ips[0]}, {origin}): {detail}. Check that MASTER_ADDR names a node of this job "
                                  "that this node can reach (firewall, wrong network) and that MASTER_PORT is the "
                                  "same on every rank.")]
    return info, []


def probe_writable(path: Path) -> RunDir:
    """Can this process create `path` and write in it? A real write in the nearest existing
    ancestor: access() says yes to root even on a read-only filesystem."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return RunDir(str(path), False, detail=f"{existing} is a file, not a directory")
    try:
        fd, name = tempfile.mkstemp(dir=existing, prefix=".doctor-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return RunDir(str(path), False, detail=f"cannot create a file in {existing}: {exc.strerror}")
    return RunDir(str(path), True, shutil.disk_usage(existing).free, f"{existing} writable")


def probe_run_dir(config: Config, env: DistEnv) -> RunDir:
    """`probe_writable` on the directory the run would take now (train/loop/rundir.py decides it)."""
    return probe_writable(decide(config.output.dir, env)[0])


def probe_share_dir(config: DataConfig, env: DistEnv, graph_bytes: int,
                    free: Callable[[Path], int] = free_bytes) -> Shm:
    """Where this node would keep its shared graph, as the run decides (train/graph/sharing/segments.py): the
    folder the run would take, with its room, and `need` (0 for a rank alone on its node)."""
    need = graph_bytes if shares_graph(config.share, env.local_world_size) else 0
    path = str(planned_dir(config.share_dir, env.node_tmpdirs, need, free))
    with contextlib.suppress(OSError):
        usage = shutil.disk_usage(path)
        return Shm(path, usage.total, usage.free, need)
    return Shm(path, need=need)


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
