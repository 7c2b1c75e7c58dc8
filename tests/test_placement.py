"""Where a rank runs when SLURM_NODEID/SLURM_LOCALID (or GROUP_RANK/LOCAL_RANK) are missing: the placement is derived
only where the layout is certain (tasks filling the nodes in blocks) and checked against a brute-force expansion of
the task list for many random layouts; everything else is refused naming what is missing, never printed as good."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from train.cluster.distenv import resolve
from train.cluster.placement import node_distribution
from train.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
SEED = 20_2024


def brute_force(counts: list[int]) -> list[tuple[int, int]]:
    """(node, local rank) of every rank under block placement: the task list written out, one task at a time."""
    tasks = []
    for node, count in enumerate(counts):
        for local in range(count):
            tasks.append((node, local))
    return tasks


def compress(counts: list[int], rng: random.Random) -> str:
    """SLURM's compressed form of `counts`, with runs of equal counts grouped as `c(xN)` at random places
    (SLURM groups every run; a hand-made environment may write some of them out)."""
    items, i = [], 0
    while i < len(counts):
        run = 1
        while i + run < len(counts) and counts[i + run] == counts[i]:
            run += 1
        take = rng.randint(1, run)  # group part of the run, leave the rest to the next item
        items.append(f"{counts[i]}(x{take})" if take > 1 or rng.random() < 0.1 else str(counts[i]))
        i += take
    return ",".join(items)


def random_counts(rng: random.Random) -> list[int]:
    nodes = rng.randint(1, 9)
    shape = rng.choice(["uneven", "runs", "uneven-first"])
    if shape == "runs":  # long (xN) groups anywhere
        counts = []
        while len(counts) < nodes:
            counts += [rng.randint(1, 5)] * rng.randint(1, 4)
        return counts[:nodes]
    counts = [rng.randint(1, 6) for _ in range(nodes)]
    if shape == "uneven-first":
        counts = [rng.randint(1, 3)] + [rng.randint(4, 6)] * (nodes - 1)
    return counts


def step_env(counts: list[int], rank: int, rng: random.Random, compressed: str) -> dict[str, str]:
    """An srun-like task environment without SLURM_LOCALID/SLURM_NODEID (an MPI-style launcher, or by hand)."""
    tasks_var = rng.choice(["SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE"])
    world_var = rng.choice(["SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_NPROCS"])
    env = {"SLURM_JOB_ID": "777", tasks_var: compressed, world_var: str(sum(counts)), "SLURM_PROCID": str(rank),
           "SLURM_STEP_NODELIST": f"n[1-{len(counts)}]" if len(counts) > 1 else "n1"}
    if rng.random() < 0.5:
        env["SLURM_STEP_ID"] = "0"
    if rng.random() < 0.5:
        env[rng.choice(["SLURM_NNODES", "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES"])] = str(len(counts))
    return env


# ---- the layout ------------------------------------------------------------------------------
def test_one_then_three_nodes_of_two_places_every_rank_in_blocks():
    expected = [(0, 0, 1), (1, 0, 2), (1, 1, 2), (2, 0, 2), (2, 1, 2), (3, 0, 2), (3, 1, 2)]
    for rank, (node, local, local_size) in enumerate(expected):
        env = resolve({"SLURM_TASKS_PER_NODE": "1,2(x3)", "SLURM_NTASKS": "7", "SLURM_PROCID": str(rank),
                       "MASTER_ADDR": "n1", "MASTER_PORT": "1234"})
        assert (env.node_rank, env.local_rank, env.local_world_size, env.num_nodes) == (node, local, local_size, 4)
        assert env.sources["node_rank"] == "derived from SLURM_PROCID and SLURM_TASKS_PER_NODE=1,2(x3), in blocks"
        assert env.sources["local_rank"].startswith("derived from SLURM_PROCID")


# ---- many random layouts against the brute-force expansion -----------------------------------------------
def test_random_layouts_match_the_brute_force_expansion():
    rng = random.Random(SEED)
    checked = 0
    for _ in range(400):
        counts = random_counts(rng)
        compressed = compress(counts, rng)
        expected = brute_force(counts)
        for rank in range(len(expected)):
            env = resolve(step_env(counts, rank, rng, compressed))
            node, local = expected[rank]
            got = (env.world_size, env.rank, env.num_nodes, env.node_rank, env.local_rank, env.local_world_size)
            assert got == (len(expected), rank, len(counts), node, local, counts[node]), (compressed, rank, got)
            checked += 1
    assert checked > 2000


def test_one_of_the_two_given_is_checked_against_the_layout():
    """SLURM_NODEID without SLURM_LOCALID (or the reverse): the given one must agree with the derived layout."""
    rng = random.Random(SEED + 1)
    for _ in range(150):
        counts = random_counts(rng)
        compressed = compress(counts, rng)
        expected = brute_force(counts)
        rank = rng.randrange(len(expected))
        node, local = expected[rank]
        base = step_env(counts, rank, rng, compressed)
        given_node = resolve({**base, "SLURM_NODEID": str(node)})
        given_local = resolve({**base, "SLURM_LOCALID": str(local)})
        assert (given_node.local_rank, given_local.node_rank) == (local, node), (compressed, rank)
        if len(counts) > 1:  # a node id the block layout contradicts
            wrong = (node + 1) % len(counts)
            with pytest.raises(UserError, match=f"SLURM_NODEID={wrong} does not fit .*set SLURM_LOCALID too"):
                resolve({**base, "SLURM_NODEID": str(wrong)})
        if counts[node] > 1 and len(counts) > 1:  # (on one node the node rank is certain anyway)
            wrong = (local + 1) % counts[node]
            with pytest.raises(UserError, match=f"SLURM_LOCALID={wrong} does not fit .*set SLURM_NODEID too"):
                resolve({**base, "SLURM_LOCALID": str(wrong)})


# ---- SLURM_DISTRIBUTION: only block can be derived ---------------------------------------------------
@pytest.mark.parametrize("value,kind", [
    ("block", "block"), ("*", "block"), ("block:cyclic", "block"), ("block:block,Pack", "block"), ("BLOCK", "block"),
    ("2", "block"), ("34", "block"), ("cyclic", "cyclic"), ("cyclic:block", "cyclic"), ("plane", "plane"),
    ("arbitrary", "arbitrary"), ("1", "cyclic"), ("4", "plane"), ("fcyclic", "fcyclic"),
])
def test_node_distribution_reads_every_form_srun_prints(value, kind):
    assert node_distribution(value) == kind


@pytest.mark.parametrize("distribution", ["cyclic", "plane", "arbitrary", "cyclic:cyclic", "1", "unknown"])
def test_a_distribution_that_is_not_block_is_refused_naming_what_is_missing(distribution):
    rng = random.Random(SEED + 2)
    refused = 0
    for _ in range(60):
        counts = random_counts(rng)
        environ = {**step_env(counts, len(brute_force(counts)) - 1, rng, compress(counts, rng)),
                   "SLURM_DISTRIBUTION": distribution}
        if len(counts) == 1 or all(c == 1 for c in counts):  # one node, or one task per node: every order agrees
            env = resolve(environ)
            assert (env.node_rank, env.local_rank) == brute_force(counts)[env.rank]
            continue
        with pytest.raises(UserError) as info:
            resolve(environ)
        message = str(info.value)
        assert "SLURM_NODEID and SLURM_LOCALID are not set" in message, message
        assert f"SLURM_DISTRIBUTION={distribution}" in message, message
        refused += 1
        # given by srun, both are used as they are, whatever the distribution
        rank = len(brute_force(counts)) - 1
        env = resolve({**environ, "SLURM_NODEID": "0", "SLURM_LOCALID": "0", "SLURM_PROCID": str(rank)})
        assert (env.node_rank, env.local_rank) == (0, 0)
    assert refused > 20


def test_block_distribution_named_explicitly_is_derived():
    env = resolve({"SLURM_TASKS_PER_NODE": "1,2(x3)", "SLURM_NTASKS": "7", "SLURM_PROCID": "4",
                   "SLURM_DISTRIBUTION": "block:cyclic", "MASTER_ADDR": "n1", "MASTER_PORT": "1"})
    assert (env.node_rank, env.local_rank) == (2, 1)


def test_a_uniform_slurm_count_under_cyclic_is_refused():
    """SLURM_NTASKS_PER_NODE=2 on 2 nodes places rank 1 on node 1 under cyclic: block would say node 0."""
    with pytest.raises(UserError, match="SLURM_DISTRIBUTION=cyclic places the tasks cyclic"):
        resolve({"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_PROCID": "1", "SLURM_NNODES": "2",
                 "SLURM_DISTRIBUTION": "cyclic", "SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0",
                 "SLURM_STEP_NODELIST": "n[1-2]"})


# ---- other layouts that cannot be known -----------------------------------------------------------------
@pytest.mark.parametrize("environ,names", [
    # torchrun-style variables, uneven: 7 processes, 2 per node
    (dict(WORLD_SIZE="7", RANK="5", LOCAL_WORLD_SIZE="2", MASTER_ADDR="h", MASTER_PORT="1"),
     ["GROUP_RANK and LOCAL_RANK are not set", "LOCAL_WORLD_SIZE=2 does not divide"]),
    # two hosts, and nothing says how many tasks each runs
    (dict(SLURM_NTASKS="4", SLURM_PROCID="3", SLURM_STEP_NODELIST="n[1-2]", SLURM_JOB_ID="9", SLURM_STEP_ID="0"),
     ["SLURM_NODEID and SLURM_LOCALID are not set", "4 processes", "2 nodes"]),
    # a tasks-per-node list that does not add up to the world size from WORLD_SIZE
    (dict(WORLD_SIZE="6", RANK="5", SLURM_TASKS_PER_NODE="2(x2)", MASTER_ADDR="h", MASTER_PORT="1"),
     ["SLURM_NODEID and SLURM_LOCALID are not set", "SLURM_TASKS_PER_NODE=2(x2) lists 4 tasks on 2 nodes"]),
    # several processes and no rank at all: every one would be rank 0
    (dict(WORLD_SIZE="2", MASTER_ADDR="h", MASTER_PORT="1"), ["WORLD_SIZE=2", "RANK is not set"]),
    (dict(SLURM_NTASKS="2", SLURM_JOB_ID="9", SLURM_STEP_ID="0", SLURM_STEP_NODELIST="n1"),
     ["SLURM_NTASKS=2", "SLURM_PROCID"]),
])
def test_unknowable_layouts_are_refused_naming_the_missing_variables(environ, names):
    with pytest.raises(UserError) as info:
        resolve(environ)
    for name in names:
        assert name in str(info.value), (name, str(info.value))


def test_even_torchrun_style_variables_are_derived():
    env = resolve(dict(WORLD_SIZE="8", RANK="6", LOCAL_WORLD_SIZE="4", MASTER_ADDR="h", MASTER_PORT="1"))
    assert (env.num_nodes, env.node_rank, env.local_rank) == (2, 1, 2)
    assert env.sources["node_rank"] == "derived from RANK and LOCAL_WORLD_SIZE=4 on each node, in blocks"


# ---- through the CLI: printed when right, refused with status 2 otherwise ---------------------------------
def _env_cli(environ: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", "env"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **environ})


def test_cli_prints_the_derived_placement_and_refuses_a_cyclic_one():
    environ = {"SLURM_TASKS_PER_NODE": "1,2(x3)", "SLURM_NTASKS": "7", "SLURM_PROCID": "3", "SLURM_JOB_ID": "5",
               "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "c[1-4]"}
    done = _env_cli(environ)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert (printed["node_rank"], printed["local_rank"], printed["local_world_size"]) == (2, 0, 2)
    assert "SLURM_TASKS_PER_NODE=1,2(x3), in blocks" in printed["sources"]["node_rank"]
    refused = _env_cli({**environ, "SLURM_DISTRIBUTION": "cyclic"})
    assert refused.returncode == 2 and refused.stdout == "" and "Traceback" not in refused.stderr
    assert "SLURM_NODEID and SLURM_LOCALID are not set" in refused.stderr


def test_on_one_node_a_given_local_rank_is_kept_as_given():
    """One node: the node rank is 0 whatever the local rank; a duplicate local rank is doctor's to find."""
    env = resolve(dict(WORLD_SIZE="4", RANK="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="4", MASTER_ADDR="h",
                       MASTER_PORT="1"))
    assert (env.node_rank, env.local_rank, env.sources["node_rank"]) == (0, 1, "derived from RANK and one node")
