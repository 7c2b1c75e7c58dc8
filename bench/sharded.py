"""Sharded features (data.features=sharded, issue 40): the fetch's bandwidth, training speed, remote rows per seed.

1. **Fetch bandwidth per rank**: local ranks, each posing as a node, fetch batches of random rows through their
   `ShardedFeatures` (train/graph/sharing/feature_store.py: counts, ids, rows over all_to_all_single); against the
   same bytes moved by one bare `all_to_all_single` per batch, in the same run and processes (goal: >= 0.5x).
2. **Seeds/s sharded against a copy per node**: `python -m train fit` on local ranks posing as nodes (srun's
   variables), the same config with data.features=sharded and node; the last epoch's training seeds/s (goal 0.8x).
3. **Unique remote rows per seed**: batches sampled at [15, 10, 5] and [25, 10] on a synthetic graph of
   ogbn-products' shape (`--products-scale` of its 2,449,029 nodes and average degree 50.5), the rows a rank on one
   of `--parts` nodes fetches: its batch's distinct nodes that other nodes own, per seed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.common import bench_main, emit, launch_local_ranks, machine, machine_summary, table, write_result

PRODUCTS_NODES, PRODUCTS_DEGREE = 2_449_029, 50.5


def worker(args) -> None:
    """One rank posing as node `rank`: its shard of a deterministic matrix, then timed fetches and bare exchanges."""
    import torch
    import torch.distributed as dist

    from train.graph.sharing.feature_store import ShardedFeatures
    from train.graph.sharing.ownership import Ownership
    from train.graph.sharing.row_exchange import RowExchange, fetch_group

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ownership = Ownership(world, args.rows)
    shard = torch.randn(ownership.rows_of(rank), args.features, generator=torch.Generator().manual_seed(rank))
    exchange = RowExchange(fetch_group(120, "gloo"), world, torch.device("cpu"))
    store = ShardedFeatures(shard, ownership, rank, exchange, torch.arange(world))
    generator = torch.Generator().manual_seed(100 + rank)
    batches = [torch.randint(0, args.rows, (args.batch_rows,), generator=generator) for _ in range(args.batches)]
    remote = sum(int((ownership.owner(ids) != rank).sum()) for ids in batches)
    row_bytes = args.features * 4
    timings = {"fetch": [], "all_to_all_single": []}
    for _round in range(args.rounds):
        dist.barrier()
        started = time.perf_counter()
        with store.session():
            for ids in batches:
                store.rows(ids, torch.device("cpu"))
        timings["fetch"].append(time.perf_counter() - started)
        per_peer = args.batch_rows // world  # the rows a batch asks of each other node, on average
        splits = [0 if peer == rank else per_peer for peer in range(world)]  # nothing to itself, as the fetch
        send = torch.zeros(per_peer * (world - 1), row_bytes, dtype=torch.uint8)
        recv = torch.empty_like(send)
        dist.barrier()
        started = time.perf_counter()
        for _batch in batches:
            dist.all_to_all_single(recv, send, splits, splits, group=exchange.group)
        timings["all_to_all_single"].append(time.perf_counter() - started)
    best = {name: min(times) for name, times in timings.items()}
    moved = {"fetch": remote * row_bytes, "all_to_all_single": args.batches * per_peer * (world - 1) * row_bytes}
    result = {name: moved[name] / best[name] for name in best}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, result)
    if rank == 0:
        emit({"per_rank": everyone, "remote_rows_per_batch": remote / args.batches})
    dist.destroy_process_group()


def _bandwidth(args, world: int) -> dict:
    argv = ["--worker", f"--rows={args.rows}", f"--features={args.features}", f"--batch-rows={args.batch_rows}",
            f"--batches={args.batches}", f"--rounds={args.rounds}"]
    return launch_local_ranks("bench.sharded", argv, world, timeout=args.timeout)


def _seeds_per_second(args, layout: str, world: int) -> float:
    """The last epoch's training seeds/s of `python -m train fit` on `world` local ranks posing as `world` nodes."""
    from bench.localranks import LocalRanks, srun_env
    from train.cluster.distenv import free_port

    port = free_port()
    with tempfile.TemporaryDirectory() as out:
        fit = [sys.executable, "-m", "train", "fit", "--config", "synthetic", f"data.num_nodes={args.train_nodes}",
               f"data.num_features={args.features}", "data.avg_degree=10", f"data.features={layout}",
               "trainer.epochs=2", "eval.mode=sampled", "sampler.num_neighbors=[15,10,5]",
               "model.num_layers=3", f"output.dir={out}/run"]
        with LocalRanks(fit, world, lambda rank: srun_env(rank, world, world, f"bench-{layout}", port),
                        threads=1) as ranks:
            codes = ranks.wait(args.timeout)
            if codes != [0] * world:
                raise RuntimeError(f"fit with data.features={layout} failed: {codes}\n{ranks.tail()}")
        rows = [json.loads(line) for line in Path(out, "run", "metrics.jsonl").read_text().splitlines()]
        return float([row for row in rows if "seeds_per_second" in row][-1]["seeds_per_second"])


