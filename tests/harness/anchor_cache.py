"""The benchmarks' pyg-lib anchor (bench/anchor.sh: a venv with the lock's torch and PyG plus pyg-lib built
from ../shared/pyg-lib), built once per machine for the tests, beside the NGC stand-in.

A checkout's own anchor is `.venv-anchor` (`make anchor`); a fresh clone has none, and building it costs
about 3 minutes on 2 cores: too slow for every clone, cheap once per machine. The venv lives under
``CACHE_DIR`` and bench/anchor.sh rebuilds it only when the pyg-lib sources or requirements.lock change
(it keeps their hash). One build at a time on the machine (flock); the others wait and reuse it.
"""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.harness.ngc_standin import CACHE_DIR, ROOT

ANCHOR_DIR = CACHE_DIR / "pyg-lib-anchor"
SCRIPT = ROOT / "bench" / "anchor.sh"
CANNOT_BUILD = 3  # bench/anchor.sh: "the anchor cannot be built here" (no sources, no compiler)


class AnchorUnavailable(RuntimeError):
    """This machine cannot build the anchor (why, in the message)."""


def ensure_anchor(log=print, timeout: float = 3600) -> tuple[Path, float]:
    """(the anchor venv, seconds spent building it: 0 when reused) for bench/anchor.py's BENCH_ANCHOR_VENV."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(CACHE_DIR / ".anchor.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        check = subprocess.run(["bash", str(SCRIPT), "--check", str(ANCHOR_DIR)], capture_output=True, text=True,
                               timeout=120)
        if check.returncode == 0:
            return ANCHOR_DIR, 0.0
        log(f"building the pyg-lib anchor into {ANCHOR_DIR} (once per machine, ~3 min on 2 cores)")
        # its own process group: on a timeout the compilers go too, not only bash (an orphaned compiler
        # would write into the folder the next build starts afresh)
        build = subprocess.Popen(["bash", str(SCRIPT), str(ANCHOR_DIR)], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _out, err = build.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(build.pid, signal.SIGKILL)
            build.communicate()
            raise RuntimeError(f"bench/anchor.sh {ANCHOR_DIR} did not finish within {timeout:.0f} s") from None
    if build.returncode == CANNOT_BUILD:
        raise AnchorUnavailable(err.strip().splitlines()[-1])
    if build.returncode != 0:
        raise RuntimeError(f"bench/anchor.sh {ANCHOR_DIR} failed (exit {build.returncode}):\n{err[-3000:]}")
    return ANCHOR_DIR, time.monotonic() - started
