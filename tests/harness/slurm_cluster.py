"""A real, throw-away SLURM cluster on this machine, for the test-suite.

Debian's slurm-wlm 22.05 + munge; one slurmctld in the root network namespace
(on a private bridge) and N slurmd "nodes" n1..nN, each in its own network
namespace with its own hostname and its own /etc/hosts (bind-mounted), so a
task on n2 reaches n1 by the name ``scontrol show hostnames`` prints.

    with SlurmCluster(nodes=2, cpus_per_node=2, workdir=tmp) as c:
        job = c.sbatch(["-N2", "--wrap", "srun hostname"])
        assert c.wait_job(job) == "COMPLETED"

Everything lives under ``workdir``: slurm.conf, munge key/socket, spool and
state dirs, logs, the hosts file.  Names (namespaces, bridge, veths), the
10.77.X.0/24 subnet and the ports are chosen per instance, so two instances (or
a SLURM of the machine itself) do not disturb each other.  /etc/slurm is never
read or written: clients get ``SLURM_CONF`` through :attr:`SlurmCluster.env`.

Stdlib only.  Needs root.  Every daemon runs under the small child-subreaper
tests/harness/workers/reaper.py, so that slurmstepd and slurmscriptd are reaped at
once, not by a slow PID 1.  What the machine must offer is in machine.py; the pure
text (slurm.conf, hosts, addresses) in slurm_conf.py.
"""
from __future__ import annotations

import contextlib
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.harness import slurm_conf
from tests.harness.machine import (
    SYSTEM_PATH,
    SlurmClusterError,
    SlurmClusterUnavailable,
    alive,
    all_pids,
    cmdline,
    comm,
    descendants,
    ensure_slurm_installed,
    exe,
    free_port,
    kill,
    machine_lock,
    pids_in_netns,
    ppid,
    skip_or_fail_unavailable,
    system_env,
    tail,
    unavailable_reason,
)
from tests.harness.slurm_conf import SLURM_CLIENTS, SLURM_ENV_PREFIXES, TERMINAL_STATES, parse_scontrol_oneliner

__all__ = [
    "SlurmCluster",
    "SlurmClusterError",
    "SlurmClusterUnavailable",
    "TERMINAL_STATES",
    "ensure_slurm_installed",
    "parse_scontrol_oneliner",
    "skip_or_fail_unavailable",
    "unavailable_reason",
]

REAPER = Path(__file__).resolve().parent / "workers" / "reaper.py"


