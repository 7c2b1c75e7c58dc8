"""The odd things a path can be, made on disk for the tests of every reader (tests/test_input_files.py,
tests/test_graph_files_odd.py), with the words train/files.py names each one by."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def _under_a_file(path: Path) -> Path:
    blocker = path.parent / "a-file"
    blocker.write_text("x")
    return blocker / path.name


# kind -> (how to make it at a path; the path to read afterwards; the words the message must hold)
ODD: dict[str, tuple] = {
    "empty": (lambda p: p.write_bytes(b""), None, "is empty (0 bytes)"),
    "directory": (lambda p: p.mkdir(), None, "is a directory"),
    "fifo": (lambda p: os.mkfifo(p), None, "is a FIFO (named pipe), not a regular file"),
    "dangling-link": (lambda p: p.symlink_to(p.parent / "nowhere"), None, "is a dangling symbolic link"),
    "link-loop": (lambda p: p.symlink_to(p), None, "is a symbolic link loop"),
    "under-a-file": (lambda p: None, _under_a_file, "on its path is a regular file, not a directory"),
}
NOT_TEXT = b"\xff\xfe\x00\x01 not text"


def make_odd(path: Path, kind: str) -> Path:
    """Make `path` odd in the way `kind` says; returns the path a reader is given."""
    make, where, _words = ODD[kind]
    path = where(path) if where else path
    make(path)
    return path


def words(kind: str) -> str:
    return ODD[kind][2]


class Blocked(BaseException):
    """A read that blocked. Not an OSError (TimeoutError is one): a reader's `except OSError` would take it for an
    unreadable file, name the FIFO after all, and so hide the hang (a real user's run would wait forever)."""


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """Fail instead of waiting forever (a FIFO opened for reading blocks until a writer comes)."""
    def expire(signum, frame):
        raise Blocked(f"blocked for {seconds} s: a reader waited on a FIFO or a lock")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
