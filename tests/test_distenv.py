"""The distributed environment contract, as a table of environments and what they resolve to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from train.distenv import expand_tasks_per_node, resolve
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
FREE_PORT = 45678


def fixed_port() -> int:
    return FREE_PORT


# (id, environment, expected fields)
CASES = [
    ("bare-single-process", {}, dict(world_size=1, rank=0, local_rank=0, local_world_size=1, node_rank=0,
                                     num_nodes=1, master_addr="127.0.0.1", master_port=FREE_PORT)),
    ("torchrun-one-node",
     dict(WORLD_SIZE="4", RANK="2", LOCAL_RANK="2", LOCAL_WORLD_SIZE="4", GROUP_RANK="0",
          MASTER_ADDR="127.0.0.1", MASTER_PORT="29500"),
     dict(world_size=4, rank=2, local_rank=2, local_world_size=4, node_rank=0, num_nodes=1,
          master_addr="127.0.0.1", master_port=29500)),
    ("torchrun-two-nodes",
     dict(WORLD_SIZE="8", RANK="5", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4", GROUP_RANK="1",
          MASTER_ADDR="node1", MASTER_PORT="29400"),
     dict(world_size=8, rank=5, local_rank=1, local_world_size=4, node_rank=1, num_nodes=2, master_addr="node1")),
    ("enroot-hook-over-slurm",  # the hook sets these from SLURM's; they win over SLURM's own
     dict(WORLD_SIZE="4", RANK="3", LOCAL_RANK="1", MASTER_ADDR="gpu007", MASTER_PORT="65242",
          SLURM_NTASKS="4", SLURM_PROCID="3", SLURM_LOCALID="1", SLURM_NODEID="1", SLURM_JOB_NUM_NODES="2",
          SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NODELIST="gpu[007-008]", SLURM_JOB_ID="4242"),
     dict(world_size=4, rank=3, local_rank=1, local_world_size=2, node_rank=1, num_nodes=2,
          master_addr="gpu007", master_port=65242)),
    ("bare-srun-two-nodes",
     dict(SLURM_NTASKS="4", SLURM_PROCID="3", SLURM_LOCALID="1", SLURM_NTASKS_PER_NODE="2", SLURM_NODEID="1",
          SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="gpu[007-008]", SLURM_JOB_ID="4242"),
     dict(world_size=4, rank=3, local_rank=1, local_world_size=2, node_rank=1, num_nodes=2,
          master_addr="gpu007", master_port=14242, job_id="4242")),
    ("bare-srun-one-node",
     dict(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0", SLURM_NNODES="1",
          SLURM_TASKS_PER_NODE="2", SLURM_JOB_NODELIST="n1", SLURM_JOB_ID="7"),
     dict(world_size=2, rank=0, local_world_size=2, num_nodes=1, master_addr="n1", master_port=10007)),
    ("compressed-tasks-per-node",  # 2(x3),1: the last node runs one task
     dict(SLURM_NTASKS="7", SLURM_PROCID="6", SLURM_LOCALID="0", SLURM_NODEID="3",
          SLURM_STEP_TASKS_PER_NODE="2(x3),1", SLURM_JOB_NODELIST="c[1-4]", SLURM_JOB_ID="123456789"),
     dict(world_size=7, rank=6, local_rank=0, local_world_size=1, node_rank=3, num_nodes=4,
          master_addr="c1", master_port=16789)),
    ("nodelist-mixed-prefixes",
     dict(SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_NODEID="1", SLURM_JOB_NUM_NODES="2",
          SLURM_NTASKS_PER_NODE="1", SLURM_JOB_NODELIST="gpu-a[01,03],cpu7", SLURM_JOB_ID="99"),
     dict(master_addr="gpu-a01", master_port=10099, local_world_size=1)),
    ("array-job-id", dict(SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_JOB_ID="55512345_3", SLURM_JOB_NODELIST="n9"),
     dict(master_port=12345, master_addr="n9")),
    ("master-port-override-beats-job-id",
     dict(SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_JOB_ID="4242", SLURM_JOB_NODELIST="n[1-2]",
          SLURM_NTASKS_PER_NODE="1", SLURM_NODEID="1", SLURM_JOB_NUM_NODES="2", SLURM_LOCALID="0",
          MASTER_PORT="23456"),
     dict(master_port=23456, master_addr="n1", node_rank=1)),
    ("node-rank-derived-without-slurm-nodeid",
     dict(WORLD_SIZE="8", RANK="6", LOCAL_WORLD_SIZE="4", MASTER_ADDR="h", MASTER_PORT="1234"),
     dict(node_rank=1, local_rank=2, num_nodes=2)),
]


@pytest.mark.parametrize("environ,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_resolves(environ, expected):
    env = resolve(environ, pick_free_port=fixed_port)
    for name, value in expected.items():
        assert getattr(env, name) == value, (name, env)


def test_sources_name_the_variables():
    env = resolve(dict(CASES[4][1]), pick_free_port=fixed_port)
    assert env.sources["world_size"] == "SLURM_NTASKS"
    assert env.sources["master_addr"] == "SLURM_JOB_NODELIST"
    assert "SLURM_JOB_ID" in env.sources["master_port"]
    assert resolve({}, pick_free_port=fixed_port).sources["master_port"] == "free port"


# (id, environment, the variable the message must name)
ERRORS = [
    ("rank-beyond-world", dict(WORLD_SIZE="4", RANK="9"), "RANK"),
    ("world-size-not-int", dict(WORLD_SIZE="four"), "WORLD_SIZE"),
    ("negative-rank", dict(WORLD_SIZE="2", RANK="-1", MASTER_PORT="1"), "RANK"),
    ("world-size-zero", dict(SLURM_NTASKS="0"), "SLURM_NTASKS"),
    ("local-rank-beyond-local-world",
     dict(WORLD_SIZE="4", RANK="1", LOCAL_RANK="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="a", MASTER_PORT="1"),
     "LOCAL_RANK"),
    ("bad-nodelist", dict(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_JOB_ID="1", SLURM_JOB_NODELIST="gpu[007-"),
     "SLURM_JOB_NODELIST"),
    ("bad-tasks-per-node", dict(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_TASKS_PER_NODE="2(y3)"),
     "SLURM_TASKS_PER_NODE"),
    ("port-out-of-range", dict(MASTER_PORT="70000"), "MASTER_PORT"),
    ("port-not-int", dict(MASTER_PORT="http"), "MASTER_PORT"),
    ("node-rank-beyond-nodes",
     dict(SLURM_NTASKS="4", SLURM_PROCID="0", SLURM_NODEID="2", SLURM_JOB_NUM_NODES="2", SLURM_JOB_ID="1",
          SLURM_JOB_NODELIST="n[1-2]"), "SLURM_NODEID"),
    ("multi-process-without-port", dict(WORLD_SIZE="2", RANK="0"), "MASTER_PORT"),
    ("non-numeric-job-id", dict(SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_JOB_ID="abc", SLURM_JOB_NODELIST="n1"),
     "SLURM_JOB_ID"),
    ("tasks-per-node-disagrees-with-nodes",
     dict(SLURM_NTASKS="4", SLURM_PROCID="0", SLURM_JOB_NUM_NODES="3", SLURM_TASKS_PER_NODE="2(x2)",
          SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n[1-3]"), "SLURM_TASKS_PER_NODE"),
]


@pytest.mark.parametrize("environ,variable", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_rejects_malformed(environ, variable):
    with pytest.raises(UserError) as info:
        resolve(environ, pick_free_port=fixed_port)
    assert variable in str(info.value)


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
