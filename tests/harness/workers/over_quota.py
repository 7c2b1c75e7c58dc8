"""`python -m tests.harness.workers.over_quota N fit ...`: `python -m train` whose file system reports a quota
(EDQUOT) at the Nth fsync of metrics.jsonl, as a network file system does when the data leaves the client.
tests/test_storage.py checks that every rank ends alike and the file keeps whole lines only."""
import errno
import os
import sys

from train.storage import writes

fail_at = int(sys.argv.pop(1))
real_fsync = os.fsync
calls = 0


def fsync(fd: int) -> None:
    global calls
    if os.readlink(f"/proc/self/fd/{fd}").endswith("/metrics.jsonl"):
        calls += 1
        if calls == fail_at:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    real_fsync(fd)


writes.os.fsync = fsync

from train.__main__ import console_entry  # noqa: E402 (after the change above)

console_entry()
