"""The cross-rank checks: pure functions of the records every rank gathered (no sockets, no torch)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

from train.cluster.devices import one_gpu_per_task
from train.doctor.findings import (
    FAIL,
    MIN_FREE_BYTES,
    OK,
    SHM_MARGIN,
    WARN,
    Finding,
    _agreement,
    by_host,
    failed,
    format_cpus,
    is_loopback,
    rank_list,
)
from train.doctor.gpu_ranks import check_gpu_ranks
from train.doctor.links import check_transport
from train.doctor.records import RankRecord
from train.storage.faults import format_bytes


def check_contract(records: list[RankRecord], expected_world: int) -> list[Finding]:
    """World size, master, ranks and local ranks agree and are complete."""
    counts = Counter(r.job.rank for r in records)
    outside = sorted(r for r in counts if r >= expected_world)
    missing = sorted(set(range(expected_world)) - set(counts))
    complete = not missing and not outside and all(n == 1 for n in counts.values())
    hosts = by_host(records)
    out = [*_job_agreement(records), *_rank_claims(records, counts, outside, missing, expected_world)]
    for host, rs in sorted(hosts.items()):
        out += _node_contract(host, rs, complete)
    out += _node_rank_claims(records)
    num_nodes = {r.job.num_nodes for r in records}
    if complete and num_nodes != {len(hosts)}:
        out.append(Finding(FAIL, "contract", f"the job says {'/'.join(map(str, sorted(num_nodes)))} node(s) (from "
                           f"{records[0].job.sources.get('num_nodes')}) but tasks run on {len(hosts)} "
                           f"({', '.join(sorted(hosts))}): check -N and --ntasks-per-node."))
    if not out:
        first = records[0]
        out.append(Finding(OK, "contract", f"{len(records)} rank(s) on {len(hosts)} node(s) agree on world size "
                           f"{first.job.world_size} and master {first.job.master_addr}:{first.job.master_port}; "
                           "ranks and local ranks unique and complete"))
    return out


def _job_agreement(records: list[RankRecord]) -> Iterator[Finding]:
    """Every rank names the same world size and the same master."""
    if len({r.job.world_size for r in records}) > 1:
        says = _agreement(records, lambda r: r.job.world_size,
                          lambda r: f"{r.job.world_size} (from {r.job.sources.get('world_size')})")
        yield Finding(FAIL, "contract", "ranks disagree on the world size: " + "; ".join(says)
                      + ". Start every task from one srun (or torchrun) and don't export WORLD_SIZE "
                        "left over from another job.")
    if len({(r.job.master_addr, r.job.master_port) for r in records}) > 1:
        says = _agreement(records, lambda r: (r.job.master_addr, r.job.master_port),
                          lambda r: f"{r.job.master_addr}:{r.job.master_port} (from "
                                    f"{r.job.sources.get('master_addr')}, {r.job.sources.get('master_port')})")
        yield Finding(FAIL, "contract", "ranks disagree on the master: " + "; ".join(says)
                      + ". Set MASTER_ADDR and MASTER_PORT once in the batch script, before srun.")


def _rank_claims(records: list[RankRecord], counts: Counter, outside: list[int], missing: list[int],
                 expected_world: int) -> Iterator[Finding]:
    """Each rank 0..world-1 claimed by exactly one process."""
    for rank, n in sorted(counts.items()):
        if n > 1:
            who = ", ".join(f"{r.host} pid {r.pid}" for r in records if r.job.rank == rank)
            yield Finding(FAIL, "contract", f"rank {rank} is claimed by {n} processes ({who}): every "
                          f"task needs its own RANK; don't export RANK to all tasks (srun sets SLURM_PROCID).")
    if outside:
        yield Finding(FAIL, "contract", f"{rank_list(outside)} are outside 0..{expected_world - 1} "
                      f"(rank 0 says WORLD_SIZE={expected_world}).")
    if missing:
        master = records[0]
        yield Finding(FAIL, "contract", f"{rank_list(missing)} of {expected_world} never reached the master "
                      f"at {master.job.master_addr}:{master.job.master_port}: check that srun started every "
                      "task (--ntasks) and that they see the same MASTER_ADDR/MASTER_PORT.")


def _node_contract(host: str, rs: list[RankRecord], complete: bool) -> Iterator[Finding]:
    """On one node: local ranks unique and 0..N-1, local world size N, one node rank."""
    local = Counter(r.job.local_rank for r in rs)
    for local_rank, n in sorted(local.items()):
        if n > 1:
            dup = [r for r in rs if r.job.local_rank == local_rank]
            both = "both" if n == 2 else "all"
            yield Finding(FAIL, "contract", f"{rank_list(r.job.rank for r in dup)} on node {host} {both} "
                          f"have local rank {local_rank} (from {dup[0].job.sources.get('local_rank')}): give "
                          "each task on a node its own local rank 0..N-1; don't export LOCAL_RANK to all "
                          "tasks (srun sets SLURM_LOCALID, torchrun sets LOCAL_RANK).")
    sizes = {r.job.local_world_size for r in rs}
    if complete and sizes != {len(rs)}:
        said = "/".join(map(str, sorted(sizes)))
        yield Finding(FAIL, "contract", f"node {host} runs {len(rs)} tasks "
                      f"({rank_list(r.job.rank for r in rs)}) but their local world size is {said} "
                      f"(from {rs[0].job.sources.get('local_world_size')}): "
                      "ask for the same number of tasks on every node (--ntasks-per-node).")
    elif complete and all(n == 1 for n in local.values()) and set(local) != set(range(len(rs))):
        yield Finding(FAIL, "contract",
                      f"local ranks on node {host} are {sorted(local)}; expected 0..{len(rs) - 1}.")
    if len({r.job.node_rank for r in rs}) > 1:
        yield Finding(FAIL, "contract", f"ranks on node {host} disagree on the node rank: "
                      + "; ".join(_agreement(rs, lambda r: r.job.node_rank, lambda r: str(r.job.node_rank)))
                      + ".")


def _node_rank_claims(records: list[RankRecord]) -> Iterator[Finding]:
    """Each node rank claimed by one node only."""
    node_ranks: dict[int, set[str]] = defaultdict(set)
    for r in records:
        node_ranks[r.job.node_rank].add(r.host)
    for node_rank, names in sorted(node_ranks.items()):
        if len(names) > 1:
            both = "both" if len(names) == 2 else "all"
            yield Finding(FAIL, "contract", f"nodes {', '.join(sorted(names))} {both} claim node rank "
                          f"{node_rank}: "
                          "don't export NODE_RANK/GROUP_RANK to every node (srun sets SLURM_NODEID).")


def check_devices(records: list[RankRecord]) -> list[Finding]:
    """One GPU per rank on each node; the same CUDA/NCCL everywhere; CPU cores not oversubscribed."""
    out: list[Finding] = []
    for r in records:
        if r.device.error:
            out.append(Finding(FAIL, "devices", f"rank {r.job.rank} on {r.host}: {r.device.error}"))
    for host, rs in sorted(by_host(records).items()):
        out += _shared_gpus(host, rs)
        out += _shared_cores(host, rs)
        out += _oversubscribed_cpu(host, rs)
    out += _version_mismatch(records)
    if not failed(out):
        kinds = Counter(r.device.name or r.device.type for r in records)
        out.append(Finding(OK, "devices", ", ".join(f"{n} x {k}" for k, n in kinds.items())
                           + (", one GPU per rank" if any(r.device.type == "cuda" for r in records) else "")))
    return out


def _shared_gpus(host: str, rs: list[RankRecord]) -> Iterator[Finding]:
    """Two ranks of one node on the same GPU."""
    gpus: dict[str, list[RankRecord]] = defaultdict(list)
    for r in rs:
        dev = r.device
        if dev.type == "cuda" and not dev.error:
            gpus[dev.gpu_key()].append(r)
    for users in gpus.values():
        if len(users) > 1:
            dev = users[0].device
            both = "both" if len(users) == 2 else "all"
            yield Finding(FAIL, "devices", f"{rank_list(r.job.rank for r in users)} on node {host} {both} use "
                          f"GPU {dev.index} (bus {dev.bus_id}, CUDA_VISIBLE_DEVICES="
                          f"{users[0].variables.get('CUDA_VISIBLE_DEVICES', '<unset>')}): {one_gpu_per_task(len(rs))}.")


def _shared_cores(host: str, rs: list[RankRecord]) -> Iterator[Finding]:
    """Two ranks of one node bound to overlapping cores (only ranks bound to fewer than all cores count)."""
    bound = [r for r in rs if r.device.ncpus < r.cpu_count]
    for i, a in enumerate(bound):
        for b in bound[i + 1:]:
            shared = set(a.device.cpus) & set(b.device.cpus)
            if shared:
                yield Finding(WARN, "devices", f"ranks {a.job.rank} and {b.job.rank} on node {host} are "
                              f"bound to the same cores ({format_cpus(shared)}): use --cpus-per-task with "
                              "--cpu-bind=cores.")


def _oversubscribed_cpu(host: str, rs: list[RankRecord]) -> Iterator[Finding]:
    """More threads on the node's ranks together than the node has cores."""
    threads = sum(r.device.threads for r in rs)
    cores = max(r.cpu_count for r in rs)
    if cores and threads > cores:
        yield Finding(WARN, "devices", f"node {host}: {len(rs)} ranks x {rs[0].device.threads} "
                      f"threads on {cores} cores oversubscribe the CPU: set OMP_NUM_THREADS (torchrun and "
                      "enroot's hook set 1) or give each task --cpus-per-task.")


