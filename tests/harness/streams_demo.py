"""Two tests for tests/test_streams.py to run through tests/harness/streams.py, one in each of its sessions (not
collected by the suite itself: the file is not named test_*). Driven by the environment the test gives:

- STREAMS_DEMO_DIR: where each writes when it ran (start and end times), and the handshake's files;
- STREAMS_DEMO_ENTRY: a /dev/shm entry of the project's that the rest's test makes and holds until the cluster's
  session has exited (its end saw it: a concurrent session's live segment), then removes, unless STREAMS_DEMO_LEAK=1;
- STREAMS_DEMO_FAIL=cluster: the cluster's test fails;
- STREAMS_DEMO_HOLD=1: each test only says it started (`<name>.started`, holding its pid) and waits, to be ended.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.harness.machine import alive

WAIT_S = 60  # for the other session's step of the handshake (generous: a busy 2-core machine)


def _dir() -> Path:
    return Path(os.environ["STREAMS_DEMO_DIR"])


def _wait_for(done, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"{what} within {WAIT_S} s"
        time.sleep(0.05)


def _record(name: str, start: float) -> None:
    partial = _dir() / f".{name}.json"  # renamed into place: the other reads it whole
    partial.write_text(json.dumps({"start": start, "end": time.time(), "pid": os.getpid()}))
    partial.rename(_dir() / f"{name}.json")


def _hold(name: str) -> None:
    if os.environ.get("STREAMS_DEMO_HOLD") == "1":
        (_dir() / f"{name}.started").write_text(str(os.getpid()))
        time.sleep(WAIT_S)
        pytest.fail(f"the {name} session was not ended within {WAIT_S} s")


@pytest.mark.slurm
def test_cluster_side():
    _hold("cluster")
    start = time.time()
    made = _dir() / "entry-made"
    _wait_for(made.exists, f"no {made}")  # the rest's entry is there: this session ends while it lives
    _record("cluster", start)
    assert os.environ.get("STREAMS_DEMO_FAIL") != "cluster", "the cluster's test fails, as asked"


def test_rest_side():
    _hold("rest")
    start = time.time()
    entry = Path(os.environ["STREAMS_DEMO_ENTRY"])
    entry.mkdir()
    (_dir() / "entry-made").touch()
    ran = _dir() / "cluster.json"
    _wait_for(ran.exists, f"no {ran}")
    pid = json.loads(ran.read_text())["pid"]
    _wait_for(lambda: not alive(pid), f"the cluster's session (pid {pid}) did not exit")
    _record("rest", start)
    if os.environ.get("STREAMS_DEMO_LEAK") != "1":
        entry.rmdir()
