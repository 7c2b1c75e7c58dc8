"""The doctor's probes of the run's other collectives, beside the all-reduce: the exact evaluation's all_to_all_single
(train/loop/evaluate.py fetch_rows, first run at the end of epoch 0) and the node groups' split that node sharing
makes while loading (train/graph/sharing/shared_graph.py node_group), each run as the run runs it."""

from __future__ import annotations

import datetime
import time

import torch
import torch.distributed as dist

from train.cluster.distenv import DistEnv
from train.doctor.findings import OK, Finding
from train.graph.sharing.shared_graph import node_group
from train.storage.faults import format_bytes

ALL_TO_ALL_BYTES = 1 << 20  # what each rank sends in all (an evaluation chunk's rows are of this order)


def _slowest(seconds: float, device) -> float:
    worst = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return float(worst)


def time_all_to_all(nbytes: int, iters: int, device) -> float:
    """Mean seconds of one all_to_all_single of `nbytes` a rank in even splits (the slowest rank's), after a warm-up."""
    world = dist.get_world_size()
    count = max(nbytes // 4 // world, 1) * world
    send = torch.ones(count, dtype=torch.float32, device=device)
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send)  # warm-up: NCCL's point-to-point connections to every peer
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(iters):
        dist.all_to_all_single(received, send)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return _slowest((time.perf_counter() - started) / iters, device)


def time_node_groups(env: DistEnv, timeout: float, device) -> tuple[float, int]:
    """Seconds to split the ranks into their nodes' gloo groups as node sharing does, and a barrier in each
    (the slowest rank's); and this rank's group size."""
    started = time.perf_counter()
    group, _leader, size = node_group(env, datetime.timedelta(seconds=timeout))
    dist.barrier(group=group)
    return _slowest(time.perf_counter() - started, device), size


def exchange_findings(all_to_all: float, nbytes: int, split: float, nodes: int, world: int) -> list[Finding]:
    """The two probes' lines."""
    rate = nbytes / all_to_all / 1e9 if all_to_all > 0 else float("inf")
    return [Finding(OK, "all2all", f"all_to_all_single of {format_bytes(nbytes)} a rank over {world} rank(s): "
                    f"{all_to_all * 1e3:.3f} ms ({rate:.2f} GB/s a rank; the exact evaluation's row exchange)"),
            Finding(OK, "groups", f"the node groups' split ({nodes} gloo group(s), as node sharing makes them) and a "
                    f"barrier in each: {split * 1e3:.1f} ms")]
