"""Ending fast when a rank dies, with the name of the rank that failed.

A rank that raises posts its error in the rendezvous store (a TCPStore in rank 0's process)
and exits with its traceback. A rank whose collective fails because a peer is gone (gloo: at
once, as the peer's connections close; any backend: after dist.collective_timeout_seconds)
reads the store and says which rank failed, that rank 0 is gone (the store no longer answers),
or which ranks went silent (killed, out of memory, node lost, hung), with the node and pid each rank
posted at the start (`announce`) and the memory plan's figures (train/loop/killed_rank.py), then exits with
EXIT_FAILED; under SLURM, srun --kill-on-bad-exit ends the step as soon as the first task exits.
Under NCCL, `fit` exports TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (train/cluster/procgroup.py): the watchdog
aborts the communicators, not the process, so the survivor's next collective raises here.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable

import torch.distributed as dist

from train.loop.killed_rank import MemoryFigures, silent_rank_cause

FAILURE_GRACE_SECONDS = 3.0  # how long a survivor waits for the others' reports before it exits
TOLD = "told"  # a report's kind: a rank's own error (a UserError), which it printed
_PEER_ERROR = re.compile(
    r"gloo|nccl|connection (closed|reset)|broken pipe|timed out|timeout|processgroup|failed to pass monitoredBarrier|"
    r"DistBackendError|DistNetworkError|DistStoreError", re.IGNORECASE)

def default_store():
    """The default process group's store (the TCPStore of the rendezvous), or None."""
    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


def announce(store, rank: int) -> None:
    """Post where this rank runs (node, pid), so that a survivor can name the node of a rank that went silent."""
    if store is not None:
        store.set(f"where/{rank}", json.dumps({"node": socket.gethostname(), "pid": os.getpid()}))


def _whereabouts(store, ranks: list[int]) -> dict[int, str]:
    """"node NAME, pid N" of each of `ranks` that announced itself (none where the store is gone)."""
    found = {}
    for rank in ranks:
        try:
            if store is not None and store.check([f"where/{rank}"]):
                where = json.loads(store.get(f"where/{rank}"))
                found[rank] = f"{where['node']}, pid {where['pid']}"
        except Exception:  # the store lives in rank 0's process: it may be gone
            return found
    return found


