"""What rank 0 prints: one row per rank, where the contract's values came from, and the bandwidth table."""

from __future__ import annotations

from collections import defaultdict

from train.doctor.findings import allreduce_bandwidth, by_host, format_cpus, rank_list
from train.doctor.links import node_link
from train.doctor.records import Device, RankRecord
from train.storage.faults import format_bytes


def format_rows(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *rows])


def device_cell(dev: Device) -> str:
    if dev.error:
        return "ERROR"
    if dev.type == "cuda":
        free = f" ({format_bytes(dev.free)} free)" if dev.free is not None else ""
        return f"cuda:{dev.index} {dev.name} {format_bytes(dev.memory)}{free} {dev.bus_id}"
    return "cpu"


def format_table(records: list[RankRecord]) -> str:
    """One row per rank, then where the contract's values came from and the software versions."""
    records = sorted(records, key=lambda r: (r.job.rank, r.host, r.pid))
    header = ["rank", "host", "node", "local", "pid", "device", "CUDA_VISIBLE_DEVICES", "cores", "to master",
              "backend ifaces", "data", "run dir"]
    rows = []
    for r in records:
        net = r.network
        ifaces = net.nccl_ifaces if r.backend == "nccl" else net.gloo_ifaces
        run = r.run_dir
        rows.append([
            str(r.job.rank), r.host, str(r.job.node_rank), f"{r.job.local_rank}/{r.job.local_world_size}", str(r.pid),
            device_cell(r.device), r.variables.get("CUDA_VISIBLE_DEVICES", "-"),
            f"{format_cpus(r.device.cpus)} x{r.device.threads}",
            f"{net.route_iface or '?'} {net.route_addr or ''}".strip(),
            f"{r.backend}:{','.join(ifaces) or '-'}",
            r.data.state,
            ("ok " + format_bytes(run.free) + " free") if run.writable else "NOT WRITABLE",
        ])
    lines = [format_rows(header, rows), ""]
    lines += _grouped("sources", records, lambda r: ", ".join(f"{k}<-{v}" for k, v in r.job.sources.items()))
    lines += _grouped("versions", records, lambda r: ", ".join(f"{k} {v or '-'}" for k, v in r.versions.items()))
    for host, rs in sorted(by_host(records).items()):
        shm, variables = rs[0].shm, rs[0].variables
        extras = " ".join(f"{k}={v}" for k, v in variables.items() if k.endswith("SOCKET_IFNAME"))
        lines.append(f"node {host}: {shm.path} {format_bytes(shm.free)} free of {format_bytes(shm.total)}"
                     f"; interfaces {', '.join(rs[0].network.interfaces)}{'; ' + extras if extras else ''}")
        lines.append(f"node {host}: {node_resources(rs)}")
    return "\n".join(lines)


def node_resources(rs: list[RankRecord]) -> str:
    """One node's CPUs per rank, its GPUs' free memory, and the link NCCL would use from it."""
    cpus = sorted({r.device.ncpus for r in rs})
    gpus = [(r.job.rank, r.device) for r in rs if r.device.type == "cuda"]
    free = ", ".join(f"rank {rank} {format_bytes(dev.free)}" for rank, dev in gpus) or "no GPU"
    _name, why, gbs = node_link(rs[0].links)
    return (f"CPUs per rank {'/'.join(map(str, cpus))}; GPU free memory: {free}; between nodes NCCL would use "
            f"{why}{f' ({gbs:.1f} GB/s)' if gbs else ''}")


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


def _grouped(label: str, records: list[RankRecord], render) -> list[str]:
    """One line per distinct `render(record)`, naming its ranks ("every rank" when all agree)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for r in records:
        groups[render(r)].append(r.job.rank)
    return [f"{label} ({'every rank' if len(groups) == 1 else rank_list(ranks)}): {text}"
            for text, ranks in groups.items()]
