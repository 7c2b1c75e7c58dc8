"""`python -m train doctor`: check the allocation on every rank before a long run.

Each rank collects one record (its env contract, device, network view, data and run dir)
and checks alone what it can before any rendezvous: the master address resolves, it is
reachable, the port is free on rank 0's host. A bad MASTER_ADDR thus fails fast, with a
message naming address and port, instead of hanging. The records then go to rank 0 through
the TCPStore itself, not through a process group, so the table still appears when the
collective backend is what is broken. Rank 0 runs the cross-rank checks (pure functions over
the records, below), prints one table, and only when every check passed times an all-reduce
and a barrier over the real backend (gloo on CPU, NCCL on GPUs).

Exit status: 0 all checks passed (warnings allowed), 1 a check failed, 2 a usage error.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from train.cli_fit import add_config_arguments
from train.config import Config, DataConfig, load_config
from train.distenv import DistEnv, resolve
from train.errors import UserError

FAIL, WARN, OK = "FAIL", "warn", "ok"
DEFAULT_TIMEOUT = 120.0  # seconds for the pre-checks plus the rendezvous; pyxis may start nodes seconds apart
CPU_SIZES = "64K,1M,16M"
GPU_SIZES = "1M,64M,512M"
MIN_FREE_BYTES = 1 << 30  # warn when the run dir's filesystem has less free space than this
SHM_MARGIN = 1.25  # /dev/shm should hold the shared graph with this much headroom
EXIT_FAILED = 1
_PLANETOID = ("Cora", "CiteSeer", "PubMed")  # train.data keeps these under <root>/Planetoid/<name>


# ---- findings and small pure helpers -----------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """One check's verdict; a FAIL message says what to change."""

    level: str  # ok | warn | FAIL
    check: str  # contract | devices | network | data | rundir | versions | rendezvous | bandwidth
    message: str

    def line(self) -> str:
        return f"{self.level:<4}  {self.check:<9} {self.message}"


def failed(findings: list[Finding]) -> bool:
    return any(f.level == FAIL for f in findings)


def rank_list(ranks) -> str:
    """[2, 3] -> 'ranks 2 and 3'; [1] -> 'rank 1'; [0, 1, 2, 3] -> 'ranks 0-3'."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def format_cpus(cpus) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the form of taskset and --cpu-bind)."""
    cpus, parts = sorted(cpus), []
    for cpu in cpus:
        if parts and cpu == parts[-1][1] + 1:
            parts[-1][1] = cpu
        else:
            parts.append([cpu, cpu])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in parts) or "-"


def format_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def parse_sizes(text: str) -> list[int]:
    """'64K,1M,1G' -> byte counts (binary units, as nccl-tests' -b/-e)."""
    sizes = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", item, re.IGNORECASE)
        if not match or int(match.group(1)) == 0:
            raise UserError(f"--sizes item {item.strip()!r} is not a size; expected e.g. --sizes 64K,1M,16M.")
        sizes.append(int(match.group(1)) * 1024 ** " KMG".index(match.group(2).upper() or " "))
    return sizes


def allreduce_bandwidth(nbytes: int, seconds: float, world_size: int) -> tuple[float, float | None]:
    """(algbw, busbw) in GB/s as nccl-tests reports them: algbw = size / time, and the bus
    bandwidth busbw = algbw * 2(n-1)/n, comparable with the link speed; None for one rank."""
    algbw = nbytes / seconds / 1e9 if seconds > 0 else float("inf")
    busbw = algbw * 2 * (world_size - 1) / world_size if world_size > 1 else None
    return algbw, busbw


def nccl_interfaces(spec: str | None, names: list[str]) -> list[str]:
    """The interfaces NCCL's socket transport would use, by its rules for NCCL_SOCKET_IFNAME:
    unset -> ib* first, else all but lo and docker*, else lo; `^a,b` excludes these prefixes;
    `=a,b` names exact interfaces; `a,b` are prefixes."""
    if not spec:
        ib = [n for n in names if n.startswith("ib")]
        rest = [n for n in names if not n.startswith(("lo", "docker"))]
        return ib or rest or [n for n in names if n.startswith("lo")]
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = [s.strip() for s in spec.split(",") if s.strip()]
    return [n for n in names if any(n == i if exact else n.startswith(i) for i in items) != exclude]


def interface_of(address: str | None, interfaces: Mapping[str, list[str]]) -> str | None:
    for name, addrs in interfaces.items():
        if address in addrs:
            return name
    return None


def is_loopback(address: str | None) -> bool:
    return bool(address) and (address.startswith("127.") or address == "::1")


