"""`make test` without arguments: the whole suite as two pytest sessions at once, the SLURM test cluster's tests
and the rest, then one verdict.

The cluster's tests (markers `slurm`, `container`) mostly wait on the cluster (jobs starting, ranks meeting,
containers unpacking) while the rest keep the CPUs busy: run one after the other on CI's 2 cores they took 28
minutes; side by side the wait overlaps the work. The `long` tests (minutes of CPU each: the published figures)
run in the cluster's session too, so that neither session sets the suite's time alone. What the two would
otherwise share, and how each is kept apart:

- the /dev/shm leak check: each session's end would see the other's live segments, so the sessions leave it to
  this runner (shm_entries.CHECKED_OUTSIDE), which compares /dev/shm before both started and after both ended;
- pytest's cache (--lf): the cluster's session writes its own (`<state>/cluster`), so that neither overwrites the
  other's failures; the rest's is pytest's default, the one a plain `pytest --lf` reads. Both folders exist before
  either session starts: tests that list the checkout (nothing may be created in it) would otherwise see one
  appear there when the first session to end writes its cache (pytest makes it beside, then renames it);
- the checkout: tests that list it around a command of theirs (nothing may appear in it) would see the other session
  make a folder there, as a user's first `make submit` does (CHECKOUT_FOLDERS): made before both start;
- .wheels/, which both sessions' `make submit`/`make srun` rebuild while the other's job may install from it:
  container/wheelhouse.sh renames each wheel into place, never empties it;
- once-per-machine builds (enroot+pyxis, the NGC stand-in, the pyg-lib anchor): each under its own flock
  (tests/harness/prepare.py), and each needed by one stream only;
- the terminal: the rest (the longer) is shown as it runs, the cluster's session is written to its log and shown
  after; both logs stay, in `<state>/streams`.

`make test PYTEST_ARGS=...` runs pytest once with the arguments, as ever (the Makefile does not come here).
`python -m tests.harness.streams [--state DIR] [-- ARGS]`: ARGS go to both sessions (tests/test_streams.py runs
it on a small folder of its own). Exit status: the first failed session's (the cluster's first; 128 + N for one
ended by signal N), else 1 for a leak, else 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness.shm_entries import CHECKED_OUTSIDE, leak_message, leaked, project_entries

ROOT = Path(__file__).resolve().parents[2]
STATE = ROOT / ".pytest_cache"  # pytest's own cache folder: `make clean` removes it
# What a session's `make submit` makes in the checkout where it is missing (jobs/submit.sh): data/, the default
# DATA_DIR mounted into a container job; .wheels/, the wheels a job-start install reads (INSTALL_PROJECT=1).
CHECKOUT_FOLDERS = ("data", ".wheels")


@dataclass(frozen=True)
class Stream:
    """One pytest session of the suite: its name, its marker expression, whether it is shown as it runs (else
    after), and its cache folder within the state folder ("": the state folder itself)."""

    name: str
    markers: str
    live: bool
    cache: str

    def log(self, state: Path) -> Path:
        return state / "streams" / f"{self.name}.log"

    def command(self, state: Path, extra: list[str]) -> list[str]:
        return [sys.executable, "-m", "pytest", "-m", self.markers, "-o", f"cache_dir={state / self.cache}", *extra]


# The cluster's session: the tests that wait on the SLURM test cluster, and the `long` ones, which fill that wait with
# CPU work that would otherwise lengthen the rest (CI, 2 cores: cluster 606 s beside rest 1,411 s before they moved).
CLUSTER_MARKERS = "slurm or container or long"
STREAMS = (Stream("cluster", CLUSTER_MARKERS, live=False, cache="cluster"),
           Stream("rest", f"not ({CLUSTER_MARKERS})", live=True, cache=""))


def _forward_sigterm(procs: list[subprocess.Popen]) -> None:
    """A SIGTERM (CI's timeout) goes on to both sessions, which end as on Ctrl-C, tearing the cluster down. Ctrl-C
    reaches them from the terminal itself (one process group): here it only must not end this runner first."""
    def forward(signum, frame):
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(stream: Stream, state: Path, extra: list[str], env: dict[str, str]) -> subprocess.Popen:
    with stream.log(state).open("wb") as log:  # the child holds its own descriptor
        return subprocess.Popen(stream.command(state, extra), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE if stream.live else log, stderr=subprocess.STDOUT)


def _tee(proc: subprocess.Popen, log: Path) -> None:
    """Copy the live session's output to the terminal and to its log, as it comes (pytest's progress dots too)."""
    with log.open("ab") as sink:
        for chunk in iter(lambda: os.read(proc.stdout.fileno(), 65536), b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            sink.write(chunk)


def _wait_all(procs: list[subprocess.Popen], started: float) -> list[float]:
    """Each process's seconds from `started` to its end, once all have ended."""
    ended: dict[int, float] = {}
    while len(ended) < len(procs):
        for i, proc in enumerate(procs):
            if i not in ended and proc.poll() is not None:
                ended[i] = time.monotonic() - started
        time.sleep(0.2)
    return [ended[i] for i in range(len(procs))]


