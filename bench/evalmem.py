"""Evaluation memory: peak growth per rank during one full evaluation, at 1, 2 and 4 ranks.

The project's `eval.mode=full` (train/loop/evaluate.py) keeps each rank's rows of a hidden layer and
fetches the rows a batch needs from their owners. The anchor is what PyG's layer-wise
`inference` does (its multi-GPU examples): every rank holds every row of each hidden layer (here
computed in shards with PyG's own `BasicGNN.inference_per_layer` and all-gathered, the fastest way to
get there with several ranks). Both run
in the same processes on the same shared graph and weights, and must give the same accuracy.

Per rank and mode: the peak resident set growth (VmHWM after clearing it, minus the resident set
before), with every page of the node-shared graph touched first so that reading features does not
count as evaluation memory.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench.common import bench_main, emit, gib, launch_local_ranks, table, touch, write_result

MODES = ("project", "anchor")


def graph_overrides(args) -> list[str]:
    return [f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}", f"data.num_features={args.features}",
            "data.num_classes=16", f"model.hidden={args.hidden}", f"sampler.eval_batch_size={args.eval_batch_size}",
            "eval.mode=full", "trainer.epochs=1", "output.progress=lines"]


def _status_bytes(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def anchor_evaluate(model, data, config, env, device) -> dict[str, float]:
    """Full-neighbourhood layer-wise inference with every row of each hidden layer on every rank."""
    import torch
    import torch.distributed as dist

    from train.graph.sampling.device_plan import batch_source
    from train.graph.sampling.samplers import make_node_loader
    from train.graph.seeds import rank_shard, shard_sizes
    from train.graph.sharing.shared_graph import graph_csc

    structure = batch_source(torch.device("cpu"), num_nodes=data.num_nodes)

    def layer_on(index: int, hidden, nodes):
        outs = []
        for batch in make_node_loader(structure, nodes, [-1], config.sampler.eval_batch_size, csc=graph_csc(data)):
            h = hidden[batch.n_id].to(device)
            outs.append(model.inference_per_layer(index, h, batch.edge_index.to(device), batch.batch_size).cpu())
        width = model.out_channels if index == model.num_layers - 1 else model.hidden_channels
        return torch.cat(outs) if outs else torch.empty(0, width)

    world, rank = env.world_size, env.rank
    hidden = data.x
    with torch.no_grad():
        for index in range(model.num_layers - 1):
            part = layer_on(index, hidden, rank_shard(torch.arange(data.num_nodes), rank, world))
            sizes = shard_sizes(data.num_nodes, world)
            padded = torch.zeros(max(sizes), part.size(1))
            padded[: part.size(0)] = part
            gathered = [torch.empty_like(padded) for _ in sizes]
            dist.all_gather(gathered, padded)
            hidden = torch.cat([g[:n] for g, n in zip(gathered, sizes)])
            del gathered, padded, part
        result = {}
        for split in ("val", "test"):
            nodes = rank_shard(data[f"{split}_idx"], rank, world)
            logits = layer_on(model.num_layers - 1, hidden, nodes)
            counts = torch.tensor([float((logits.argmax(-1) == data.y[nodes]).sum()), float(nodes.numel())],
                                  dtype=torch.float64)
            dist.all_reduce(counts)
            result[f"{split}_acc"] = float(counts[0] / counts[1])
    return result


def worker(args) -> None:
    """One rank: the node-shared graph, then each mode once with the peak growth measured around it."""
    import time

    import torch.distributed as dist

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import graph_csc, shared_graphs
    from train.loop.evaluate import evaluate
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph

    config = load_config("synthetic", graph_overrides(args))
    env = resolve(os.environ)
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        trainer = Trainer(config, env, device, data, out_dir=Path(out))
        step = trainer.step.eval()  # the project evaluates through the training step's module
        model = step.model
        touch([t for t in (data.x, data.y, data.edge_index, *graph_csc(data)) if t is not None])
        measured = {}
        for mode in MODES:
            dist.barrier()
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
            before = _status_bytes("VmRSS")
            started = time.perf_counter()
            if mode == "project":
                acc = evaluate(step, data, config, env, device, trainer.sampling)
            else:
                acc = anchor_evaluate(model, data, config, env, device)
            measured[mode] = {"peak_growth_bytes": _status_bytes("VmHWM") - before, "accuracy": acc,
                              "seconds": time.perf_counter() - started}
        rows: list = [None] * env.world_size
        dist.all_gather_object(rows, {"rank": env.rank, **measured})
        if env.rank == 0:
            emit({"ranks": rows})


def summarize(results: dict[int, dict]) -> dict:
    """Per world size and mode: the largest per-rank peak growth, the accuracies and the project/anchor ratio."""
    summary = {}
    for world, result in results.items():
        ranks = result["ranks"]
        entry = {mode: {"max_peak_growth_bytes_per_rank": max(r[mode]["peak_growth_bytes"] for r in ranks),
                        "accuracy": ranks[0][mode]["accuracy"],
                        "seconds": max(r[mode]["seconds"] for r in ranks)} for mode in MODES}
        entry["project_over_anchor"] = (entry["project"]["max_peak_growth_bytes_per_rank"]
                                        / max(entry["anchor"]["max_peak_growth_bytes_per_rank"], 1))
        entry["same_accuracy"] = entry["project"]["accuracy"] == entry["anchor"]["accuracy"]
        summary[world] = entry
    return summary


def run(args) -> dict:
    results = {}
    for world in args.world_sizes:
        print(f"evalmem: {world} local rank(s), full evaluation, project and anchor ...", flush=True)
        results[world] = launch_local_ranks("bench.evalmem", ["--worker", *_passthrough(args)], world,
                                            timeout=args.timeout)
    summary = summarize(results)
    rows = [[world, round(gib(s["project"]["max_peak_growth_bytes_per_rank"]), 3),
             round(gib(s["anchor"]["max_peak_growth_bytes_per_rank"]), 3), round(s["project_over_anchor"], 3),
             round(s["project"]["seconds"], 1), round(s["anchor"]["seconds"], 1),
             "yes" if s["same_accuracy"] else "NO"] for world, s in summary.items()]
    print()
    print(f"Evaluation memory: synthetic graph {args.nodes:,} nodes, avg degree {args.degree}, {args.features} "
          f"features, SAGE hidden {args.hidden}; peak growth per rank (largest rank) during one full evaluation")
    print(table(["ranks", "project GiB/rank", "anchor (every row on every rank) GiB/rank", "project/anchor",
                 "project s", "anchor s", "same accuracy"], rows))
    worlds = sorted(summary)
    falls = all(summary[a]["project"]["max_peak_growth_bytes_per_rank"]
                >= summary[b]["project"]["max_peak_growth_bytes_per_rank"] for a, b in zip(worlds, worlds[1:]))
    print(f"project's per-rank peak {'falls' if falls else 'does NOT fall'} as ranks are added "
          f"({', '.join(str(w) for w in worlds)})")
    path = write_result("evalmem", {"params": {**vars(args)}, "summary": summary, "falls_with_ranks": falls,
                                     "raw": results})
    print(f"wrote {path}")
    return {"falls_with_ranks": falls, **{f"project_over_anchor_{w}": s["project_over_anchor"]
                                          for w, s in summary.items()}}


def _passthrough(args) -> list[str]:
    return ["--nodes", str(args.nodes), "--degree", str(args.degree), "--features", str(args.features),
            "--hidden", str(args.hidden), "--eval-batch-size", str(args.eval_batch_size)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--degree", type=float, default=10.0, help="average degree (edges = nodes x degree)")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--eval-batch-size", type=int, default=8192)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--timeout", type=float, default=1200)


def main(argv=None) -> int:
    return bench_main(__doc__, add_arguments, run, argv, worker=worker)


if __name__ == "__main__":
    raise SystemExit(main())
