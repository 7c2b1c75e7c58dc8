"""Training throughput: seeds per second per rank of the project's loop against the seed's loop.

The loops run in the same processes, on the same graph, model, optimizer and hardware,
one after the other, in rounds (A B C A B C) so that warm-up and drift hit all alike:

* project: `Trainer.train_epoch` (per-step seeding, Join for uneven shards, loss and
  accuracy sums, the node-shared graph and its precomputed CSC, `model.trim`);
* project untrimmed: the same with `model.trim=false` (every sampled row in every layer, as
  the seed's model computes): what the loop itself gains or costs;
* baseline, as the seed's example writes it: `DistributedDataParallel`, a shuffled loader
  over this rank's `train_idx.split(ceil(N / world))` part with drop_last, and the plain
  `zero_grad / forward / cross_entropy / backward / step` loop.

Then the model step against the strongest anchor a PyG user would pick, PyG's own GraphSAGE, GAT and GIN
with `trim_to_layer`, on the same batches from the same weights (bench/pyg_anchor.py, `--anchor-models`).

The seed uses PyG's `NeighborLoader` on pyg-lib (NVIDIA's container ships it). `make bench`
builds pyg-lib into .venv-anchor (bench/anchor.sh) and this benchmark re-runs itself there, so
the baseline is exactly that (with `persistent_workers` when it has workers), and the project
samples as it would in the container (pyg-lib on the node-shared graph). Where the anchor
cannot be built, the baseline samples with the project's `TorchNeighborSampler` building its own
CSC, as `NeighborLoader` would, and the table says so. Both use `sampler.num_workers` loader
workers (the seed uses 4 workers per GPU; a 2-core machine has no room for that). The project's
timed steps are also split into phases (train/loop/timing.py) to show where its time goes.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

from bench.common import emit, launch_local_ranks, table, write_result
from bench.training_loops import (
    first_at_target,
    overrides,
    passthrough,
    project_steps,
    race_to_target,
    target_overrides,
)

LOOPS = ("project", "project untrimmed", "baseline")  # baseline: the seed's loop


def seed_model(data, config, device):
    """The seed's model, optimizer and DDP wrapper, with the project's initial weights (same seed)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from train.graph.datasets.loading import num_classes
    from train.models import build_model

    model = build_model(config.model, data.num_features, num_classes(data), config.trainer.seed).to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model, ddp, torch.optim.Adam(model.parameters(), lr=config.optim.lr,
                                        weight_decay=config.optim.weight_decay)


def seed_graph(data):
    """The graph as the seed's loader takes it, with an edge_index of its own: the node-shared graph keeps only
    its CSC (`csc_targets` gives each edge's target back), and each of the seed's processes holds its own."""
    import torch
    from torch_geometric.data import Data

    from train.graph.sharing.shared_graph import csc_targets, graph_csc

    if data.edge_index is not None:
        return data
    colptr, row, _perm = graph_csc(data)
    return Data(x=data.x, y=data.y, edge_index=torch.stack([row.long(), csc_targets(colptr)]), train_idx=data.train_idx,
                val_idx=data.val_idx, test_idx=data.test_idx)


