"""data.features=sharded through `make submit` on the real SLURM test cluster (issue 40's "Done when").

Bare mode, CPU-only, gloo, as tests/test_jobs_slurm.py submits. Two jobs of 2 nodes x 2 ranks run side by side on
the session's four nodes, on one synthetic graph of 1024-wide features (GRAPH):
- a copy of the features per node (data.features=node), which fits a test node (RealMemory=2000) by the plan;
- the default data.features=auto with MEM (the job's --mem) below what a copy per node needs: the run decides
  sharded from its own limit (SLURM_MEM_PER_NODE, train/cluster/memory_limit.py) and says why, as the plan that
  `make submit` made for it did; the same request with data.features=node is refused by the plan.
Both end with the same weights. While they run, each training process's memory is read from /proc
(tests/harness/job_memory.py): each node's feature segment is its shard, and no process maps or holds the whole
matrix. The test cluster's nodes have no memory cgroup (task/none and CR_Core, tests/harness/slurm_conf.py), so
--mem is not enforced here: what is tested is the decision the run makes from the job's own limit, and what the
sharded run then holds, measured.

Then a synthetic IGBH (IGBH's folder layout, four types, 1024-wide features, its relations and degree ratios,
tests/harness/igbh_files.py) trains sharded on 2 nodes with the shipped configs/igbh-rgat.yaml to its end, at
1/200,000 of IGBH-full (IGBH_FRACTION says why not 1/1000).

And the rows fetched equal the replicated gather bit for bit on 2, 3 and 4 nodes, for a homogeneous and a typed graph:
tests/harness/workers/sharded_rows.py (the check of tests/test_sharded_features.py, from tests/harness/sharded_rows.py)
as one rank per node in three srun steps of one `salloc -N4`, each rank joining its group by the package's own
rendezvous from SLURM's variables, nothing exported by hand.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.igbh_files import write_igbh_scaled
from tests.harness.job_memory import ProcessMemory, mib, ranks, segment_pattern, watch_memory, workers
from tests.harness.localjob import final_summary
from tests.harness.sharded_rows import NUM_NODES
from tests.harness.slurm_conf import TERMINAL_STATES
from train.cluster.distenv import TORCHRUN_VARS, port_for_job

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ["tests.harness.conftest_slurm"]
pytestmark = pytest.mark.slurm

BARE = ["IMAGE=none", "GPUS_PER_TASK=0", "CPUS_PER_TASK=1"]
JOB_TIMEOUT = 300  # a job takes about 40 s beside the other on this 2-core machine
NODES = 2
# 60,000 nodes x 1024 float32 features (234 MiB): by the plan a copy per node needs 1.7 GiB at a node's peak, within
# a test node's 2000 MB, and sharded 1.3 GiB: MEM_MB lies between. One epoch of a few steps (the weights after them)
# and the exact evaluation, whose first layer reads every row (the others' fetched where sharded; with a copy per node
# it touches the whole copy); seconds enough to read the processes' memory.
ROWS, WIDTH = 60_000, 1024
FEATURES_BYTES = ROWS * WIDTH * 4
SHARD_BYTES = -(-ROWS // NODES) * WIDTH * 4
AT_MOST = (1 / NODES + 0.05) * FEATURES_BYTES  # the bound on a node's feature segment
GRAPH = [f"data.num_nodes={ROWS}", f"data.num_features={WIDTH}", "trainer.epochs=1", "trainer.max_steps_per_epoch=6"]
MEM_MB = 1400
REQUEST = ["NODES=2", "GPUS=4", *BARE, "CONFIG=tiny"]
SAME_WEIGHTS = "0: final weights {} (sha256 {}, the same on all {} ranks)"
STRIPED = "data.features=sharded: features striped over 2 node(s)"
# 1/200,000 of IGBH-full: 2,738 nodes (1,347 papers, 1,386 authors, 1 institute, 4 fields), 38,138 directed edges,
# 11 MB of features. The shipped config's batch (1,024 seeds, fanouts [15, 10, 5], R-GAT of 3 x 512 with 4 heads
# over 7 relations) makes the plan count 0.8 GiB a rank at this size and 1.6 GiB at 1/100,000, whose node peak
# (2.1 GiB) make submit refuses on a test node of 2000 MB; at 1/1000 (547k nodes, 2.2 GB of features) a batch holds
# gigabytes and a step takes minutes of this CPU.
IGBH_FRACTION = 1 / 200_000


def make(cluster, *args: str) -> subprocess.CompletedProcess:
    """`make ARGS` in the project, as a user on the cluster's login node types it."""
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=cluster.env, capture_output=True,
                          text=True, timeout=180)