def verdict(stream: Stream, rc: int, seconds: float, log: Path) -> str:
    outcome = ("passed" if rc == 0 else f"FAILED (pytest exit status {rc})" if rc > 0 else
               f"FAILED (ended by {signal.Signals(-rc).name})")
    return f"[streams] {stream.name} (-m \"{stream.markers}\"): {outcome} after {seconds:.0f} s; log {log}"


def prepare(state: Path, checkout: Path) -> None:
    """Every folder either session would make where the other may be looking: made before both start."""
    for stream in STREAMS:
        (state / stream.cache).mkdir(parents=True, exist_ok=True)
        stream.log(state).parent.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT_FOLDERS:
        (checkout / name).mkdir(exist_ok=True)


def run(state: Path, extra: list[str]) -> int:
    prepare(state, ROOT)
    before = project_entries()
    env = {**os.environ, CHECKED_OUTSIDE: "1"}
    print("[streams] the suite as two sessions at once: " + "; ".join(
        f"{s.name} (-m \"{s.markers}\") " + ("shown here as it runs" if s.live else f"in {s.log(state)}, shown after")
        for s in STREAMS), flush=True)
    started = time.monotonic()
    procs = [_start(stream, state, extra, env) for stream in STREAMS]
    _forward_sigterm(procs)  # after the start: an ignored SIGINT would be inherited, and the sessions deaf to Ctrl-C
    tees = [threading.Thread(target=_tee, args=(proc, stream.log(state)), daemon=True)
            for stream, proc in zip(STREAMS, procs) if stream.live]
    for tee in tees:
        tee.start()
    seconds = _wait_all(procs, started)
    for tee in tees:
        tee.join()
    for stream in STREAMS:
        if not stream.live:
            print(f"\n[streams] ---- {stream.name}: {stream.log(state)} ----", flush=True)
            sys.stdout.buffer.write(stream.log(state).read_bytes())
            sys.stdout.buffer.flush()
    print(flush=True)
    codes = [proc.returncode for proc in procs]
    for stream, rc, took in zip(STREAMS, codes, seconds):
        print(verdict(stream, rc, took, stream.log(state)), flush=True)
    left = leaked(before)
    if left:
        print(leak_message(left), flush=True)
    # a session ended by a signal: the shell's status for it (128 + the signal's number)
    return next((rc if rc > 0 else 128 - rc for rc in codes if rc != 0), 1 if left else 0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.streams", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, default=STATE, help="where the logs and caches go (default: %(default)s)")
    parser.add_argument("extra", nargs="*", help="pytest's arguments for both sessions (after --)")
    args = parser.parse_args(argv)
    return run(args.state.resolve(), args.extra)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
