"""A file system that fails a write, in words: which errors count, what each means, and what to do.

Pure: an `OSError` and the room on its file system (read at the edge, train/storage/writes.py) in, a
`StorageFault` out; a fault and the run's last good checkpoint in, the one message rank 0 prints out. A
full disk, a quota, a read-only or failing file system will not mend by itself, so the run ends with
EXIT_STORAGE (train/errors.py), which jobs/train.sbatch never requeues: a requeue would meet it again.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from train.errors import EXIT_STORAGE

# The errors of a file system rather than of one file or of the program, with what each means.
MEANINGS: dict[int, str] = {
    errno.ENOSPC: "the file system is full",
    errno.EDQUOT: "you are over your quota on this file system",
    errno.EROFS: "the file system is read-only",
    errno.EIO: "an input/output error: the disk or the file server failed",
    errno.ESTALE: "a stale file handle: the network file system lost the file (its server restarted, or the "
                  "file was replaced from another node)",
}

# What to do about each, before resubmitting.
REMEDIES: dict[int, str] = {
    errno.ENOSPC: "free space there (or point output.dir at a file system with room)",
    errno.EDQUOT: "free space within your quota (`quota -s`; on Lustre `lfs quota -h -u $USER DIR`) or ask for more",
    errno.EROFS: "make it writable again (a file system remounted read-only after an error: ask your admins), or "
                 "point output.dir elsewhere",
    errno.EIO: "ask your admins whether the file system is healthy, or point output.dir elsewhere",
    errno.ESTALE: "check that the directory still exists on the login node, or point output.dir elsewhere",
}


@dataclass(frozen=True)
class StorageFault:
    """A write that a file system refused: the file, the error, the room where it could be read, and what the
    writer knows beyond the generic remedy (`advice`: the shared graph's way around, say)."""

    path: str
    errno: int
    free_bytes: int | None = None
    total_bytes: int | None = None
    advice: str = ""


class StorageError(Exception):
    """A run's file could not be written because of its file system (`StorageFault`). Raised by the writers
    (train/storage/writes.py), agreed by all ranks, and turned into one message and EXIT_STORAGE at the top."""

    exit_status = EXIT_STORAGE

    def __init__(self, fault: StorageFault):
        super().__init__(fault)
        self.fault = fault

    def __str__(self) -> str:
        return describe(self.fault)


def is_storage_error(exc: BaseException) -> bool:
    """An OSError of the file system itself (MEANINGS), not of one file or of the program (EACCES, ENOENT, ...)."""
    return isinstance(exc, OSError) and exc.errno in MEANINGS


def fault_of(exc: OSError, path: str, room: tuple[int, int] | None) -> StorageFault | None:
    """The fault `exc` is when writing `path`, with `room` (free, total bytes) of its file system; None when
    `exc` is not a storage error."""
    if not is_storage_error(exc):
        return None
    free, total = room if room is not None else (None, None)
    return StorageFault(str(path), exc.errno, free, total)


def format_bytes(n: float | None) -> str:
    """A byte count in binary units, for messages ("-" when unknown)."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def split_path(path: str) -> tuple[str, str]:
    """(the file's name, its directory) as a message names them."""
    directory, _, name = path.rpartition("/")
    return name, directory or "."


def room_words(fault: StorageFault) -> str:
    """The room on the file system, where it could be read."""
    if fault.free_bytes is None:
        return "its free space could not be read"
    total = f" of {format_bytes(fault.total_bytes)}" if fault.total_bytes is not None else ""
    return f"{format_bytes(fault.free_bytes)} free{total} there"


def describe(fault: StorageFault) -> str:
    """What happened: the file and its directory, the error in words, and the room."""
    name, directory = split_path(fault.path)
    code = errno.errorcode.get(fault.errno, str(fault.errno))
    return f"could not write {name} in {directory}: {MEANINGS[fault.errno]} ({code}); {room_words(fault)}"


def storage_message(fault: StorageFault, run_dir: str, checkpoint: str | None) -> str:
    """The one message of a run ended by `fault`: what happened, the last good checkpoint, and what to do."""
    kept = (f"The last good checkpoint is {checkpoint}" if checkpoint else
            "No checkpoint was saved yet, so a resubmitted run starts from the beginning")
    remedy = fault.advice or REMEDIES[fault.errno]
    resume = ": trainer.resume=auto (the default) continues from that checkpoint" if checkpoint else ""
    return (f"storage fault: {describe(fault)}. {kept}. What to do: {remedy}, then resubmit with "
            f"output.dir={run_dir}{resume}. Exit status {EXIT_STORAGE} (EXIT_STORAGE): not requeued, since a requeue "
            "would meet the same file system.")


def shared_graph_advice(total_bytes: int | None, need_bytes: int) -> str:
    """What to do when the node-local file system of the node's shared graph (data.share=node) fails it: its
    size, the graph's need, and the ways around."""
    size = f" and this file system holds {format_bytes(total_bytes)} in all" if total_bytes is not None else ""
    return (f"the shared graph needs {format_bytes(need_bytes)} on each node{size}: use data.share=process (each "
            "rank keeps its own copy, in RAM), give the job a larger /dev/shm, or set data.share_dir to a node-local "
            "directory with room")
