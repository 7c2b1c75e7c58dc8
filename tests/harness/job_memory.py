"""What a running job's training processes hold in memory, read from /proc while they run (the test nodes share this
machine's PID namespace): each process's peak RSS (VmHWM), its largest PSS and RSS parts seen, the node-shared
graph files it maps (their sizes as mapped) and its largest anonymous mapping (a tensor of a few MiB or more is one
mapping of its own: glibc's mmap threshold, torch's huge-page allocator).

Polled, so a figure other than VmHWM (the kernel's own peak) is the largest seen at the polls; a process's last
figures are those of the last poll before it exited. Stdlib only, like the rest of the harness; the parsers are pure
(tests/test_harness.py).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

KIB = 1024
STATUS_KEYS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")


def kib_fields(text: str, keys: Iterable[str]) -> dict[str, int]:
    """`Key:   123 kB` lines of /proc/PID/status or smaps_rollup: {key: bytes} of the `keys` present."""
    wanted = set(keys)
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in wanted and rest.strip().endswith("kB"):
            found[name] = int(rest.split()[0]) * KIB
    return found


def mappings(maps: str) -> list[tuple[int, str]]:
    """(bytes, path or "" for an anonymous one) of each mapping of /proc/PID/maps; a deleted file's path without
    its " (deleted)" mark (a node-shared file is unlinked once every rank of its node maps it)."""
    out = []
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5].removesuffix(" (deleted)") if len(parts) == 6 else ""
        out.append((end - start, path))
    return out


@dataclass
class ProcessMemory:
    """One training process's memory, the largest seen over the polls (bytes)."""

    rank: int
    node: str
    worker: bool = False  # a process the rank's own started (its DataLoader's workers), not the rank itself
    cpu_seconds: float = 0.0  # user and system CPU, its own and its reaped children's (workers), at the last poll
    peak_rss: int = 0  # VmHWM: the kernel's own peak of the resident set
    pss: int = 0  # proportional set size: the node-shared pages split among the processes that map them
    anon: int = 0
    shmem: int = 0
    largest_anonymous: int = 0  # the largest anonymous mapping
    segment_files: dict[str, int] = field(default_factory=dict)  # file name -> bytes mapped, of the job's segments
    segment_folders: set[str] = field(default_factory=set)

    def update(self, status: dict[str, int], pss: int | None, maps: list[tuple[int, str]],
               is_segment: Callable[[str], bool], cpu_seconds: float) -> None:
        self.cpu_seconds = max(self.cpu_seconds, cpu_seconds)
        self.peak_rss = max(self.peak_rss, status.get("VmHWM", 0))
        self.pss = max(self.pss, pss or 0)
        self.anon = max(self.anon, status.get("RssAnon", 0))
        self.shmem = max(self.shmem, status.get("RssShmem", 0))
        mapped: dict[str, int] = {}
        for size, path in maps:
            if not path:
                self.largest_anonymous = max(self.largest_anonymous, size)
            elif is_segment(Path(path).parent.name):
                mapped[path] = mapped.get(path, 0) + size
                self.segment_folders.add(Path(path).parent.name)
        for path, size in mapped.items():
            name = Path(path).name
            self.segment_files[name] = max(self.segment_files.get(name, 0), size)


def cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """User and system CPU seconds of /proc/PID/stat's line, the process's own and its reaped children's (utime,
    stime, cutime and cstime: fields 14 to 17, counted after the command's parenthesised name, which may hold
    spaces)."""
    fields = stat.rpartition(")")[2].split()
    return sum(int(value) for value in fields[11:15]) / ticks_per_second


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def watch_memory(jobs: dict[str, Callable[[], dict[int, dict[str, str]]]], done: Callable[[], bool],
                 is_segment: dict[str, Callable[[str], bool]], interval: float = 0.2,
                 timeout: float = 600) -> dict[str, dict[int, ProcessMemory]]:
    """job -> pid -> ProcessMemory of the training processes (`python -m train fit`, and the workers they start) of
    `jobs` (job -> a function that lists its live processes and their environments, SlurmCluster.job_processes),
    polled every `interval` seconds until `done()` or `timeout`. `is_segment[job]`: whether a folder's name is one of
    the job's segments."""
    seen: dict[str, dict[int, ProcessMemory]] = {job: {} for job in jobs}
    ticks = os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        for job, processes in jobs.items():
            for pid, environ in processes().items():
                if not _training(pid) or "SLURM_PROCID" not in environ:
                    continue
                status, maps, stat = (_read(f"/proc/{pid}/{name}") for name in ("status", "maps", "stat"))
                if status is None or maps is None or stat is None or not _training(pid):
                    continue  # ended, or a child that ran another program (exec) while it was read
                rollup = kib_fields(_read(f"/proc/{pid}/smaps_rollup") or "", ("Pss",)).get("Pss")
                parent = int(stat.rpartition(")")[2].split()[1])
                record = seen[job].setdefault(pid, ProcessMemory(int(environ["SLURM_PROCID"]),
                                                                 environ.get("SLURMD_NODENAME", "?"),
                                                                 worker=_training(parent)))
                record.update(kib_fields(status, STATUS_KEYS), rollup, mappings(maps), is_segment[job],
                              cpu_seconds(stat, ticks))
        time.sleep(interval)
    return seen


def training_command(cmdline: str) -> bool:
    """Whether /proc/PID/cmdline is a Python's `-m train fit ...` (not srun's, whose arguments hold it too)."""
    return cmdline.split("\0")[1:4] == ["-m", "train", "fit"]


def _training(pid: int) -> bool:
    return training_command(_read(f"/proc/{pid}/cmdline") or "")


def ranks(processes: dict[int, ProcessMemory]) -> dict[int, ProcessMemory]:
    """rank -> the rank's own process (not its workers); a rank seen in two processes is a finding."""
    found = {}
    for p in processes.values():
        if not p.worker:
            assert p.rank not in found, f"rank {p.rank} in two processes: {found[p.rank]} and {p}"
            found[p.rank] = p
    return found


def workers(processes: dict[int, ProcessMemory], rank: int) -> list[ProcessMemory]:
    """The workers the rank started (its DataLoader's: num_workers each time it iterates)."""
    return [p for p in processes.values() if p.worker and p.rank == rank]


def segment_pattern(job: str, port: int, uid: int) -> Callable[[str], bool]:
    """Whether a folder's name is one of the job's node-shared segments ("...j<job>-p<port>-n<node>-u<uid>",
    train/graph/sharing/segments.py segment_name)."""
    pattern = re.compile(rf"j{job}-p{port}-n\d+-u{uid}$")
    return lambda name: bool(pattern.search(name))


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