def submit(cluster, logs: Path, request: list[str], *args: str) -> dict:
    """`make submit` of `request` and `args`: its job id, log and printed plan."""
    p = make(cluster, "submit", *request, f"LOG_DIR={logs}", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return {"job": re.search(r"^Submitted job (\d+) ", p.stdout, re.M).group(1), "submitted": p.stdout,
            "log": Path(re.search(r"^log: +(\S+)$", p.stdout, re.M).group(1))}


def run_watched(cluster, jobs: dict[str, dict], request) -> None:
    """Read the jobs' processes' memory until every job ends; then add each one's state, log and memory
    (pid -> ProcessMemory), and show them in the test log."""
    started = time.monotonic()
    ids = [info["job"] for info in jobs.values()]
    memory = watch_memory({job: (lambda job=job: cluster.job_processes(job)) for job in ids},
                          lambda: all(cluster.job_state(job) in TERMINAL_STATES for job in ids),
                          {job: segment_pattern(job, port_for_job(job), os.getuid()) for job in ids},
                          timeout=JOB_TIMEOUT)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    for name, info in jobs.items():
        info["state"] = cluster.wait_job(info["job"], timeout=60)
        info["text"] = info["log"].read_text()
        info["memory"] = memory[info["job"]]
        with capman.global_and_fixture_disabled():
            processes = ranks(info["memory"])
            print(f"\n[sharded] {name}: job {info['job']} {info['state']} after {time.monotonic() - started:.0f} s, "
                  f"{sum(p.cpu_seconds for p in processes.values()):.0f} CPU-s in its training processes", flush=True)
            lines = [figures(p) for _rank, p in sorted(processes.items())]
            lines += [f"rank {rank}'s {len(spawned)} worker process(es): peak RSS at most "
                      f"{mib(max(p.peak_rss for p in spawned))}, PSS at most {mib(max(p.pss for p in spawned))}"
                      for rank in sorted(processes) if (spawned := workers(info["memory"], rank))]
            lines += [ln for ln in info["text"].splitlines() if "data.features" in ln or "final weights" in ln]
            print("\n".join(f"[sharded]   {line}" for line in lines), flush=True)


def figures(p: ProcessMemory) -> str:
    segment = ", ".join(f"{name} {mib(size)}" for name, size in sorted(p.segment_files.items()) if size >= 2**20)
    return (f"rank {p.rank} on {p.node}: peak RSS {mib(p.peak_rss)}, PSS "
            f"{mib(p.pss)}, anon {mib(p.anon)}, shmem {mib(p.shmem)}, largest anonymous mapping "
            f"{mib(p.largest_anonymous)}, maps {segment or 'no segment'}; {p.cpu_seconds:.1f} CPU-s with its workers'")


@pytest.fixture(scope="module")
def two_layouts(slurm_cluster, tmp_path_factory, request) -> dict:
    """The copy-per-node job and the MEM-limited auto job side by side, their processes' memory read as they run."""
    tmp = tmp_path_factory.mktemp("sharded-slurm")
    jobs = {}
    for name, extra, mem in (("node", ["data.features=node"], []), ("auto", [], [f"MEM={MEM_MB}M"])):
        out = tmp / name
        # held until both are in the queue: the first could otherwise end before the watch starts (CI, 34dfa63)
        jobs[name] = submit(slurm_cluster, tmp / name / "logs", [*REQUEST, *mem, "SBATCH_ARGS=--hold"],
                            f"ARGS={' '.join([*GRAPH, *extra, f'output.dir={out}'])}")
        jobs[name]["out"] = out
    slurm_cluster.run(["scontrol", "release", *(info["job"] for info in jobs.values())], check=True)
    run_watched(slurm_cluster, jobs, request)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(f"\n[sharded] the whole feature matrix {mib(FEATURES_BYTES)}, a node's shard {mib(SHARD_BYTES)}, the "
              f"bound 1/{NODES} + 5 % {mib(AT_MOST)}; per node, the sum of its ranks' largest PSS:", flush=True)
        for name, info in jobs.items():
            nodes: dict[str, int] = {}
            for p in ranks(info["memory"]).values():
                nodes[p.node] = nodes.get(p.node, 0) + p.pss
            print(f"[sharded]   {name}: " + ", ".join(f"{node} {mib(pss)}" for node, pss in sorted(nodes.items())),
                  flush=True)
    return jobs


def test_sharded_job_ends_with_the_weights_of_a_copy_per_node(two_layouts):
    """2 nodes x 2 ranks: the sharded job (auto, decided sharded) and the copy-per-node job end with the same weights
    (sha256) and the same figures."""
    summaries = {}
    for name, info in two_layouts.items():
        assert info["state"] == "COMPLETED", info["text"][-3000:]
        summaries[name] = summary = final_summary(info["out"])  # every rank ended with the same weights
        assert SAME_WEIGHTS.format(info["out"] / "model.pt", summary["weights_sha256"][:16], 4) in info["text"]
    assert STRIPED in two_layouts["auto"]["text"] and STRIPED not in two_layouts["node"]["text"]
    node, sharded = summaries["node"], summaries["auto"]
    assert sharded["weights_sha256"] == node["weights_sha256"]
    assert sharded["world_size"] == node["world_size"] == 4
    assert (sharded["best_val_acc"], sharded["final_test_acc"]) == (node["best_val_acc"], node["final_test_acc"])
    assert sharded["final_test_acc"] is not None


def test_auto_under_the_jobs_mem_shards_and_says_why_where_the_plan_refuses_a_copy(two_layouts, slurm_cluster,
                                                                                    tmp_path):
    """MEM below a copy per node's need: the plan make submit printed decided sharded from the job's --mem, and so
    did the run, from SLURM_MEM_PER_NODE, with the same figures; the same request with data.features=node is refused
    by the plan (DRY_RUN=1), naming the need, the limit and that sharded fits."""
    info = two_layouts["auto"]
    limit = f"the node's limit is {MEM_MB / 1024:.1f} GiB"
    planned = re.search(rf"^data\.features: sharded: .* need ([\d.]+) GiB per node with a copy on each; {limit} "
                        r"\(MEM: the job's --mem\); sharded over 2 nodes a node needs ([\d.]+) GiB$",
                        info["submitted"], re.M)
    assert planned, info["submitted"]
    copy, shard = (float(x) for x in planned.groups())
    assert shard <= MEM_MB / 1024 < copy
    ran = (f"0: data.features: sharded: the features (0.2 GiB) and structure (0.0 GiB) need {copy} GiB per node "
           f"with a copy on each; {limit} (SLURM's --mem (SLURM_MEM_PER_NODE)); sharded over 2 nodes a node needs "
           f"{shard} GiB")
    assert ran in info["text"], info["text"][-3000:]
    args = " ".join([*GRAPH, "data.features=node", f"output.dir={tmp_path / 'run'}"])
    refused = make(slurm_cluster, "submit", *REQUEST, f"MEM={MEM_MB}M", "DRY_RUN=1", f"LOG_DIR={tmp_path}",
                   f"ARGS={args}")
    assert refused.returncode != 0, refused.stdout
    text = refused.stdout + refused.stderr
    said = " ".join(text.split())
    assert f"a node needs {copy} GiB at its peak but has {MEM_MB / 1024:.1f} GiB (MEM: the job's --mem), with a " \
           "copy of the features on each: every node holds the whole graph, so more nodes do not help " \
           f"({shard} GiB sharded over 2 node(s))" in said, text
    assert "What would fit (each planned as this job is): data.features=sharded" in said, text  # the plan's advice
    assert "Traceback" not in text and not (tmp_path / "run").exists()


def test_each_node_holds_its_share_of_the_features_and_no_process_the_whole_matrix(two_layouts):
    """Read from /proc while the jobs ran: each node's feature segment (x.bin of the job's node-shared folder, as its
    ranks map it) is at most 1/N + 5 % of the whole matrix, and the two hold every row; no process maps a file or an
    anonymous region of the whole matrix's size, nor holds its pages; each peaks (VmHWM) below the same rank of the
    copy-per-node job by at least half of what a node no longer holds. The copy-per-node job shows the measures
    see a whole matrix where there is one."""
    sharded, copy = ranks(two_layouts["auto"]["memory"]), ranks(two_layouts["node"]["memory"])
    assert sorted(sharded) == sorted(copy) == [0, 1, 2, 3], (sharded, copy)
    folders = {}
    for rank, p in sharded.items():
        assert len(p.segment_folders) == 1 and "x.bin" in p.segment_files, figures(p)
        folders.setdefault(p.node, set()).update(p.segment_folders)
        assert p.segment_files["x.bin"] <= AT_MOST, figures(p)
        structure = sum(size for name, size in p.segment_files.items() if name != "x.bin")
        assert structure < 0.05 * FEATURES_BYTES, figures(p)
        assert p.shmem <= AT_MOST + structure, figures(p)  # of node-shared pages, its node's share and structure
        assert p.largest_anonymous <= AT_MOST, figures(p)
        assert p.peak_rss + (FEATURES_BYTES - SHARD_BYTES) / 2 <= copy[rank].peak_rss, \
            f"sharded {figures(p)}; a copy per node {figures(copy[rank])}"
    # one segment a node, mapped by both of its ranks; between them every row
    assert [len(names) for names in folders.values()] == [1, 1] and len(set.union(*folders.values())) == 2, folders
    assert sum(p.segment_files["x.bin"] for p in sharded.values()) / 2 >= FEATURES_BYTES
    assert all(p.segment_files["x.bin"] >= FEATURES_BYTES for p in copy.values())
    # The control: where a loader holds the whole matrix, the measure shows it. The kernel's high-water mark, not the
    # 0.2 s polls of the mappings, which a busy machine's fast load can slip between: the copy's loading rank peaks
    # above the sharded one's by more than the rows it alone read.
    assert max(p.peak_rss for p in copy.values()) >= max(p.peak_rss for p in sharded.values()) + \
        FEATURES_BYTES - SHARD_BYTES, (figures(max(copy.values(), key=lambda p: p.peak_rss)),
                                       figures(max(sharded.values(), key=lambda p: p.peak_rss)))


def test_a_synthetic_igbh_trains_sharded_on_two_nodes_with_the_shipped_rgat_config(slurm_cluster, tmp_path,
                                                                                   request):
    """IGBH's layout at IGBH_FRACTION of IGBH-full (four types, 1024-wide features, its relations and degree ratios;
    the fraction and why: IGBH_FRACTION), `make submit CONFIG=igbh-rgat NODES=2 GPUS=2` with data.features=sharded
    and nothing else changed: both epochs, their evaluations and checkpoints, to the end. About 25 s, 16 CPU-s in its
    ranks and their loader workers (2-core CPU): not `long`."""
    folder = tmp_path / "igbh"
    counts = write_igbh_scaled(folder, IGBH_FRACTION)
    out = tmp_path / "run"
    jobs = {"igbh": submit(slurm_cluster, tmp_path / "logs", ["NODES=2", "GPUS=2", *BARE, "CONFIG=igbh-rgat"],
                           f"ARGS=data.path={folder} data.features=sharded output.dir={out}")}
    run_watched(slurm_cluster, jobs, request)
    info = jobs["igbh"]
    assert info["state"] == "COMPLETED", info["text"][-3000:]
    text = info["text"]
    assert f"0: graph igbh: {sum(counts.values()):,} nodes, " in text and " 1024 features, 19 classes" in text
    assert f"{STRIPED} (row id on node id % 2), {sum(counts.values())} rows (4 node types, each balanced on its own)" \
        in text, text[-3000:]
    summary = final_summary(out)
    assert summary["dataset"] == "igbh" and summary["model"] == "hetero-gat" and summary["world_size"] == 2
    assert summary["epochs"] == 2 and summary["final_test_acc"] is not None  # the config's epochs, all of them
    assert SAME_WEIGHTS.format(out / "model.pt", summary["weights_sha256"][:16], 2) in text


STEP_NODES = (2, 3, 4)  # one rank on each node; NUM_NODES rows are uneven over each (3 the uneven case)
ROWS_TIMEOUT = 180  # the allocation and its three steps take about 30 s on this 2-core machine


@pytest.fixture(scope="module")
def fetched_over_srun(slurm_cluster, tmp_path_factory, request) -> dict:
    """`salloc -N4` running three srun steps in turn, of 2, 3 and 4 nodes, one rank per node
    (tests/harness/workers/sharded_rows.py): {"job", "nodes": the allocation's, "text": salloc's output, "steps":
    {nodes: [each rank's result, by rank]}}."""
    tmp = tmp_path_factory.mktemp("sharded-rows")
    outs = {nodes: tmp / f"{nodes}-nodes" for nodes in STEP_NODES}
    steps = []
    for nodes, out in outs.items():
        out.mkdir()
        steps.append(shlex.join(["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                                 "--cpus-per-task=1", sys.executable, "-m", "tests.harness.workers.sharded_rows",
                                 str(out)]))
    started = time.monotonic()
    r = slurm_cluster.run(["salloc", f"--nodes={max(STEP_NODES)}", f"--ntasks={max(STEP_NODES)}",
                           "--cpus-per-task=1", "bash", "-c", " && ".join(steps)], cwd=ROOT, timeout=ROWS_TIMEOUT)
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    job = re.search(r"Granted job allocation (\d+)", r.stderr).group(1)
    found = {"job": job, "nodes": slurm_cluster.job_nodes(job), "text": text,
             "steps": {nodes: [json.loads((out / f"{rank}.json").read_text()) for rank in range(nodes)]
                       for nodes, out in outs.items()}}
    cpu = sum(r["cpu_seconds"] for results in found["steps"].values() for r in results)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(f"\n[sharded] salloc -N{max(STEP_NODES)}, srun steps of {', '.join(map(str, STEP_NODES))} nodes: job "
              f"{job} after {time.monotonic() - started:.1f} s, {cpu:.0f} CPU-s in its ranks", flush=True)
        for nodes, results in found["steps"].items():
            print(f"[sharded]   {nodes} nodes: " + "; ".join(
                f"rank {r['env']['rank']} on {r['host']} holds {r['homogeneous']['shard_rows']} + "
                f"{r['typed']['shard_rows']} typed rows" for r in results), flush=True)
    return found


@pytest.mark.parametrize("case", ["homogeneous", "typed"])
@pytest.mark.parametrize("nodes", STEP_NODES)
def test_rows_fetched_over_srun_equal_the_replicated_gather_bit_for_bit(fetched_over_srun, nodes, case):
    """Each rank's fetches (a different number on each, through PyG's FeatureStore door too) equal the replicated
    gather bit for bit; the node of part p holds its striped rows (row id % N == p; of each node type on its own where
    typed), together every row once."""
    results = fetched_over_srun["steps"][nodes]
    assert all(r[case]["same"] for r in results), results
    assert sum(r[case]["asked"] for r in results) > 0
    shards = [r[case]["shard_rows"] for r in results]
    total = results[0][case]["size"][0]
    assert all(r[case]["size"] == results[0][case]["size"] for r in results)
    assert sum(shards) == total and max(shards) - min(shards) <= 1, shards
    if case == "homogeneous":
        assert results[0][case]["size"] == [NUM_NODES, 12]
        assert shards == [len(range(part, NUM_NODES, nodes)) for part in range(nodes)]
        assert len(set(shards)) == 2  # uneven: NUM_NODES is no multiple of the nodes


@pytest.mark.parametrize("nodes", STEP_NODES)
def test_the_srun_steps_ranks_met_by_the_packages_rendezvous_from_slurms_variables(fetched_over_srun, nodes):
    """One rank on each node of the step, gloo, placed and met by resolve() from SLURM's variables alone: the step's
    world and rank, its first node the master, the job's port (port_for_job); no torchrun variable was read."""
    results, job = fetched_over_srun["steps"][nodes], fetched_over_srun["job"]
    envs = [r["env"] for r in results]
    assert [e["rank"] for e in envs] == list(range(nodes))
    hosts = {r["host"] for r in results}
    assert len(hosts) == nodes and hosts <= set(fetched_over_srun["nodes"]), hosts
    assert all(r["backend"] == "gloo" for r in results)
    for env in envs:
        assert (env["world_size"], env["num_nodes"], env["node_rank"], env["local_world_size"]) == \
            (nodes, nodes, env["rank"], 1), env
        assert env["launcher"] == "srun step" and env["job_id"] == job, env
        assert (env["master_addr"], env["master_port"]) == (results[0]["host"], port_for_job(job)), env
        assert not set(env["sources"].values()) & set(TORCHRUN_VARS), env["sources"]
        assert env["sources"]["rank"] == "SLURM_PROCID" and env["sources"]["world_size"] == "SLURM_STEP_NUM_TASKS"
