"""The test harness's pure parts, without root and without a cluster: slurm.conf and hosts text, the
cluster's addresses and its clients' environment, what SLURM prints, the reaper every daemon runs
under, and the shell stand-ins (real files, which shellcheck and the lint see)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ngc_standin, pyxis_setup, slurm_conf, standin_bin
from tests.harness.conftest_slurm import MACHINE_PARTS
from tests.harness.localjob import ROOT, WORKERS, srun_env
from tests.harness.prepare import Preparation
from tests.harness.slurm_cluster import SlurmCluster, settled_info

STANDINS = ROOT / "tests" / "harness" / "standins"
SHELLCHECK = ROOT / ".venv" / "bin" / "shellcheck"


# ---- slurm.conf, hosts, addresses ------------------------------------------------------------------
def conf(**changes) -> str:
    w = Path("/w")
    args = dict(tag="abc123", controller="ctl", addresses={"ctl": "10.77.5.1", "n1": "10.77.5.11", "n2": "10.77.5.12"},
                ctld_port=20001, slurmd_port=20002, workdir=w, rundir=w / "run", spool_dir=w / "run" / "spool",
                log_dir=w / "log", munge_socket=w / "run" / "munge" / "munge.socket", debug="info", cred_expire=10,
                extra_conf=(), node_names=["n1", "n2"], cpus_per_node=2, real_memory_mb=1000, partition="debug")
    return slurm_conf.slurm_conf_text(**{**args, **changes})


def test_slurm_conf_declares_the_controller_each_node_and_one_partition():
    lines = conf().splitlines()
    assert lines[0] == "ClusterName=sltabc123"
    assert "SlurmctldHost=ctl(10.77.5.1)" in lines and "SlurmctldPort=20001" in lines and "SlurmdPort=20002" in lines
    assert "AuthInfo=socket=/w/run/munge/munge.socket,cred_expire=10" in lines
    assert "SlurmdSpoolDir=/w/run/spool/%n" in lines and "TmpFS=/w/jobs" in lines
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [f"NodeName=n{i} NodeAddr=10.77.5.1{i} NodeHostname=n{i} CPUs=2 Sockets=1 CoresPerSocket=2 "
                     "ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN" for i in (1, 2)]
    assert lines[-1] == "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    assert conf().endswith("\n") and len(set(line.split("=")[0] for line in lines if "=" in line)) > 30


def test_nodes_declare_memory_slurmd_checks_unless_they_declare_more_than_the_machine():
    """config_overrides makes slurmd believe any declaration (and the memory plan call the memory unknown):
    only where the nodes declare more CPUs or memory than the machine they all run on has."""
    assert "SlurmdParameters=config_overrides" not in conf()
    assert "SlurmdParameters=config_overrides" in conf(config_overrides=True).splitlines()
    fits = dict(machine_cpus=2, machine_memory_mb=23_000)
    assert not slurm_conf.needs_config_overrides(2, 2000, **fits)
    assert slurm_conf.needs_config_overrides(4, 2000, **fits) and slurm_conf.needs_config_overrides(2, 24_000, **fits)


def test_slurm_conf_extra_lines_come_before_the_nodes_and_cores_follow_cpus_per_node():
    lines = conf(extra_conf=["GresTypes=gpu"], cpus_per_node=8, node_names=["n1"]).splitlines()
    assert lines.index("GresTypes=gpu") < min(i for i, line in enumerate(lines) if line.startswith("NodeName="))
    assert sum(line.startswith("NodeName=") for line in lines) == 1
    assert "CPUs=8 Sockets=1 CoresPerSocket=8" in conf(cpus_per_node=8)


def test_addresses_and_hosts_file():
    addresses = slurm_conf.cluster_addresses(42, "ctl", ["n1", "n2", "n3"])
    assert addresses == {"ctl": "10.77.42.1", "n1": "10.77.42.11", "n2": "10.77.42.12", "n3": "10.77.42.13"}
    hosts = slurm_conf.hosts_text(addresses).splitlines()
    assert hosts[0] == "127.0.0.1\tlocalhost" and "10.77.42.12\tn2" in hosts and len(hosts) == 6


@pytest.mark.parametrize("ip_output, used", [
    ("", set()),
    ("2: eth0    inet 10.77.3.1/24 brd ...\n10.77.9.0/24 dev sltb1 proto kernel", {3, 9}),
    ("default via 192.168.1.1 dev eth0\n172.17.0.0/16 dev docker0", set()),
])
def test_used_subnets_are_read_from_ip_output(ip_output, used):
    assert slurm_conf.used_third_octets(ip_output) == used


@pytest.mark.parametrize("route", ["10.0.0.0/8 via 10.1.1.1", "10.77.0.0/16 dev vpn0"])
def test_an_overlapping_wider_route_leaves_no_subnet_free(route):
    assert slurm_conf.used_third_octets(route) == set(range(256))


def test_client_env_drops_foreign_slurm_variables_and_puts_the_clusters_clients_first():
    env = slurm_conf.client_env({"PATH": "/opt/x/bin", "SLURM_JOB_ID": "9", "SBATCH_PARTITION": "gpu", "HOME": "/h"},
                                Path("/w/etc/slurm.conf"), Path("/w/bin"))
    assert env["SLURM_CONF"] == "/w/etc/slurm.conf" and env["HOME"] == "/h"
    assert not any(k.startswith(("SLURM_JOB", "SBATCH_")) for k in env)
    assert env["PATH"].split(":") == ["/w/bin", "/opt/x/bin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"]


def test_parse_scontrol_oneliner_keeps_values_with_spaces_and_equals():
    line = "JobId=7 JobName=pyg train JobState=RUNNING Reason=None Command=/x/run.sh a=b NodeList=n[1-2]"
    info = slurm_conf.parse_scontrol_oneliner(line)
    assert info["JobId"] == "7" and info["JobName"] == "pyg train" and info["JobState"] == "RUNNING"
    assert info["NodeList"] == "n[1-2]" and info["Command"] == "/x/run.sh" and info["a"] == "b"


def test_a_cluster_object_names_its_nodes_without_starting_anything(tmp_path):
    c = SlurmCluster(nodes=3, cpus_per_node=4, workdir=tmp_path)
    assert c.node_names == ["n1", "n2", "n3"] and len(set(c.netns.values())) == 3
    assert all(len(v) <= 15 for v in [c.bridge, *c.veths.values()])  # Linux interface names: at most 15 bytes
    assert c.conf_path == tmp_path / "etc" / "slurm.conf" and not c.conf_path.exists()
    for bad in (dict(nodes=0), dict(nodes=201), dict(cpus_per_node=0)):
        with pytest.raises(ValueError):
            SlurmCluster(**bad)


# ---- pyxis, the NGC stand-in, local jobs: their pure parts -----------------------------------------
def test_pyxis_node_config_points_every_enroot_path_into_the_node(tmp_path):
    text = pyxis_setup.node_enroot_conf(tmp_path / "n1")
    assert text.splitlines() == [f"ENROOT_{k}_PATH {tmp_path / 'n1' / 'enroot' / v}"
                                 for k, v in (("RUNTIME", "runtime"), ("CACHE", "cache"), ("DATA", "data"),
                                              ("TEMP", "tmp"))]
    assert pyxis_setup.plugstack_line(Path("/rt")).startswith(f"required {pyxis_setup.PYXIS_SO} runtime_path=/rt ")
    assert pyxis_setup.node_mounts(tmp_path, Path("/rt")) == [(tmp_path / "enroot-etc", pyxis_setup.ENROOT_SYSCONF),
                                                              (tmp_path / "pyxis", Path("/rt"))]


def test_ngc_standin_pins_the_lock_minus_what_ngc_lacks():
    lock = "# comment\n--index-url x\ntorch==2.9.0  # cpu\npython-hostlist==2.2\nnumpy==2.1\n\n"
    assert ngc_standin._lock_pins(lock) == ["torch==2.9.0", "numpy==2.1"]


def test_srun_env_spreads_ranks_evenly_over_nodes():
    env = srun_env(5, 8, 2, "77", 29500)
    assert (env["SLURM_PROCID"], env["SLURM_LOCALID"], env["SLURM_NODEID"], env["SLURM_NTASKS_PER_NODE"]) == \
        ("5", "1", "1", "4")
    assert env["SLURM_JOB_NODELIST"] == "node[1-2]" and srun_env(0, 1, 1, "1", 1)["SLURM_JOB_NODELIST"] == "node1"


# ---- the once-per-machine parts, built in the background ---------------------------------------------
def test_preparation_builds_in_order_in_the_background_at_nice_19_and_hands_over_results_and_errors():
    calls = []

    def nice_of_a_child(log):
        calls.append("first")
        log("building the first")
        return subprocess.run(["nice"], capture_output=True, text=True).stdout.strip()  # the niceness it inherits

    def failing(log):
        calls.append("second")
        raise ValueError("cannot build the second here")

    def third(log):
        calls.append("third")
        return 3

    parts = Preparation([("first", nice_of_a_child), ("second", failing), ("third", third)])
    mine = os.getpriority(os.PRIO_PROCESS, 0)  # this thread's
    parts.start(["second", "first"])  # the steps' own order, whatever the order asked in
    assert parts.result("first") == "19"  # the build's processes yield to the tests'
    assert parts.outcome("first").messages == ["building the first"]
    with pytest.raises(ValueError, match="cannot build the second here"):
        parts.result("second")
    assert parts.result("third") == 3  # not started in the background: built when asked, here
    assert parts.result("first") == "19" and calls == ["first", "second", "third"]  # each step runs once
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the tests' own priority is untouched



def test_each_once_per_machine_parts_fixture_is_defined_once_in_the_suite():
    """The suite orders a test by the fixture names it uses (conftest_slurm.MACHINE_PARTS): a test's own fixture of
    the same name (test_jobs.py's stand-in sbatch was once named as the NGC image's) would order its tests last and
    start the part's build in a session that never needs it (make test's sessions: tests/harness/streams.py)."""
    sources = [path.read_text() for path in sorted((ROOT / "tests").rglob("*.py"))]
    for _part, _step, fixtures in MACHINE_PARTS:
        for name in fixtures:
            defined = sum(len(re.findall(rf"^def {name}\(", text, re.M)) for text in sources)
            assert defined == 1, f"fixture {name}: defined {defined} times in tests/"

# ---- the reaper every daemon runs under (a real file, run as the cluster runs it) -------------------
def reap(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(WORKERS / "reaper.py"), *cmd], capture_output=True, text=True,
                          timeout=30)


def test_reaper_exits_with_its_commands_status_after_every_descendant():
    assert reap("--", "sh", "-c", "exit 3").returncode == 3
    done = reap("--", "sh", "-c", "(sleep 0.3; echo late) & echo early")  # the orphan is reparented and waited for
    assert done.returncode == 0 and done.stdout.split() == ["early", "late"]
    assert reap("--", "sh", "-c", "kill -TERM $$").returncode == 128 + signal.SIGTERM


def test_reaper_names_who_signalled_it_and_starts_its_command_with_no_signal_ignored():
    """A daemon stopped by a signal says who sent it (log/NAME.stdout); and the daemons (so the jobs' tasks)
    ignore nothing, though Python ignores SIGPIPE and a suite started from a script's `&` ignores SIGINT."""
    script = "grep SigIgn /proc/self/status; exec sleep 30"  # exec: the signal reaches sleep, no orphan holds stdout
    proc = subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$@"', "sh", sys.executable, "-I",
                             str(WORKERS / "reaper.py"), "--", "sh", "-c", script],
                            stdout=subprocess.PIPE, text=True)
    try:
        field, mask = proc.stdout.readline().split()
        # the standard signals 1-31 (bits 0-30); 32 and 33 are glibc's own, out of Python's reach (and not ours)
        assert field == "SigIgn:" and int(mask, 16) & (2**31 - 1) == 0, mask
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    me = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert out.startswith(f"reaper: SIGTERM from pid {os.getpid()} ({me}), forwarded to sh (pid "), out


