"""data.features=sharded (issue 40): each node holds its own feature rows, the others' fetched by all-to-all.

Real gloo ranks, each posing as a node (2, 3 and 4; and 4 ranks as 2 nodes of 2, whose node-shared segment holds
the node's rows): the rows fetched equal the replicated gather bit for bit, for a homogeneous and a typed graph, in
16 bits too, through PyG's FeatureStore door as well; ranks making different numbers of fetches end their session
together; a node's segment holds at most 1/N + 5 % of the rows; the exact and the sampled evaluations and the
feature-only model's read sharded rows and give the figures of a copy per node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.harness.gloo_ranks import GlooRanks
from tests.harness.sharded_rows import HOMOGENEOUS, NUM_NODES, fetches, homogeneous, sharded, typed_config
from train.cluster.distenv import DistEnv
from train.config import load_config


def _env(rank: int, world: int, nodes: int) -> DistEnv:
    per_node = world // nodes
    return DistEnv(world_size=world, rank=rank, local_rank=rank % per_node, local_world_size=per_node,
                   node_rank=rank // per_node, num_nodes=nodes, master_addr="127.0.0.1", master_port=1,
                   job_id=f"sharded-test-{world}-{nodes}")


def _evaluations(data, whole_data, rank: int, world: int) -> dict:
    """The figures of the exact, the sampled and the feature-only evaluation, sharded and from a copy per node."""
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.evaluate import evaluate
    from train.models import ModelStep, build_model

    cpu, out = torch.device("cpu"), {}
    cases = {"exact": ["model.num_layers=2"], "sampled": ["eval.mode=sampled", "eval.fanouts=[3,3]"],
             "mlp": ["model.name=mlp"]}
    for name, overrides in cases.items():
        config = load_config("tiny", ["sampler.eval_batch_size=50", "sampler.num_neighbors=[3,3]", *overrides])
        model = ModelStep(build_model(config.model, 12, 5, seed=3))
        env = _env(rank, world, world)
        out[name] = [evaluate(model, graph, config, env, cpu, plan_sampling(graph, config.sampler, cpu))
                     for graph in (data, whole_data)]
    return out


def _work(rank: int, world: int) -> dict:
    from train.graph.datasets.loading import load_graph
    from train.graph.form import graph_features

    result = {}
    env = _env(rank, world, world)
    data = sharded(HOMOGENEOUS, homogeneous, env)
    whole = homogeneous(HOMOGENEOUS)
    result["homogeneous"] = fetches(graph_features(data), whole.x, rank)
    result["num_nodes"] = int(data.num_nodes)
    half = sharded(HOMOGENEOUS, homogeneous, env, torch.bfloat16)
    result["bfloat16"] = fetches(graph_features(half), whole.x.bfloat16(), rank)
    typed = typed_config()
    result["typed"] = fetches(graph_features(sharded(typed, load_graph, env)), load_graph(typed).x, rank)
    result["evaluations"] = _evaluations(data, whole, rank, world)
    return result


def _share_dir(test_pid: int) -> Path:
    """The folder the node-shared segments go to (kept, to be measured), one per test process."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"pyg-sharded-test-{test_pid}"


def _node_work(rank: int, world: int) -> dict:
    """4 ranks as 2 nodes of 2: the shard written once per node into its segment, mapped by both ranks."""
    import os

    from train.graph.form import graph_features

    env = _env(rank, world, 2)
    share_dir = _share_dir(os.getppid()) / f"node{env.node_rank}"  # each node its own, as its own /dev/shm
    share_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = sharded(HOMOGENEOUS, homogeneous, env, share_dir=str(share_dir))
    found = fetches(graph_features(data), homogeneous(HOMOGENEOUS).x, rank)
    segment = {p.name: p.stat().st_size for p in share_dir.rglob("*/*.bin")}
    torch.distributed.barrier()  # the writer keeps its files until it exits (data.share_keep): all have looked
    return {**found, "segment": segment}


ranks = GlooRanks(_work, "sharded")
node_ranks = GlooRanks(_node_work, "sharded-nodes")


@pytest.mark.parametrize("world", [2, 3, pytest.param(4, marks=pytest.mark.long)])  # 4 ranks: half a minute of CPU
@pytest.mark.parametrize("case", ["homogeneous", "bfloat16", "typed"])
def test_rows_fetched_equal_the_replicated_gather_bit_for_bit(tmp_path_factory, world, case):
    results = [r[case] for r in ranks(tmp_path_factory, world)]
    assert all(r["same"] for r in results), results
    assert sum(r["asked"] for r in results) > 0
    shards = [r["shard_rows"] for r in results]
    total = NUM_NODES if case != "typed" else results[0]["size"][0]
    assert sum(shards) == total and max(shards) - min(shards) <= 1  # each node its 1/N, to a row
    assert all(r["size"][0] == total for r in results)


