"""Stopping cleanly when the end is near: the stop signals, the status that follows, and the way out.

SLURM warns a job before its end with a signal (`--signal`), scancel and preemption send
SIGTERM, and jobs/train.sbatch forwards its warning to the step as SIGURG. A handler only
records the signal; the ranks agree on it at the next step boundary (train/loop/step_vote.py),
rank 0 writes a checkpoint and the process exits with EXIT_REQUEUE, the agreed status that
tells jobs/train.sbatch "checkpointed, requeue me" (the statuses live in train/errors.py).

Which status: trainer.max_restarts is read here, not in the batch script. While the job's
restart count (SLURM_RESTART_COUNT, `DistEnv.restart_count`) < trainer.max_restarts the training
step ends with EXIT_REQUEUE (3); after that with EXIT_STOPPED (4): checkpointed, but not to be
requeued. The batch script only compares the step's status with 3. Ranks other than 0 leave
first with status 0 and rank 0 last with the status, so srun --kill-on-bad-exit never kills a
rank that is still on its way out (which would turn the step's status into 137).
"""

from __future__ import annotations

import os
import signal
import time

from train.errors import EXIT_REQUEUE, EXIT_STOPPED, exit_without_teardown

# torch is not imported here: `python -m train fit` installs the signal handlers before it loads
# torch and PyG, so a warning during those seconds is kept, not fatal.

STOPPED = (EXIT_REQUEUE, EXIT_STOPPED)

STOP_SIGNALS: dict[int, str] = {
    signal.SIGUSR1: "SLURM's warning before the time limit or a preemption (sbatch --signal)",
    signal.SIGUSR2: "SLURM's warning before the time limit or a preemption (sbatch --signal)",
    signal.SIGTERM: "sent by scancel, a preemption, or the end of the time limit",
    # jobs/train.sbatch forwards SLURM's warning as SIGURG (STOP_REQUEST_SIGNAL there): its default
    # action is to be ignored, so the other processes of the step (pyxis's squashfuse) survive it.
    signal.SIGURG: "SLURM's warning, forwarded by jobs/train.sbatch (a signal the step's other processes ignore)",
}


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name

class StopSignals:
    """Handlers for every signal of STOP_SIGNALS (SIGUSR1, SIGUSR2, SIGTERM, SIGURG) that record the first one.

    One per process (`shared()`), installed as the first thing `python -m train fit` does,
    so a warning during start-up is kept for the first step boundary instead of killing the
    task (the default action of SIGUSR1). They stay until the process ends: a second
    signal while it exits must not kill it either. `restore()` puts the previous ones back.
    """

    _shared: "StopSignals | None" = None

    def __init__(self, rank: int | str = "?"):
        self.rank = rank
        self.received = 0
        self.quiet = False  # the rank is failing, and has said why: a stop signal now is the launcher's, no news
        self._previous: dict[int, object] = {}

    @classmethod
    def shared(cls) -> "StopSignals":
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def _handle(self, signum, _frame) -> None:
        if not self.received:
            self.received = signum
            if self.quiet:
                return
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
        exit_without_teardown(0, last=lambda: store.add("stopped/leaving", 1))
    deadline = time.monotonic() + timeout
    while store.add("stopped/leaving", 0) < world_size - 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # from store.add to _exit() is microseconds; this is ample
    return exit_code