def synthetic_graph_bytes(data: DataConfig) -> int:
    """Rough in-memory size of the synthetic graph: features, labels, edge_index and CSC."""
    edges = int(data.num_nodes * data.avg_degree)
    return data.num_nodes * (data.num_features * 4 + 16) + edges * 32


def by_host(records: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r["host"]].append(r)
    return dict(groups)


def _agreement(records: list[dict], value, describe) -> list[str]:
    """['ranks 0 and 1: X', 'rank 2: Y'] for the distinct values of value(record)."""
    groups: dict = defaultdict(list)
    for r in records:
        groups[value(r)].append(r)
    return [f"{rank_list(r['rank'] for r in rs)}: {describe(rs[0])}" for rs in groups.values()]


# ---- the checks: pure functions of the gathered records ----------------------------------------
def check_contract(records: list[dict], expected_world: int) -> list[Finding]:
    """World size, master, ranks and local ranks agree and are complete."""
    out: list[Finding] = []
    if len({r["world_size"] for r in records}) > 1:
        says = _agreement(records, lambda r: r["world_size"],
                          lambda r: f"{r['world_size']} (from {r['sources'].get('world_size')})")
        out.append(Finding(FAIL, "contract", "ranks disagree on the world size: " + "; ".join(says)
                           + ". Start every task from one srun (or torchrun) and don't export WORLD_SIZE "
                             "left over from another job."))
    if len({(r["master_addr"], r["master_port"]) for r in records}) > 1:
        says = _agreement(records, lambda r: (r["master_addr"], r["master_port"]),
                          lambda r: f"{r['master_addr']}:{r['master_port']} (from "
                                    f"{r['sources'].get('master_addr')}, {r['sources'].get('master_port')})")
        out.append(Finding(FAIL, "contract", "ranks disagree on the master: " + "; ".join(says)
                           + ". Set MASTER_ADDR and MASTER_PORT once in the batch script, before srun."))
    counts = Counter(r["rank"] for r in records)
    for rank, n in sorted(counts.items()):
        if n > 1:
            who = ", ".join(f"{r['host']} pid {r['pid']}" for r in records if r["rank"] == rank)
            out.append(Finding(FAIL, "contract", f"rank {rank} is claimed by {n} processes ({who}): every "
                               f"task needs its own RANK; don't export RANK to all tasks (srun sets SLURM_PROCID)."))
    outside = sorted(r for r in counts if r >= expected_world)
    if outside:
        out.append(Finding(FAIL, "contract", f"{rank_list(outside)} are outside 0..{expected_world - 1} "
                           f"(rank 0 says WORLD_SIZE={expected_world})."))
    missing = sorted(set(range(expected_world)) - set(counts))
    if missing:
        master = records[0]
        out.append(Finding(FAIL, "contract", f"{rank_list(missing)} of {expected_world} never reached the master "
                           f"at {master['master_addr']}:{master['master_port']}: check that srun started every "
                           "task (--ntasks) and that they see the same MASTER_ADDR/MASTER_PORT."))
    complete = not missing and not outside and all(n == 1 for n in counts.values())
    hosts = by_host(records)
    for host, rs in sorted(hosts.items()):
        local = Counter(r["local_rank"] for r in rs)
        for local_rank, n in sorted(local.items()):
            if n > 1:
                dup = [r for r in rs if r["local_rank"] == local_rank]
                both = "both" if n == 2 else "all"
                out.append(Finding(FAIL, "contract", f"{rank_list(r['rank'] for r in dup)} on node {host} {both} "
                                   f"have local rank {local_rank} (from {dup[0]['sources'].get('local_rank')}): give "
                                   "each task on a node its own local rank 0..N-1; don't export LOCAL_RANK to all "
                                   "tasks (srun sets SLURM_LOCALID, torchrun sets LOCAL_RANK)."))
        sizes = {r["local_world_size"] for r in rs}
        if complete and sizes != {len(rs)}:
            said = "/".join(map(str, sorted(sizes)))
            out.append(Finding(FAIL, "contract", f"node {host} runs {len(rs)} tasks ({rank_list(r['rank'] for r in rs)}) "
                               f"but their local world size is {said} (from {rs[0]['sources'].get('local_world_size')}): "
                               "ask for the same number of tasks on every node (--ntasks-per-node)."))
        elif complete and all(n == 1 for n in local.values()) and set(local) != set(range(len(rs))):
            out.append(Finding(FAIL, "contract",
                               f"local ranks on node {host} are {sorted(local)}; expected 0..{len(rs) - 1}."))
        if len({r["node_rank"] for r in rs}) > 1:
            out.append(Finding(FAIL, "contract", f"ranks on node {host} disagree on the node rank: "
                               + "; ".join(_agreement(rs, lambda r: r["node_rank"], lambda r: str(r["node_rank"])))
                               + "."))
    node_ranks: dict[int, set[str]] = defaultdict(set)
    for r in records:
        node_ranks[r["node_rank"]].add(r["host"])
    for node_rank, names in sorted(node_ranks.items()):
        if len(names) > 1:
            both = "both" if len(names) == 2 else "all"
            out.append(Finding(FAIL, "contract", f"nodes {', '.join(sorted(names))} {both} claim node rank {node_rank}: "
                               "don't export NODE_RANK/GROUP_RANK to every node (srun sets SLURM_NODEID)."))
    num_nodes = {r["num_nodes"] for r in records}
    if complete and num_nodes != {len(hosts)}:
        out.append(Finding(FAIL, "contract", f"the job says {'/'.join(map(str, sorted(num_nodes)))} node(s) (from "
                           f"{records[0]['sources'].get('num_nodes')}) but tasks run on {len(hosts)} "
                           f"({', '.join(sorted(hosts))}): check -N and --ntasks-per-node."))
    if not out:
        first = records[0]
        out.append(Finding(OK, "contract", f"{len(records)} rank(s) on {len(hosts)} node(s) agree on world size "
                           f"{first['world_size']} and master {first['master_addr']}:{first['master_port']}; "
                           "ranks and local ranks unique and complete"))
    return out


