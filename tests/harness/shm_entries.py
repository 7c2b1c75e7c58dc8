"""The project's entries in /dev/shm, and the check that a test run left none of them behind.

The check compares the entries before and after a whole run, so it belongs to whoever sees the whole run: the pytest
session when it runs alone (tests/conftest.py), the controller under pytest-xdist, and tests/harness/streams.py when
`make test` runs the suite as two concurrent sessions: there one session's end would see the other's live segments,
and ``CHECKED_OUTSIDE`` in their environment leaves the check to the runner, after both have ended.
"""

from __future__ import annotations

import re
from pathlib import Path

from train.graph.sharing.segments import PREFIX, SHM

# Set (to 1) by tests/harness/streams.py for the sessions it starts: it checks the whole run itself.
CHECKED_OUTSIDE = "PYG_TRAIN_TESTS_SHM_CHECKED_OUTSIDE"
PRIVATE_DIR = re.compile(rf"^{re.escape(PREFIX)}u\d+$")  # a user's private directory: it stays, its contents go


def project_entries() -> set[Path]:
    """Every entry of the project in /dev/shm: the contents of each user's private directory, and anything else."""
    found: set[Path] = set()
    for entry in Path(SHM).glob(f"{PREFIX}*"):
        if PRIVATE_DIR.match(entry.name) and entry.is_dir() and not entry.is_symlink():
            try:
                found.update(entry.iterdir())
            except OSError:  # another user's (the tests of tests/test_shm_users.py run as other users)
                found.add(entry)
        else:
            found.add(entry)
    return found


def leaked(before: set[Path]) -> list[str]:
    """The entries there now that were not there `before`, sorted."""
    return sorted(str(p) for p in project_entries() - before)


def leak_message(entries: list[str]) -> str:
    return f"FAILED: the tests left shared-memory segments behind: {entries}"
