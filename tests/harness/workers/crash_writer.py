"""`python crash_writer.py DIR WHERE`: write two checkpoints, then die by SIGKILL while writing the third,
either between fsync and rename (WHERE=before-rename) or halfway through its bytes (mid-write).
tests/test_checkpoint.py checks that the second one is still the latest valid checkpoint."""
import os
import signal
import sys
from pathlib import Path

from tests.harness.checkpoints import payload
from train.loop import checkpoint as ck
from train.storage import writes


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


class HalfFile:
    """Writes half of what it is given, then kills the process."""

    def __init__(self, fh):
        self.fh = fh

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, data):
        self.fh.write(data[: len(data) // 2])
        self.fh.flush()
        die()


directory, where = Path(sys.argv[1]), sys.argv[2]
ck.save_checkpoint(directory, payload(1, value=1.0), keep=3)
ck.save_checkpoint(directory, payload(2, value=2.0), keep=3)
print("two written", flush=True)
if where == "before-rename":  # the new file is complete and fsynced, not yet renamed
    os.replace = die
else:  # half of the bytes written, then the process dies
    real_open = open
    writes.open = lambda path, mode: HalfFile(real_open(path, mode))  # where every file of a run is written
ck.save_checkpoint(directory, payload(2, 4, value=3.0), keep=3)
print("not reached", flush=True)
