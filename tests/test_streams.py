"""`make test`'s runner (tests/harness/streams.py): the suite's two sessions at once, each with its log and its
cache, one verdict; the /dev/shm leak check over both, after both (a session's end sees the other's live segments).

Each test runs the runner on tests/harness/streams_demo.py, whose two tests wait for each other (they pass only
when the sessions overlap), with its own state folder (not the checkout's .pytest_cache, which a running suite uses).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.shm_entries import CHECKED_OUTSIDE
from tests.harness.streams import STREAMS, prepare
from train.graph.segments import PREFIX, SHM

ROOT = Path(__file__).resolve().parents[1]
DEMO = "tests/harness/streams_demo.py"
LASTFAILED = "v/cache/lastfailed"  # where pytest keeps the failures that --lf re-runs


@pytest.fixture
def entry(tmp_path):
    """A /dev/shm entry of the project's, named for this test (removed afterwards, whatever happened)."""
    path = SHM / f"{PREFIX}streams-demo-{os.getpid()}-{tmp_path.name}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_streams(tmp_path: Path, entry: Path, **demo: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "STREAMS_DEMO_DIR": str(tmp_path), "STREAMS_DEMO_ENTRY": str(entry),
           **{f"STREAMS_DEMO_{k.upper()}": v for k, v in demo.items()}}
    env.pop(CHECKED_OUTSIDE, None)  # as `make test` starts it (this suite may itself run under it)
    command = [sys.executable, "-m", "tests.harness.streams", "--state", str(tmp_path / "state"), "--", DEMO]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_both_sessions_run_at_once_each_with_its_log_and_a_concurrent_live_segment_is_no_leak(tmp_path, entry):
    done = run_streams(tmp_path, entry)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    ran = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("cluster", "rest")}
    assert ran["cluster"]["pid"] != ran["rest"]["pid"]
    assert ran["cluster"]["end"] > ran["rest"]["start"] and ran["rest"]["end"] > ran["cluster"]["start"], ran
    logs = {s.name: (tmp_path / "state" / "streams" / f"{s.name}.log").read_text() for s in STREAMS}
    assert "1 passed, 1 deselected" in logs["cluster"] and "1 passed, 1 deselected" in logs["rest"], logs
    # the rest shown as it ran, the cluster's log after it, then one verdict line each
    assert out.index(logs["rest"]) < out.index(logs["cluster"]) < out.index("[streams] cluster (-m \"slurm or "), out
    assert "[streams] rest (-m \"not slurm and not container\"): passed after" in out
    assert "shared-memory segments" not in out and not entry.exists()


def test_a_leak_fails_the_run_named_once_after_both_sessions_passed(tmp_path, entry):
    done = run_streams(tmp_path, entry, leak="1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "[streams] cluster (-m \"slurm or container\"): passed after" in out
    assert "[streams] rest (-m \"not slurm and not container\"): passed after" in out
    assert out.count(f"FAILED: the tests left shared-memory segments behind: ['{entry}']") == 1, out


def test_a_failed_session_fails_the_run_and_its_failures_stay_in_its_own_cache(tmp_path, entry):
    done = run_streams(tmp_path, entry, fail="cluster")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "[streams] cluster (-m \"slurm or container\"): FAILED (pytest exit status 1)" in out
    assert "[streams] rest (-m \"not slurm and not container\"): passed after" in out
    assert "shared-memory segments" not in out
    # `--lf` finds the cluster's failure in its cache; the rest's session, ending later, did not overwrite it
    state = tmp_path / "state"
    assert "streams_demo.py::test_cluster_side" in (state / "cluster" / LASTFAILED).read_text()
    assert not (state / LASTFAILED).exists() or "test_cluster_side" not in (state / LASTFAILED).read_text()


def test_the_folders_either_session_makes_where_the_other_looks_are_made_before_both(tmp_path):
    (tmp_path / "checkout").mkdir()
    prepare(tmp_path / "state", tmp_path / "checkout")
    made = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    # the caches (the rest's is pytest's default, in the state folder itself), the logs' folder, and the checkout's
    assert made == {"state", "state/cluster", "state/streams", "checkout", "checkout/data", "checkout/.wheels"}
