"""Other users of this machine, for the tests of what one user's files can do to another's (tests/test_shm_users.py).

Made with useradd when missing (the suite runs as root, as CI does). Their steps run as them for real:
shell tools through subprocess's user=/group= (setuid and setgid in the child), and a function of this
process in a forked child that drops to the user first: the project's interpreter lives under /root,
which other users cannot enter, so a new Python process cannot start as them.
"""

from __future__ import annotations

import os
import pickle
import pwd
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ATTACKER = "pygtest-mallory"
VICTIM = "pygtest-alice"


def ensure_user(name: str) -> pwd.struct_passwd:
    """The system user `name`, made (no home, no login shell) when it does not exist yet."""
    for attempt in range(20):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        if os.geteuid() != 0:
            pytest.skip(f"needs root to add the test user {name!r} (useradd) and to act as it")
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True, text=True)
        if done.returncode not in (0, 9):  # 9: made meanwhile by a concurrent test run
            time.sleep(0.2 * (attempt + 1))  # /etc/passwd locked by another useradd
    raise AssertionError(f"could not add the test user {name!r}")


def run_as(user: pwd.struct_passwd, *argv: str) -> subprocess.CompletedProcess:
    """A command run as `user` (its uid and gid, no supplementary groups); it must succeed."""
    return subprocess.run(list(argv), user=user.pw_uid, group=user.pw_gid, extra_groups=[], check=True,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, cwd="/")


def call_as(user: pwd.struct_passwd, function: Callable, *args, timeout: float = 120.0):
    """`function(*args)` in a forked child that has become `user`; its result, or its exception re-raised here.
    A child still running after `timeout` seconds (a fork of a process with threads can deadlock, e.g. in
    torch's thread pool) is killed and the call fails, naming the function."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop root for good, run, report, leave without running the parent's atexit
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            try:
                outcome = ("ok", function(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the parent as it is
                outcome = ("raised", exc)
            with os.fdopen(write_end, "wb") as fh:
                pickle.dump(outcome, fh)
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        raise AssertionError(f"{function.__name__} as {user.pw_name} did not finish within {timeout:.0f} s")
    with os.fdopen(read_end, "rb") as fh:
        data = fh.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, f"the child running as {user.pw_name} failed"
    kind, value = pickle.loads(data)
    if kind == "raised":
        raise value
    return value


def sticky_dir(prefix: str) -> Path:
    """A fresh directory like /dev/shm and /tmp (mode 1777: everyone may add entries, only owners remove them)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o1777)
    return path