def seed_loader(data, config, env, epoch: int):
    """The seed's loader: a shuffled NeighborLoader over this rank's part of train_idx, drop_last."""
    import torch

    from train.graph.sampling.samplers import have_native_sampler, make_node_loader

    train_idx = data.train_idx
    train_idx = train_idx.split(math.ceil(train_idx.size(0) / env.world_size))[env.rank]
    cfg = config.sampler
    if have_native_sampler():
        from torch_geometric.loader import NeighborLoader

        return NeighborLoader(data, input_nodes=train_idx, num_neighbors=list(cfg.num_neighbors),
                              batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                              num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0)
    torch.manual_seed(epoch)
    shuffled = train_idx[torch.randperm(train_idx.numel())]
    shuffled = shuffled[: shuffled.numel() // cfg.batch_size * cfg.batch_size]  # drop_last
    return make_node_loader(data, shuffled, list(cfg.num_neighbors), cfg.batch_size,
                            num_workers=cfg.num_workers, force_torch_sampler=True)


def seed_loop(ddp, optimizer, loader, device, steps: int | None) -> tuple[int, float, dict[str, float]]:
    """The seed's `zero_grad / forward / cross_entropy / backward / step` loop over `loader`.

    With `steps`: that many steps after one untimed warm-up step; else the whole loader, all timed.
    Returns (seeds, seconds, where they went: waiting for the loader's next batch, and the step itself).
    """
    import torch.nn.functional as F

    ddp.train()
    warmup = steps is not None
    seeds, seconds = 0, 0.0
    split = {"loader": 0.0, "step": 0.0}  # the seed's loop has no timer: wall clocks around its two halves
    batches = iter(loader)
    done = 0
    while steps is None or done <= steps:
        started = time.perf_counter()
        batch = next(batches, None)
        if batch is None:
            break
        fetched = time.perf_counter()
        batch = batch.to(device)
        optimizer.zero_grad()
        out = ddp(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        ended = time.perf_counter()
        if not (warmup and done == 0):
            seeds += batch.batch_size
            seconds += ended - started
            split["loader"] += fetched - started
            split["step"] += ended - fetched
        done += 1
    return seeds, seconds, split


def _baseline_steps(data, config, env, device, epoch: int, steps: int) -> tuple[int, float, dict[str, float]]:
    """The seed's loop; `steps` steps after one untimed warm-up step."""
    _model, ddp, optimizer = seed_model(data, config, device)
    return seed_loop(ddp, optimizer, seed_loader(data, config, env, epoch), device, steps)


def to_target(args) -> None:
    """Time to a target validation accuracy: the project's `train_epoch` against the seed's loop,
    each from the same initial weights, evaluated after every epoch by the same exact evaluation."""
    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph
    from train.models import ModelStep

    config = load_config("synthetic", [*target_overrides(args)])
    env = resolve(os.environ)
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        trainer = Trainer(config, env, device, data, out_dir=Path(out))
        seed_data = seed_graph(data)
        model, ddp, optimizer = seed_model(seed_data, config, device)

        def seed_epoch(epoch: int) -> None:  # the loader's construction counts, as the project's does
            seed_loop(ddp, optimizer, seed_loader(seed_data, config, env, epoch), device, None)

        curves = race_to_target(trainer, {"baseline": (seed_epoch, ModelStep(model))}, args.max_epochs,
                                args.target_acc, device)
        if env.rank == 0:
            emit({"curves": curves})


def worker(args) -> None:
    if args.anchor_run:
        from bench.pyg_anchor import worker as anchor_worker

        return anchor_worker(args)
    if args.target_run:
        return to_target(args)
    import torch.distributed as dist

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph

    config = load_config("synthetic", overrides(args))
    env = resolve(os.environ)
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        trainer = Trainer(config, env, device, data, out_dir=Path(out))
        # the same loop computing every sampled row in every layer, as the seed's model does: what the loop
        # itself gains or costs, apart from model.trim
        untrimmed = Trainer(load_config("synthetic", [*overrides(args), "model.trim=false"]), env, device, data,
                            out_dir=Path(out))
        seed_data = seed_graph(data)
        measured = {name: [0, 0.0] for name in LOOPS}
        phases: dict[str, float] = {}
        baseline_split: dict[str, float] = {}
        for round_ in range(args.rounds):
            for name in LOOPS:
                dist.barrier()
                if name == "project untrimmed":
                    seeds, seconds = project_steps(untrimmed, round_, args.steps)
                elif name == "project":
                    seeds, seconds = project_steps(trainer, round_, args.steps)
                    for phase, value in trainer.timer.totals().items():  # includes the untimed warm-up step
                        phases[phase] = phases.get(phase, 0.0) + value
                else:
                    seeds, seconds, split = _baseline_steps(seed_data, config, env, device, round_, args.steps)
                    for part, value in split.items():
                        baseline_split[part] = baseline_split.get(part, 0.0) + value
                measured[name][0] += seeds
                measured[name][1] += seconds
        rows: list = [None] * env.world_size
        dist.all_gather_object(rows, {"rank": env.rank, "project_phase_seconds": phases,
                                      "baseline_split_seconds": baseline_split,
                                      **{k: {"seeds": v[0], "seconds": v[1]} for k, v in measured.items()}})
        if env.rank == 0:
            emit({"ranks": rows})


def run(args) -> dict:
    from bench.anchor import have_pyg_lib
    from train.graph.sampling.samplers import have_native_sampler

    baseline_loader = ("PyG NeighborLoader on pyg-lib" if have_pyg_lib() else "PyG NeighborLoader (torch-sparse)"
                       if have_native_sampler() else
                       "stand-in: TorchNeighborSampler with its own CSC "
                       f"(no pyg-lib: {args.anchor_reason or 'not installed'})")
    import torch

    from bench.common import local_ranks, machine, machine_summary

    # every launch below (throughput, time to target, the anchor's) takes these ranks
    args.ranks, backend = local_ranks(torch.cuda.device_count(), args.ranks)
    where = machine_summary(machine())
    print(f"training: {args.ranks} local ranks ({backend}) on {where}, project loop against the seed's loop "
          f"({baseline_loader}) ...", flush=True)
    result = launch_local_ranks("bench.training", ["--worker", *passthrough(args)], args.ranks, timeout=args.timeout)
    rows, per_loop = [], {}
    for name in LOOPS:
        rates = [r[name]["seeds"] / r[name]["seconds"] for r in result["ranks"]]
        per_loop[name] = {"seeds_per_s_per_rank": sum(rates) / len(rates), "per_rank": rates,
                          "steps_per_rank": args.rounds * args.steps}
        rows.append([name, args.rounds * args.steps, round(per_loop[name]["seeds_per_s_per_rank"], 1),
                     round(min(rates), 1), round(max(rates), 1)])
    ratio = per_loop["project"]["seeds_per_s_per_rank"] / per_loop["baseline"]["seeds_per_s_per_rank"]
    untrimmed_ratio = (per_loop["project untrimmed"]["seeds_per_s_per_rank"]
                       / per_loop["baseline"]["seeds_per_s_per_rank"])
    print()
    print(f"Training throughput: {args.ranks} ranks ({backend}) on {where}, synthetic graph {args.nodes:,} nodes, "
          f"avg degree {args.degree}, {args.features} features, SAGE hidden 256, fanouts [25, 10], batch "
          f"{args.batch_size}")
    print(table(["loop", "timed steps/rank", "seeds/s per rank", "slowest rank", "fastest rank"], rows))
    print(f"\nproject/baseline seeds per second = {ratio:.3f} (model.trim=false: {untrimmed_ratio:.3f}); "
          f"baseline loader: {baseline_loader}")
    phases = {k: sum(r["project_phase_seconds"][k] for r in result["ranks"]) / len(result["ranks"])
              for k in result["ranks"][0]["project_phase_seconds"]}
    total = sum(phases.values()) or 1.0
    print("project's step time (mean rank): " + ", ".join(f"{k} {v / total:.0%}" for k, v in phases.items()))
    split = {k: sum(r["baseline_split_seconds"][k] for r in result["ranks"]) / len(result["ranks"])
             for k in result["ranks"][0]["baseline_split_seconds"]}
    split_total = sum(split.values()) or 1.0
    print("baseline's step time (mean rank): " + ", ".join(f"{k} {v / split_total:.0%}" for k, v in split.items())
          + "  (loader: waiting for the next batch, sampled and gathered; step: copy, forward, backward, all-reduce)")
    target = time_to_target(args) if args.target_acc > 0 else None
    from bench.pyg_anchor import run as run_anchor

    anchor = run_anchor(args)
    path = write_result("training", {"params": {**vars(args)}, "backend": backend, "measured_on": where,
                                      "loops": per_loop, "baseline_loader": baseline_loader,
                                      "project_phase_seconds": phases, "baseline_split_seconds": split,
                                      "time_to_target": target, "pyg_trim_to_layer_anchor": anchor,
                                      "ratios": {"project_over_baseline": ratio,
                                                 **{f"project_over_pyg_trim_to_layer_{m}": a[
                                                     "project_over_trim_to_layer"] for m, a in anchor.items()},
                                                 "project_untrimmed_over_baseline": untrimmed_ratio,
                                                 **({"baseline_over_project_time_to_target": target["ratio"]}
                                                    if target and target["ratio"] else {})},
                                      "raw": result})
    print(f"wrote {path}")
    return {"project_over_baseline": ratio}


def time_to_target(args) -> dict:
    """Launch `to_target` on the ranks and print both curves' first epoch at the target."""
    print(f"\ntraining: time to val_acc >= {args.target_acc} on {args.target_nodes:,} nodes "
          f"({args.target_features} features, batch {args.target_batch_size}, at most {args.max_epochs} epochs) ...",
          flush=True)
    result = launch_local_ranks("bench.training", ["--worker", "--target-run", *passthrough(args)], args.ranks,
                                timeout=args.timeout)
    reached = {name: first_at_target(curve, args.target_acc) for name, curve in result["curves"].items()}
    rows = [[name, len(result["curves"][name]), *(["-", "-"] if row is None else
                                                  [row["epoch"] + 1, round(row["train_seconds"], 1)]),
             round(result["curves"][name][-1]["val_acc"], 4)] for name, row in reached.items()]
    print(table(["loop", "epochs run", "epochs to target", "training s to target", "last val_acc"], rows))
    ratio = None
    if all(reached.values()):
        ratio = reached["baseline"]["train_seconds"] / reached["project"]["train_seconds"]
        print(f"baseline/project training time to val_acc >= {args.target_acc} = {ratio:.3f}")
    else:
        print(f"not reached by: {', '.join(n for n, r in reached.items() if r is None)} (raise --max-epochs)")
    return {"target_val_acc": args.target_acc, "curves": result["curves"], "ratio": ratio}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=int, default=0,
                        help="local ranks (default 0: one per visible GPU over NCCL, else 2 CPU ranks over gloo)")
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--degree", type=float, default=25.0)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per loop and round (after 1 warm-up step)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=2400, help="seconds for each launch of the ranks")
    parser.add_argument("--target-acc", type=float, default=0.98,
                        help="time to this validation accuracy, both loops from the same weights (0: skip)")
    parser.add_argument("--target-nodes", type=int, default=20_000, help="graph of the time-to-target run")
    parser.add_argument("--target-features", type=int, default=32)
    parser.add_argument("--target-batch-size", type=int, default=512)
    parser.add_argument("--max-epochs", type=int, default=10, help="time-to-target: give up after this many")
    parser.add_argument("--anchor-models", default="sage,gat,gin",
                        help="models measured against PyG's own with trim_to_layer ('' to skip)")
    parser.add_argument("--gat-heads", type=int, default=4, help="GAT's heads in that comparison")
    parser.add_argument("--target-run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--anchor-run", action="store_true", help=argparse.SUPPRESS)


def main(argv=None) -> int:
    from bench.anchor import anchored_main

    return anchored_main("bench.training", __doc__, add_arguments, run, argv, worker=worker)


if __name__ == "__main__":
    raise SystemExit(main())