def check_devices(records: list[dict]) -> list[Finding]:
    """One GPU per rank on each node; the same CUDA/NCCL everywhere; CPU cores not oversubscribed."""
    out: list[Finding] = []
    for r in records:
        if r["device"].get("error"):
            out.append(Finding(FAIL, "devices", f"rank {r['rank']} on {r['host']}: {r['device']['error']}"))
    for host, rs in sorted(by_host(records).items()):
        gpus: dict[str, list[dict]] = defaultdict(list)
        for r in rs:
            dev = r["device"]
            if dev.get("type") == "cuda" and not dev.get("error"):
                gpus[dev.get("uuid") or dev.get("bus_id") or str(dev.get("index"))].append(r)
        for users in gpus.values():
            if len(users) > 1:
                dev = users[0]["device"]
                both = "both" if len(users) == 2 else "all"
                out.append(Finding(FAIL, "devices", f"{rank_list(r['rank'] for r in users)} on node {host} {both} use "
                                   f"GPU {dev.get('index')} (bus {dev.get('bus_id')}, CUDA_VISIBLE_DEVICES="
                                   f"{users[0]['env'].get('CUDA_VISIBLE_DEVICES', '<unset>')}): drop --gpu-bind or use "
                                   "--gpus-per-task=1, and run at most one task per GPU."))
        bound = [r for r in rs if r["device"].get("ncpus", 0) < r.get("cpu_count", 0)]
        for i, a in enumerate(bound):
            for b in bound[i + 1:]:
                shared = set(a["device"]["cpus"]) & set(b["device"]["cpus"])
                if shared:
                    out.append(Finding(WARN, "devices", f"ranks {a['rank']} and {b['rank']} on node {host} are bound to "
                                       f"the same cores ({format_cpus(shared)}): use --cpus-per-task with --cpu-bind=cores."))
        threads = sum(r["device"].get("threads", 1) for r in rs)
        cores = max(r.get("cpu_count", 0) for r in rs)
        if cores and threads > cores:
            out.append(Finding(WARN, "devices", f"node {host}: {len(rs)} ranks x {rs[0]['device'].get('threads')} "
                               f"threads on {cores} cores oversubscribe the CPU: set OMP_NUM_THREADS (torchrun and "
                               "enroot's hook set 1) or give each task --cpus-per-task."))
    for key, level in (("cuda", FAIL), ("nccl", FAIL), ("driver", WARN)):
        seen = {r["versions"].get(key) for r in records if r["versions"].get(key)}
        if len(seen) > 1:
            says = _agreement(records, lambda r, k=key: r["versions"].get(k), lambda r, k=key: str(r["versions"].get(k)))
            out.append(Finding(level, "devices", f"{key} versions differ: " + "; ".join(says) + ": use the same image "
                               "and driver on every node."))
    if not failed(out):
        kinds = Counter(r["device"].get("name") or r["device"].get("type") for r in records)
        out.append(Finding(OK, "devices", ", ".join(f"{n} x {k}" for k, n in kinds.items())
                           + (", one GPU per rank" if any(r["device"].get("type") == "cuda" for r in records) else "")))
    return out


