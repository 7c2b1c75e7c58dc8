"""Exact evaluation's batches: in-edges read from the CSC in chunks, against the host sampler's full neighbourhoods.

The layer-wise evaluation (train/loop/evaluate.py) computes each layer for a chunk of target nodes from their
full in-neighbourhoods. It reads them from the CSC (train/graph/sampling/in_edges.py) on the device that holds the
graph;
before, it ran the host loader with fanout -1 (a sampler per batch). Both paths run here in the same process
over every node of one synthetic graph, each batch followed by the same SAGE layer (the work the evaluation
does per batch), alternating, best of `--rounds`; they must give the same rows.
"""

from __future__ import annotations

import argparse
import time

from bench.common import bench_main, table, write_result


def _graph(args):
    from train.config import DataConfig
    from train.graph.datasets.loading import synthetic_graph
    from train.graph.sharing.shared_graph import attach_csc
    from train.graph.typed_csc import build_csc

    data = synthetic_graph(DataConfig(num_nodes=args.nodes, num_features=args.features, num_classes=4,
                                      avg_degree=args.degree))
    return attach_csc(data, build_csc(data.edge_index, data.num_nodes))


def _sampler_batches(data, nodes, batch_size):
    """The former path: full neighbourhoods from the host loader (one sampler, reused as the run did)."""
    import torch

    from train.graph.sampling.device_plan import batch_source
    from train.graph.sampling.samplers import make_node_loader, make_node_sampler
    from train.graph.sharing.shared_graph import graph_csc

    structure = batch_source(torch.device("cpu"), num_nodes=data.num_nodes)
    sampler = make_node_sampler(structure, [-1], csc=graph_csc(data))

    def batches():
        for batch in make_node_loader(structure, nodes, [-1], batch_size, sampler=sampler):
            yield batch.n_id, batch.edge_index, batch.batch_size
    return batches


def _chunk_batches(data, nodes, batch_size, hidden):
    """The evaluation's path: in-edges read from the CSC, chunked by the memory budget."""
    from train.graph.sampling.in_edges import ChunkCost, in_edge_batch, in_edge_chunks
    from train.graph.sharing.shared_graph import graph_csc

    colptr, row, _perm = graph_csc(data)
    cost = ChunkCost.for_layer(data.num_features, hidden)

    def batches():
        bounds = in_edge_chunks(colptr, nodes, batch_size, cost)
        for start, stop in zip(bounds, bounds[1:]):
            yield in_edge_batch(colptr, row, nodes[start:stop])
    return batches


def _layer_pass(batches, conv, x) -> tuple[float, "object"]:
    import torch

    started = time.perf_counter()
    outs = []
    with torch.no_grad():
        for n_id, edge_index, seeds in batches():
            h = x[n_id]
            outs.append(conv((h, h[:seeds]), edge_index))
    return time.perf_counter() - started, torch.cat(outs)


def run(args) -> dict:
    import torch
    from torch_geometric.nn import SAGEConv

    torch.manual_seed(0)
    data = _graph(args)
    nodes = torch.arange(data.num_nodes)
    conv = SAGEConv(data.num_features, args.hidden).eval()
    paths = {"sampler": _sampler_batches(data, nodes, args.eval_batch_size),
             "csc chunks": _chunk_batches(data, nodes, args.eval_batch_size, args.hidden)}
    seconds = {name: [] for name in paths}
    rows = {}
    for _ in range(args.rounds):
        for name, batches in paths.items():
            took, rows[name] = _layer_pass(batches, conv, data.x)
            seconds[name].append(took)
    same = bool(torch.allclose(rows["sampler"], rows["csc chunks"], rtol=1e-5, atol=1e-6))
    best = {name: min(times) for name, times in seconds.items()}
    ratio = best["sampler"] / best["csc chunks"]
    print(f"Exact evaluation's batches: synthetic graph {args.nodes:,} nodes, avg degree {args.degree}, "
          f"{args.features} features, one SAGE layer (hidden {args.hidden}) per batch of {args.eval_batch_size} "
          f"targets; best of {args.rounds}, {torch.get_num_threads()} torch threads")
    print(table(["path", "seconds (all nodes)"], [[name, round(s, 3)] for name, s in best.items()]))
    print(f"csc chunks: {ratio:.2f}x the sampler path's speed; same rows: {'yes' if same else 'NO'}")
    path = write_result("evalchunks", {"params": vars(args), "seconds": seconds, "best": best,
                                        "speedup": ratio, "same_rows": same})
    print(f"wrote {path}")
    return {"speedup": ratio, "same_rows": same}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--degree", type=float, default=10.0, help="average degree (edges = nodes x degree)")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--eval-batch-size", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)


def main(argv=None) -> int:
    return bench_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
