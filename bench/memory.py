"""Memory and start-up: N local ranks holding one synthetic graph, data.share=node against process.

Each mode starts N real processes as the local ranks of one node. Each loads the graph the
way training does (`train.loop.run.obtain_graph`), builds the Trainer and trains one batch, then
reads every page of the graph and reports its proportional set size (PSS, from
/proc/self/smaps_rollup) while all ranks are alive. PSS splits a shared page between the
processes that map it, so the sum over ranks is what the node really holds.

Start-up is the time from the launch of a process to the end of its first training step
(the slowest rank's, since DDP steps together), and to the graph being ready.

What a rank holds after a step includes what the step freed but the C heap kept: glibc hands back to
the system only blocks at the top of its heap or above its mmap threshold (at most 32 MiB, raised as
large blocks are freed). The batch's tensors (gathered features, messages, activations: 0.15-0.2 GiB
per rank here since model.trim made them smaller than that threshold) stay resident for the next step.
The table shows the total as it is, and again after each rank handed its free heap back (glibc's
malloc_trim), which is what its live objects hold.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench.common import bench_main, emit, gib, launch_local_ranks, pss, table, touch, write_result

GLIBC = "libc.so.6"

GOAL = 0.4  # node <= 0.4 x process, with 4 local ranks


def graph_overrides(args) -> list[str]:
    return [f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}", f"data.num_features={args.features}",
            "data.num_classes=16", "sampler.num_neighbors=[25,10]", "sampler.batch_size=1024", "model.hidden=256",
            "trainer.epochs=1", "output.progress=lines"]


def trim_heap() -> bool:
    """Hand the C heap's free memory back to the system (glibc's malloc_trim); False where there is no glibc."""
    import ctypes

    try:
        malloc_trim = ctypes.CDLL(GLIBC).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim(0)  # 1 when it returned memory, 0 when there was none to return
    return True


def worker(args) -> None:
    """One rank: load as training does, one training step, touch all graph pages, PSS."""
    import torch.distributed as dist

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import graph_csc, shared_graphs
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph

    t0 = float(os.environ["BENCH_T0"])
    t_imported = time.time()
    config = load_config("synthetic", [*graph_overrides(args), f"data.share={args.mode}"])
    env = resolve(os.environ)
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        t_graph = time.time()
        trainer = Trainer(config, env, device, data, out_dir=Path(out))
        t_trainer = time.time()
        trainer.train_epoch(0, on_step_end=lambda _trainer, _record: True)  # one step
        t_first = time.time()
        tensors = [t for t in (data.x, data.y, data.edge_index, data.train_idx, data.val_idx, data.test_idx,
                               *graph_csc(data)) if t is not None]  # node: no edge_index, the CSC is the structure
        touch(tensors)
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
        graph_bytes = sum(storages.values())
        dist.barrier()  # all ranks alive and mapped: PSS divides shared pages among all of them
        mine = pss()
        dist.barrier()
        trimmed = pss() if trim_heap() else None
        dist.barrier()
        rows: list = [None] * env.world_size
        dist.all_gather_object(rows, {"rank": env.rank, "pss": mine, "pss_trimmed": trimmed, "graph_s": t_graph - t0,
                                      "trainer_s": t_trainer - t0,
                                      "first_batch_s": t_first - t0, "graph_bytes": graph_bytes,
                                      "imported_s": t_imported - t0})
        if env.rank == 0:
            emit({"mode": args.mode, "ranks": rows})


def run(args) -> dict:
    results = {}
    for mode in args.modes:
        print(f"memory: {args.ranks} local ranks, data.share={mode} ...", flush=True)
        results[mode] = launch_local_ranks(
            "bench.memory", ["--worker", "--mode", mode, "--nodes", str(args.nodes), "--degree", str(args.degree),
                             "--features", str(args.features)], args.ranks, timeout=args.timeout)
    summary, memory_rows, startup_rows = {}, [], []
    for mode, result in results.items():
        ranks = result["ranks"]
        total = sum(r["pss"]["pss"] for r in ranks)
        slowest = {key: max(r[key] for r in ranks) for key in ("imported_s", "graph_s", "trainer_s", "first_batch_s")}
        trimmed = [r.get("pss_trimmed") for r in ranks]
        summary[mode] = {
            "total_pss_bytes": total,
            "total_pss_trimmed_bytes": sum(t["pss"] for t in trimmed) if all(trimmed) else None,
            "per_rank_pss_bytes": [r["pss"]["pss"] for r in ranks],
            "pss_anon_bytes": sum(r["pss"].get("pss_anon", 0) for r in ranks),
            "pss_file_bytes": sum(r["pss"].get("pss_file", 0) for r in ranks),
            "pss_shmem_bytes": sum(r["pss"].get("pss_shmem", 0) for r in ranks),
            "graph_bytes_per_rank_view": ranks[0]["graph_bytes"],
            **slowest,
            "graph_load_s": max(r["graph_s"] - r["imported_s"] for r in ranks),
        }
        s = summary[mode]
        memory_rows.append([mode, round(gib(total), 2), round(gib(total) / len(ranks), 2),
                            round(gib(s["pss_anon_bytes"]), 2),
                            round(gib(s["pss_shmem_bytes"] + s["pss_file_bytes"]), 2),
                            round(gib(s["graph_bytes_per_rank_view"]), 2),
                            round(gib(s["total_pss_trimmed_bytes"]), 2) if s["total_pss_trimmed_bytes"] else "-"])
        startup_rows.append([mode, round(s["imported_s"], 1), round(s["graph_load_s"], 1), round(s["graph_s"], 1),
                             round(s["first_batch_s"], 1)])
    print()
    print(f"Memory: {args.ranks} local ranks, synthetic graph {args.nodes:,} nodes, avg degree {args.degree}, "
          f"{args.features} float32 features; PSS summed over the ranks after one training step")
    print(table(["data.share", "total PSS GiB", "per rank GiB", "anon GiB", "shared GiB",
                 "graph GiB (one rank's view)", "total, free heap handed back"], memory_rows))
    print()
    print("Start-up, seconds from process start (slowest rank): python+imports, loading the graph, graph ready, "
          "first training step done")
    print(table(["data.share", "imports", "graph load", "graph ready", "first batch"], startup_rows))
    ratios = {}
    if "node" in summary and "process" in summary:
        node, process = summary["node"], summary["process"]
        ratios = {"pss_node_over_process": node["total_pss_bytes"] / process["total_pss_bytes"],
                  "first_batch_node_over_process": node["first_batch_s"] / process["first_batch_s"],
                  "graph_load_node_over_process": node["graph_load_s"] / process["graph_load_s"]}
        ratios["goal_met"] = ratios["pss_node_over_process"] <= GOAL
        if node["total_pss_trimmed_bytes"] and process["total_pss_trimmed_bytes"]:
            ratios["pss_trimmed_node_over_process"] = (node["total_pss_trimmed_bytes"]
                                                       / process["total_pss_trimmed_bytes"])
        print(f"\nPSS node/process = {ratios['pss_node_over_process']:.3f}  "
              f"(goal <= {GOAL}: {'met' if ratios['goal_met'] else 'NOT met'})"
              + (f"; with the free heap handed back: {ratios['pss_trimmed_node_over_process']:.3f}"
                 if "pss_trimmed_node_over_process" in ratios else ""))
        print(f"start-up node/process: to first batch {ratios['first_batch_node_over_process']:.3f}, "
              f"graph load {ratios['graph_load_node_over_process']:.3f}")
    path = write_result("memory", {"params": {"ranks": args.ranks, "nodes": args.nodes, "avg_degree": args.degree,
                                               "features": args.features, "goal": GOAL},
                                    "modes": summary, "ratios": ratios, "raw": results})
    print(f"wrote {path}")
    return ratios


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", default="node", help=argparse.SUPPRESS)
    parser.add_argument("--ranks", type=int, default=4, help="local ranks (processes) per mode")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--degree", type=float, default=25.0, help="average degree (edges = nodes x degree)")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--modes", nargs="+", default=["node", "process"], choices=["node", "process"])
    parser.add_argument("--timeout", type=float, default=900)


def main(argv=None) -> int:
    return bench_main(__doc__, add_arguments, run, argv, worker=worker)


if __name__ == "__main__":
    raise SystemExit(main())
