"""How much memory this node's run may hold: the job's cgroup limit, SLURM's --mem, the node's memory as SLURM
declares it (sinfo's, as make submit's plan weighed it), the node's physical memory: the smallest.

The run's side of data.features=auto (train/graph/sharing/feature_layout.py); the plan's side asks sinfo
(train/cli/plan.py node_memory). Standard library only: train/loop/killed_rank.py reads the node's memory from
here too, and it is run with the node's own Python.
"""

from __future__ import annotations

import os
from pathlib import Path

MIB = 2**20
# cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712); no node has 2**60 bytes.
UNLIMITED = 2**60
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def physical_memory_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def _limit_in(path: Path) -> int | None:
    """One cgroup file's limit in bytes; None where it is absent, unreadable or unlimited ("max")."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) < UNLIMITED else None


def _limits_up(root: Path, relative: str, name: str) -> list[int]:
    """The limits `name` sets on the cgroup at `root`/`relative` and on each cgroup above it, up to `root`: the
    smallest binds. Inside a container the cgroup's own path may not exist below the mounted root (the mount is
    the namespace's root): then the root's own file is the one that is read."""
    folder = root / relative.strip("/")
    found = []
    while True:
        if (limit := _limit_in(folder / name)) is not None:
            found.append(limit)
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return found


def cgroup_limit_bytes(proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT) -> int | None:
    """The memory limit of this process's cgroup (v2's memory.max, v1's memory.limit_in_bytes: the smallest on its
    path), or None where there is none. SLURM's task/cgroup plugin confines a job's steps to its --mem this way."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _id, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: "0::/path"
            limits += _limits_up(root, path, "memory.max")
        elif "memory" in controllers.split(","):  # v1: "4:memory:/path"
            limits += _limits_up(root / "memory", path, "memory.limit_in_bytes")
    return min(limits) if limits else None


def node_limit(slurm_mem_mb: int | None, proc_cgroup: Path = PROC_CGROUP, root: Path = CGROUP_ROOT,
               physical: int | None = None, planned: int | None = None) -> tuple[int | None, str]:
    """(bytes, where it comes from) of what this node's run may hold: the smallest of the job's cgroup limit,
    SLURM's --mem (SLURM_MEM_PER_NODE, in MB; 0 asks for the whole node), the node's memory make submit's plan
    weighed (sinfo's RealMemory: where it is below the physical memory and no cgroup holds the job to it, the plan
    would otherwise take a layout the run does not) and the node's physical memory.

    Args:
        slurm_mem_mb: SLURM_MEM_PER_NODE as the entry read it (train/cluster/jobfacts.py), None where unset.
        proc_cgroup, root: where this process's cgroup is named and where cgroups are mounted (tests give others).
        physical: the node's memory (None: asked of the system).
        planned: bytes, the node's memory in make submit's plan (PYG_MEMORY_PLAN), None where there was none.
    Returns:
        (bytes or None where nothing is known, the source in words).
    """
    return smallest([(cgroup_limit_bytes(proc_cgroup, root), "the job's cgroup"),
                     (slurm_mem_mb * MIB if slurm_mem_mb else None, "SLURM's --mem (SLURM_MEM_PER_NODE)"),
                     (planned, "the node's memory by sinfo, as make submit's plan weighed it (PYG_MEMORY_PLAN)"),
                     (physical if physical is not None else physical_memory_bytes(), "the node's memory")],
                    "unknown: no cgroup limit, no SLURM --mem, no plan's node memory, and the system does not say "
                    "its memory")


def smallest(limits: list[tuple[int | None, str]], unknown: str) -> tuple[int | None, str]:
    """The smallest known (bytes, source) of `limits` (None or 0: not known), else (None, `unknown`): the run's
    limits (node_limit) and the plan's (a node's memory and the job's --mem, train/cli/plan.py) alike."""
    known = [(value, source) for value, source in limits if value]
    return min(known, key=lambda pair: pair[0]) if known else (None, unknown)
