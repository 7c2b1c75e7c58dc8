"""What the SLURM test cluster needs of this machine: root, namespaces, Debian's packages, a
machine-wide lock, and a look at /proc (which processes live, in which network namespace).

Stdlib only, like the rest of the harness.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import socket
import subprocess
import sys
from pathlib import Path

LOCK_FILE = "/run/lock/slurm-test-cluster.lock"


class SlurmClusterError(RuntimeError):
    """The cluster failed to start, to run a command, or to stop cleanly."""


class SlurmClusterUnavailable(SlurmClusterError):
    """This machine cannot host the cluster (not root, no namespaces, no packages)."""


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def which(name: str) -> str | None:
    """shutil.which, also looking in the sbin dirs a CI PATH may lack."""
    return shutil.which(name) or shutil.which(name, path=SYSTEM_PATH)


def exe(name: str) -> str:
    path = which(name)
    if path is None:
        raise SlurmClusterUnavailable(f"command not found: {name}")
    return path


def system_env() -> dict[str, str]:
    """os.environ with the sbin/bin dirs on PATH (for apt and the daemons)."""
    env = dict(os.environ)
    parts = env.get("PATH", "").split(":")
    env["PATH"] = ":".join([p for p in parts if p] +
                           [d for d in SYSTEM_PATH.split(":") if d not in parts])
    return env


def which_all(*names: str) -> list[str]:
    """The names among ``names`` that are not installed."""
    return [n for n in names if which(n) is None]


def ensure_slurm_installed() -> None:
    """Install Debian's slurm-wlm and munge when slurmctld is missing (apt, as root)."""
    if not which_all("slurmctld", "slurmd", "srun", "munged", "mungekey"):
        return
    if os.geteuid() != 0:
        raise SlurmClusterUnavailable(
            "slurm-wlm/munge are not installed and installing them needs root")
    if which("apt-get") is None:
        raise SlurmClusterUnavailable(
            "slurm-wlm/munge are not installed and there is no apt-get to install them")
    env = dict(system_env(), DEBIAN_FRONTEND="noninteractive")
    with machine_lock():  # two sessions installing at once would fight over dpkg's lock
        if not which_all("slurmctld", "slurmd", "srun", "munged", "mungekey"):
            return
        apt = exe("apt-get")
        for cmd in ([apt, "update"],
                    [apt, "install", "-y", "--no-install-recommends",
                     "slurm-wlm", "munge"]):
            p = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=900)
            if p.returncode != 0:
                raise SlurmClusterUnavailable(
                    f"`{' '.join(cmd)}` failed (rc={p.returncode}): "
                    f"{(p.stderr or p.stdout).strip()[-800:]}")
    missing = which_all("slurmctld", "slurmd", "srun", "munged", "mungekey")
    if missing:
        raise SlurmClusterUnavailable(f"still missing after apt-get install: {missing}")


def unavailable_reason(install: bool = True) -> str | None:
    """Why this machine cannot run a SlurmCluster, or None when it can.

    With ``install`` it installs the packages when they are missing (root only).
    """
    if sys.platform != "linux":
        return "the SLURM test cluster needs Linux"
    if os.geteuid() != 0:
        return "the SLURM test cluster needs root (network namespaces, slurmd as root)"
    missing = which_all("ip", "nsenter", "unshare", "mount", "sh")
    if missing:
        return f"the SLURM test cluster needs these commands: {', '.join(missing)}"
    p = subprocess.run([exe("unshare"), "--net", "--uts", "--mount", "true"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return f"cannot create namespaces (unshare --net --uts --mount): {p.stderr.strip()}"
    if install:
        try:
            ensure_slurm_installed()
        except SlurmClusterUnavailable as e:
            return str(e)
    else:
        missing = which_all("slurmctld", "slurmd", "srun", "munged", "mungekey")
        if missing:
            return f"SLURM/munge not installed: {', '.join(missing)}"
    return None


def skip_or_fail_unavailable(reason: str) -> None:
    """For tests: pytest.skip(reason), or pytest.fail when SLURM_CLUSTER_REQUIRED=1 (CI)."""
    import pytest  # only here: the harness itself is stdlib-only
    if os.environ.get("SLURM_CLUSTER_REQUIRED", "") not in ("", "0"):
        pytest.fail(f"SLURM test cluster required but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@contextlib.contextmanager
def machine_lock():
    """A machine-wide lock (flock) for choosing subnets and installing packages."""
    path = Path(LOCK_FILE)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        fd = os.open(f"/tmp/slurm-test-cluster-{os.geteuid()}.lock",
                     os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


# --------------------------------------------------------------------------- /proc helpers

def proc_state(pid: int) -> str | None:
    """The one-letter state of a process ('Z' zombie), None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split(" ", 1)[0]


def alive(pid: int) -> bool:
    s = proc_state(pid)
    return s is not None and s not in ("Z", "X")


def all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace").strip()
    except OSError:
        return ""


def pids_in_netns(inodes: set[int]) -> list[int]:
    """Live (non-zombie) processes whose network namespace is one of ``inodes``."""
    if not inodes:
        return []
    me = os.getpid()
    out = []
    for pid in all_pids():
        if pid == me:
            continue
        try:
            ino = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        if ino in inodes and alive(pid):
            out.append(pid)
    return out


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split(" ", 2)[1])


def descendants(root: int, direct: bool = False) -> list[int]:
    """PIDs below ``root`` in the process tree (only its children with ``direct``)."""
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        pp = ppid(pid)
        if pp is not None:
            children.setdefault(pp, []).append(pid)
    if direct:
        return sorted(children.get(root, []))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def free_port(used: set[int]) -> int:
    """A TCP port free on all addresses, outside the ephemeral range."""
    for _ in range(500):
        port = random.randint(20000, 30999)
        if port in used:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        return port
    raise SlurmClusterError("no free TCP port found in 20000-30999")


def tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"  <{e.strerror}>"
    return "\n".join("  " + ln for ln in lines[-n:]) or "  <empty>"