def _machine_memory_mb() -> int:
    """This machine's memory as slurmd measures it (physical pages, MB): what a node here may declare."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20


def _pyxis_setup():
    """tests/harness/pyxis_setup.py, imported only when a cluster with pyxis needs it."""
    from tests.harness import pyxis_setup
    return pyxis_setup


# --------------------------------------------------------------------------- the cluster

def settled_info(job_info, timeout: float, clock=time.monotonic, sleep=time.sleep) -> dict[str, str]:
    """`job_info()` once the job is no longer COMPLETING (where its NodeList is partial), within `timeout` seconds."""
    deadline = clock() + timeout
    while True:
        info = job_info()
        if "COMPLETING" not in info.get("JobState", ""):
            return info
        if clock() > deadline:
            raise TimeoutError(f"job {info.get('JobId')} still COMPLETING after {timeout:.0f} s")
        sleep(0.1)


class SlurmCluster:
    """A SLURM cluster of ``nodes`` network-namespace nodes n1..nN, started by ``start()``
    or ``with``; ``stop()`` (also from ``__exit__`` and atexit) removes every trace."""

    controller_host = "ctl"
    partition = "debug"

    def __init__(self, nodes: int = 2, cpus_per_node: int = 2,
                 workdir: str | os.PathLike | None = None,
                 *, real_memory_mb: int = 2000, start_timeout: float = 30.0,
                 extra_conf: list[str] | tuple[str, ...] = (), install: bool = True,
                 debug: str = "info", cred_expire: int = 10, stop_grace: float = 3.0,
                 pyxis: bool = False):
        if not 1 <= nodes <= 200:
            raise ValueError("nodes must be within 1..200")
        if cpus_per_node < 1:
            raise ValueError("cpus_per_node must be >= 1")
        self.nodes = nodes
        self.cpus_per_node = cpus_per_node
        self.real_memory_mb = real_memory_mb
        self.start_timeout = start_timeout
        self.extra_conf = list(extra_conf)
        self.install = install
        self.debug = debug
        self.cred_expire = cred_expire
        self.stop_grace = stop_grace
        # pyxis + enroot (tests/harness/pyxis_setup.py): built from ../shared/pyxis when missing; each
        # node gets its own enroot and pyxis folders, as on a real cluster.
        self.pyxis = pyxis
        self.workdir = Path(workdir) if workdir is not None else None
        # where the UNIX sockets live (munge socket, slurmd spool with the step
        # sockets): the workdir, or a short /tmp dir when the workdir's path is too
        # long for sun_path (108 bytes).
        self.rundir: Path | None = None
        self.tag = secrets.token_hex(3)
        self.node_names: list[str] = [f"n{i}" for i in range(1, nodes + 1)]
        self.netns: dict[str, str] = {n: f"slt{self.tag}-{n}" for n in self.node_names}
        self.bridge = f"sltb{self.tag}"
        self.veths: dict[str, str] = {
            n: f"sltv{self.tag}{i}" for i, n in enumerate(self.node_names, 1)}
        self.subnet: str | None = None          # "10.77.X.0/24"
        self.addresses: dict[str, str] = {}      # host name -> IPv4 (ctl, n1, ...)
        self.ctld_port: int | None = None
        self.slurmd_port: int | None = None
        self.env: dict[str, str] = {}
        self.timings: dict[str, float] = {}
        # what has been created, for cleanup (filled as it is created)
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self._logs_open: list = []
        self._ns_created: list[str] = []
        # Each node namespace's inode, with an open file that keeps the namespace (so the number)
        # ours until this object goes: a freed namespace number is handed to the next namespace
        # made on the machine, maybe another cluster's node, and whatever this cluster kills by
        # namespace must never be that cluster's.
        self._ns_inodes: set[int] = set()
        self._ns_pins: list = []
        self._owner_pid: int | None = None  # the process that started it; a forked copy never stops it
        self._links_created: list[str] = []
        self._tmp_rundir: Path | None = None
        self._started = False
        self._stopping = False
        self._stopped = False
        self._stop_errors: list[str] = []

    # ----------------------------------------------------------------- paths
    @property
    def conf_path(self) -> Path:
        return self.workdir / "etc" / "slurm.conf"

    @property
    def hosts_path(self) -> Path:
        return self.workdir / "etc" / "hosts"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "log"

    @property
    def munge_socket(self) -> Path:
        return self.rundir / "munge" / "munge.socket"

    @property
    def spool_dir(self) -> Path:
        return self.rundir / "spool"

    def node_dir(self, node: str) -> Path:
        """The node's own folders (enroot's and pyxis's working paths, with pyxis)."""
        return self.workdir / "nodes" / node

    @property
    def pyxis_runtime_path(self) -> Path:
        """pyxis's runtime_path: one path in slurm's config, a different folder per node."""
        return self.workdir / "node-local" / "pyxis"

    def set_pytorch_hook(self, enabled: bool) -> None:
        """Enable or disable enroot's PyTorch hook on every node (pyxis clusters only)."""
        if not self.pyxis:
            raise SlurmClusterError("this cluster was started without pyxis")
        _pyxis_setup().set_pytorch_hook([self.node_dir(n) for n in self.node_names], enabled)

    def log_paths(self) -> dict[str, Path]:
        d = self.log_dir
        out = {"munged": d / "munged.stdout", "slurmctld": d / "slurmctld.log"}
        out.update({f"slurmd-{n}": d / f"slurmd-{n}.log" for n in self.node_names})
        return out

    # ----------------------------------------------------------------- context manager
    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (f"SlurmCluster(tag={self.tag}, nodes={self.node_names}, subnet={self.subnet}, "
                f"ctld_port={self.ctld_port}, workdir={self.workdir})")

    # ----------------------------------------------------------------- start
    def start(self) -> "SlurmCluster":
        if self._started:
            raise SlurmClusterError("a SlurmCluster can be started once")
        reason = unavailable_reason(install=self.install)
        if reason:
            raise SlurmClusterUnavailable(reason)
        if self.pyxis:
            try:
                with machine_lock():
                    _pyxis_setup().ensure_installed()
            except _pyxis_setup().PyxisUnavailable as e:
                raise SlurmClusterUnavailable(f"pyxis/enroot: {e}") from None
        self._started = True
        self._owner_pid = os.getpid()
        import atexit  # cleanup is registered before anything is created
        atexit.register(self.stop)
        t0 = time.monotonic()
        try:
            self._make_dirs()
            # Held until slurmctld listens: another instance starting at the same
            # time can take neither this subnet nor these ports.
            with machine_lock():
                self._setup_network()
                self.timings["network_s"] = time.monotonic() - t0
                self._write_files()
                self._start_munged()
                self._start_slurmctld()
            self._start_slurmds()
            self.wait_nodes_idle(self.start_timeout - (time.monotonic() - t0))
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - t0
        return self

    def _make_dirs(self) -> None:
        if self.workdir is None:
            import tempfile
            self.workdir = Path(tempfile.mkdtemp(prefix=f"slurm-cluster-{self.tag}-"))
        self.workdir = self.workdir.resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if len(str(self.workdir)) <= 60:
            self.rundir = self.workdir / "run"
            self.rundir.mkdir(exist_ok=True)
        else:
            import tempfile
            self.rundir = Path(tempfile.mkdtemp(prefix=f"slt{self.tag}-", dir="/tmp"))
            self._tmp_rundir = self.rundir
        self.rundir.chmod(0o755)
        for sub in ("etc", "log", "state", "bin", "jobs"):
            (self.workdir / sub).mkdir(exist_ok=True)
        for n in self.node_names:
            (self.spool_dir / n).mkdir(parents=True, exist_ok=True)
            if self.pyxis:
                _pyxis_setup().prepare_node(self.node_dir(n))
        if self.pyxis:
            self.pyxis_runtime_path.mkdir(parents=True, exist_ok=True)
        munge = self.workdir / "munge"
        # key dir 700; the socket's dir must be 755 ("execute permissions for all")
        for d, mode in ((munge, 0o755), (munge / "etc", 0o700), (munge / "lib", 0o700),
                        (self.munge_socket.parent, 0o755)):
            d.mkdir(exist_ok=True)
            d.chmod(mode)
        # The client commands this cluster's env resolves first: Debian's, not
        # whatever else is on PATH (the rest of PATH is left as it is).
        bindir = self.workdir / "bin"
        for name in SLURM_CLIENTS:
            found = shutil.which(name, path=SYSTEM_PATH) or shutil.which(name)
            if found and not (bindir / name).exists():
                (bindir / name).symlink_to(found)

    # ----------------------------------------------------------------- network
    def _ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([exe("ip"), *args], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise SlurmClusterError(f"`ip {' '.join(args)}` failed: {p.stderr.strip()}")
        return p

    def _used_third_octets(self) -> set[int]:
        return slurm_conf.used_third_octets(self._ip("-o", "-4", "addr", "show").stdout
                                            + self._ip("-4", "route", "show").stdout)

    def _setup_network(self) -> None:
        """Bridge (controller address) in the root namespace, one netns per node joined
        by a veth pair (eth0 inside), lo up.  Called under the machine lock."""
        used = self._used_third_octets()
        free = [x for x in range(1, 255) if x not in used]
        if not free:
            raise SlurmClusterUnavailable("no free 10.77.X.0/24 subnet (all used or overlapping)")
        x = random.choice(free)
        self.subnet = f"{slurm_conf.SUBNET_PREFIX}.{x}.0/24"
        self.addresses = slurm_conf.cluster_addresses(x, self.controller_host, self.node_names)
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._links_created.append(self.bridge)
        self._ip("addr", "add", f"{self.addresses[self.controller_host]}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for n in self.node_names:
            ns = self.netns[n]
            p = self._ip("netns", "add", ns, check=False)
            if p.returncode != 0:
                err = p.stderr.strip()
                if "ermission" in err or "not permitted" in err:
                    raise SlurmClusterUnavailable(f"cannot create network namespaces: {err}")
                raise SlurmClusterError(f"`ip netns add {ns}` failed: {err}")
            self._ns_created.append(ns)
            pin = open(f"/run/netns/{ns}", "rb", buffering=0)  # held for the object's life
            self._ns_pins.append(pin)
            self._ns_inodes.add(os.fstat(pin.fileno()).st_ino)
            veth = self.veths[n]
            self._ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._links_created.append(veth)
            self._ip("link", "set", veth, "master", self.bridge)
            self._ip("link", "set", veth, "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", ns, "addr", "add", f"{self.addresses[n]}/24", "dev", "eth0")
            self._ip("-n", ns, "link", "set", "eth0", "up")

    # ----------------------------------------------------------------- files
    def _write_files(self) -> None:
        self.hosts_path.write_text(slurm_conf.hosts_text(self.addresses))
        self.hosts_path.chmod(0o644)

        used: set[int] = set()
        self.ctld_port = free_port(used)
        used.add(self.ctld_port)
        self.slurmd_port = free_port(used)
        w = self.workdir
        (w / "etc" / "plugstack.conf").write_text(
            _pyxis_setup().plugstack_line(self.pyxis_runtime_path) + "\n" if self.pyxis else "")
        self.conf_path.write_text(slurm_conf.slurm_conf_text(
            tag=self.tag, controller=self.controller_host, addresses=self.addresses, ctld_port=self.ctld_port,
            slurmd_port=self.slurmd_port, workdir=w, rundir=self.rundir, spool_dir=self.spool_dir,
            log_dir=self.log_dir, munge_socket=self.munge_socket, debug=self.debug, cred_expire=self.cred_expire,
            extra_conf=self.extra_conf, node_names=self.node_names, cpus_per_node=self.cpus_per_node,
            real_memory_mb=self.real_memory_mb, partition=self.partition,
            config_overrides=slurm_conf.needs_config_overrides(self.cpus_per_node, self.real_memory_mb,
                                                               os.cpu_count() or 1, _machine_memory_mb())))
        self.env = slurm_conf.client_env(os.environ, self.conf_path, w / "bin")

    # ----------------------------------------------------------------- daemons
    def _spawn(self, name: str, cmd: list[str]) -> subprocess.Popen:
        """Start ``cmd`` under the reaper (see _reaper_main), as our child, in its own
        session; its stdout/stderr go to log/NAME.stdout."""
        out = open(self.log_dir / f"{name}.stdout", "ab")
        self._logs_open.append(out)
        p = subprocess.Popen([sys.executable, "-I", str(REAPER), "--", *cmd],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True, cwd=self.workdir,
                             env={k: v for k, v in system_env().items()
                                  if not k.startswith(SLURM_ENV_PREFIXES)})
        self._procs.append((name, p))
        return p

    def _wait_for(self, what: str, pred, timeout: float, procs=()) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            if pred():
                return
            for name, p in procs:
                if p.poll() is not None:
                    raise SlurmClusterError(
                        f"{name} exited with {p.returncode} while waiting for {what}\n"
                        + self.logs_tail())
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"timed out after {timeout:.0f}s waiting for {what}\n"
                                        + self.logs_tail())
            time.sleep(delay)
            delay = min(delay * 1.5, 0.2)

    def _start_munged(self) -> None:
        m = self.workdir / "munge"
        key = m / "etc" / "munge.key"
        p = subprocess.run([exe("mungekey"), "--create", f"--keyfile={key}"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise SlurmClusterError(f"mungekey failed: {p.stderr.strip()}")
        key.chmod(0o600)
        proc = self._spawn("munged", [
            exe("munged"), "--foreground", "--force",
            f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={self.rundir / 'munged.pid'}",  # it logs to log/munged.stdout
            f"--seed-file={m / 'lib' / 'munged.seed'}"])
        self._wait_for("the munge socket", self.munge_socket.exists, 10, [("munged", proc)])

    def _start_slurmctld(self) -> None:
        # Own UTS namespace with hostname `ctl`, so slurmctld recognises itself as
        # SlurmctldHost; it stays in the root network namespace, on the bridge.
        script = (f"hostname {self.controller_host}"
                  f" && exec {shlex.quote(exe('slurmctld'))}"
                  f" -D -i -f {shlex.quote(str(self.conf_path))}")
        proc = self._spawn("slurmctld", [exe("unshare"), "--uts", "sh", "-c", script])
        addr = (self.addresses[self.controller_host], self.ctld_port)

        def listening() -> bool:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                return s.connect_ex(addr) == 0
        self._wait_for("slurmctld to listen", listening, 15, [("slurmctld", proc)])

    def _start_slurmds(self) -> None:
        slurmd = exe("slurmd")
        for n in self.node_names:
            mounts = [(self.hosts_path, Path("/etc/hosts"))]
            if self.pyxis:
                mounts += _pyxis_setup().node_mounts(self.node_dir(n), self.pyxis_runtime_path)
            binds = "".join(f" && mount --bind {shlex.quote(str(src))} {shlex.quote(str(dst))}"
                            for src, dst in mounts)
            script = (f"hostname {n}{binds}"
                      f" && exec {shlex.quote(slurmd)} -D -f {shlex.quote(str(self.conf_path))}"
                      f" -N {n}")
            self._spawn(f"slurmd-{n}", [
                exe("nsenter"), f"--net=/run/netns/{self.netns[n]}",
                exe("unshare"), "--uts", "--mount", "--propagation", "private",
                "sh", "-c", script])

    def node_states(self) -> dict[str, str]:
        p = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=15)
        states = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_nodes_idle(self, timeout: float = 30.0) -> None:
        last: dict[str, str] = {}

        def all_idle() -> bool:
            nonlocal last
            last = self.node_states()
            return all(last.get(n) == "idle" for n in self.node_names)
        try:
            self._wait_for("all nodes idle", all_idle, max(timeout, 1.0), self._procs)
        except SlurmClusterError as e:
            raise SlurmClusterError(f"{e}\nlast node states: {last}") from None

    # ----------------------------------------------------------------- client helpers
    def run(self, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        """subprocess.run with this cluster's env; text and captured output by default,
        cwd=workdir, timeout 120 s; pass check=True to raise on failure."""
        kw.setdefault("env", self.env)
        kw.setdefault("cwd", self.workdir)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 120)
        kw.setdefault("stdin", subprocess.DEVNULL)
        if "stdout" not in kw and "stderr" not in kw and "capture_output" not in kw:
            kw["capture_output"] = True
        return subprocess.run(cmd, **kw)

    def sbatch(self, args: list[str] | str) -> str:
        """Submit with ``sbatch --parsable ARGS``; returns the job id (a string, as
        SLURM prints it and as SLURM_JOB_ID reads)."""
        if isinstance(args, str):
            args = shlex.split(args)
        p = self.run(["sbatch", "--parsable", *args])
        if p.returncode != 0:
            raise SlurmClusterError(f"sbatch {args} failed (rc={p.returncode}): {p.stderr.strip()}")
        return p.stdout.strip().split(";")[0]

    def job_info(self, job_id) -> dict[str, str]:
        """``scontrol show job -o ID`` as a dict (first line, i.e. the job or array head).
        Raises LookupError when SLURM does not know the job."""
        p = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=30)
        line = p.stdout.strip().splitlines()[0] if p.stdout.strip() else ""
        if p.returncode != 0 or not line.startswith("JobId="):
            raise LookupError(f"job {job_id}: {(p.stderr or p.stdout).strip()}")
        return parse_scontrol_oneliner(line)

    def job_nodes(self, job_id, timeout: float = 60.0) -> list[str]:
        """The job's nodes in SLURM's order: its NodeList expanded by ``scontrol show hostnames``. A COMPLETING job
        lists only the nodes not yet returned to service (squeue(1), %N), so that state is waited out first: a
        test that asks right after `salloc` returned would otherwise see some of its nodes."""
        nodelist = settled_info(lambda: self.job_info(job_id), timeout)["NodeList"]
        p = self.run(["scontrol", "show", "hostnames", nodelist], timeout=30)
        if p.returncode != 0 or not p.stdout.split():
            raise SlurmClusterError(f"job {job_id}: cannot expand NodeList={nodelist!r}: {p.stderr.strip()}")
        return p.stdout.split()

    def job_state(self, job_id) -> str:
        return self.job_info(job_id)["JobState"]

    def wait_job(self, job_id, timeout: float = 60.0) -> str:
        """Poll scontrol until the job is in a terminal state and return it.
        A requeued job (REQUEUED/PENDING/RUNNING again) is waited for."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        state = "?"
        while True:
            state = self.job_state(job_id)
            if state in TERMINAL_STATES:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state} after {timeout}s")
            time.sleep(delay)
            delay = min(delay * 1.3, 0.25)

    def requeue(self, job_id, timeout: float = 30.0) -> None:
        """``scontrol requeue ID``, then make it eligible at once: SLURM holds a requeued
        job back for AuthInfo cred_expire seconds (BeginTime), which this resets with
        ``scontrol update JobId=ID StartTime=now`` once the job is PENDING again."""
        p = self.run(["scontrol", "requeue", str(job_id)])
        if p.returncode != 0:
            raise SlurmClusterError(f"scontrol requeue {job_id} failed: {p.stderr.strip()}")
        deadline = time.monotonic() + timeout
        while True:
            info = self.job_info(job_id)
            if info["JobState"] == "PENDING":
                break
            if info["JobState"] in TERMINAL_STATES or time.monotonic() > deadline:
                raise SlurmClusterError(f"job {job_id} is {info['JobState']} after requeue")
            time.sleep(0.05)
        # slurmd revokes the old run's credential and refuses any credential of this job made
        # in the same second (its times have 1 s resolution); a restart within that second can
        # end FAILED on a busy machine. Let the clock pass the revocation first.
        time.sleep(1.1)
        p = self.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
        if p.returncode != 0 and self.job_state(job_id) == "PENDING":
            raise SlurmClusterError(f"cannot reset StartTime of job {job_id}: {p.stderr.strip()}")

    def signal_batch_shell(self, job_id, sig: int, timeout: float = 30.0) -> int:
        """Send ``sig`` to the job's batch shell alone, as ``sbatch --signal=B:SIG@TIME`` does
        before a time limit ("signal only the batch shell, none of the other processes"),
        and return its PID. ``scancel --batch`` is not the same: it signals the shell's child
        processes too, srun among them, which forwards the signal to every process of its
        step. The test nodes share this machine's PID namespace, so the shell is found in /proc,
        among this cluster's processes (job_processes)."""
        deadline = time.monotonic() + timeout
        while True:
            for pid in self.job_processes(job_id):
                if "slurm_script" in cmdline(pid) and comm(ppid(pid) or 0) == "slurmstepd":  # not a subshell
                    kill(pid, sig)
                    return pid
            if time.monotonic() > deadline:
                raise SlurmClusterError(f"no batch shell of job {job_id} found")
            time.sleep(0.1)

    def job_processes(self, job_id) -> dict[int, dict[str, str]]:
        """pid -> environment of every live process of job ``job_id`` on this cluster's nodes. The test
        nodes share this machine's PID namespace, and every test cluster numbers its jobs from 1: a
        process is this cluster's only where it runs in one of its node namespaces."""
        out = {}
        for pid in pids_in_netns(self._ns_inodes):
            try:
                raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            environ = dict(item.decode(errors="replace").split("=", 1) for item in raw if b"=" in item)
            if environ.get("SLURM_JOB_ID") == str(job_id) and alive(pid):
                out[pid] = environ
        return out

    def logs_tail(self, n: int = 20) -> str:
        return "\n".join(f"--- {name} ({path}):\n{tail(path, n)}"
                         for name, path in self.log_paths().items())

    # ----------------------------------------------------------------- stop
    def stop(self) -> None:
        """Stop all daemons (SIGTERM, SIGKILL after a grace period), kill whatever
        still runs in the node namespaces, remove namespaces/links. Idempotent."""
        if self._stopped or not self._started or self._stopping or os.getpid() != self._owner_pid:
            return
        self._stopping = True  # interrupted halfway, atexit runs it again
        try:
            self._stop()
        finally:
            self._stopping = False
        self._stopped = True
        if self._stop_errors:
            raise SlurmClusterError("unclean stop: " + "; ".join(self._stop_errors))

    def _stop(self) -> None:
        t0 = time.monotonic()
        errors: list[str] = []
        nodes = [(nm, p) for nm, p in self._procs if nm.startswith("slurmd-")]
        others = [(nm, p) for nm, p in self._procs if not nm.startswith("slurmd-")]
        ctld = [(nm, p) for nm, p in others if nm == "slurmctld"]
        others = [(nm, p) for nm, p in others if nm != "slurmctld"]
        # 1. slurmctld first (stopped after its nodes, it spends seconds on RPCs to
        #    dead slurmds before it exits)
        for name, p in ctld:
            self._stop_proc(name, p, errors, grace=self.stop_grace)
        # 2. slurmd and every process in the node namespaces
        self._stop_nodes(nodes, errors)
        # 3. munged
        for name, p in reversed(others):
            self._stop_proc(name, p, errors, grace=self.stop_grace)
        for f in self._logs_open:
            with contextlib.suppress(OSError):
                f.close()
        left = pids_in_netns(self._ns_inodes)
        if left:
            errors.append(f"processes left in node namespaces: {left}")
        # 4. network: veths (both ends), bridge, namespaces
        self._remove_network(errors)
        if self._tmp_rundir is not None:
            shutil.rmtree(self._tmp_rundir, ignore_errors=True)
        self.timings["stop_s"] = time.monotonic() - t0
        self._stop_errors = errors

    def _stop_nodes(self, nodes: list[tuple[str, subprocess.Popen]], errors: list[str]) -> None:
        """slurmd (SIGTERM through its reaper) and every process in the node namespaces
        (job tasks, slurmstepd); SIGKILL what is left after the grace period, or as soon as
        only SLURM's own processes are left (slurmstepd, and srun inside jobs waits for the
        dead controller)."""
        for _, p in nodes:
            if p.poll() is None:
                kill(p.pid, signal.SIGTERM)  # the reaper forwards it to slurmd
        for pid in pids_in_netns(self._ns_inodes):
            kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        while time.monotonic() < deadline:
            left = pids_in_netns(self._ns_inodes)
            if all(comm(pid) in ("slurmstepd", "srun", "salloc", "sattach") for pid in left):
                break
            time.sleep(0.05)
        for _ in range(100):
            left = pids_in_netns(self._ns_inodes)
            if not left:
                break
            for pid in left:
                kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        for name, p in nodes:
            self._stop_proc(name, p, errors, grace=2.0)

    def _remove_network(self, errors: list[str]) -> None:
        """Delete the links and namespaces this cluster created; a link or namespace already
        gone is no error."""
        for link in reversed(self._links_created):
            p = self._ip("link", "del", link, check=False)
            if p.returncode != 0 and "Cannot find device" not in p.stderr:
                errors.append(f"ip link del {link}: {p.stderr.strip()}")
        for ns in self._ns_created:
            p = self._ip("netns", "del", ns, check=False)
            if p.returncode != 0 and "No such file" not in p.stderr:
                errors.append(f"ip netns del {ns}: {p.stderr.strip()}")

    @staticmethod
    def _stop_proc(name: str, p: subprocess.Popen, errors: list[str], grace: float) -> None:
        """Stop one reaper-wrapped daemon: SIGTERM (forwarded to the daemon), then
        SIGKILL the reaper's descendants; the reaper exits once it has reaped them."""
        if p.poll() is None:
            kill(p.pid, signal.SIGTERM)
            try:
                p.wait(grace)
                return
            except subprocess.TimeoutExpired:
                pass
        for _ in range(3):
            if p.poll() is not None:  # reaped: its number may be another process's now, and so its "descendants"
                break
            for pid in descendants(p.pid):
                kill(pid, signal.SIGKILL)
            try:
                p.wait(2)
                break
            except subprocess.TimeoutExpired:
                continue
        if p.poll() is None:
            kill(p.pid, signal.SIGKILL)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                errors.append(f"{name} (pid {p.pid}) did not die")

    def daemon_pids(self) -> dict[str, int]:
        """The PIDs of the daemons themselves (munged, slurmctld, slurmd-n1, ...),
        each the child of its reaper (``self._procs`` holds the reapers)."""
        out = {}
        for name, p in self._procs:
            kids = [pid for pid in descendants(p.pid, direct=True) if alive(pid)]
            if kids:
                out[name] = kids[0]
        return out

    def leftovers(self) -> list[str]:
        """What of this cluster still exists (processes, namespaces, links, the /tmp
        socket dir); [] after a clean stop."""
        out = []
        for name, p in self._procs:
            if alive(p.pid):
                out.append(f"daemon {name} pid {p.pid} alive")
        markers = [str(d) for d in (self.workdir, self._tmp_rundir) if d is not None]
        me = os.getpid()
        for pid in all_pids():
            if pid == me or not alive(pid):
                continue
            cmd = cmdline(pid)
            if any(m in cmd for m in markers):
                out.append(f"process {pid} uses this cluster: {cmd[:200]}")
        if self._tmp_rundir is not None and self._tmp_rundir.exists():
            out.append(f"directory {self._tmp_rundir} exists")
        out += [f"process {pid} in a node namespace: {cmdline(pid)[:200]}"
                for pid in pids_in_netns(self._ns_inodes)]
        ns_list = self._ip("netns", "list", check=False).stdout
        out += [f"netns {ns} exists" for ns in self.netns.values()
                if re.search(rf"^{re.escape(ns)}\b", ns_list, re.M)]
        links = self._ip("-o", "link", "show", check=False).stdout
        out += [f"link {ln} exists" for ln in [self.bridge, *self.veths.values()]
                if re.search(rf"^\d+: {re.escape(ln)}[@:]", links, re.M)]
        return out
