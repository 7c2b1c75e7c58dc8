"""The doctor's verdicts (`Finding`) and the small pure helpers that word and measure them."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from train.errors import UserError

if TYPE_CHECKING:
    from train.doctor.records import RankRecord

FAIL, WARN, OK = "FAIL", "warn", "ok"
CPU_SIZES = "64K,1M,16M"
GPU_SIZES = "1M,64M,512M"
MIN_FREE_BYTES = 1 << 30  # warn when the run dir's filesystem has less free space than this
SHM_MARGIN = 1.25  # /dev/shm should hold the shared graph with this much headroom


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


def by_host(records: list[RankRecord]) -> dict[str, list[RankRecord]]:
    groups: dict[str, list[RankRecord]] = defaultdict(list)
    for r in records:
        groups[r.host].append(r)
    return dict(groups)


def _agreement(records: list[RankRecord], value, describe) -> list[str]:
    """['ranks 0 and 1: X', 'rank 2: Y'] for the distinct values of value(record)."""
    groups: dict = defaultdict(list)
    for r in records:
        groups[value(r)].append(r)
    return [f"{rank_list(r.job.rank for r in rs)}: {describe(rs[0])}" for rs in groups.values()]
