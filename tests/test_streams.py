"""`make test`'s runner (tests/harness/streams.py): the suite's two sessions at once, each with its log and its
cache, one verdict; the /dev/shm leak check over both, after both (a session's end sees the other's live segments).

Each test runs the runner on tests/harness/streams_demo.py, whose two tests wait for each other (they pass only
when the sessions overlap), with its own state folder (not the checkout's .pytest_cache, which a running suite uses).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import standin_bin
from tests.harness.machine import alive, cmdline
from tests.harness.shm_entries import CHECKED_OUTSIDE
from tests.harness.streams import STREAMS, prepare
from train.graph.sharing.segments import PREFIX, SHM

ROOT = Path(__file__).resolve().parents[1]
DEMO = "tests/harness/streams_demo.py"
LASTFAILED = "v/cache/lastfailed"
VERDICT = (r'^\[streams\] (\w+) \(-m "([^"]+)"\): (passed|FAILED \((?:pytest exit status \d+|ended by SIG[A-Z]+)\)) '
           r'after \d+ s')  # where pytest keeps the failures that --lf re-runs


@pytest.fixture
def entry(tmp_path):
    """A /dev/shm entry of the project's, named for this test (removed afterwards, whatever happened)."""
    path = SHM / f"{PREFIX}streams-demo-{os.getpid()}-{tmp_path.name}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_streams(tmp_path: Path, entry: Path, **demo: str) -> tuple[int, str]:
    """(the runner's exit status, its output) on the demo's two tests, driven by `demo` (streams_demo.py)."""
    env = {**os.environ, "STREAMS_DEMO_DIR": str(tmp_path), "STREAMS_DEMO_ENTRY": str(entry),
           **{f"STREAMS_DEMO_{k.upper()}": v for k, v in demo.items()}}
    env.pop(CHECKED_OUTSIDE, None)  # as `make test` starts it (this suite may itself run under it)
    command = [sys.executable, "-m", "tests.harness.streams", "--state", str(tmp_path / "state"), "--", DEMO]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout + done.stderr


def outcomes(out: str) -> dict[str, str]:
    """Each session's verdict line: its name -> "passed", "FAILED (pytest exit status N)" or "FAILED (ended by ...)"."""
    found = re.findall(VERDICT, out, re.M)
    assert [(name, markers) for name, markers, _ in found] == [(s.name, s.markers) for s in STREAMS], out
    return {name: outcome for name, _markers, outcome in found}


def test_both_sessions_run_at_once_each_with_its_log_and_a_concurrent_live_segment_is_no_leak(tmp_path, entry):
    rc, out = run_streams(tmp_path, entry)
    assert rc == 0 and outcomes(out) == {"cluster": "passed", "rest": "passed"}, out
    ran = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("cluster", "rest")}
    assert ran["cluster"]["pid"] != ran["rest"]["pid"]
    assert ran["cluster"]["end"] > ran["rest"]["start"] and ran["rest"]["end"] > ran["cluster"]["start"], ran
    logs = {s.name: (tmp_path / "state" / "streams" / f"{s.name}.log").read_text() for s in STREAMS}
    assert "1 passed, 1 deselected" in logs["cluster"] and "1 passed, 1 deselected" in logs["rest"], logs
    # the rest shown as it ran, the cluster's log after it, then one verdict line each
    assert out.index(logs["rest"]) < out.index(logs["cluster"]) < out.index("[streams] cluster (-m "), out
    assert "shared-memory segments" not in out and not entry.exists()


def test_a_leak_fails_the_run_named_once_after_both_sessions_passed(tmp_path, entry):
    rc, out = run_streams(tmp_path, entry, leak="1")
    assert rc == 1 and outcomes(out) == {"cluster": "passed", "rest": "passed"}, out
    assert out.count(f"FAILED: the tests left shared-memory segments behind: ['{entry}']") == 1, out


def test_a_failed_session_fails_the_run_and_its_failures_stay_in_its_own_cache(tmp_path, entry):
    rc, out = run_streams(tmp_path, entry, fail="cluster")
    assert rc == 1 and outcomes(out) == {"cluster": "FAILED (pytest exit status 1)", "rest": "passed"}, out
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


@pytest.mark.parametrize("pytest_args,python_args", [
    (None, "-m tests.harness.streams"),  # the whole suite: the two sessions at once
    ("-k doctor -x", "-m pytest -k doctor -x"),  # a user's arguments: one session with them, as ever
])
def test_make_test_runs_the_two_sessions_and_with_pytest_args_one_session(tmp_path, pytest_args, python_args):
    venv = tmp_path / "venv"  # stand-ins that record their arguments, for the venv's python and linters
    for name in ("python", "shellcheck", "hadolint", "ruff"):
        standin_bin.install(venv / "bin", name, "fixed-output")
        (venv / "bin" / f"{name}.out").write_text("")
    (venv / ".stamp").touch()  # newer than the lock files: setup has nothing to do
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTEST_ARGS")}
    words = [f"VENV={venv}"] + ([f"PYTEST_ARGS={pytest_args}"] if pytest_args else [])
    done = subprocess.run(["make", "--no-print-directory", "test", *words], cwd=ROOT, env={**env, "STANDIN_DIR":
                          str(venv / "bin")}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (venv / "bin" / "python.argv").read_text().splitlines() == [python_args]
    assert (venv / "bin" / "ruff.argv").read_text().splitlines() == ["check --quiet ."]  # the lint ran first


def test_a_sigterm_to_the_runner_reaches_both_sessions(tmp_path, entry):
    """CI's timeout ends `make test` with SIGTERM: both sessions must get it (the cluster's fixture then tears the
    cluster down, tests/harness/conftest_slurm.py), not only the runner."""
    env = {**os.environ, "STREAMS_DEMO_DIR": str(tmp_path), "STREAMS_DEMO_ENTRY": str(entry), "STREAMS_DEMO_HOLD": "1"}
    env.pop(CHECKED_OUTSIDE, None)
    runner = subprocess.Popen([sys.executable, "-m", "tests.harness.streams", "--state", str(tmp_path / "state"), "--",
                               DEMO], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = [tmp_path / f"{name}.started" for name in ("cluster", "rest")]
    try:
        deadline = time.monotonic() + 60
        while not all(path.exists() for path in started):
            assert time.monotonic() < deadline and runner.poll() is None, runner.communicate()[0]
            time.sleep(0.05)
        sessions = [int(path.read_text()) for path in started]
        runner.send_signal(signal.SIGTERM)
        out = runner.communicate(timeout=30)[0]
        assert not any(alive(pid) for pid in sessions), out
    finally:
        runner.kill()
        for path in started:  # whatever failed above: no demo session left waiting (its pid, if still its own)
            pid = int(path.read_text()) if path.exists() else 0
            if pid and alive(pid) and DEMO in cmdline(pid):
                os.kill(pid, signal.SIGKILL)
    assert runner.returncode == 128 + signal.SIGTERM, out
    assert outcomes(out) == {"cluster": "FAILED (ended by SIGTERM)", "rest": "FAILED (ended by SIGTERM)"}, out
