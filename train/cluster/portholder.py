"""Who listens on a TCP port of this machine, for an error that names the holder (Linux /proc)."""

from __future__ import annotations

import os
from pathlib import Path

_LISTEN = "0A"


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """Socket inodes listening on `port` (IPv4 or IPv6, any address)."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_holder(port: int, proc: Path = Path("/proc")) -> str | None:
    """'pid 123 (cmdline)' of a process listening on `port`, 'another user's process', or None."""
    inodes = listening_inodes(port, proc)
    if not inodes:
        return None
    targets = {f"socket:[{inode}]" for inode in inodes}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                if os.readlink(fd) in targets:
                    cmdline = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                    return f"pid {pid_dir.name} ({cmdline[:200] or '?'})"
        except OSError:
            continue
    return "a process this user cannot see (another user's job?)"