def check_network(records: list[dict]) -> list[Finding]:
    """Interfaces named in NCCL/GLOO_SOCKET_IFNAME exist; across nodes nothing goes over loopback."""
    out: list[Finding] = []
    multi = len(by_host(records)) > 1
    master_host = next((r["host"] for r in records if r["rank"] == 0), None)
    for r in records:
        net, host, backend = r["network"], r["host"], r["backend"]
        names = ", ".join(net["interfaces"]) or "none"
        route = net.get("route_iface") or "?"
        for var, chosen, used in (("NCCL_SOCKET_IFNAME", net["nccl_ifaces"], backend == "nccl"),
                                  ("GLOO_SOCKET_IFNAME", net["gloo_ifaces"], backend == "gloo")):
            value = r["env"].get(var)
            if value and (not chosen or net.get(f"{var}_missing")):
                bad = net.get(f"{var}_missing") or [value]
                out.append(Finding(FAIL if used else WARN, "network",
                                   f"{var}={value} names no interface of node {host} ({', '.join(bad)} missing; it has "
                                   f"{names}): set it to the interface that reaches the master ({route})."))
        if multi:
            if host != master_host and any(is_loopback(ip) for ip in net["master_ips"]):
                out.append(Finding(FAIL, "network", f"MASTER_ADDR={r['master_addr']} resolves to "
                                   f"{', '.join(net['master_ips'])} (loopback) on node {host}, not rank 0's node "
                                   f"{master_host}: set MASTER_ADDR to the first node's hostname."))
            elif backend == "gloo" and is_loopback(net.get("gloo_addr")):
                out.append(Finding(FAIL, "network", f"on node {host} the hostname resolves to {net['gloo_addr']}, so gloo "
                                   f"would listen on loopback where other nodes cannot connect: set GLOO_SOCKET_IFNAME="
                                   f"{route} (the interface that reaches the master)."))
            elif backend == "nccl" and net["nccl_ifaces"] and all(n.startswith("lo") for n in net["nccl_ifaces"]):
                out.append(Finding(FAIL, "network", f"on node {host} NCCL would use loopback "
                                   f"({', '.join(net['nccl_ifaces'])}) "
                                   f"but the job spans several nodes: set NCCL_SOCKET_IFNAME={route}."))
    if len({tuple(r["network"]["master_ips"]) for r in records}) > 1:
        says = _agreement(records, lambda r: tuple(r["network"]["master_ips"]),
                          lambda r: ", ".join(r["network"]["master_ips"]))
        out.append(Finding(WARN, "network", f"MASTER_ADDR={records[0]['master_addr']} resolves differently: "
                           + "; ".join(says) + "; use one IP or fix /etc/hosts."))
    if not failed(out):
        r0 = records[0]
        net = r0["network"]
        via = sorted({f"{r['network'].get('route_iface') or '?'}" for r in records})
        backend_ifaces = sorted({",".join(r["network"]["nccl_ifaces" if r["backend"] == "nccl" else "gloo_ifaces"])
                                 for r in records})
        out.append(Finding(OK, "network", f"master {r0['master_addr']}:{r0['master_port']} "
                           f"({', '.join(net['master_ips'])}) reached from every rank via {', '.join(via)}; "
                           f"{r0['backend']} would use {' / '.join(backend_ifaces) or '?'}"))
    return out


