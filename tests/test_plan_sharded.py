"""data.features: the one decision of `auto` (run and plan alike), the node's own limit the run weighs, and the
memory plan's per-node bytes under `node` and under `sharded` (train/plan/sharded.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.harness import standin_bin
from tests.harness.localjob import ROOT
from tests.harness.side_by_side import map_side_by_side
from train.cli.plan_run import graph_size
from train.cluster.distenv import job_facts, resolve
from train.cluster.memory_limit import cgroup_limit_bytes, node_limit
from train.config import load_config
from train.graph.sharing.feature_layout import resolved_layout
from train.loop.killed_rank import MemoryFigures, figures_text
from train.plan.sharded import (
    FETCH_ON_GPU,
    SHARDED,
    layout_of,
    node_layout,
    nodes_needed,
    run_layout,
    shard_rows,
    sharded_rows,
)
from train.plan.terms import GIB, make_plan

# A synthetic graph whose features (1.9 GiB) dwarf its structure: a copy per node and a shard differ by gigabytes.
WIDE = ["data.num_nodes=2000000", "data.num_features=256"]


# ---- the decision ---------------------------------------------------------------------------------

def decide(asked="auto", nodes=4, limit=10 * GIB, copy=12 * GIB, sharded=5 * GIB):
    return resolved_layout(asked, nodes, features_bytes=8 * GIB, structure_bytes=2 * GIB, copy_need=copy,
                           sharded_need=sharded, limit=limit, limit_source="the job's cgroup")


def test_auto_shards_where_a_copy_per_node_does_not_fit_and_says_why():
    choice = decide()
    assert choice.layout == "sharded"
    assert choice.reason == ("sharded: the features (8.0 GiB) and structure (2.0 GiB) need 12.0 GiB per node with a "
                             "copy on each; the node's limit is 10.0 GiB (the job's cgroup); sharded over 4 nodes a "
                             "node needs 5.0 GiB")


@pytest.mark.parametrize("kwargs, why", [
    ({"copy": 10 * GIB}, "the node's limit is 10.0 GiB (the job's cgroup)"),  # fits exactly
    ({"nodes": 1}, "one node, nothing to shard over"),
    ({"limit": None}, "the node's limit is not known (the job's cgroup), so the features are not sharded"),
])
def test_auto_keeps_a_copy_per_node_where_it_fits_or_nothing_says_otherwise(kwargs, why):
    choice = decide(**kwargs)
    assert choice.layout == "node" and why in choice.reason, choice


@pytest.mark.parametrize("asked", ["node", "sharded"])
def test_an_asked_layout_is_kept_whatever_the_memory(asked):
    for limit in (None, GIB, 100 * GIB):
        assert decide(asked, limit=limit).layout == asked
    assert "changes nothing" in decide("sharded", nodes=1).reason


# ---- the run's limit -------------------------------------------------------------------------------

def cgroups(tmp_path: Path, lines: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp_path / "cgroup"
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc.write_text(lines)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text)
    return proc, tmp_path / "fs"


def test_the_cgroup_limit_is_the_smallest_on_the_process_s_path(tmp_path):
    # v2, as SLURM's cgroup/v2 plugin nests a job: the job's limit binds, the step's is "max"
    proc, root = cgroups(tmp_path, "0::/system.slice/slurmstepd.scope/job_7/step_0\n",
                         {"system.slice/slurmstepd.scope/job_7/memory.max": f"{64 * GIB}\n",
                          "system.slice/slurmstepd.scope/job_7/step_0/memory.max": "max\n",
                          "system.slice/memory.max": f"{512 * GIB}\n"})
    assert cgroup_limit_bytes(proc, root) == 64 * GIB
    # v1: the memory controller's hierarchy; its "unlimited" is no limit
    proc, root = cgroups(tmp_path / "v1", "4:memory:/slurm/uid_1/job_7\n1:cpu:/\n",
                         {"memory/slurm/uid_1/job_7/memory.limit_in_bytes": f"{32 * GIB}\n",
                          "memory/memory.limit_in_bytes": "9223372036854771712\n"})
    assert cgroup_limit_bytes(proc, root) == 32 * GIB
    proc, root = cgroups(tmp_path / "none", "0::/user.slice\n", {"user.slice/memory.max": "max\n"})
    assert cgroup_limit_bytes(proc, root) is None
    assert cgroup_limit_bytes(tmp_path / "no-such-file", root) is None


def test_the_node_limit_is_the_smallest_of_cgroup_mem_and_the_node(tmp_path):
    proc, root = cgroups(tmp_path, "0::/job\n", {"job/memory.max": f"{48 * GIB}\n"})
    assert node_limit(None, proc, root, physical=256 * GIB) == (48 * GIB, "the job's cgroup")
    assert node_limit(16 * 1024, proc, root, physical=256 * GIB) == (16 * GIB, "SLURM's --mem (SLURM_MEM_PER_NODE)")
    assert node_limit(0, tmp_path / "none", root, physical=8 * GIB) == (8 * GIB, "the node's memory")  # --mem=0
    value, source = node_limit(None, tmp_path / "none", root)
    assert source == "the node's memory" and value > 0  # this machine's own


def test_slurm_s_mem_is_a_fact_of_the_job():
    facts, sources = job_facts({"SLURM_MEM_PER_NODE": "64000"})
    assert facts["mem_per_node"] == 64000 and sources["mem_per_node"] == "SLURM_MEM_PER_NODE"
    facts, sources = job_facts({"SLURM_MEM_PER_NODE": "64G"})
    assert facts["mem_per_node"] is None and "not a number of MB" in sources["mem_per_node"]
    assert job_facts({})[0]["mem_per_node"] is None


def test_the_plans_node_memory_make_submit_hands_the_job_is_a_fact_and_a_limit(tmp_path):
    """PYG_MEMORY_PLAN (make submit's figures, as figures_text writes them) holds the node's memory the plan weighed
    (sinfo's): the run reads it, and it binds where it is the smallest; unknown to the plan ('-'), it is no limit."""
    planned = 2000 * 2**20
    text = figures_text(MemoryFigures(rank_peak=GIB, node_memory=planned, shared_graph=0))
    facts, sources = job_facts({"PYG_MEMORY_PLAN": text})
    assert facts["planned_node_memory"] == planned and sources["planned_node_memory"] == "PYG_MEMORY_PLAN"
    facts, sources = job_facts({"PYG_MEMORY_PLAN": figures_text(MemoryFigures(rank_peak=GIB))})
    assert facts["planned_node_memory"] is None and "unknown" in sources["planned_node_memory"]
    assert job_facts({})[0]["planned_node_memory"] is None
    source = "the node's memory by sinfo, as make submit's plan weighed it (PYG_MEMORY_PLAN)"
    none = tmp_path / "none"
    assert node_limit(None, none, tmp_path, physical=24 * GIB, planned=planned) == (planned, source)
    assert node_limit(1000, none, tmp_path, physical=24 * GIB, planned=planned)[0] == 1000 * 2**20  # --mem smaller
    assert node_limit(None, none, tmp_path, physical=GIB, planned=planned) == (GIB, "the node's memory")


# ---- the plan's figures ------------------------------------------------------------------------------

def wide_plan(nodes: int, ranks: int, gpus: bool = False, overrides=WIDE):
    config = load_config("synthetic", list(overrides))
    loaded = graph_size(config)
    return config, loaded, make_plan(config, loaded, nodes, ranks, gpus=gpus)


def test_a_typed_graph_s_shard_is_balanced_per_type():
    config = load_config("igbh-rgat", ["data.name=igbh-full"])
    size = graph_size(config)
    counts = size.meta.counts
    assert shard_rows(size, 8) == sum(-(-c // 8) for c in counts)
    assert shard_rows(size, 1) == size.nodes
    assert shard_rows(replace(size, meta=None), 3) == -(-size.nodes // 3)


def test_sharded_over_one_node_is_the_copy_and_more_nodes_hold_less():
    config, loaded, plan = wide_plan(1, 2)
    one = sharded_rows(plan, config, loaded, 1)
    assert one["peak"] == plan.node_peak  # the same terms: one node's shard is the whole copy
    assert not any(k.startswith("fetch buffers") and v for k, v in one.items())  # nothing is remote
    peaks = [sharded_rows(plan, config, loaded, n)["peak"] for n in (1, 2, 4, 8)]
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < peaks[0]
    two = sharded_rows(plan, config, loaded, 2)
    fetch = next(v for k, v in two.items() if k.startswith("fetch buffers"))
    assert fetch > 0  # on the CPU the rows come through host memory


def test_on_gpus_the_fetch_is_on_the_gpu_and_the_host_batches_hold_no_features():
    config, loaded, plan = wide_plan(2, 8, gpus=True)
    rows = sharded_rows(plan, config, loaded, 2)
    assert rows[FETCH_ON_GPU] > 0
    assert not next(v for k, v in rows.items() if k.startswith("fetch buffers:"))


def test_the_run_and_the_plan_take_the_same_layout_from_the_same_figures(tmp_path):
    """The CLI weighs sinfo's (here --node-memory) figure, the run its own limit: at the same limit they give the
    same layout and the same words, from the same plan."""
    config, loaded, plan = wide_plan(2, 4)
    layout_of(plan, config, loaded, None, "unknown")
    copy, sharded = plan.node_peak, plan.rows[SHARDED]["peak"]
    assert sharded < copy
    limit_gib = round((copy + sharded) / 2 / GIB, 2)
    done = subprocess.run([sys.executable, "-m", "train", "plan", "--config", "synthetic", "--nodes", "2", "--gpus",
                           "4", "--cpu", "--node-memory", str(limit_gib), "--", *WIDE], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/bin"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = next(line for line in done.stdout.splitlines() if line.startswith("data.features: "))
    ran = run_layout(config, loaded, 2, 4, gpus=False, limit=int(limit_gib * GIB), source="--node-memory")
    assert ran.layout == "sharded" and printed == f"data.features: {ran.reason}"
    assert "per node, a copy of the features on each (node)" in done.stdout
    assert "per node, sharded over 2 node(s) (sharded)" in done.stdout
    # a limit above the copy keeps it, in the run as in the plan
    assert run_layout(config, loaded, 2, 4, gpus=False, limit=copy, source="x").layout == "node"


def test_the_job_s_mem_binds_the_plan_as_it_binds_the_run(tmp_path):
    """MEM (the job's --mem) below a node's memory is the limit the plan weighs, as SLURM_MEM_PER_NODE is the run's:
    both take the same layout, from the same figures."""
    config, loaded, plan = wide_plan(2, 4)
    layout_of(plan, config, loaded, None, "unknown")
    mem_mb = int((plan.node_peak + plan.rows[SHARDED]["peak"]) / 2 / 2**20)
    done = subprocess.run([sys.executable, "-m", "train", "plan", "--config", "synthetic", "--nodes", "2", "--gpus",
                           "4", "--cpu", "--node-memory", "512", "--mem-mb", str(mem_mb), "--", *WIDE], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "PATH": "/bin"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{mem_mb / 1024:,.1f} GiB  (MEM: the job's --mem)" in done.stdout
    limit, source = node_limit(mem_mb, tmp_path / "no-cgroup", tmp_path, physical=512 * GIB)
    assert (limit, source) == (mem_mb * 2**20, "SLURM's --mem (SLURM_MEM_PER_NODE)")
    ran = run_layout(config, loaded, 2, 4, gpus=False, limit=limit, source=source)
    printed = next(line for line in done.stdout.splitlines() if line.startswith("data.features: "))
    assert ran.layout == "sharded" and printed == f"data.features: {ran.reason}".replace(source, "MEM: the job's --mem")


def test_a_running_node_takes_the_layout_from_its_own_job_and_limit():
    """node_layout: the job's shape from its DistEnv, its --mem from SLURM_MEM_PER_NODE (here below the copy's
    need, so below any node's memory too), the same answer as the plan at that limit."""
    config, loaded, plan = wide_plan(2, 4)
    layout_of(plan, config, loaded, None, "unknown")
    mem_mb = int((plan.node_peak + plan.rows[SHARDED]["peak"]) / 2 / 2**20)
    env = resolve({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0",
                   "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
                   "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
                   "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
                   "MASTER_ADDR": "n1", "MASTER_PORT": "29500", "SLURM_MEM_PER_NODE": str(mem_mb)})
    assert (env.num_nodes, env.world_size, env.mem_per_node) == (2, 4, mem_mb)
    choice = node_layout(config, env, gpus=False)
    limit, source = node_limit(mem_mb)  # this machine's cgroup, were it smaller still, would bind instead
    assert limit <= mem_mb * 2**20
    assert choice.layout == "sharded" and f"the node's limit is {limit / GIB:,.1f} GiB ({source})" in choice.reason


def test_a_running_node_without_mem_weighs_the_node_memory_the_plan_weighed():
    """No --mem and no cgroup, a node that declares less memory to SLURM (sinfo) than it has: make submit's plan
    shards from sinfo's figure, and so does the run, from the same figure in PYG_MEMORY_PLAN (without it, the run
    would weigh the physical memory, keep a copy per node and need more than the node's declared memory)."""
    config, loaded, plan = wide_plan(2, 4)
    layout_of(plan, config, loaded, None, "unknown")
    declared = int((plan.node_peak + plan.rows[SHARDED]["peak"]) / 2)
    planned = layout_of(plan, config, loaded, declared, "sinfo: smallest node")
    env = resolve({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0",
                   "SLURM_NODEID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
                   "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_NNODES": "2",
                   "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
                   "MASTER_ADDR": "n1", "MASTER_PORT": "29500",
                   "PYG_MEMORY_PLAN": figures_text(MemoryFigures(rank_peak=plan.rank_peak, node_memory=declared))})
    choice = node_layout(config, env, gpus=False)
    limit, source = node_limit(None, planned=declared)  # this machine's cgroup, were it smaller still, would bind
    assert limit <= declared
    assert planned.layout == choice.layout == "sharded"
    assert f"the node's limit is {limit / GIB:,.1f} GiB ({source})" in choice.reason


def test_what_is_needed_is_the_fewest_nodes_that_fit_sharded():
    config, loaded, plan = wide_plan(1, 2)
    sharded_at = {n: sharded_rows(plan, config, loaded, n)["peak"] for n in (2, 3, 4)}
    limit = sharded_at[3] + 1
    assert sharded_at[2] > limit >= sharded_at[3]
    assert nodes_needed(plan, config, loaded, limit) == 3
    assert nodes_needed(plan, config, loaded, 1) is None  # the runtimes alone need more than a byte


# ---- make submit DRY_RUN=1, IGBH-full on 2 TiB nodes --------------------------------------------------

def submit_igbh(tmp_path: Path, nodes: int, *knobs: str) -> subprocess.CompletedProcess:
    """`make submit DRY_RUN=1` of IGBH-full in float16 on 8 nodes of 8 GPUs and 2 TiB each (a stand-in sinfo)."""
    bindir = tmp_path / f"bin{nodes}"
    standin_bin.install(bindir, "sinfo")  # answers from bindir/sinfo.table
    standin_bin.install(bindir, "sbatch")
    # The GPUs' type is not named, so their memory is unknown: this test is the nodes' verdict. The GPU's own
    # terms for MLPerf's R-GAT setting are upper bounds (labelled so: sampled nodes not deduplicated) that exceed an
    # 80 GB GPU; tests/test_plan_advice.py plans it on one.
    (bindir / "sinfo.table").write_text("".join(f"big*|n{i}|128|gpu:8|{2 * 2**20}|2-00:00:00\n"
                                                for i in range(1, 9)))
    folder = tmp_path / "igbh"  # the files are not read: igbh-full is planned from its published sizes
    folder.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MAKE"))}
    env.update(PATH=f"{bindir}:{env['PATH']}", STANDIN_DIR=str(bindir), STANDIN_RECORD=str(tmp_path / "sbatch"))
    args = f"data.name=igbh-full data.feature_dtype=float16 data.path={folder}"
    return subprocess.run(["make", "--no-print-directory", "submit", "DRY_RUN=1", "CONFIG=igbh-rgat", f"ARGS={args}",
                           f"NODES={nodes}", f"GPUS={8 * nodes}", "IMAGE=none", *knobs], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_igbh_full_fits_2_tib_nodes_sharded_over_8_and_fits_no_one_node(tmp_path):
    """On one node the job's MEM (its cgroup's limit) binds below sinfo's memory, as it binds the run."""
    eight, one = map_side_by_side(lambda args: submit_igbh(tmp_path, *args), [(8,), (1, "MEM=1800G")])
    assert eight.returncode == 0, eight.stderr
    assert "data.features: sharded: the features (2,087.8 GiB) and structure" in eight.stdout
    assert "the node's limit is 2,048.0 GiB (sinfo -p big: smallest node); sharded over 8 nodes" in eight.stdout
    copy = next(line for line in eight.stdout.splitlines() if "a copy of the features on each (node)" in line)
    sharded = next(line for line in eight.stdout.splitlines() if "sharded over 8 node(s) (sharded)" in line)
    assert float(copy.split()[-2].replace(",", "")) > 2048 >= float(sharded.split()[-2].replace(",", ""))
    assert "# DRY_RUN=1: nothing submitted" in eight.stdout
    assert one.returncode == 2, one.stdout
    assert "at its peak but has 1,800.0 GiB (MEM: the job's --mem), on one node, where sharding the features " \
        "changes nothing" in one.stderr
    needed, ranks = map(int, re.search(r"What would fit \(each planned as this job is\): NODES=(\d+) GPUS=(\d+)",
                                       one.stderr).groups())
    assert needed > 8 and ranks == 8 * needed  # more than on 2,048 GiB nodes, as many ranks a node
    assert "Traceback" not in one.stderr and not (tmp_path / "sbatch").exists()