def _version_mismatch(records: list[RankRecord]) -> Iterator[Finding]:
    """CUDA and NCCL (fatal) or the driver (a warning) differ between ranks."""
    for key, level in (("cuda", FAIL), ("nccl", FAIL), ("driver", WARN)):
        seen = {r.versions.get(key) for r in records if r.versions.get(key)}
        if len(seen) > 1:
            says = _agreement(records, lambda r, k=key: r.versions.get(k),
                              lambda r, k=key: str(r.versions.get(k)))
            yield Finding(level, "devices", f"{key} versions differ: " + "; ".join(says) + ": use the same image "
                          "and driver on every node.")


def check_network(records: list[RankRecord]) -> list[Finding]:
    """Interfaces named in NCCL/GLOO_SOCKET_IFNAME exist; across nodes nothing goes over loopback."""
    out: list[Finding] = []
    multi = len(by_host(records)) > 1
    master_host = next((r.host for r in records if r.job.rank == 0), None)
    for r in records:
        net, host, backend = r.network, r.host, r.backend
        names = ", ".join(net.interfaces) or "none"
        route = net.route_iface or "?"
        for var, chosen, used in (("NCCL_SOCKET_IFNAME", net.nccl_ifaces, backend == "nccl"),
                                  ("GLOO_SOCKET_IFNAME", net.gloo_ifaces, backend == "gloo")):
            value = r.variables.get(var)
            if value and (not chosen or net.missing(var)):
                bad = net.missing(var) or [value]
                out.append(Finding(FAIL if used else WARN, "network",
                                   f"{var}={value} names no interface of node {host} ({', '.join(bad)} missing; it has "
                                   f"{names}): set it to the interface that reaches the master ({route})."))
        if multi:
            if host != master_host and any(is_loopback(ip) for ip in net.master_ips):
                out.append(Finding(FAIL, "network", f"MASTER_ADDR={r.job.master_addr} resolves to "
                                   f"{', '.join(net.master_ips)} (loopback) on node {host}, not rank 0's node "
                                   f"{master_host}: set MASTER_ADDR to the first node's hostname."))
            elif backend == "gloo" and is_loopback(net.gloo_addr):
                out.append(Finding(FAIL, "network", f"on node {host} the hostname resolves to {net.gloo_addr}, "
                                   "so gloo would listen on loopback where other nodes cannot connect: "
                                   f"set GLOO_SOCKET_IFNAME={route} (the interface that reaches the master)."))
            elif backend == "nccl" and net.nccl_ifaces and all(n.startswith("lo") for n in net.nccl_ifaces):
                out.append(Finding(FAIL, "network", f"on node {host} NCCL would use loopback "
                                   f"({', '.join(net.nccl_ifaces)}) "
                                   f"but the job spans several nodes: set NCCL_SOCKET_IFNAME={route}."))
    if len({tuple(r.network.master_ips) for r in records}) > 1:
        says = _agreement(records, lambda r: tuple(r.network.master_ips),
                          lambda r: ", ".join(r.network.master_ips))
        out.append(Finding(WARN, "network", f"MASTER_ADDR={records[0].job.master_addr} resolves differently: "
                           + "; ".join(says) + "; use one IP or fix /etc/hosts."))
    if not failed(out):
        r0 = records[0]
        net = r0.network
        via = sorted({r.network.route_iface or "?" for r in records})
        backend_ifaces = sorted({",".join(r.network.nccl_ifaces if r.backend == "nccl" else r.network.gloo_ifaces)
                                 for r in records})
        out.append(Finding(OK, "network", f"master {r0.job.master_addr}:{r0.job.master_port} "
                           f"({', '.join(net.master_ips)}) reached from every rank via {', '.join(via)}; "
                           f"{r0.backend} would use {' / '.join(backend_ifaces) or '?'}"))
    return out


