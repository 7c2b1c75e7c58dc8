"""What a GPU rank needs beside its GPU, judged from every rank's record (pure, no torch): CPUs of its own, and
one backend across the job."""

from __future__ import annotations

from collections.abc import Iterator

from train.doctor.findings import FAIL, WARN, Finding, _agreement, by_host, rank_list
from train.doctor.records import RankRecord


def split_backends(records: list[RankRecord]) -> Iterator[Finding]:
    """Ranks that chose different backends (dist.backend=auto where some see no GPU): fit refuses the same
    (train/cluster/procgroup.py); the doctor names them before its collectives would wait for the timeout."""
    if len({r.backend for r in records}) > 1:  # fit refuses the same (train/cluster/procgroup.py)
        says = _agreement(records, lambda r: r.backend, lambda r: r.backend)
        yield Finding(FAIL, "contract", "ranks chose different backends with dist.backend=auto: " + "; ".join(says)
                      + ". Every rank must see a GPU (the nodes' drivers, the job's GPU request), or set "
                        "dist.backend=gloo for a CPU run.")


def starved_gpu_ranks(host: str, rs: list[RankRecord]) -> Iterator[Finding]:
    """A GPU rank with one CPU: its main thread, the prefetch thread, NCCL's proxy thread and pinning take turns."""
    starved = [r for r in rs if r.device.type == "cuda" and r.device.ncpus <= 1]
    if starved:
        yield Finding(WARN, "devices", f"{rank_list(r.job.rank for r in starved)} on node {host} drive a GPU with one "
                      "CPU each: the main thread, the prefetch thread, NCCL's proxy thread and pinning take turns "
                      "on it; give each task the node's CPUs / its GPUs (CPUS_PER_TASK, or --cpus-per-task).")


def check_gpu_ranks(records: list[RankRecord]) -> list[Finding]:
    """One backend across the job; CPUs of its own for each GPU rank (nothing said where all is well)."""
    out = list(split_backends(records))
    for host, rs in sorted(by_host(records).items()):
        out += starved_gpu_ranks(host, rs)
    return out
