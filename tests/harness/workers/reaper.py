"""``python -I reaper.py -- CMD...``: the child-subreaper every daemon of the SLURM test cluster runs under.

It runs CMD as a child, becomes a child subreaper (so slurmstepd, which slurmd double-forks, is
reparented here and not to a slow PID 1), forwards SIGTERM/SIGINT/SIGHUP to CMD, reaps every
descendant, and exits with CMD's status once no descendant is left. Stdlib only, run with -I:
it imports nothing of the project.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def reap(argv: list[str]) -> int:
    """Run argv under this subreaper; its exit status (128 + N for a signal N)."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = None

    def forward(sig, _frame):
        if child:  # None before the fork, 0 in the child
            _kill(child, sig)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)  # before fork: no window where a SIGTERM kills us
    child = os.fork()
    if child == 0:
        try:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    status = 0
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            status = os.waitstatus_to_exitcode(st)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--":
        sys.exit(reap(sys.argv[2:]))
    sys.exit("usage: reaper.py -- CMD [ARGS...]")
