"""How the run writes its files: whole or not at all, and a failing file system told as a `StorageError`.

`atomic_write` (a temporary file, fsync, rename, a directory fsync: readers see the old file or the whole
new one) writes the checkpoints, model.pt, summary.json, config.yaml, job.json and curves.png;
`append_line` adds one line to metrics.jsonl, whole or cut back. Both, and the shared graph's segments
(train/graph/sharing/shared_graph.py), write under `guarded(path)`: the one place where an OSError of the file
system (train/storage/faults.py) becomes a `StorageError` that names the file and the room left there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from train.storage.faults import StorageError, fault_of

TMP_PREFIX = ".tmp-"


def room(path: Path) -> tuple[int, int] | None:
    """(free, total) bytes of the file system that holds `path` (or its nearest existing parent); None where
    the file system does not answer (a failing or lost one)."""
    for candidate in (Path(path), *Path(path).parents):
        try:
            usage = shutil.disk_usage(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
        return usage.free, usage.total
    return None


@contextlib.contextmanager
def guarded(path: Path) -> Iterator[None]:
    """Writing `path`: an OSError of its file system (full, quota, read-only, failing, stale) leaves as a
    `StorageError`; any other error as it is."""
    try:
        yield
    except OSError as exc:
        fault = fault_of(exc, str(path), room(Path(path).parent))
        if fault is None:
            raise
        raise StorageError(fault) from exc


def fsync_dir(path: Path) -> None:
    """Make a rename in `path` durable (POSIX: the directory entry is data of the directory)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | Callable[[BinaryIO], object]) -> None:
    """Write `data` (bytes, or a function that writes into the open file) to `path` so that readers see the old
    file or the whole new one, nothing else; `StorageError` when the file system fails it."""
    path = Path(path)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}")
    with guarded(path):
        try:
            with open(tmp, "wb") as fh:
                if callable(data):
                    data(fh)
                else:
                    fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, text.encode())


def append_line(path: Path, text: str) -> None:
    """Append `text` in one write and fsync it; on any error the file is cut back to its size before, so it never
    keeps a partial line (a network file system may report a full disk or a quota only at the fsync)."""
    data = text.encode()
    with guarded(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            try:
                written = os.write(fd, data)
                if written != len(data):
                    raise OSError(errno.ENOSPC, f"wrote {written} of {len(data)} bytes of a line", str(path))
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