def check_environment(records: list[dict]) -> list[Finding]:
    """Dataset readable, run dir writable, space on disk and in /dev/shm, same software everywhere."""
    out: list[Finding] = []
    for state in ("missing", "unreadable"):
        rs = [r for r in records if r["data"]["state"] == state]
        if rs:
            d = rs[0]["data"]
            hosts = ", ".join(sorted({r["host"] for r in rs}))
            out.append(Finding(FAIL, "data", f"dataset {d['name']!r} is {state} under {d['dir']} for "
                               f"{rank_list(r['rank'] for r in rs)} ({hosts}): {d['detail']}. Prepare it on a login node "
                               f"with `python -m train data --config ...` (make data) into the same data.root/DATA_DIR "
                               f"({d['root']}), on storage every node mounts."))
    for r in records:
        run = r["run_dir"]
        if not run["writable"]:
            level = FAIL if r["rank"] == 0 else WARN
            why = "" if r["rank"] == 0 else " (rank 0 writes; every rank reads checkpoints on resume)"
            out.append(Finding(level, "rundir", f"run dir {run['path']} is not writable from rank {r['rank']} on "
                               f"{r['host']}{why}: {run['detail']}; set output.dir= to a writable directory on "
                               "shared storage."))
    for host, rs in sorted(by_host(records).items()):
        r = rs[0]
        free = r["run_dir"].get("free")
        if r["run_dir"]["writable"] and free is not None and free < MIN_FREE_BYTES:
            out.append(Finding(WARN, "rundir", f"only {format_bytes(free)} free for {r['run_dir']['path']} on {host}: "
                               "checkpoints and metrics may not fit."))
        shm, need = r.get("shm") or {}, r["data"].get("shm_need", 0)
        if need and shm.get("free") is not None and shm["free"] < need * SHM_MARGIN:
            out.append(Finding(WARN, "data", f"{shm.get('path', '/dev/shm')} on {host} has {format_bytes(shm['free'])} "
                               f"free (of {format_bytes(shm['total'])}) but data.share=node keeps about "
                               f"{format_bytes(need)} of {r['data']['name']} there: give the job a larger /dev/shm "
                               "(docker --shm-size; enroot/pyxis mount the host's), point data.share_dir at node-local "
                               "disk, or set data.share=process."))
    for key in ("python", "torch", "torch_geometric", "pyg_lib"):
        if len({r["versions"].get(key) for r in records}) > 1:
            says = _agreement(records, lambda r, k=key: r["versions"].get(k),
                              lambda r, k=key: f"{r['versions'].get(k) or 'none'} on {r['host']}")
            out.append(Finding(FAIL, "versions", f"{key} differs across ranks: " + "; ".join(says)
                               + ". Run every node from the same image."))
    if len({r["config_digest"] for r in records}) > 1:
        out.append(Finding(FAIL, "versions", "ranks were given different configs: "
                           + "; ".join(_agreement(records, lambda r: r["config_digest"],
                                                  lambda r: r["config_digest"]))
                           + ". Pass the same --config and overrides to every task."))
    if not failed(out):
        r0 = records[0]
        v = r0["versions"]
        out.append(Finding(OK, "versions", f"python {v['python']}, torch {v['torch']}, torch_geometric "
                           f"{v.get('torch_geometric') or '-'}, pyg_lib {v.get('pyg_lib') or '-'} on every rank; dataset "
                           f"{r0['data']['name']} {r0['data']['state']}; run dir {r0['run_dir']['path']} writable"))
    return out


def run_checks(records: list[dict], expected_world: int) -> list[Finding]:
    records = sorted(records, key=lambda r: (r["rank"], r["host"], r["pid"]))
    return (check_contract(records, expected_world) + check_devices(records)
            + check_network(records) + check_environment(records))


# ---- the table ---------------------------------------------------------------------------------
def format_rows(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows])


def device_cell(dev: dict) -> str:
    if dev.get("error"):
        return "ERROR"
    if dev.get("type") == "cuda":
        return f"cuda:{dev['index']} {dev.get('name')} {format_bytes(dev.get('memory'))} {dev.get('bus_id')}"
    return "cpu"


def format_table(records: list[dict]) -> str:
    """One row per rank, then where the contract's values came from and the software versions."""
    records = sorted(records, key=lambda r: (r["rank"], r["host"], r["pid"]))
    header = ["rank", "host", "node", "local", "pid", "device", "CUDA_VISIBLE_DEVICES", "cores", "to master",
              "backend ifaces", "data", "run dir"]
    rows = []
    for r in records:
        net = r["network"]
        ifaces = net["nccl_ifaces"] if r["backend"] == "nccl" else net["gloo_ifaces"]
        run = r["run_dir"]
        rows.append([
            str(r["rank"]), r["host"], str(r["node_rank"]), f"{r['local_rank']}/{r['local_world_size']}", str(r["pid"]),
            device_cell(r["device"]), r["env"].get("CUDA_VISIBLE_DEVICES", "-"),
            f"{format_cpus(r['device'].get('cpus', []))} x{r['device'].get('threads', '?')}",
            f"{net.get('route_iface') or '?'} {net.get('route_addr') or ''}".strip(),
            f"{r['backend']}:{','.join(ifaces) or '-'}",
            r["data"]["state"], ("ok " + format_bytes(run.get("free")) + " free") if run["writable"] else "NOT WRITABLE",
        ])
    lines = [format_rows(header, rows), ""]
    sources: dict[str, list[int]] = defaultdict(list)
    for r in records:
        sources[", ".join(f"{k}<-{v}" for k, v in r["sources"].items())].append(r["rank"])
    for text, ranks in sources.items():
        scope = "every rank" if len(sources) == 1 else rank_list(ranks)
        lines.append(f"sources ({scope}): {text}")
    versions: dict[str, list[int]] = defaultdict(list)
    for r in records:
        versions[", ".join(f"{k} {v or '-'}" for k, v in r["versions"].items())].append(r["rank"])
    for text, ranks in versions.items():
        scope = "every rank" if len(versions) == 1 else rank_list(ranks)
        lines.append(f"versions ({scope}): {text}")
    for host, rs in sorted(by_host(records).items()):
        shm, env = rs[0].get("shm") or {}, rs[0]["env"]
        extras = " ".join(f"{k}={v}" for k, v in env.items() if k.endswith("SOCKET_IFNAME"))
        lines.append(f"node {host}: {shm.get('path', '/dev/shm')} {format_bytes(shm.get('free'))} free of "
                     f"{format_bytes(shm.get('total'))}"
                     f"; interfaces {', '.join(rs[0]['network']['interfaces'])}{'; ' + extras if extras else ''}")
    return "\n".join(lines)