@pytest.mark.parametrize("world", [2, 3])
def test_the_graph_counts_every_node_though_it_holds_a_share_of_the_rows(tmp_path_factory, world):
    assert [r["num_nodes"] for r in ranks(tmp_path_factory, world)] == [NUM_NODES] * world


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case", ["exact", "sampled", "mlp"])
def test_evaluations_read_sharded_rows_and_give_the_figures_of_a_copy_per_node(tmp_path_factory, world, case):
    for result in ranks(tmp_path_factory, world):
        sharded, per_node = result["evaluations"][case]
        assert sharded == per_node


@pytest.mark.long  # 4 ranks: half a minute of CPU
def test_each_nodes_segment_holds_its_share_of_the_rows(tmp_path_factory):
    import os
    import shutil

    try:
        results = node_ranks(tmp_path_factory, 4)
    finally:
        shutil.rmtree(_share_dir(os.getpid()), ignore_errors=True)
    assert all(r["same"] for r in results)
    whole_bytes = NUM_NODES * 12 * 4
    for result in results:
        x_bytes = result["segment"]["x.bin"]
        assert x_bytes <= whole_bytes * (1 / 2 + 0.05), result["segment"]
        assert result["shard_rows"] in (NUM_NODES // 2, NUM_NODES // 2 + 1)


def _lost_work(rank: int, world: int, port: int, out_dir: str) -> None:
    """Rank 1 leaves without a word after one fetch; rank 0 fetches again (then answers on the exchange's thread):
    both raise promptly, where the session's close re-raises what the answering thread met."""
    import json
    import os
    import time

    from tests.harness.gloo_ranks import join_gloo
    from train.graph.form import graph_features

    join_gloo(rank, world, port)
    store = graph_features(sharded(HOMOGENEOUS, homogeneous, _env(rank, world, world)))
    ids = torch.arange(20)
    found = {}
    for how in ("fetch", "answer"):
        started = time.monotonic()
        try:
            with store.session():
                store.rows(ids, torch.device("cpu"))
                if rank == 1 and how == "answer":
                    os._exit(0)  # lost: no error posted, no goodbye
                if how == "fetch":
                    continue
                store.release()
        except RuntimeError as error:
            found[how] = {"error": str(error)[:300], "seconds": time.monotonic() - started}
    (Path(out_dir) / f"{rank}.json").write_text(json.dumps(found))


def test_a_rank_lost_mid_session_fails_the_others_fetch_promptly(tmp_path):
    import json

    import torch.multiprocessing as mp

    from train.cluster.distenv import free_port

    mp.start_processes(_lost_work, args=(2, free_port(), str(tmp_path)), nprocs=2, start_method="spawn")
    found = json.loads((tmp_path / "0.json").read_text())
    assert "fetch" not in found  # the first session ended on both ranks
    assert found["answer"]["seconds"] < 30, found  # gloo sees the peer's connection close; else the group's timeout


def _gpu_work(rank: int, world: int) -> dict:
    """Rows fetched onto the GPU (the batch's device): the node's own through pinned memory, the others' over the
    exchange (gloo here; NCCL where the run's backend is), equal to the replicated gather made on the GPU."""
    from train.graph.form import graph_features

    store = graph_features(sharded(HOMOGENEOUS, homogeneous, _env(rank, world, world)))
    whole = homogeneous(HOMOGENEOUS).x.cuda()
    ids = torch.randperm(NUM_NODES, generator=torch.Generator().manual_seed(rank))[:100].cuda()
    with store.session():
        rows = store.rows(ids, torch.device("cuda"))
    return {"same": bool(rows.is_cuda and torch.equal(rows, whole[ids]))}


gpu_ranks = GlooRanks(_gpu_work, "sharded-gpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: rows fetched onto the batch's device")
def test_rows_are_fetched_onto_the_gpu(tmp_path_factory):
    assert all(r["same"] for r in gpu_ranks(tmp_path_factory, 2))


@pytest.mark.parametrize("damage", ["missing", "short"])
def test_a_shard_file_missing_or_of_another_size_is_refused_naming_node_and_file(tmp_path, damage):
    from train.errors import UserError
    from train.graph.sharing.shared_graph import map_tensors, write_tensors

    shard = torch.randn(40, 12)
    write_tensors(tmp_path, {"x": shard, "y": torch.zeros(80, dtype=torch.long)}, {})
    assert torch.equal(map_tensors(tmp_path, node=1)["x"], shard)
    path = tmp_path / "x.bin"
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-48])  # a row short
    with pytest.raises(UserError) as refused:
        map_tensors(tmp_path, node=1)
    said = str(refused.value)
    assert said.startswith(f"node 1: {path} ") and ("missing" in said if damage == "missing" else
                                                    "holds 1872 bytes" in said and "1920 bytes" in said), said
