"""What the suite builds once per machine, built in the background from the start of the session.

A fresh machine has none of it: enroot and pyxis (pyxis_setup, ~70 s), the NGC stand-in image
(ngc_standin, ~1 min), the benchmarks' pyg-lib anchor (anchor_cache, ~3 min on 2 cores). Built when
the first test that needs each asks for it, they add minutes to a suite that must stay under 20. So
the session starts them, in this order, in one background thread as soon as it knows its tests need
them, at the lowest CPU priority (nice 19: they take what the tests leave idle), and runs the tests
that need them last (conftest_slurm orders them). Such a test waits for its part and gets its result,
or the exception its build raised, as if it had built it itself. On a machine that has them all,
each step is a check of a moment.

Stdlib only, like the rest of the harness.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Step = Callable[[Callable[[str], None]], object]  # called with a log function; returns the part


@dataclass
class Outcome:
    """What one step gave: its value, or the exception it raised; its messages; its seconds."""

    value: object = None
    error: BaseException | None = None
    messages: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Preparation:
    """Named steps run one after the other, in the background once ``start`` is called (in the caller's
    thread, when asked for, otherwise)."""

    def __init__(self, steps: list[tuple[str, Step]]):
        self._steps = dict(steps)
        self._order = [name for name, _ in steps]
        self._done = {name: threading.Event() for name in self._order}
        self._outcomes: dict[str, Outcome] = {}
        self._background: set[str] = set()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return list(self._order)

    def start(self, names: list[str]) -> None:
        """Run the steps among ``names``, in their order, in a background thread at nice 19."""
        wanted = [n for n in self._order if n in names]
        if not wanted or self._thread is not None:
            return
        self._background = set(wanted)
        self._thread = threading.Thread(target=self._run_all, args=(wanted,), name="suite-preparation", daemon=True)
        self._thread.start()

    def _run_all(self, names: list[str]) -> None:
        try:  # Linux: a thread's nice value, inherited by the processes it starts
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        for name in names:
            self._run(name)

    def _run(self, name: str) -> Outcome:
        with self._lock:  # a step asked for while the background thread runs it is not run twice
            if name in self._outcomes:
                return self._outcomes[name]
            outcome = Outcome()
            started = time.monotonic()
            try:
                outcome.value = self._steps[name](outcome.messages.append)
            except BaseException as e:  # handed to whoever asks for the part
                outcome.error = e
            outcome.seconds = time.monotonic() - started
            self._outcomes[name] = outcome
            self._done[name].set()
            return outcome

    def outcome(self, name: str) -> Outcome:
        """The step's outcome: waited for when it runs in the background, run here when nobody started it."""
        if name not in self._steps:
            raise KeyError(f"no preparation step {name!r}; known: {', '.join(self._order)}")
        if name in self._background:
            self._done[name].wait()
        return self._run(name)

    def result(self, name: str) -> object:
        """The step's value, or its exception raised here."""
        outcome = self.outcome(name)
        if outcome.error is not None:
            raise outcome.error
        return outcome.value
