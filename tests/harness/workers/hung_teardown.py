"""`python -m train` whose process group's teardown never returns, as gloo's now and then does: HANG=released
blocks with the interpreter's lock released (a C++ wait), HANG=held with it held. dist.exit_timeout_seconds must
still end the rank (tests/test_leaving.py)."""

import ctypes
import os
import time

import torch.distributed as dist

from train.__main__ import console_entry

destroy = dist.destroy_process_group


def hang(group=None) -> None:
    """The default group's teardown hangs (a node's subgroup, destroyed while the graph is shared, does not)."""
    if group is not None:
        return destroy(group)
    if os.environ["HANG"] == "held":
        ctypes.PyDLL(None).sleep(3600)  # libc's sleep, called through PyDLL, which keeps the interpreter's lock
    time.sleep(3600)


dist.destroy_process_group = hang
console_entry()