def check_environment(records: list[RankRecord]) -> list[Finding]:
    """Dataset readable, run dir writable, space on disk and in /dev/shm, same software everywhere."""
    out: list[Finding] = []
    for state in ("missing", "unreadable"):
        rs = [r for r in records if r.data.state == state]
        if rs:
            d = rs[0].data
            hosts = ", ".join(sorted({r.host for r in rs}))
            out.append(Finding(FAIL, "data", f"dataset {d.name!r} is {state} under {d.dir} for "
                               f"{rank_list(r.job.rank for r in rs)} ({hosts}): {d.detail}. "
                               + (d.fix or "Prepare it on a login node with `python -m train data --config "
                                  "...` (make data) into the same data.root/DATA_DIR "
                                  f"({d.root}), on storage every node mounts") + "."))
    for r in records:
        run = r.run_dir
        if not run.writable:
            level = FAIL if r.job.rank == 0 else WARN
            why = "" if r.job.rank == 0 else " (rank 0 writes; every rank reads checkpoints on resume)"
            out.append(Finding(level, "rundir", f"run dir {run.path} is not writable from rank {r.job.rank} on "
                               f"{r.host}{why}: {run.detail}; set output.dir= to a writable directory on "
                               "shared storage."))
    for host, rs in sorted(by_host(records).items()):
        r = rs[0]
        free = r.run_dir.free
        if r.run_dir.writable and free is not None and free < MIN_FREE_BYTES:
            out.append(Finding(WARN, "rundir", f"only {format_bytes(free)} free for {r.run_dir.path} on {host}: "
                               "checkpoints and metrics may not fit."))
        shm, need = r.shm, r.shm.need
        if need and shm.free is not None and shm.free < need * SHM_MARGIN:
            out.append(Finding(WARN, "data", f"{shm.path} on {host} has {format_bytes(shm.free)} "
                               f"free (of {format_bytes(shm.total)}) but data.share=node keeps about "
                               f"{format_bytes(need)} of {r.data.name} there: give the job a larger /dev/shm "
                               "(docker --shm-size; enroot/pyxis mount the host's), point data.share_dir at node-local "
                               "disk, or set data.share=process."))
    for key in ("python", "torch", "torch_geometric", "pyg_lib"):
        if len({r.versions.get(key) for r in records}) > 1:
            says = _agreement(records, lambda r, k=key: r.versions.get(k),
                              lambda r, k=key: f"{r.versions.get(k) or 'none'} on {r.host}")
            out.append(Finding(FAIL, "versions", f"{key} differs across ranks: " + "; ".join(says)
                               + ". Run every node from the same image."))
    if len({r.config_digest for r in records}) > 1:
        out.append(Finding(FAIL, "versions", "ranks were given different configs: "
                           + "; ".join(_agreement(records, lambda r: r.config_digest,
                                                  lambda r: r.config_digest))
                           + ". Pass the same --config and overrides to every task."))
    if not failed(out):
        r0 = records[0]
        v = r0.versions
        out.append(Finding(OK, "versions", f"python {v['python']}, torch {v['torch']}, torch_geometric "
                           f"{v.get('torch_geometric') or '-'}, pyg_lib {v.get('pyg_lib') or '-'} on every rank; "
                           f"dataset {r0.data.name} {r0.data.state}; run dir {r0.run_dir.path} writable"))
    return out


def run_checks(records: list[RankRecord], expected_world: int) -> list[Finding]:
    records = sorted(records, key=lambda r: (r.job.rank, r.host, r.pid))
    return (check_contract(records, expected_world) + check_devices(records) + check_gpu_ranks(records)
            + check_network(records) + check_transport(records) + check_environment(records))
