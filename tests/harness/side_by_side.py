"""Run a test's independent, short, single-threaded programs (make, bash, a one-rank Python) side by side.

The suite runs in one pytest process: a test that starts dozens of such programs one after the other keeps
one core busy and leaves the others idle (CI's machine has two). Each call must be independent of the others
(its own files, its own marker): the results come back in the order of the inputs, so an assertion can still
name the one input that failed. Stdlib only, like the rest of the harness.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

# One program per core this process may use (the programs are CPU-bound: Python and bash start-ups), at most 4:
# some of them import torch, a few hundred MB each.
WORKERS = min(4, max(2, len(os.sched_getaffinity(0))))


def map_side_by_side(call: Callable[[In], Out], inputs: Iterable[In], workers: int = WORKERS) -> list[Out]:
    """[call(x) for x in inputs], up to `workers` at a time (threads: each call waits on its own subprocess)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(call, inputs))
