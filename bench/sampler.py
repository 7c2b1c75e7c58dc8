"""Sampler throughput: sampled edges per second of the project's sampler against a plain reference.

The reference is the textbook per-node loop (random.sample over each node's in-neighbours,
a dict for relabelling): what one writes without vectorizing. pyg-lib's sampler (PyG's
NeighborSampler) runs too where it is installed (NVIDIA's container). Same graph, same
seed batches (1024 random training nodes), measured in the same run.
"""

from __future__ import annotations

import argparse
import random
import time

from bench.common import bench_main, table, write_result

FANOUTS = ([25, 10], [15, 10, 5])


def reference_sample(colptr: list[int], row, seeds: list[int], fanouts: list[int], rng: random.Random) -> int:
    """Per-node Python loop; returns the number of sampled edges (the edges are built, then dropped)."""
    local = {node: i for i, node in enumerate(seeds)}
    rows: list[int] = []
    cols: list[int] = []
    frontier = seeds
    for fanout in fanouts:
        next_frontier = []
        for node in frontier:
            start, end = colptr[node], colptr[node + 1]
            degree = end - start
            picks = range(start, end) if degree <= fanout else [start + i for i in rng.sample(range(degree), fanout)]
            for position in picks:
                source = int(row[position])
                if source not in local:
                    local[source] = len(local)
                    next_frontier.append(source)
                rows.append(local[source])
                cols.append(local[node])
        frontier = next_frontier
    return len(rows)


def _time_batches(sample_one, batches) -> tuple[int, float]:
    edges, started = 0, time.perf_counter()
    for batch in batches:
        edges += sample_one(batch)
    return edges, time.perf_counter() - started


def run(args) -> dict:
    import torch
    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from train.config import DataConfig
    from train.data import synthetic_graph
    from train.sampler import TorchNeighborSampler, build_csc, have_native_sampler

    torch.set_num_threads(args.threads)
    print(f"sampler: building a synthetic graph of {args.nodes:,} nodes, average degree {args.degree} ...", flush=True)
    data = synthetic_graph(DataConfig(num_nodes=args.nodes, avg_degree=args.degree, num_features=1, num_classes=16))
    csc = build_csc(data.edge_index, data.num_nodes)
    gen = torch.Generator().manual_seed(0)
    train = data.train_idx[torch.randperm(data.train_idx.numel(), generator=gen)]
    needed = args.warmup + max(args.batches, args.reference_batches)
    batches = [train[i * args.batch_size:(i + 1) * args.batch_size] for i in range(needed)]
    colptr_list = csc[0].tolist()
    row_np = csc[1].numpy()
    structure = Data(num_nodes=data.num_nodes)

    rows, results = [], {}
    for fanouts in FANOUTS:
        key = "x".join(map(str, fanouts))
        sampler = TorchNeighborSampler(structure, fanouts, seed=1, csc=csc)

        def project(batch):
            out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=batch))
            return sum(out.num_sampled_edges)

        rng = random.Random(0)

        def reference(batch):
            return reference_sample(colptr_list, row_np, batch.tolist(), fanouts, rng)

        entries = {}
        _time_batches(project, batches[:args.warmup])
        entries["project"] = _time_batches(project, batches[args.warmup:args.warmup + args.batches])
        entries["reference (per-node Python loop)"] = _time_batches(
            reference, batches[args.warmup:args.warmup + args.reference_batches])
        if have_native_sampler():
            from torch_geometric.sampler import NeighborSampler

            native = NeighborSampler(data, fanouts)

            def pyg_lib(batch):
                return int(sum(native.sample_from_nodes(NodeSamplerInput(input_id=None, node=batch)).num_sampled_edges))

            _time_batches(pyg_lib, batches[:args.warmup])
            entries["pyg-lib (PyG NeighborSampler)"] = _time_batches(
                pyg_lib, batches[args.warmup:args.warmup + args.batches])
        rates = {name: edges / seconds for name, (edges, seconds) in entries.items()}
        reference_rate = rates["reference (per-node Python loop)"]
        results[key] = {name: {"edges": entries[name][0], "seconds": entries[name][1], "edges_per_s": rate,
                               "batches": args.batches if "reference" not in name else args.reference_batches}
                        for name, rate in rates.items()}
        results[key]["project_over_reference"] = rates["project"] / reference_rate
        if "pyg-lib (PyG NeighborSampler)" in rates:
            results[key]["project_over_pyg_lib"] = rates["project"] / rates["pyg-lib (PyG NeighborSampler)"]
        for name, rate in rates.items():
            rows.append([str(fanouts), name, results[key][name]["batches"], round(rate), round(rate / reference_rate, 1)])

    print()
    print(f"Sampler throughput: batch {args.batch_size}, graph {args.nodes:,} nodes / {data.edge_index.size(1):,} edges, "
          f"CPU, {torch.get_num_threads()} torch threads")
    print(table(["fanouts", "sampler", "batches", "edges/s", "x reference"], rows))
    if not have_native_sampler():
        print("pyg-lib / torch-sparse not installed: no native PyG sampler to compare with here.")
    for key in results:
        print(f"project/reference [{key}] = {results[key]['project_over_reference']:.1f}x"
              + (f", project/pyg-lib = {results[key]['project_over_pyg_lib']:.2f}x"
                 if "project_over_pyg_lib" in results[key] else ""))
    path = write_result("sampler", {"params": {"nodes": args.nodes, "avg_degree": args.degree,
                                                "edges": data.edge_index.size(1), "batch_size": args.batch_size,
                                                "batches": args.batches, "reference_batches": args.reference_batches,
                                                "warmup": args.warmup, "torch_threads": args.threads},
                                     "results": results})
    print(f"wrote {path}")
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--degree", type=float, default=25.0)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=20, help="timed batches of the project's (and pyg-lib's) sampler")
    parser.add_argument("--reference-batches", type=int, default=3, help="timed batches of the slow reference")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: like-for-like with the single-threaded reference, and immune to "
                             "oversubscription on a busy machine)")


def main(argv=None) -> int:
    return bench_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