def format_bandwidth(rows: list[tuple[int, float]], world_size: int, backend: str, iters: int,
                     barrier_seconds: float, barrier_count: int) -> str:
    table = []
    for nbytes, seconds in rows:
        algbw, busbw = allreduce_bandwidth(nbytes, seconds, world_size)
        table.append([format_bytes(nbytes), f"{seconds * 1e3:.3f} ms", f"{algbw:.2f} GB/s",
                      f"{busbw:.2f} GB/s" if busbw is not None else "n/a (1 rank)"])
    return (f"all-reduce over {backend}, {world_size} rank(s), float32, mean of {iters} iterations, slowest rank:\n"
            + format_rows(["size", "time", "algbw", "busbw"], table)
            + f"\nbarrier latency: {barrier_seconds * 1e6:.0f} us (median of {barrier_count})")


# ---- what one rank sees (side effects: sockets, files, torch) ----------------------------------
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
            return info, [Finding(FAIL, "network", f"port {port} of the master {where} ({origin}) is not free on {host} "
                                  f"({busy}): another job or a stale process holds it; choose another MASTER_PORT "
                                  "(outside the ephemeral range 32768-60999).")]
        info["probe"] = "free, rank 0 listens here"
    else:
        state, detail = probe_connect(ips[0], port, deadline - time.monotonic())
        info["probe"] = detail
        if state == "unreachable":
            return info, [Finding(FAIL, "network", f"rank {env.rank} on {host} cannot reach the master {where} ({ips[0]}, "
                                  f"{origin}): {detail}. Check that MASTER_ADDR names a node of this job that this node "
                                  "can reach (firewall, wrong network) and that MASTER_PORT is the same on every rank.")]
    return info, []


def inspect_dataset(data: DataConfig, environ: Mapping[str, str]) -> dict:
    """Is the dataset there and readable? Never downloads (the compute node may have no internet)."""
    if data.name == "synthetic":
        return {"name": data.name, "state": "generated", "root": "-", "dir": "-",
                "detail": "generated from data.seed", "bytes": synthetic_graph_bytes(data)}
    from train.data import check_dataset_name, data_root  # imports PyG: only for real datasets

    check_dataset_name(data.name)
    root = data_root(data, environ)
    directory = root / "Planetoid" / data.name if data.name in _PLANETOID else root / data.name
    out = {"name": data.name, "root": str(root), "dir": str(directory)}
    processed = sorted(p for p in (directory / "processed").glob("*") if p.is_file())
    raw = sorted(p for p in (directory / "raw").glob("*") if p.is_file())
    if not processed and not raw:
        return {**out, "state": "missing", "detail": "no files in its processed/ or raw/ folder"}
    for path in processed + raw:
        try:
            with path.open("rb") as fh:
                fh.read(1)
        except OSError as exc:
            return {**out, "state": "unreadable", "detail": f"cannot read {path}: {exc.strerror}"}
    size = sum(p.stat().st_size for p in (processed or raw))
    kind = "processed" if processed else "raw only (processed on first load)"
    return {**out, "state": "present", "detail": f"{kind}, {format_bytes(size)}", "bytes": size}


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


def inspect_device(env: DistEnv, backend: str, environ: Mapping[str, str]) -> dict:
    import torch

    from train.distributed import choose_device_index

    cpus = sorted(os.sched_getaffinity(0))
    out: dict = {"type": "cpu", "cpus": cpus, "ncpus": len(cpus), "threads": torch.get_num_threads()}
    if backend != "nccl":
        return out
    out["type"] = "cuda"
    try:
        index = choose_device_index(env.local_rank, torch.cuda.device_count(), environ)
    except UserError as exc:
        return {**out, "error": str(exc)}
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    bus_id = (f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
              if bus is not None else None)
    return {**out, "index": index, "name": props.name, "memory": props.total_memory, "bus_id": bus_id,
            "uuid": str(getattr(props, "uuid", "") or "")}