def test_reaper_without_a_command_says_how_to_call_it():
    done = reap("sh")
    assert done.returncode == 1 and "usage: reaper.py -- CMD" in done.stderr


# ---- the shell stand-ins: real files the lint checks -------------------------------------------------
def test_every_standin_is_an_executable_sh_file_that_the_lint_lists():
    """mk/lint.mk runs shellcheck on `git ls-files '*.sh' '*.sbatch'`: a stand-in named otherwise goes unchecked."""
    files = sorted(p for p in STANDINS.iterdir())
    assert {p.name for p in files} >= {"sbatch.sh", "srun.sh", "scontrol.sh", "sinfo.sh", "enroot.sh", "docker.sh",
                                       "fixed-output.sh"}
    for path in files:
        assert path.suffix == ".sh" and os.access(path, os.X_OK), path
        assert path.read_text().startswith(("#!/bin/sh\n", "#!/bin/bash\n", "#!/usr/bin/env bash\n")), path


def test_standins_are_shellcheck_clean():
    if not SHELLCHECK.exists():
        pytest.skip(f"{SHELLCHECK} is missing: run `make setup`")
    done = subprocess.run([str(SHELLCHECK), "-x", *map(str, sorted(STANDINS.glob("*.sh")))], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_installed_standin_answers_under_the_name_it_was_installed_as(tmp_path):
    tool = standin_bin.install(tmp_path / "bin", "nvidia-smi", "fixed-output")
    (tmp_path / "nvidia-smi.out").write_text("2048\n")
    done = subprocess.run([str(tool), "--query-gpu=memory.total"], env={"PATH": "/usr/bin:/bin",
                          "STANDIN_DIR": str(tmp_path)}, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "2048\n"
    assert (tmp_path / "nvidia-smi.argv").read_text() == "--query-gpu=memory.total\n"


def test_a_completing_jobs_partial_node_list_is_waited_out():
    """A COMPLETING job lists only its nodes still completing: job_nodes reads the node list once that is over (a CI
    run caught the block placement of a 2-node salloc checked against one node)."""
    states = iter([{"JobId": "4", "JobState": "COMPLETING", "NodeList": "n1"},
                   {"JobId": "4", "JobState": "COMPLETING", "NodeList": "n1"},
                   {"JobId": "4", "JobState": "COMPLETED", "NodeList": "n[1-2]"}])
    naps = []
    assert settled_info(lambda: next(states), 60, clock=lambda: 0.0, sleep=naps.append)["NodeList"] == "n[1-2]"
    assert len(naps) == 2
    running = {"JobId": "5", "JobState": "RUNNING", "NodeList": "n[1-2]"}
    assert settled_info(lambda: running, 60, sleep=naps.append) is running and len(naps) == 2  # no wait
    times = iter([0.0, 61.0])
    with pytest.raises(TimeoutError, match="job 4 still COMPLETING after 60 s"):
        settled_info(lambda: {"JobId": "4", "JobState": "COMPLETING"}, 60, clock=lambda: next(times), sleep=naps.append)


def test_job_memory_reads_procs_status_maps_and_stat():
    """tests/harness/job_memory.py's parsers, on /proc's own text: kB fields as bytes, each mapping's size and file
    (a deleted one's path without the mark), CPU with the reaped children's, a Python's `-m train fit` only."""
    from tests.harness.job_memory import cpu_seconds, kib_fields, mappings, training_command

    status = "Name:\tpython\nVmHWM:\t  1024 kB\nRssAnon:\t   8 kB\nThreads:\t4\n"
    assert kib_fields(status, ("VmHWM", "RssAnon", "RssShmem")) == {"VmHWM": 2**20, "RssAnon": 8192}
    maps = ("7f0000000000-7f0000400000 r--s 00000000 00:1a 42 /dev/shm/pyg-train-u0/pyg-train-j5-p1-n0-u0/x.bin "
            "(deleted)\n7f0000400000-7f0000401000 rw-p 00000000 00:00 0 \n"
            "7f0000401000-7f0000402000 rw-p 00000000 00:00 0\n")
    assert mappings(maps) == [(4 * 2**20, "/dev/shm/pyg-train-u0/pyg-train-j5-p1-n0-u0/x.bin"), (4096, ""),
                              (4096, "")]
    stat = "123 (pt main thread) S 1 123 123 0 -1 4194560 10 0 0 0 250 50 100 100 20 0 1 0 5"
    assert cpu_seconds(stat, 100) == 5.0
    assert training_command("/venv/bin/python\0-m\0train\0fit\0--config\0tiny\0")
    assert not training_command("srun\0--label\0/venv/bin/python\0-m\0train\0fit\0")


def test_a_scaled_igbh_keeps_igbhs_types_relations_and_degree_ratios(tmp_path):
    """tests/harness/igbh_files.py write_igbh_scaled: IGBH-full's counts times the fraction (every type at least one
    node), 1024-wide features, and each relation's edges per node as IGBH-full's."""
    import numpy as np

    from tests.harness.igbh_files import IGBH_EDGES, scaled_counts, write_igbh_scaled
    from train.graph.datasets.igbh import igbh_full

    counts, edges = scaled_counts(1e-3)
    assert counts == {"paper": 269_346, "author": 277_221, "institute": 27, "fos": 713}
    assert sum(counts.values()) == 547_307 and edges["cites"] == 3_996_442
    assert abs(edges["cites"] / counts["paper"] - IGBH_EDGES["cites"] / igbh_full().meta.counts[0]) < 1e-3
    written = write_igbh_scaled(tmp_path / "igbh", 5e-6)
    assert written == scaled_counts(5e-6)[0] and written["institute"] == 1
    x = np.load(tmp_path / "igbh" / "processed" / "fos" / "node_feat.npy", mmap_mode="r")
    assert x.shape == (written["fos"], 1024) and x.dtype == np.float32
    cites = np.load(tmp_path / "igbh" / "processed" / "paper__cites__paper" / "edge_index.npy")
    assert cites.shape == (scaled_counts(5e-6)[1]["cites"], 2) and cites.max() < written["paper"]
