"""The distributed environment contract, as a table of environments and what they resolve to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.cluster.distenv import expand_tasks_per_node, port_for_job, resolve
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
FREE_PORT = 45678


def fixed_port() -> int:
    return FREE_PORT


# What srun exports to every task of a step (SLURM 22.05, recorded on the test cluster): the job's
# variables, the step's own, and sbatch's --ntasks-per-node inherited as SLURM_NTASKS_PER_NODE.
JOB_2x2 = dict(SLURM_JOB_ID="4242", SLURM_JOBID="4242", SLURM_JOB_NODELIST="gpu[007-008]", SLURM_JOB_NUM_NODES="2",
               SLURM_NTASKS_PER_NODE="2", SLURM_JOB_CPUS_PER_NODE="2(x2)")


def step(**step_vars) -> dict[str, str]:
    """A task of an srun step in JOB_2x2: the job's variables, then the step's."""
    return {**JOB_2x2, "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", **step_vars}


WHOLE_JOB_STEP = step(SLURM_NTASKS="4", SLURM_NPROCS="4", SLURM_NNODES="2", SLURM_NODELIST="gpu[007-008]",
                      SLURM_TASKS_PER_NODE="2(x2)", SLURM_STEP_NUM_TASKS="4", SLURM_STEP_NUM_NODES="2",
                      SLURM_STEP_NODELIST="gpu[007-008]", SLURM_STEP_TASKS_PER_NODE="2(x2)",
                      SLURM_PROCID="3", SLURM_LOCALID="1", SLURM_NODEID="1")
# `srun -N1 -n1 -w gpu008` inside the 2-node job: SLURM_NODELIST stays the job's, SLURM_NTASKS_PER_NODE=2 is sbatch's.
SUBSET_STEP = step(SLURM_STEP_ID="2", SLURM_STEPID="2", SLURM_NTASKS="1", SLURM_NPROCS="1", SLURM_NNODES="1",
                   SLURM_NODELIST="gpu[007-008]", SLURM_TASKS_PER_NODE="1", SLURM_STEP_NUM_TASKS="1",
                   SLURM_STEP_NUM_NODES="1", SLURM_STEP_NODELIST="gpu008", SLURM_STEP_TASKS_PER_NODE="1",
                   SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
# `srun -N2 -n2` in the job: one task per node although sbatch said --ntasks-per-node=2.
SPREAD_STEP = step(SLURM_NTASKS="2", SLURM_NPROCS="2", SLURM_NNODES="2", SLURM_NODELIST="gpu[007-008]",
                   SLURM_TASKS_PER_NODE="1(x2)", SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NUM_NODES="2",
                   SLURM_STEP_NODELIST="gpu[007-008]", SLURM_STEP_TASKS_PER_NODE="1(x2)",
                   SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NODEID="1")
# `srun --preserve-env -N1 -n1`: SLURM_NTASKS, SLURM_NNODES and SLURM_TASKS_PER_NODE keep the job's values.
PRESERVE_ENV_STEP = {**SUBSET_STEP, "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_NNODES": "2",
                     "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NODELIST": "gpu007"}
# The batch script of that job (no SLURM_STEP_ID; SLURM_PROCID=0 is set there too).
BATCH = {**JOB_2x2, "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_NNODES": "2", "SLURM_NODELIST": "gpu[007-008]",
         "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
# The enroot PyTorch hook: WORLD_SIZE=$SLURM_NTASKS, RANK, LOCAL_RANK, the step's first node, 61000 + id % 4536.
HOOK = dict(WORLD_SIZE="4", RANK="3", LOCAL_RANK="1", MASTER_ADDR="gpu007", MASTER_PORT="61058")
# torchrun started by each task of `srun -N2 --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=4`.
TORCHRUN_UNDER_SRUN = {**SPREAD_STEP, "TORCHELASTIC_RUN_ID": "4242", "WORLD_SIZE": "8", "RANK": "6",
                       "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
                       "MASTER_ADDR": "gpu007", "MASTER_PORT": "29500"}
HET = dict(SLURM_HET_SIZE="2", SLURM_JOB_NODELIST_HET_GROUP_0="gpu[007-008]", SLURM_JOB_NODELIST_HET_GROUP_1="cpu[1-2]")
# srun --het-group=1 -N2 -n2: one component, its own nodes.
HET_ONE_COMPONENT = {**JOB_2x2, **HET, "SLURM_STEP_ID": "0", "SLURM_JOB_NODELIST": "gpu[007-008],cpu[1-2]",
                     "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "cpu[1-2]",
                     "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
                     "SLURM_NODEID": "1"}

# (id, environment, expected fields)
CASES = [
    ("bare-single-process", {}, dict(world_size=1, rank=0, local_rank=0, local_world_size=1, node_rank=0,
                                     num_nodes=1, master_addr="127.0.0.1", master_port=FREE_PORT, launcher="plain")),
    ("torchrun-one-node",
     dict(WORLD_SIZE="4", RANK="2", LOCAL_RANK="2", LOCAL_WORLD_SIZE="4", GROUP_RANK="0",
          MASTER_ADDR="127.0.0.1", MASTER_PORT="29500"),
     dict(world_size=4, rank=2, local_rank=2, local_world_size=4, node_rank=0, num_nodes=1,
          master_addr="127.0.0.1", master_port=29500)),
    ("torchrun-two-nodes",
     dict(WORLD_SIZE="8", RANK="5", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4", GROUP_RANK="1",
          MASTER_ADDR="node1", MASTER_PORT="29400"),
     dict(world_size=8, rank=5, local_rank=1, local_world_size=4, node_rank=1, num_nodes=2, master_addr="node1")),
    ("enroot-hook-over-slurm-step",  # the hook copies SLURM's values: they agree, and win
     {**WHOLE_JOB_STEP, **HOOK},
     dict(world_size=4, rank=3, local_rank=1, local_world_size=2, node_rank=1, num_nodes=2,
          master_addr="gpu007", master_port=61058, launcher="srun step")),
    ("bare-srun-two-nodes", WHOLE_JOB_STEP,
     dict(world_size=4, rank=3, local_rank=1, local_world_size=2, node_rank=1, num_nodes=2,
          master_addr="gpu007", master_port=10000 + 4242, job_id="4242", launcher="srun step")),
    ("step-on-a-subset-of-the-job's-nodes",  # master on the step's node, not the job's first; one task
     SUBSET_STEP, dict(world_size=1, rank=0, local_world_size=1, num_nodes=1, master_addr="gpu008")),
    ("step-spread-one-task-per-node",  # the step's 1(x2), not sbatch's SLURM_NTASKS_PER_NODE=2
     SPREAD_STEP, dict(world_size=2, rank=1, local_rank=0, local_world_size=1, node_rank=1, num_nodes=2,
                       master_addr="gpu007", master_port=14242)),
    ("step-preserve-env",  # the step's SLURM_STEP_* over the job's SLURM_NTASKS=4 / SLURM_NNODES=2
     PRESERVE_ENV_STEP, dict(world_size=1, num_nodes=1, local_world_size=1, master_addr="gpu007")),
    ("torchrun-under-srun",  # torchrun's variables describe the processes; SLURM's describe its tasks
     TORCHRUN_UNDER_SRUN, dict(world_size=8, rank=6, local_rank=2, local_world_size=4, node_rank=1, num_nodes=2,
                               master_addr="gpu007", master_port=29500, launcher="torchrun", agent_store=False)),
    ("torchrun-agent-store",  # torchrun's agent serves the store: rank 0 must not bind MASTER_PORT again
     {**TORCHRUN_UNDER_SRUN, "TORCHELASTIC_USE_AGENT_STORE": "True"}, dict(agent_store=True)),
    ("torchrun-standalone-in-a-batch-script",  # make run inside an sbatch/salloc shell
     {**BATCH, "TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1",
      "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "localhost",
      "MASTER_PORT": "29400"},
     dict(world_size=2, rank=1, num_nodes=1, master_addr="localhost", master_port=29400)),
    ("one-process-in-a-one-task-batch-script",
     {**JOB_2x2, "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "gpu007", "SLURM_NTASKS": "1",
      "SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "1"},
     dict(world_size=1, rank=0, master_addr="127.0.0.1", master_port=FREE_PORT, launcher="allocation without srun")),
    ("heterogeneous-job-one-component", HET_ONE_COMPONENT,
     dict(world_size=2, rank=1, num_nodes=2, node_rank=1, master_addr="cpu1")),
    ("compressed-tasks-per-node",  # 2(x3),1: the last node runs one task
     dict(SLURM_STEP_ID="0", SLURM_NTASKS="7", SLURM_PROCID="6", SLURM_LOCALID="0", SLURM_NODEID="3",
          SLURM_STEP_TASKS_PER_NODE="2(x3),1", SLURM_STEP_NODELIST="c[1-4]", SLURM_JOB_ID="123456789"),
     dict(world_size=7, rank=6, local_rank=0, local_world_size=1, node_rank=3, num_nodes=4,
          master_addr="c1", master_port=10000 + 123456789 % 22768)),
    ("nodelist-mixed-prefixes",
     dict(SLURM_STEP_ID="0", SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NODEID="1",
          SLURM_STEP_NUM_NODES="2", SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_STEP_NODELIST="gpu-a[01,03],cpu7",
          SLURM_JOB_ID="99"),
     dict(master_addr="gpu-a01", master_port=10099, local_world_size=1)),
    ("array-job-id",
     dict(SLURM_STEP_ID="0", SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_JOB_ID="55512345_3", SLURM_STEP_NODELIST="n9"),
     dict(master_port=10000 + (55512345 + 3) % 22768, master_addr="n9")),
    ("master-port-override-beats-job-id",
     {**SPREAD_STEP, "MASTER_PORT": "23456"}, dict(master_port=23456, master_addr="gpu007", node_rank=1)),
    ("node-rank-derived-without-slurm-nodeid",
     dict(WORLD_SIZE="8", RANK="6", LOCAL_WORLD_SIZE="4", MASTER_ADDR="h", MASTER_PORT="1234"),
     dict(node_rank=1, local_rank=2, num_nodes=2)),
    ("step-without-step-id",  # a hand-made srun environment: the step's own variables say it is a step
     {k: v for k, v in WHOLE_JOB_STEP.items() if k not in ("SLURM_STEP_ID", "SLURM_STEPID")},
     dict(world_size=4, rank=3, node_rank=1, master_addr="gpu007", launcher="srun step")),
    ("lightning-style-srun-task",  # Lightning's SLURMEnvironment test: no step variables, rank 1, a spaced list
     dict(SLURM_NODELIST="1.1.1.1, 1.1.1.2", SLURM_JOB_ID="0001234", SLURM_NTASKS="20", SLURM_NTASKS_PER_NODE="10",
          SLURM_LOCALID="2", SLURM_PROCID="1", SLURM_NODEID="0", SLURM_JOB_NAME="JOB"),
     dict(world_size=20, rank=1, local_rank=2, local_world_size=10, node_rank=0, num_nodes=2,
          master_addr="1.1.1.1", master_port=10000 + 1234)),
    ("ipv6-master", dict(WORLD_SIZE="2", RANK="1", MASTER_ADDR="fe80::1%eth0", MASTER_PORT="1234"),
     dict(master_addr="fe80::1%eth0")),
]


@pytest.mark.parametrize("environ,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_resolves(environ, expected):
    env = resolve(environ, pick_free_port=fixed_port)
    for name, value in expected.items():
        assert getattr(env, name) == value, (name, env)


def test_sources_name_the_variables():
    env = resolve(WHOLE_JOB_STEP, pick_free_port=fixed_port)
    assert env.sources["world_size"] == "SLURM_STEP_NUM_TASKS"
    assert env.sources["num_nodes"] == "SLURM_STEP_NUM_NODES"
    assert env.sources["local_world_size"] == "SLURM_STEP_TASKS_PER_NODE"
    assert env.sources["master_addr"] == "SLURM_STEP_NODELIST"
    assert "SLURM_JOB_ID" in env.sources["master_port"]
    assert resolve({}, pick_free_port=fixed_port).sources["master_port"] == "free port"
    hooked = resolve({**WHOLE_JOB_STEP, **HOOK}, pick_free_port=fixed_port)
    assert hooked.sources["world_size"] == "WORLD_SIZE" and hooked.sources["master_port"] == "MASTER_PORT"


@pytest.mark.parametrize("first,second", [("12345", "22345"), ("10001", "20001"), ("9999", "19999"),
                                          ("4242", "14242"), ("1", "10001")])
def test_jobs_sharing_the_last_four_digits_get_different_ports(first, second):
    """The seed's 10000 + last four digits gave these pairs one port on a shared first node."""
    ports = [resolve({**SPREAD_STEP, "SLURM_JOB_ID": job}, pick_free_port=fixed_port).master_port
             for job in (first, second)]
    assert ports[0] != ports[1], ports
    assert all(10000 <= p < 32768 for p in ports), ports  # below Linux's ephemeral range