ENV_SHOWN = ("CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS",
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
    data = inspect_dataset(config.data, environ)
    data["shm_need"] = data.get("bytes", 0) if config.data.share == "node" else 0
    shm = {"path": config.data.share_dir or "/dev/shm", "total": None, "free": None}  # where data.share=node maps the graph
    try:
        usage = shutil.disk_usage(shm["path"])
        shm.update(total=usage.total, free=usage.free)
    except OSError:
        pass
    run_path = Path(config.output.dir) if config.output.dir else Path("runs")
    digest = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
    return {
        **env.to_dict(), "host": hostname, "pid": os.getpid(), "backend": backend,
        "env": {k: environ[k] for k in ENV_SHOWN if environ.get(k)},
        "cpu_count": os.cpu_count() or 0, "device": inspect_device(env, backend, environ),
        "network": network, "versions": versions, "data": data, "run_dir": probe_writable(run_path),
        "shm": shm, "config_digest": digest,
    }


# ---- rendezvous through the TCPStore, and the timed collectives --------------------------------
class Unreachable(Exception):
    """The rendezvous did not complete in time; the message names address and port."""


def _wait_until(predicate, deadline: float, step: float = 0.05) -> bool:
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def open_store(env: DistEnv, deadline: float, timeout: float, agent_store: bool):
    """Rank 0 serves the TCPStore (unless torchrun's agent already does); the others wait, with
    plain sockets and a deadline, until it accepts connections, then connect."""
    import datetime

    import torch.distributed as dist

    where = f"{env.master_addr}:{env.master_port}"
    store_timeout = datetime.timedelta(seconds=timeout)
    if env.rank == 0 and not agent_store:
        try:
            return dist.TCPStore(env.master_addr, env.master_port, is_master=True, wait_for_workers=False,
                                 timeout=store_timeout)
        except (RuntimeError, OSError) as exc:
            raise Unreachable(f"rank 0 could not listen at {where}: {str(exc).splitlines()[0]}") from None
    ip = resolve_host(env.master_addr, env.master_port, 5.0)[0][0]
    if not _wait_until(lambda: probe_connect(ip, env.master_port, 1.0)[0] == "open", deadline, 0.1):
        raise Unreachable(f"rank {env.rank} on {socket.gethostname()}: nobody listens at the master {where} "
                          f"after {timeout:.0f} s: is rank 0 running (srun --ntasks, every task started)? Does "
                          "MASTER_ADDR name rank 0's node, and is MASTER_PORT the same on every rank?")
    # The client retries with back-off past its own timeout; a thread holds it to the deadline.
    result: dict = {}

    def connect():
        try:
            result["store"] = dist.TCPStore(env.master_addr, env.master_port, is_master=False, timeout=store_timeout)
        except (RuntimeError, OSError) as exc:
            result["error"] = str(exc).splitlines()[0]

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(max(deadline - time.monotonic(), 1.0))
    if "store" not in result:
        why = result.get("error", f"no valid answer within {timeout:.0f} s")
        raise Unreachable(f"rank {env.rank} could not connect to the master {where} ({why}): something that is not "
                          "rank 0's store answers there; check MASTER_ADDR and MASTER_PORT.")
    return result["store"]


def gather_records(store, env: DistEnv, record: dict, deadline: float) -> list[dict]:
    """Every process adds itself to a counter and stores its record under its arrival number,
    so duplicate or surplus ranks show up instead of overwriting each other. Rank 0 waits for
    WORLD_SIZE arrivals or the deadline, and returns what arrived."""
    seq = store.add("arrived", 1)
    store.set(f"record/{seq}", json.dumps(record))
    if env.rank != 0:
        return []
    _wait_until(lambda: store.add("arrived", 0) >= env.world_size, deadline)
    count = store.add("arrived", 0)
    records = []
    for i in range(1, count + 1):
        if _wait_until(lambda: store.check([f"record/{i}"]), time.monotonic() + 5.0):
            records.append(json.loads(store.get(f"record/{i}")))
    return records


def time_collectives(sizes: list[int], iters: int, device, barriers: int = 20) -> tuple[list[tuple[int, float]], float]:
    """Mean time per all-reduce for each size (the slowest rank's) and the median barrier latency."""
    import statistics

    import torch
    import torch.distributed as dist

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rows = []
    for nbytes in sizes:
        tensor = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device=device)
        for _ in range(2):  # warm-up: connections, NCCL channels
            dist.all_reduce(tensor)
        sync()
        started = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        sync()
        worst = torch.tensor([(time.perf_counter() - started) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        rows.append((nbytes, float(worst)))
        del tensor
    latencies = []
    for _ in range(barriers):
        started = time.perf_counter()
        dist.barrier()
        latencies.append(time.perf_counter() - started)
    return rows, statistics.median(latencies)


def _bandwidth_phase(store, env: DistEnv, backend: str, sizes: list[int] | None, iters: int, timeout: float) -> int:
    import datetime

    import torch
    import torch.distributed as dist

    device = torch.device("cpu")
    if backend == "nccl":
        from train.distributed import select_device

        device = select_device(env, backend)
    sizes = sizes or parse_sizes(GPU_SIZES if backend == "nccl" else CPU_SIZES)
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                                world_size=env.world_size, timeout=datetime.timedelta(seconds=timeout),
                                device_id=device if backend == "nccl" else None)
        try:
            rows, barrier = time_collectives(sizes, iters, device)
        finally:
            dist.destroy_process_group()
    except (RuntimeError, OSError) as exc:
        print(Finding(FAIL, "bandwidth", f"rank {env.rank}: the all-reduce over {backend} failed "
                      f"({str(exc).splitlines()[0]}): "
                      "the ranks reached the master but not each other; check NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME "
                      "and firewalls between the nodes.").line(), file=sys.stderr, flush=True)
        return EXIT_FAILED
    if env.rank == 0:
        print(format_bandwidth(rows, env.world_size, backend, iters, barrier, 20), flush=True)
    return 0


# ---- the command -------------------------------------------------------------------------------
def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"bound on the pre-checks and the rendezvous (default {DEFAULT_TIMEOUT:.0f})")
    parser.add_argument("--sizes", default=None, metavar="LIST",
                        help=f"all-reduce sizes (default {CPU_SIZES} with gloo, {GPU_SIZES} with NCCL)")
    parser.add_argument("--iters", type=int, default=5, help="timed all-reduces per size (default 5)")
    parser.add_argument("--no-bandwidth", action="store_true", help="skip the timed all-reduce and barrier")