def _remote_rows_per_seed(args) -> dict:
    """Distinct rows of other nodes per seed, in batches of 1024 seeds, on the products-shaped synthetic graph."""
    import torch

    from train.config import DataConfig
    from train.graph.datasets.loading import synthetic_graph
    from train.graph.sampling.samplers import make_node_loader
    from train.graph.sharing.ownership import Ownership
    from train.graph.typed_csc import build_csc

    nodes = int(PRODUCTS_NODES * args.products_scale)
    data = synthetic_graph(DataConfig(num_nodes=nodes, num_features=1, num_classes=47, avg_degree=PRODUCTS_DEGREE))
    csc = build_csc(data.edge_index, nodes)
    ownership = Ownership(args.parts, nodes)
    out = {}
    for fanouts in ([15, 10, 5], [25, 10]):
        seeds = torch.randperm(nodes, generator=torch.Generator().manual_seed(0))[: 1024 * args.sample_batches]
        loader = make_node_loader(data, seeds, fanouts, 1024, csc=csc, seed=0, force_torch_sampler=True)
        remote = sum(int((ownership.owner(batch.n_id) != 0).sum()) for batch in loader)
        out[str(fanouts)] = remote / seeds.numel()
    return {"nodes": nodes, "edges": int(data.edge_index.size(1)), "per_seed": out}


def run(args) -> dict:
    info = machine()
    print(f"Sharded features on {machine_summary(info)}; each local rank poses as a node, gloo")
    bandwidth = {world: _bandwidth(args, world) for world in args.worlds}
    rows = []
    for world, found in bandwidth.items():
        for rank, result in enumerate(found["per_rank"]):
            rows.append([world, rank, round(result["fetch"] / 2**20, 1), round(result["all_to_all_single"] / 2**20, 1),
                         round(result["fetch"] / result["all_to_all_single"], 2)])
    print(f"1. fetch bandwidth per rank, MiB/s of remote rows ({args.batch_rows} random rows of {args.features} "
          f"float32 a batch, best of {args.rounds}), against all_to_all_single of the same bytes (goal >= 0.5x)")
    print(table(["ranks", "rank", "fetch MiB/s", "all_to_all_single MiB/s", "ratio"], rows))
    speeds = {world: {layout: _seeds_per_second(args, layout, world) for layout in ("node", "sharded")}
              for world in args.worlds}
    print(f"2. training seeds/s (all ranks), each rank posing as a node, synthetic {args.train_nodes:,} nodes, "
          f"{args.features} features, [15, 10, 5], against a copy per node (goal >= 0.8x)")
    print(table(["nodes", "sharded seeds/s", "a copy per node seeds/s", "ratio"],
                [[world, round(found["sharded"]), round(found["node"]), round(found["sharded"] / found["node"], 2)]
                 for world, found in speeds.items()]))
    per_seed = _remote_rows_per_seed(args)
    print(f"3. unique remote rows per seed (batches of 1024, {args.parts} nodes), products-shaped synthetic graph of "
          f"{per_seed['nodes']:,} nodes and {per_seed['edges']:,} edges: "
          + ", ".join(f"{fanouts}: {value:.1f}" for fanouts, value in per_seed["per_seed"].items()))
    payload = {"params": vars(args), "bandwidth": {str(k): v for k, v in bandwidth.items()},
               "seeds_per_second": {str(k): v for k, v in speeds.items()}, "remote_rows_per_seed": per_seed}
    print(f"wrote {write_result('sharded', payload)}")
    return payload


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--worlds", type=lambda text: [int(w) for w in text.split(",")], default=[2, 4],
                        help="local ranks (nodes) of the fetch benchmark, comma-separated")
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the sharded matrix")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--batch-rows", type=int, default=20_000, help="ids a fetch asks for")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-nodes", type=int, default=50_000)
    parser.add_argument("--products-scale", type=float, default=0.1)
    parser.add_argument("--parts", type=int, default=2, help="nodes the remote rows per seed are counted for")
    parser.add_argument("--sample-batches", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=900)


def main(argv=None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    return bench_main(__doc__, add_arguments, run, argv, worker=worker)


if __name__ == "__main__":
    raise SystemExit(main())
