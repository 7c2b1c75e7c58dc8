"""Stopping cleanly when the end is near, and ending fast when a rank dies.

Preemption and time limits. SLURM warns a job before its end with a signal (`--signal`),
scancel and preemption send SIGTERM. A handler only records the signal; at the next step
boundary all ranks all-reduce (MAX) that flag, so they stop after the same step even though
the signal reached one process first. Rank 0 then writes a checkpoint and the process exits
with `EXIT_REQUEUE`, the agreed status that tells jobs/train.sbatch "checkpointed, requeue me".
Ranks that already ran out of batches (DDP `Join`, uneven shards) take part through a join
hook, so the vote never hangs.

Which status: trainer.max_restarts is read here, not in the batch script. While the job's
restart count (SLURM_RESTART_COUNT, `DistEnv.restart_count`) < trainer.max_restarts the training
step ends with EXIT_REQUEUE (3); after that with EXIT_STOPPED (4): checkpointed, but not to be
requeued. The batch script only compares the step's status with 3. Ranks other than 0 leave
first with status 0 and rank 0 last with the status, so srun --kill-on-bad-exit never kills a
rank that is still on its way out (which would turn the step's status into 137).

Failures. A rank that raises posts its error in the rendezvous store (a TCPStore in rank 0's
process) and exits with its traceback. A rank whose collective fails because a peer is gone
(gloo: at once, as the peer's connections close; any backend: after
dist.collective_timeout_seconds) reads the store and says which rank failed, that rank 0 is
gone (the store no longer answers), or which ranks went silent (killed, out of memory, node
lost, hung), then exits with EXIT_FAILED; under SLURM, srun --kill-on-bad-exit ends the step
as soon as the first task exits.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Callable

from train.errors import EXIT_FAILED, EXIT_REQUEUE, EXIT_STOPPED  # noqa: F401  (their one home; re-exported)

# torch is imported inside the functions: `python -m train fit` installs the signal handlers
# before it loads torch and PyG, so a warning during those seconds is kept, not fatal.

STOPPED = (EXIT_REQUEUE, EXIT_STOPPED)

STOP_SIGNALS: dict[int, str] = {
    signal.SIGUSR1: "SLURM's warning before the time limit or a preemption (sbatch --signal)",
    signal.SIGUSR2: "SLURM's warning before the time limit or a preemption (sbatch --signal)",
    signal.SIGTERM: "sent by scancel, a preemption, or the end of the time limit",
    # jobs/train.sbatch forwards SLURM's warning as SIGURG (STOP_REQUEST_SIGNAL there): its default
    # action is to be ignored, so the other processes of the step (pyxis's squashfuse) survive it.
    signal.SIGURG: "SLURM's warning, forwarded by jobs/train.sbatch (a signal the step's other processes ignore)",
}
FAILURE_GRACE_SECONDS = 3.0  # how long a survivor waits for the others' reports before it exits
_PEER_ERROR = re.compile(
    r"gloo|nccl|connection (closed|reset)|broken pipe|timed out|timeout|processgroup|"
    r"DistBackendError|DistNetworkError|DistStoreError", re.IGNORECASE)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


# ---- signals ------------------------------------------------------------------------------------
class StopSignals:
    """Handlers for SIGUSR1, SIGUSR2 and SIGTERM that only record the first one received.

    One per process (`shared()`), installed as the first thing `python -m train fit` does,
    so a warning during start-up is kept for the first step boundary instead of killing the
    task (the default action of SIGUSR1). They stay until the process ends: a second
    signal while it exits must not kill it either. `restore()` puts the previous ones back.
    """

    _shared: "StopSignals | None" = None

    def __init__(self, rank: int | str = "?"):
        self.rank = rank
        self.received = 0
        self._previous: dict[int, object] = {}

    @classmethod
    def shared(cls) -> "StopSignals":
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def _handle(self, signum, _frame) -> None:
        if not self.received:
            self.received = signum
            # os.write: print() is not safe inside a handler that can interrupt a print
            os.write(2, f"rank {self.rank}: received {signal_name(signum)}; stopping after the current step\n".encode())

    def install(self) -> "StopSignals":
        """Install the handlers (again: a no-op)."""
        if not self._previous:
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def stop_outcome(restarts: int, max_restarts: int, under_slurm: bool, run_dir: str) -> tuple[int, str]:
    """The exit status after a checkpointed stop, and what happens next, in words."""
    again = f"output.dir={run_dir}"
    if not under_slurm:
        return EXIT_REQUEUE, f"run the same command with {again} to resume from it"
    if restarts < max_restarts:
        return EXIT_REQUEUE, (f"exit status {EXIT_REQUEUE}: the batch script requeues the job "
                              f"(restart {restarts + 1} of at most trainer.max_restarts={max_restarts}) "
                              "and it resumes from this checkpoint")
    return EXIT_STOPPED, (f"exit status {EXIT_STOPPED}: not requeued, the job was already restarted {restarts} "
                          f"times (trainer.max_restarts={max_restarts}); resubmit with {again} "
                          "(or trainer.resume=PATH) to continue from this checkpoint")


def leave_in_order(exit_code: int, rank: int, world_size: int, store, timeout: float = 30.0) -> int:
    """After a checkpointed stop: ranks > 0 exit with 0 first, then rank 0 returns `exit_code`.

    srun --kill-on-bad-exit SIGKILLs the step's other tasks as soon as one exits non-zero; a
    task killed that way would make the step's status 137 instead of `exit_code`. A process
    already inside _exit() keeps its status. So, once the process group and shared memory
    are released (call this after leaving run_fit's `with`), ranks > 0 run the atexit
    handlers, announce themselves in the rendezvous store (`store`, a reference kept from
    before) and `os._exit(0)`; rank 0, whose process hosts the store, waits for all of them.
    """
    if world_size == 1 or store is None:
        return exit_code
    if rank != 0:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            store.add("stopped/leaving", 1)
        finally:
            os._exit(0)
    deadline = time.monotonic() + timeout
    while store.add("stopped/leaving", 0) < world_size - 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # from store.add to _exit() is microseconds; this is ample
    return exit_code


# ---- the per-step vote --------------------------------------------------------------------------
class StepAgreement:
    """One all-reduce (MAX) per step of [stop signal, checkpoint due, some rank joined].

    Rank 0 alone decides whether the time-based checkpoint is due (one clock, one decision).
    Inside an uneven epoch (a rank has joined) the time-based checkpoint waits for the epoch
    end, so every checkpoint is taken while all ranks hold the same model and optimizer.

    Everything it acts on comes in as arguments: `save(reason)` writes a checkpoint (collective),
    `seconds_since_save()` says how long ago the last one was, `on_stop()` tells the loop to stop
    at the next boundary, and `optimizer` is the one `sync_optimizer` brings back in step.

    A torch `Joinable` by duck typing (join_hook, join_device, join_process_group; `Join`
    sets `_join_config`), so that this module needs no torch at import time.
    """

    def __init__(self, signals: StopSignals, *, rank: int, device, optimizer, save: Callable[[str], object],
                 seconds_since_save: Callable[[], float], on_stop: Callable[[], None], epochs: int,
                 every_epochs: int = 0, every_minutes: float = 0.0, step_delay: float = 0.0):
        self.signals, self.rank, self.device, self.optimizer = signals, rank, device, optimizer
        self.save, self.seconds_since_save, self.on_stop = save, seconds_since_save, on_stop
        self.epochs, self.every_epochs = epochs, every_epochs
        self.every_seconds = every_minutes * 60.0
        self.step_delay = step_delay
        self.stop_signal = 0

    def vote(self, joined: bool) -> tuple[int, bool, bool]:
        import torch
        import torch.distributed as dist

        due = self.rank == 0 and self.every_seconds > 0 and self.seconds_since_save() >= self.every_seconds
        flags = torch.tensor([self.signals.received, int(due), int(joined)], dtype=torch.int64, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        signum, any_due, any_joined = (int(v) for v in flags.tolist())
        if signum:
            self.stop_signal = signum
            self.on_stop()
        return signum, bool(any_due), bool(any_joined)

    def on_step_end(self) -> bool:
        """After each step on ranks that still have batches; True: leave the epoch now."""
        if self.step_delay > 0:
            time.sleep(self.step_delay)  # testing aid: a short run that lasts long enough to interrupt
        signum, due, joined = self.vote(joined=False)
        if signum:
            return True
        if due and not joined:
            self.save("time interval (trainer.checkpoint_every_minutes)")
        return False

    def on_epoch_end(self, done: int) -> None:
        """After `done` epochs (all ranks, outside Join): the scheduled checkpoint, or one that is due."""
        signum, due, _ = self.vote(joined=False)
        scheduled = done == self.epochs or (self.every_epochs > 0 and done % self.every_epochs == 0)
        if scheduled or due or signum:
            why = "" if scheduled else (" (time interval)" if due else " (stop signal)")
            self.save(f"end of epoch {done - 1}{why}")

    # Joinable: ranks without batches left keep voting, and get the optimizer back in step.
    def join_hook(self, **kwargs) -> "_AgreementJoinHook":
        return _AgreementJoinHook(self)

    @property
    def join_device(self):
        return self.device

    @property
    def join_process_group(self):
        import torch.distributed as dist

        return dist.group.WORLD

    def sync_optimizer(self, is_last_joiner: bool) -> None:
        """After an uneven epoch, copy the optimizer state of a rank that ran every step.

        A rank that joined early skipped its last optimizer steps (DDP only shadows the
        gradient all-reduce); DDP copies the model back, this copies the optimizer state,
        so every rank, rank 0's checkpoint included, holds the same state again.
        """
        import torch
        import torch.distributed as dist

        rank = self.rank
        flags = torch.tensor([0 if is_last_joiner else 1, rank if is_last_joiner else -1],
                             dtype=torch.int64, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        uneven, source = (int(v) for v in flags.tolist())
        if not uneven:
            return
        box = [self.optimizer.state_dict() if rank == source else None]
        dist.broadcast_object_list(box, src=source, device=self.device)
        if rank != source:
            self.optimizer.load_state_dict(box[0])


class _AgreementJoinHook:
    """StepAgreement's torch `JoinHook` (duck-typed): what a rank without batches does each step."""

    def __init__(self, agreement: StepAgreement):
        self.agreement = agreement

    def main_hook(self) -> None:
        self.agreement.vote(joined=True)  # matches on_step_end's vote of the ranks still training

    def post_hook(self, is_last_joiner: bool) -> None:
        self.agreement.sync_optimizer(is_last_joiner)


# ---- failures -----------------------------------------------------------------------------------
def default_store():
    """The default process group's store (the TCPStore of the rendezvous), or None."""
    import torch.distributed as dist

    try:
        return dist.distributed_c10d._get_default_store()
    except (RuntimeError, ValueError, AttributeError):
        return None


def is_peer_failure(exc: BaseException) -> bool:
    """True when `exc` says a collective failed (a peer is gone or timed out), not a local error."""
    import torch.distributed as dist

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


def report_failure(exc: BaseException, env, grace: float = FAILURE_GRACE_SECONDS) -> str | None:
    """Post this rank's failure in the store; for a survivor, return who failed, in words.

    Returns None on the rank where the error happened (it shows its own traceback).
    """
    rank, world_size = env.rank, env.world_size
    store = default_store()
    if store is not None and rank != 0 and not _store_alive(env.master_addr, env.master_port):
        store = None
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
    cause = _failure_cause(reports, others, unreachable, rank)
    return f"rank {rank}: stopping because {cause}. This rank's error: {_first_line(exc)}"


def _post_failure(store, rank: int, report: str, grace: float) -> None:
    """Leave this rank's report where the others look for it, within `grace`."""
    try:
        store.set_timeout(datetime.timedelta(seconds=grace))
        store.set(f"failure/{rank}", report)
    except Exception:  # the store lives in rank 0's process: it may be gone
        pass


def _gather_failures(store, others: list[int], grace: float) -> tuple[dict[int, dict], bool]:
    """The other ranks' reports, until one names an error, all have reported, or `grace` ends.

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
        origins = [r for r, rep in reports.items() if rep["kind"] == "error"]
        if origins or len(reports) == len(others) or time.monotonic() > deadline:
            return reports, False
        time.sleep(0.1)


def _failure_cause(reports: dict[int, dict], others: list[int], unreachable: bool, rank: int) -> str:
    """Who failed, in words: the ranks that reported an error, else rank 0 gone, else the silent ranks."""
    origins = {r: rep for r, rep in reports.items() if rep["kind"] == "error"}
    silent = [r for r in others if r not in reports]
    if origins:
        return "; ".join(f"rank {r} failed: {rep['error']}" for r, rep in sorted(origins.items()))
    if unreachable and rank != 0:
        return ("rank 0 is gone: the rendezvous store it hosts no longer answers "
                "(killed, out of memory, its node lost, or it failed)")
    if silent:
        names = ("rank " if len(silent) == 1 else "ranks ") + ", ".join(str(r) for r in silent)
        return (f"{names} stopped answering without reporting an error "
                "(killed, out of memory, or its node was lost)")
    return "every other rank reports a communication error too; none reported a cause"