def main(args) -> int:
    started = time.monotonic()
    config = load_config(args.config, args.overrides)
    if args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g} must be > 0 seconds.")
    if args.iters < 1:
        raise UserError(f"--iters {args.iters} must be >= 1.")
    sizes = parse_sizes(args.sizes) if args.sizes else None
    env = resolve(os.environ)
    deadline = started + args.timeout
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"

    net, findings = pre_rendezvous(env, deadline, agent_store)
    if failed(findings):
        for finding in findings:
            print(finding.line(), file=sys.stderr, flush=True)
        return EXIT_FAILED

    # c10d logs every retry with a C++ stack trace; the doctor reports failures itself.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch
    import torch.distributed as dist

    from train.distributed import choose_backend

    backend = choose_backend(config.dist.backend, torch.cuda.is_available())
    record = collect_record(env, config, backend, net, os.environ)
    try:
        store = open_store(env, deadline, args.timeout, agent_store)
    except Unreachable as exc:
        print(Finding(FAIL, "rendezvous", str(exc)).line(), file=sys.stderr, flush=True)
        return EXIT_FAILED
    prefix = f"doctor/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '')}"
    store = dist.PrefixStore(prefix, store)
    try:
        return _after_rendezvous(store, env, record, backend, sizes, args, deadline, started)
    except (RuntimeError, OSError) as exc:  # the store's server (rank 0) went away
        print(Finding(FAIL, "rendezvous", f"rank {env.rank} lost the master {env.master_addr}:{env.master_port} "
                      f"({str(exc).splitlines()[0]}): rank 0 ended early; see its output.").line(),
              file=sys.stderr, flush=True)
        return EXIT_FAILED


def _after_rendezvous(store, env: DistEnv, record: dict, backend: str, sizes, args, deadline: float,
                      started: float) -> int:
    records = gather_records(store, env, record, deadline)
    if env.rank == 0:
        findings = run_checks(records, env.world_size)
        print(format_table(records), flush=True)
        print("\n".join(f.line() for f in findings), flush=True)
        ok = not failed(findings)
        store.set("verdict", json.dumps({"ok": ok}))
    else:
        where = f"{env.master_addr}:{env.master_port}"
        if not _wait_until(lambda: store.check(["verdict"]), time.monotonic() + args.timeout + 10):
            print(Finding(FAIL, "rendezvous", f"rank {env.rank}: rank 0 at {where} gave no verdict in time; see "
                          "its output.").line(), file=sys.stderr, flush=True)
            return EXIT_FAILED
        ok = json.loads(store.get("verdict"))["ok"]

    status = EXIT_FAILED
    if ok:
        status = 0 if args.no_bandwidth else _bandwidth_phase(store, env, backend, sizes, args.iters, args.timeout)
    if env.rank == 0:
        print(f"doctor: {'all checks passed' if status == 0 else 'FAILED (see the FAIL lines)'} "
              f"in {time.monotonic() - started:.1f} s", flush=True)
    # Rank 0 serves the store: it leaves last, so nobody loses the master while reading the verdict.
    store.add("done", 1)
    if env.rank == 0:
        _wait_until(lambda: store.add("done", 0) >= len(records), time.monotonic() + 10.0)
    return status
