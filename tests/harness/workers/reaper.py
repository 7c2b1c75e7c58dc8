"""``python -I reaper.py -- CMD...``: the child-subreaper every daemon of the SLURM test cluster runs under.

It runs CMD as a child, becomes a child subreaper (so slurmstepd, which slurmd double-forks, is
reparented here and not to a slow PID 1), forwards SIGTERM/SIGINT/SIGHUP to CMD, reaps every
descendant, and exits with CMD's status once no descendant is left. Stdlib only, run with -I:
it imports nothing of the project.

Every forwarded signal is logged with its sender (pid and command line) on stdout, the daemon's
log/NAME.stdout: a daemon stopped by a signal the harness did not send says who sent it.
CMD starts with every signal Python can name at its default disposition, as a daemon started by init does: what
is ignored stays ignored across exec, down to the jobs' tasks, and Python ignores SIGPIPE and
SIGXFSZ (a suite started in the background of a script also ignores SIGINT and SIGQUIT).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300] or "?"
    except OSError:
        return "gone"


def _exec_child(argv: list[str]) -> None:
    """In the forked child: no blocked signals, default dispositions, then CMD."""
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
            with contextlib.suppress(OSError, ValueError):  # numbers without a disposition to set
                signal.signal(sig, signal.SIG_DFL)
        os.execvp(argv[0], argv)
    finally:
        os._exit(127)


def _reap_exited(child: int, status: int | None) -> tuple[bool, int | None]:
    """waitpid every exited descendant; (whether any is left, CMD's exit code once known)."""
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False, status
        if pid == 0:
            return True, status
        if pid == child:
            status = os.waitstatus_to_exitcode(st)


def reap(argv: list[str]) -> int:
    """Run argv under this subreaper; its exit status (128 + N for a signal N)."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    watched = {*FORWARDED, signal.SIGCHLD}
    # Blocked before the fork and taken with sigwaitinfo: no window where a SIGTERM kills us, no
    # SIGCHLD missed, and each signal comes with its sender.
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    child = os.fork()
    if child == 0:
        _exec_child(argv)
    name = os.path.basename(argv[0])
    status: int | None = None
    while True:
        left, status = _reap_exited(child, status)
        if not left:
            break
        info = signal.sigwaitinfo(watched)
        if info.si_signo == signal.SIGCHLD:
            continue
        print(f"reaper: {signal.Signals(info.si_signo).name} from pid {info.si_pid} "
              f"({_command_of(info.si_pid)}), forwarded to {name} (pid {child})", flush=True)
        _kill(child, info.si_signo)
    status = 0 if status is None else status
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--":
        sys.exit(reap(sys.argv[2:]))
    sys.exit("usage: reaper.py -- CMD [ARGS...]")
