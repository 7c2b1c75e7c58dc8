"""Rendezvous through the TCPStore (not a process group, so a broken backend still gets its table),
then the verdict and the timed collectives over the real backend."""

from __future__ import annotations

import datetime
import json
import socket
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

from train.cluster.distenv import DistEnv
from train.cluster.procgroup import choose_backend, select_device
from train.doctor.checks import run_checks
from train.doctor.exchanges import ALL_TO_ALL_BYTES, exchange_findings, time_all_to_all, time_node_groups
from train.doctor.findings import CPU_SIZES, FAIL, GPU_SIZES, Finding, allreduce_bandwidth, failed, parse_sizes
from train.doctor.links import Transport, judge_bandwidth, nccl_transport
from train.doctor.probes import probe_connect, resolve_host
from train.doctor.rank_record import collect_record
from train.doctor.records import RankRecord
from train.doctor.table import format_bandwidth, format_table
from train.errors import EXIT_FAILED


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


def gather_records(store, env: DistEnv, record: RankRecord, deadline: float) -> list[RankRecord]:
    """Every process adds itself to a counter and stores its record under its arrival number,
    so duplicate or surplus ranks show up instead of overwriting each other. Rank 0 waits for
    WORLD_SIZE arrivals or the deadline, and returns what arrived."""
    seq = store.add("arrived", 1)
    store.set(f"record/{seq}", json.dumps(record.to_json()))
    if env.rank != 0:
        return []
    _wait_until(lambda: store.add("arrived", 0) >= env.world_size, deadline)
    count = store.add("arrived", 0)
    records = []
    for i in range(1, count + 1):
        if _wait_until(lambda: store.check([f"record/{i}"]), time.monotonic() + 5.0):
            records.append(RankRecord.from_json(json.loads(store.get(f"record/{i}"))))
    return records


def time_collectives(sizes: list[int], iters: int, device, barriers: int = 20) -> tuple[list[tuple[int, float]], float]:
    """Mean time per all-reduce for each size (the slowest rank's) and the median barrier latency."""
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


def bandwidth_phase(store, env: DistEnv, backend: str, sizes: list[int] | None, iters: int, timeout: float,
                    transport: Transport | None = None) -> int:
    """The timed all-reduce and barrier, the all-to-all and the node groups' split over the real backend; rank 0
    prints them and judges the all-reduce against the links between nodes (`transport`: links.nccl_transport)."""
    device = torch.device("cpu")
    if backend == "nccl":
        device = select_device(env, backend)
    sizes = sizes or parse_sizes(GPU_SIZES if backend == "nccl" else CPU_SIZES)
    step = "the all-reduce"
    try:
        dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                                world_size=env.world_size, timeout=datetime.timedelta(seconds=timeout),
                                device_id=device if backend == "nccl" else None)
        try:
            rows, barrier = time_collectives(sizes, iters, device)
            step = "the all-to-all (the exact evaluation's row exchange)"
            all_to_all = time_all_to_all(ALL_TO_ALL_BYTES, iters, device)
            step = "the node groups' split (node sharing)"
            split, _size = time_node_groups(env, timeout, device)
        finally:
            dist.destroy_process_group()
    except (RuntimeError, OSError) as exc:
        print(Finding(FAIL, "bandwidth", f"rank {env.rank}: {step} over {backend} failed "
                      f"({str(exc).splitlines()[0]}): "
                      "the ranks reached the master but not each other; check NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME "
                      "and firewalls between the nodes.").line(), file=sys.stderr, flush=True)
        return EXIT_FAILED
    if env.rank == 0:
        print(format_bandwidth(rows, env.world_size, backend, iters, barrier, 20), flush=True)
        found = exchange_findings(all_to_all, ALL_TO_ALL_BYTES, split, env.num_nodes, env.world_size)
        busbw = allreduce_bandwidth(*rows[-1], env.world_size)[1] if rows else None
        judged = judge_bandwidth(busbw, transport) if transport is not None else None
        print("\n".join(f.line() for f in [*found, *([judged] if judged else [])]), flush=True)
    return 0


def after_rendezvous(store, env: DistEnv, record: RankRecord, backend: str, sizes, args, deadline: float,
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
        transport = nccl_transport(records) if env.rank == 0 and backend == "nccl" else None
        status = 0 if args.no_bandwidth else bandwidth_phase(store, env, backend, sizes, args.iters, args.timeout,
                                                             transport)
    if env.rank == 0:
        print(f"doctor: {'all checks passed' if status == 0 else 'FAILED (see the FAIL lines)'} "
              f"in {time.monotonic() - started:.1f} s", flush=True)
    # Rank 0 serves the store: it leaves last, so nobody loses the master while reading the verdict.
    store.add("done", 1)
    if env.rank == 0:
        _wait_until(lambda: store.add("done", 0) >= len(records), time.monotonic() + 10.0)
    return status


def rendezvous(env: DistEnv, config, net, environ, sizes, args, times: tuple[float, float], agent_store: bool) -> int:
    """The doctor from its record on: this rank's record, the store, then what rank 0 judges of all records and the
    timed collectives (`times`: when the doctor started, and its deadline). The exit status."""
    started, deadline = times
    backend = choose_backend(config.dist.backend, torch.cuda.is_available())
    record = collect_record(env, config, backend, net, environ)
    try:
        store = open_store(env, deadline, args.timeout, agent_store)
    except Unreachable as exc:
        print(Finding(FAIL, "rendezvous", str(exc)).line(), file=sys.stderr, flush=True)
        return EXIT_FAILED
    prefix = f"doctor/{environ.get('TORCHELASTIC_RUN_ID', '')}/{environ.get('TORCHELASTIC_RESTART_COUNT', '')}"
    store = dist.PrefixStore(prefix, store)
    try:
        return after_rendezvous(store, env, record, backend, sizes, args, deadline, started)
    except (RuntimeError, OSError) as exc:  # the store's server (rank 0) went away
        print(Finding(FAIL, "rendezvous", f"rank {env.rank} lost the master {env.master_addr}:{env.master_port} "
                      f"({str(exc).splitlines()[0]}): rank 0 ended early; see its output.").line(),
              file=sys.stderr, flush=True)
        return EXIT_FAILED
