"""The one exception type that means "the user's input is wrong", and every exit status the package uses.

The CLI turns a `UserError` into a short message and exit status 2, never a traceback. The
statuses live here, once: jobs/train.sbatch reads 3 ("checkpointed, requeue me") and 5 ("a storage
fault: do not requeue").
`exit_without_teardown` is the one way the package ends a process with one of them; `leave_within` bounds the
teardown before it.
"""

from __future__ import annotations

import atexit
import difflib
import faulthandler
import os
import sys
import threading
from collections.abc import Callable

EXIT_OK = 0
EXIT_FAILED = 1  # a check failed (doctor), or this rank or another one failed (fit); also an unexpected error
EXIT_USER_ERROR = 2  # bad input: one clear message, no traceback
EXIT_REQUEUE = 3  # checkpointed after a stop signal: requeue the job (jobs/train.sbatch does)
EXIT_STOPPED = 4  # checkpointed after a stop signal, but trainer.max_restarts is used up: do not requeue
EXIT_STORAGE = 5  # a file system failed a write (full, quota, read-only, I/O error): do not requeue (train/storage/)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


class UserError(Exception):
    """A mistake the user can fix: the message names the bad value and what would be valid."""

    exit_status = EXIT_USER_ERROR


class AnotherRanksError(UserError):
    """Another rank's `UserError`, handed to this one (`rank`: the rank that found it, and prints it): this rank
    says only that it stopped for it (train/loop/failure_report.py tell_once)."""

    def __init__(self, message: str, rank: int):
        super().__init__(message)
        self.rank = rank




def exit_status(error: BaseException) -> int:
    """The status a process that `error` ends leaves with: a class's own `exit_status` (UserError, StorageError),
    EXIT_INTERRUPTED for Ctrl-C, else EXIT_FAILED (a traceback)."""
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return getattr(error, "exit_status", EXIT_FAILED)


def exit_without_teardown(code: int, last: Callable[[], object] | None = None) -> None:
    """Leave with `code` after the atexit handlers and flushes, without CPython's final garbage collection.

    Gloo's worker threads can still hold Python objects when the interpreter is torn down;
    its last collection then livelocks now and then (seen here with torch 2.13 on CPU, on
    ranks that had printed their final result; cf. pytorch/pytorch#75097). Everything this
    program writes is closed by now, so skipping the teardown loses nothing. `last` runs just
    before the exit (a rank announcing that it leaves); the process exits even if it fails.
    """
    atexit._run_exitfuncs()  # e.g. shared-memory cleanup registered by train.graph.sharing.shared_graph
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if last is not None:
            last()
    finally:
        os._exit(code)


def leave_within(seconds: float, code: int, rank: int) -> None:
    """Leave with `code` if this process is still here `seconds` from now (dist.exit_timeout_seconds).

    Armed once a rank's exit status is settled, before torch.distributed's teardown: destroying a gloo process
    group, or freeing a DDP model after it, now and then never returns (torch 2.13 on CPU: ranks that had printed
    their result, or a refusal, stayed), and a job would hold its nodes until its time limit. A timer thread then
    prints where every thread is and leaves with `code`; where the hang holds the interpreter's lock, that thread
    cannot run, and faulthandler's thread (C, lock-free) prints the stacks and leaves at twice `seconds`, with
    status 1 (EXIT_FAILED).
    """

    def leave() -> None:
        print(f"rank {rank}: still here {seconds:g} s after its run ended (exit status {code}): torch.distributed's "
              "teardown hangs (dist.exit_timeout_seconds); it leaves without it. Where each thread was:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(all_threads=True)
        exit_without_teardown(code)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(2 * seconds, exit=True)


def unknown_key(section: str, key: str, keys: dict[str, list[str]]) -> str:
    """Why config key `section.key` is refused: the section's keys (`keys`: each section's), and the closest key of
    any section where one is close (difflib: data.num_neighbours -> sampler.num_neighbors, a key in the wrong
    section or misspelt; its own section's first)."""
    close = difflib.get_close_matches(key, sorted({k for names in keys.values() for k in names}), n=3, cutoff=0.75)
    near = sorted((f"{name}.{match}" for match in close for name, names in keys.items() if match in names),
                  key=lambda dotted: (not dotted.startswith(section + "."), close.index(dotted.split(".", 1)[1])))
    hint = f"; did you mean {near[0]}?" if near else "."
    return f"unknown config key {section + '.' + key!r}; valid {section} keys: {', '.join(keys[section])}{hint}"