def is_peer_failure(exc: BaseException) -> bool:
    """True when `exc` says a collective failed (a peer is gone or timed out), not a local error."""
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    return bool(_PEER_ERROR.search(f"{type(exc).__name__}: {exc}"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _store_alive(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether the rendezvous store (in rank 0's process) still accepts connections.

    Asked before using the store: a request to a dead store prints a C++ stack trace.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _live_store(env):
    """The default store where it answers; None where there is none, or it died with rank 0's process."""
    store = default_store()
    if store is not None and env.rank != 0 and not _store_alive(env.master_addr, env.master_port):
        return None
    return store


def points_to(rank: int, by: int) -> str:
    """The one line of a rank that stopped for another rank's error, which that rank printed."""
    return f"rank {rank}: rank {by} stopped: see its error above"


def tell_once(message: str, env, found_by: int | None = None, grace: float = FAILURE_GRACE_SECONDS) -> None:
    """Print this rank's error (a UserError's `message`) once for the whole job: the first rank to find it prints
    it; a rank that found the same error after it, or was handed it (`found_by`: AnotherRanksError), prints one
    line that points to it, after it. The report is left in the store, so that a rank whose collective fails
    because this one leaves points to it too, instead of guessing (train/loop/run.py run_fit)."""
    store = _live_store(env)
    key = "told/" + hashlib.sha1(message.encode()).hexdigest()
    first = found_by is None
    try:
        if store is not None:
            store.set_timeout(datetime.timedelta(seconds=grace))
            first = first and store.add(key, 1) == 1
    except Exception:  # the store lives in rank 0's process: it may be gone
        store = None
    by = env.rank if first else _wait_for(store, f"{key}/by", grace)
    by = found_by if by is None else by
    if by is None or by == env.rank:
        print(f"error: {message}", file=sys.stderr, flush=True)
        by = env.rank
    else:
        print(points_to(env.rank, by), file=sys.stderr, flush=True)
    if store is not None:
        _post_failure(store, env.rank, json.dumps({"kind": TOLD, "error": message[:400], "by": by}), grace)
        if by == env.rank:
            _set(store, f"{key}/by", str(by), grace)


def _wait_for(store, key: str, grace: float) -> int | None:
    """The rank posted under `key` within `grace` (None: not in time, or no store)."""
    deadline = time.monotonic() + grace
    while store is not None and time.monotonic() < deadline:
        try:
            if store.check([key]):
                return int(store.get(key))
        except Exception:
            return None
        time.sleep(0.05)
    return None


def wait_for_reports(store, env, grace: float = FAILURE_GRACE_SECONDS) -> None:
    """After telling its own error: wait (up to `grace`) until every other rank has posted why it stopped, so that
    the store they read it in (in rank 0's process under srun) outlives their reading, and they leave first."""
    if store is not None and env.world_size > 1:
        _gather_failures(store, [r for r in range(env.world_size) if r != env.rank], grace, until_all=True)


def report_failure(exc: BaseException, env, grace: float = FAILURE_GRACE_SECONDS,
                   figures: Callable[[], MemoryFigures] = MemoryFigures) -> tuple[str, bool] | None:
    """Post this rank's failure in the store; for a survivor, return who failed, in words (`figures`: the memory
    plan's, asked only when a rank went silent), and whether it was another rank's own error, which that rank
    printed (the line then only points to it).

    Returns None on the rank where the error happened (it shows its own traceback).
    """
    rank, world_size = env.rank, env.world_size
    store = _live_store(env)
    peer = is_peer_failure(exc)
    report = json.dumps({"kind": "peer" if peer else "error", "error": _first_line(exc)})
    if store is not None:
        _post_failure(store, rank, report, grace)
    if not peer:
        # On rank 0 the report dies with this process (the store lives here); the others then
        # name rank 0 as gone. Staying would not help: while DDP holds the process group, its
        # connections stay open until the process exits, so the others would just wait.
        return None
    others = [r for r in range(world_size) if r != rank]
    reports, unreachable = _gather_failures(store, others, grace) if store is not None else ({}, True)
    told = sorted(r for r, report in reports.items() if report["kind"] == TOLD)
    if told:  # a rank stopped with its own error, which it printed: nothing to add, no guess at a cause
        return points_to(rank, reports[told[0]].get("by", told[0])), True

    def about_silent(silent: list[int]) -> str:
        """Where the silent ranks ran and what likely ended them (asked only when some went silent)."""
        where = {0: env.master_addr} if unreachable else _whereabouts(store, silent)
        ran = "".join(f"; rank {r} ran on {where[r]}" for r in silent if r in where)
        return f"{ran}: {silent_rank_cause(figures())}"

    cause = _failure_cause(reports, others, unreachable, rank, about_silent)
    return f"rank {rank}: stopping because {cause}. This rank's error: {_first_line(exc)}", False


def _post_failure(store, rank: int, report: str, grace: float) -> None:
    """Leave this rank's report where the others look for it, within `grace`."""
    _set(store, f"failure/{rank}", report, grace)


def _set(store, key: str, value: str, grace: float) -> None:
    try:
        store.set_timeout(datetime.timedelta(seconds=grace))
        store.set(key, value)
    except Exception:  # the store lives in rank 0's process: it may be gone
        pass


def _gather_failures(store, others: list[int], grace: float, until_all: bool = False) -> tuple[dict[int, dict], bool]:
    """The other ranks' reports, until one names an error (`until_all`: not before all), all have reported, or
    `grace` ends.

    Also returns whether the store stopped answering on the way.
    """
    reports: dict[int, dict] = {}
    deadline = time.monotonic() + grace
    while True:
        for other in others:
            if other in reports:
                continue
            try:
                if store.check([f"failure/{other}"]):
                    reports[other] = json.loads(store.get(f"failure/{other}"))
            except Exception:
                return reports, True
        origins = [r for r, rep in reports.items() if rep["kind"] in ("error", TOLD) and not until_all]
        if origins or len(reports) == len(others) or time.monotonic() > deadline:
            return reports, False
        time.sleep(0.1)


def _failure_cause(reports: dict[int, dict], others: list[int], unreachable: bool, rank: int,
                   about_silent: Callable[[list[int]], str] = lambda _silent: "") -> str:
    """Who failed, in words: the ranks that reported an error, else rank 0 gone, else the silent ranks (with
    `about_silent`'s words on them)."""
    origins = {r: rep for r, rep in reports.items() if rep["kind"] == "error"}
    silent = [r for r in others if r not in reports]
    if origins:
        return "; ".join(f"rank {r} failed: {rep['error']}" for r, rep in sorted(origins.items()))
    if unreachable and rank != 0:
        return f"rank 0 is gone: the rendezvous store it hosts no longer answers (it failed, or){about_silent([0])}"
    if silent:
        names = ("rank " if len(silent) == 1 else "ranks ") + ", ".join(str(r) for r in silent)
        return f"{names} stopped answering without reporting an error{about_silent(silent)}"
    return "every other rank reports a communication error too; none reported a cause"
