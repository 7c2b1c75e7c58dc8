"""The pure parts of the SLURM test cluster: slurm.conf and /etc/hosts text, the addresses of a
subnet, the clients' environment, and parsing what SLURM prints. No root, no side effects:
tests/test_harness.py checks them on any machine.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

# Job states after which a job will not run again by itself.  A requeued job
# passes through REQUEUED/PENDING and runs again, so those are not terminal.
TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
    "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
})

SLURM_CLIENTS = ("sbatch", "srun", "salloc", "scontrol", "sinfo", "squeue",
                 "scancel", "sattach", "sbcast", "sstat", "sprio", "sdiag",
                 "strigger")
SLURM_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_",
                      "SINFO_", "SCONTROL_", "SACCT_")
SUBNET_PREFIX = "10.77"  # each cluster takes one free 10.77.X.0/24


_KV_SPLIT = re.compile(r"\s+(?=[A-Za-z][A-Za-z0-9_/:]*=)")


def parse_scontrol_oneliner(line: str) -> dict[str, str]:
    """Parse one line of ``scontrol show ... -o`` (``Key=Value Key=Value ...``)."""
    out: dict[str, str] = {}
    for field in _KV_SPLIT.split(line.strip()):
        key, sep, value = field.partition("=")
        if sep:
            out[key] = value
    return out


def used_third_octets(ip_output: str) -> set[int]:
    """The X of every 10.77.X.0/24 that `ip addr`/`ip route` output shows in use (all of them when a
    wider 10.0.0.0/8 or 10.77.0.0/16 route overlaps: then nothing is guessed)."""
    used = {int(m.group(1)) for m in re.finditer(r"\b10\.77\.(\d+)\.\d+", ip_output)}
    if re.search(r"\b10\.0\.0\.0/8|\b10\.77\.0\.0/16", ip_output):
        used.update(range(256))
    return used


def cluster_addresses(third_octet: int, controller: str, node_names: list[str]) -> dict[str, str]:
    """Host name -> IPv4: the controller at .1 on the bridge, node i at .(10 + i)."""
    base = f"{SUBNET_PREFIX}.{third_octet}"
    return {controller: f"{base}.1", **{n: f"{base}.{10 + i}" for i, n in enumerate(node_names, 1)}}


def hosts_text(addresses: Mapping[str, str]) -> str:
    """The /etc/hosts every node sees (bind-mounted), so `n2` resolves on `n1`."""
    hosts = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    hosts += [f"{ip}\t{name}" for name, ip in addresses.items()]
    return "\n".join(hosts) + "\n"


def needs_config_overrides(cpus_per_node: int, real_memory_mb: int, machine_cpus: int, machine_memory_mb: int) -> bool:
    """Whether the nodes declare more than this machine has (every node of the cluster is this machine).

    Without it slurmd checks each node's declaration against the machine, as on a real cluster, and
    `sinfo`'s memory is a real figure the memory plan can hold a job to (train/cli/plan.py reads a
    config_overrides cluster's memory as unknown). With it slurmd believes any declaration.
    """
    return cpus_per_node > machine_cpus or real_memory_mb > machine_memory_mb


def slurm_conf_text(*, tag: str, controller: str, addresses: Mapping[str, str], ctld_port: int, slurmd_port: int,
                    workdir: Path, rundir: Path, spool_dir: Path, log_dir: Path, munge_socket: Path, debug: str,
                    cred_expire: int, extra_conf: list[str] | tuple[str, ...], node_names: list[str],
                    cpus_per_node: int, real_memory_mb: int, partition: str, config_overrides: bool = False) -> str:
    """slurm.conf of the test cluster: one controller, node_names with cpus_per_node cores and real_memory_mb
    each, one partition; config_overrides only where the nodes declare more than the machine has."""
    lines = [
        f"ClusterName=slt{tag}",
        f"SlurmctldHost={controller}({addresses[controller]})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire is also how long a requeued job waits before it may run again
        # (default 120 s); the whole cluster is one machine, so credentials are
        # used within milliseconds.
        f"AuthInfo=socket={munge_socket},cred_expire={cred_expire}",
        f"StateSaveLocation={workdir / 'state'}",
        f"SlurmdSpoolDir={spool_dir}/%n",
        f"SlurmctldPidFile={rundir / 'slurmctld.pid'}",
        f"SlurmdPidFile={rundir}/slurmd-%n.pid",
        f"SlurmctldLogFile={log_dir / 'slurmctld.log'}",
        f"SlurmdLogFile={log_dir}/slurmd-%n.log",
        f"SlurmctldDebug={debug}",
        f"SlurmdDebug={debug}",
        f"PlugStackConfig={workdir / 'etc' / 'plugstack.conf'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        # batch jobs are scheduled on slurmctld's next 1 s tick; periodic passes
        # (which pick up requeued jobs once eligible) every second too
        "SchedulerParameters=batch_sched_delay=0,sched_interval=1,bf_interval=1",
        "PreemptType=preempt/none",
        "JobRequeue=1",
        "ReturnToService=2",
        "KillWait=2",
        "MessageTimeout=5",
        "MinJobAge=600",
        "InactiveLimit=0",
        "SlurmdTimeout=60",
        "SlurmctldTimeout=60",
        "MailProg=/bin/true",
        f"TmpFS={workdir / 'jobs'}",
    ]
    if config_overrides:  # nodes declared with more CPUs or memory than this machine has
        lines.append("SlurmdParameters=config_overrides")
    lines += list(extra_conf)
    cores = cpus_per_node
    for n in node_names:
        lines.append(
            f"NodeName={n} NodeAddr={addresses[n]} NodeHostname={n} CPUs={cores} "
            f"Sockets=1 CoresPerSocket={cores} ThreadsPerCore=1 "
            f"RealMemory={real_memory_mb} State=UNKNOWN")
    lines.append(f"PartitionName={partition} Nodes=ALL Default=YES "
                 "MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def client_env(environ: Mapping[str, str], conf_path: Path, bindir: Path) -> dict[str, str]:
    """The environment for this cluster's clients: no SLURM_* left over from elsewhere, SLURM_CONF set,
    its own client links first on PATH and the sbin dirs last."""
    env = {k: v for k, v in environ.items() if not k.startswith(SLURM_ENV_PREFIXES)}
    env["SLURM_CONF"] = str(conf_path)
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
    for extra in ("/usr/sbin", "/sbin", "/usr/bin", "/bin"):
        if extra not in env["PATH"].split(":"):
            env["PATH"] += ":" + extra
    return env