def test_consecutive_and_nearby_job_ids_never_share_a_port():
    ports = {port_for_job(str(job)) for job in range(1_000_000, 1_000_000 + 22768)}
    assert len(ports) == 22768 and min(ports) == 10000 and max(ports) == 32767


# (id, environment, the variables the message must name)
ERRORS = [
    ("rank-beyond-world", dict(WORLD_SIZE="4", RANK="9"), ["RANK"]),
    ("world-size-not-int", dict(WORLD_SIZE="four"), ["WORLD_SIZE"]),
    ("negative-rank", dict(WORLD_SIZE="2", RANK="-1", MASTER_PORT="1"), ["RANK"]),
    ("world-size-zero", dict(SLURM_NTASKS="0"), ["SLURM_NTASKS"]),
    ("local-rank-beyond-local-world",
     dict(WORLD_SIZE="4", RANK="1", LOCAL_RANK="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="a", MASTER_PORT="1"),
     ["LOCAL_RANK"]),
    ("bad-nodelist", {**SPREAD_STEP, "SLURM_STEP_NODELIST": "gpu[007-"}, ["SLURM_STEP_NODELIST"]),
    ("bad-tasks-per-node", dict(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_TASKS_PER_NODE="2(y3)"),
     ["SLURM_TASKS_PER_NODE"]),
    ("zero-tasks-on-a-node", {**SPREAD_STEP, "SLURM_STEP_TASKS_PER_NODE": "0,2"}, ["SLURM_STEP_TASKS_PER_NODE"]),
    ("port-out-of-range", dict(MASTER_PORT="70000"), ["MASTER_PORT"]),
    ("port-not-int", dict(MASTER_PORT="http"), ["MASTER_PORT"]),
    ("port-zero", dict(MASTER_PORT="0"), ["MASTER_PORT"]),
    ("node-rank-beyond-nodes", {**SPREAD_STEP, "SLURM_NODEID": "2"}, ["SLURM_NODEID"]),
    ("multi-process-without-port", dict(WORLD_SIZE="2", RANK="0"), ["MASTER_PORT"]),
    ("non-numeric-job-id", {**SPREAD_STEP, "SLURM_JOB_ID": "abc"}, ["SLURM_JOB_ID"]),
    ("tasks-per-node-disagrees-with-nodes",
     dict(SLURM_NTASKS="4", SLURM_PROCID="0", SLURM_JOB_NUM_NODES="3", SLURM_TASKS_PER_NODE="2(x2)",
          SLURM_JOB_ID="1", SLURM_STEP_ID="0", SLURM_JOB_NODELIST="n[1-3]"), ["SLURM_TASKS_PER_NODE"]),
    ("tasks-per-node-disagrees-with-tasks", {**SPREAD_STEP, "SLURM_STEP_NUM_TASKS": "3"},
     ["SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"]),
    # contradictions between sources name both variables
    ("leftover-world-size", {**SPREAD_STEP, "WORLD_SIZE": "4"}, ["WORLD_SIZE=4", "SLURM_STEP_NUM_TASKS=2"]),
    ("hook-world-size-under-preserve-env",  # the hook copied the job's SLURM_NTASKS=4; the step has 1 task
     {**PRESERVE_ENV_STEP, "WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0"},
     ["WORLD_SIZE=4", "SLURM_STEP_NUM_TASKS=1"]),
    ("leftover-rank", {**SPREAD_STEP, "RANK": "0"}, ["RANK=0", "SLURM_PROCID=1"]),
    ("leftover-local-rank", {**WHOLE_JOB_STEP, "LOCAL_RANK": "0"}, ["LOCAL_RANK=0", "SLURM_LOCALID=1"]),
    ("leftover-local-world-size", {**SPREAD_STEP, "LOCAL_WORLD_SIZE": "2"},
     ["LOCAL_WORLD_SIZE=2", "SLURM_STEP_TASKS_PER_NODE"]),
    ("leftover-node-rank", {**SPREAD_STEP, "NODE_RANK": "0"}, ["NODE_RANK=0", "SLURM_NODEID=1"]),
    ("master-on-a-job-node-outside-the-step",  # the batch script's MASTER_ADDR in `srun -w gpu008`
     {**SUBSET_STEP, "SLURM_STEP_NUM_TASKS": "1", "MASTER_ADDR": "gpu007"},
     ["MASTER_ADDR=gpu007", "SLURM_STEP_NODELIST=gpu008"]),
    # a process in a batch script / salloc shell, not started by srun, while the job has several tasks
    ("batch-script-without-srun", BATCH, ["SLURM_JOB_ID=4242", "SLURM_STEP_ID", "SLURM_NTASKS=4", "srun "]),
    ("batch-step-by-name", {**BATCH, "SLURM_STEP_ID": "batch"}, ["SLURM_STEP_ID=batch", "srun "]),
    ("salloc-interactive-step", {**BATCH, "SLURM_STEP_ID": "4294967290"}, ["SLURM_STEP_ID=4294967290", "srun "]),
    ("salloc-shell-nodes-only",
     {k: v for k, v in BATCH.items() if k not in ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_PROCID")},
     ["SLURM_TASKS_PER_NODE=2(x2)", "srun "]),
    # heterogeneous: a step spanning two components
    ("heterogeneous-step-across-components",
     {**HET_ONE_COMPONENT, "SLURM_STEP_NODELIST": "gpu007,cpu1", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"},
     ["SLURM_HET_SIZE=2", "--het-group"]),
    ("heterogeneous-global-rank-beyond-component", {**HET_ONE_COMPONENT, "SLURM_PROCID": "3"},
     ["SLURM_PROCID=3", "--het-group"]),
    ("heterogeneous-without-step-nodelist",
     {k: v for k, v in HET_ONE_COMPONENT.items() if k != "SLURM_STEP_NODELIST"}, ["SLURM_HET_SIZE=2"]),
    # empty values
    ("empty-world-size", dict(WORLD_SIZE="", RANK="0"), ["WORLD_SIZE=''"]),
    ("empty-master-addr", {**SPREAD_STEP, "MASTER_ADDR": " "}, ["MASTER_ADDR"]),
    ("empty-step-nodelist", {**SPREAD_STEP, "SLURM_STEP_NODELIST": ""}, ["SLURM_STEP_NODELIST"]),
    ("empty-procid", {**SPREAD_STEP, "SLURM_PROCID": ""}, ["SLURM_PROCID"]),
    # MASTER_ADDR must be one host
    ("master-addr-hostlist", dict(WORLD_SIZE="2", RANK="0", MASTER_ADDR="gpu[007-008]", MASTER_PORT="1"),
     ["MASTER_ADDR='gpu[007-008]'", "host-list", "gpu007"]),
    ("master-addr-comma-list", dict(WORLD_SIZE="2", RANK="0", MASTER_ADDR="a,b", MASTER_PORT="1"),
     ["MASTER_ADDR='a,b'", "host-list"]),
    ("master-addr-spaces", dict(WORLD_SIZE="2", RANK="0", MASTER_ADDR="node1 node2", MASTER_PORT="1"),
     ["MASTER_ADDR='node1 node2'", "spaces"]),
    ("master-addr-shell", dict(WORLD_SIZE="2", RANK="0", MASTER_ADDR="$(touch x)", MASTER_PORT="1"),
     ["MASTER_ADDR='$(touch x)'"]),
]


@pytest.mark.parametrize("environ,names", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_rejects_malformed(environ, names):
    with pytest.raises(UserError) as info:
        resolve(environ, pick_free_port=fixed_port)
    for name in names:
        assert name in str(info.value), (name, str(info.value))


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("X", "2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("X", "4") == [4]


def _run_env(environ: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "train", "env"],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **environ},
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )


def test_cli_prints_json_contract():
    done = _run_env(dict(CASES[4][1]))
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["world_size"] == 4 and printed["rank"] == 3 and printed["local_rank"] == 1
    assert printed["master_addr"] == "gpu007" and printed["master_port"] == 14242
    assert printed["sources"]["rank"] == "SLURM_PROCID"


def test_cli_error_is_one_message_without_traceback():
    done = _run_env(dict(WORLD_SIZE="4", RANK="9"))
    assert done.returncode == 2
    assert "RANK=9" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_cli_fit_in_a_batch_script_is_refused_at_once_with_the_srun_line():
    """`python -m train fit` run by a batch script of a 4-task job: told before torch even loads."""
    probe = ("import sys, time; from train.__main__ import main; t = time.monotonic(); "
             "code = main(['fit', '--config', 'tiny', 'trainer.epochs=1']); "
             "print(code, 'torch' in sys.modules, round(time.monotonic() - t, 3))")
    done = subprocess.run([sys.executable, "-c", probe],
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **BATCH},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    code, torch_loaded, seconds = done.stdout.split()
    assert code == "2" and torch_loaded == "False", done.stdout + done.stderr
    assert float(seconds) < 1.0, seconds  # no rendezvous, no torch: a refusal, not a wait
    assert "SLURM_NTASKS=4" in done.stderr and "srun python -m train" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_env_names_the_srun_line_with_the_real_arguments():
    done = _run_env(BATCH)
    assert done.returncode == 2 and done.stdout == ""
    assert "srun python -m train env" in done.stderr and "Traceback" not in done.stderr


def test_cli_port_prints_the_jobs_port_even_in_the_batch_script():
    done = subprocess.run([sys.executable, "-m", "train", "env", "--port"],
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **BATCH},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == port_for_job("4242") == resolve(WHOLE_JOB_STEP).master_port
    none = subprocess.run([sys.executable, "-m", "train", "env", "--port"],
                          env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "SLURM_JOB_ID" in none.stderr and "Traceback" not in none.stderr


def test_every_bad_environment_is_one_message_and_status_2_from_the_cli():
    """The ERRORS table through `python -m train env`: exit 2, the variables named, no traceback, no stdout."""
    failures = []
    for case_id, environ, names in ERRORS:
        done = _run_env(environ)
        if done.returncode != 2 or done.stdout or "Traceback" in done.stderr \
                or not all(name in done.stderr for name in names):
            failures.append(f"{case_id}: rc {done.returncode}: {done.stderr.strip()[:300]}")
    assert not failures, "\n".join(failures)


# ---- the job's facts beside the rank (train/cluster/jobfacts.py) ------------------------------------------
@pytest.mark.parametrize("environ,restarts,source", [
    ({}, 0, "default"),
    ({**WHOLE_JOB_STEP, "SLURM_RESTART_COUNT": "2"}, 2, "SLURM_RESTART_COUNT"),
    ({**WHOLE_JOB_STEP, "SLURM_RESTART_COUNT": "x"}, 0, "SLURM_RESTART_COUNT (not a count: 'x'; taken as 0)"),
    # torchrun inside a requeued job: the job's requeues count, not torchrun's worker restarts
    ({**TORCHRUN_UNDER_SRUN, "SLURM_RESTART_COUNT": "1", "TORCHELASTIC_RESTART_COUNT": "0"}, 1, "SLURM_RESTART_COUNT"),
    # torchrun alone: its own restart count, in its own contract
    ({"TORCHELASTIC_RUN_ID": "r", "WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500",
      "TORCHELASTIC_RESTART_COUNT": "3"}, 3, "TORCHELASTIC_RESTART_COUNT"),
    # outside torchrun its variable means nothing
    ({"TORCHELASTIC_RESTART_COUNT": "3"}, 0, "default"),
])
def test_restart_count_is_resolved_with_its_source(environ, restarts, source):
    env = resolve(environ, pick_free_port=fixed_port)
    assert (env.restart_count, env.sources["restart_count"]) == (restarts, source)


def test_job_facts_are_resolved_beside_the_rank_with_their_source():
    env = resolve({**WHOLE_JOB_STEP, "DATA_DIR": "/shared/data", "SLURM_TMPDIR": "/local/job", "TMPDIR": "/tmp/x",
                   "CUDA_VISIBLE_DEVICES": "2,3", "SLURM_CLUSTER_NAME": " alpha ", "PYG_SUBMISSION_ID": "s1"},
                  pick_free_port=fixed_port)
    assert (env.data_dir, env.node_tmpdirs) == ("/shared/data", ("/local/job", "/tmp/x"))
    assert env.cuda_visible_devices == "2,3"
    assert (env.cluster_name, env.submission_id) == ("alpha", "s1")
    assert env.sources["data_dir"] == "DATA_DIR" and env.sources["node_tmpdirs"] == "SLURM_TMPDIR, TMPDIR"
    bare = resolve({}, pick_free_port=fixed_port)
    assert (bare.data_dir, bare.node_tmpdirs, bare.cuda_visible_devices, bare.cluster_name) == (None, (), None, None)
    assert bare.sources["data_dir"] == "unset" and bare.rank == 0


def test_job_facts_alone_are_never_refused():
    """`python -m train data` runs in a batch script too, where resolve would refuse a lone process."""
    from train.cluster.distenv import job_facts

    with pytest.raises(UserError):
        resolve({**BATCH, "DATA_DIR": "/d"})
    facts, sources = job_facts({**BATCH, "DATA_DIR": "/d", "SLURM_RESTART_COUNT": "1"})
    assert facts["data_dir"] == "/d" and facts["restart_count"] == 1 and sources["data_dir"] == "DATA_DIR"


def test_cli_prints_the_job_facts_with_their_sources():
    done = _run_env({"DATA_DIR": "/d", "SLURM_RESTART_COUNT": "4"})
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["data_dir"] == "/d" and printed["restart_count"] == 4
    assert printed["sources"]["restart_count"] == "SLURM_RESTART_COUNT"
