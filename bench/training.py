"""Training throughput: seeds per second per rank of the project's loop against the seed's loop.

Both loops run in the same processes, on the same graph, model, optimizer and hardware,
one after the other, twice (A B A B) so that warm-up and drift hit both alike:

* project: `Trainer.train_epoch` (per-step seeding, Join for uneven shards, loss and
  accuracy sums, the node-shared graph and its precomputed CSC);
* baseline, as the seed's example writes it: `DistributedDataParallel`, a shuffled loader
  over this rank's `train_idx.split(ceil(N / world))` part with drop_last, and the plain
  `zero_grad / forward / cross_entropy / backward / step` loop.

The seed uses PyG's `NeighborLoader` on pyg-lib (NVIDIA's container ships it). `make bench`
builds pyg-lib into .venv-anchor (bench/anchor.sh) and this benchmark re-runs itself there, so
the baseline is exactly that (with `persistent_workers` when it has workers), and the project
samples as it would in the container (pyg-lib on the node-shared graph). Where the anchor
cannot be built, the baseline samples with the project's `TorchNeighborSampler` building its own
CSC, as `NeighborLoader` would, and the table says so. Both use `sampler.num_workers` loader
workers (the seed uses 4 workers per GPU; a 2-core machine has no room for that). The project's
timed steps are also split into phases (train/timing.py) to show where its time goes.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

from bench.common import emit, launch_local_ranks, table, write_result


def overrides(args) -> list[str]:
    return [f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}", f"data.num_features={args.features}",
            "sampler.num_neighbors=[25,10]", f"sampler.batch_size={args.batch_size}", "model.hidden=256",
            "trainer.epochs=1", "output.progress=lines", "trainer.log_every=1000000"]


def _project_steps(trainer, epoch: int, steps: int) -> tuple[int, float]:
    """`steps` steps of the project's loop after one untimed warm-up step; (seeds, seconds)."""
    marks: list[tuple[float, int]] = []

    def on_step_end(tr) -> bool:
        marks.append((time.perf_counter(), tr.state.stats.seeds))
        return len(marks) > steps

    trainer.state.step = 0
    trainer.timer.reset()
    trainer.train_epoch(epoch, on_step_end=on_step_end)
    return marks[-1][1] - marks[0][1], marks[-1][0] - marks[0][0]


def _baseline_steps(data, config, env, device, epoch: int, steps: int) -> tuple[int, float]:
    """The seed's loop; `steps` steps after one untimed warm-up step; (seeds, seconds)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from train.data import num_classes
    from train.model import build_model
    from train.sampler import have_native_sampler, make_node_loader

    model = build_model(config.model, data.num_features, num_classes(data), config.trainer.seed).to(device)
    model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.optim.lr)
    train_idx = data.train_idx
    train_idx = train_idx.split(math.ceil(train_idx.size(0) / env.world_size))[env.rank]
    cfg = config.sampler
    if have_native_sampler():
        from torch_geometric.loader import NeighborLoader

        loader = NeighborLoader(data, input_nodes=train_idx, num_neighbors=list(cfg.num_neighbors),
                                batch_size=cfg.batch_size, shuffle=True, drop_last=True,
                                num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0)
    else:
        torch.manual_seed(epoch)
        shuffled = train_idx[torch.randperm(train_idx.numel())]
        shuffled = shuffled[: shuffled.numel() // cfg.batch_size * cfg.batch_size]  # drop_last
        loader = make_node_loader(data, shuffled, list(cfg.num_neighbors), cfg.batch_size,
                                  num_workers=cfg.num_workers, force_torch_sampler=True)
    model.train()
    marks, seeds = [], 0
    for batch in loader:
        batch = batch.to(device)
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        loss.backward()
        optimizer.step()
        marks.append(time.perf_counter())
        if len(marks) > 1:
            seeds += batch.batch_size
        if len(marks) > steps:
            break
    return seeds, marks[-1] - marks[0]


def worker(args) -> None:
    import torch.distributed as dist

    from train.config import load_config
    from train.distenv import resolve
    from train.fit import Trainer, obtain_graph
    from train.procgroup import process_group
    from train.shared_graph import shared_graphs

    config = load_config("synthetic", overrides(args))
    env = resolve(os.environ)
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        trainer = Trainer(config, env, device, data, out_dir=Path(out))
        measured = {"project": [0, 0.0], "baseline": [0, 0.0]}
        phases: dict[str, float] = {}
        for round_ in range(args.rounds):
            for name in ("project", "baseline"):
                dist.barrier()
                if name == "project":
                    seeds, seconds = _project_steps(trainer, round_, args.steps)
                    for phase, value in trainer.timer.totals().items():  # includes the untimed warm-up step
                        phases[phase] = phases.get(phase, 0.0) + value
                else:
                    seeds, seconds = _baseline_steps(data, config, env, device, round_, args.steps)
                measured[name][0] += seeds
                measured[name][1] += seconds
        rows: list = [None] * env.world_size
        dist.all_gather_object(rows, {"rank": env.rank, "project_phase_seconds": phases,
                                      **{k: {"seeds": v[0], "seconds": v[1]} for k, v in measured.items()}})
        if env.rank == 0:
            emit({"ranks": rows})


def run(args) -> dict:
    from bench.anchor import have_pyg_lib
    from train.sampler import have_native_sampler

    baseline_loader = ("PyG NeighborLoader on pyg-lib" if have_pyg_lib() else "PyG NeighborLoader (torch-sparse)"
                       if have_native_sampler() else
                       f"stand-in: TorchNeighborSampler with its own CSC (no pyg-lib: {args.anchor_reason or 'not installed'})")
    print(f"training: {args.ranks} local ranks, project loop against the seed's loop ({baseline_loader}) ...", flush=True)
    result = launch_local_ranks("bench.training", ["--worker", *_passthrough(args)], args.ranks, timeout=args.timeout)
    rows, per_loop = [], {}
    for name in ("project", "baseline"):
        rates = [r[name]["seeds"] / r[name]["seconds"] for r in result["ranks"]]
        per_loop[name] = {"seeds_per_s_per_rank": sum(rates) / len(rates), "per_rank": rates,
                          "steps_per_rank": args.rounds * args.steps}
        rows.append([name, args.rounds * args.steps, round(per_loop[name]["seeds_per_s_per_rank"], 1),
                     round(min(rates), 1), round(max(rates), 1)])
    ratio = per_loop["project"]["seeds_per_s_per_rank"] / per_loop["baseline"]["seeds_per_s_per_rank"]
    print()
    print(f"Training throughput: {args.ranks} ranks (gloo, CPU), synthetic graph {args.nodes:,} nodes, avg degree "
          f"{args.degree}, {args.features} features, SAGE hidden 256, fanouts [25, 10], batch {args.batch_size}")
    print(table(["loop", "timed steps/rank", "seeds/s per rank", "slowest rank", "fastest rank"], rows))
    print(f"\nproject/baseline seeds per second = {ratio:.3f}; baseline loader: {baseline_loader}")
    phases = {k: sum(r["project_phase_seconds"][k] for r in result["ranks"]) / len(result["ranks"])
              for k in result["ranks"][0]["project_phase_seconds"]}
    total = sum(phases.values()) or 1.0
    print("project's step time (mean rank): " + ", ".join(f"{k} {v / total:.0%}" for k, v in phases.items()))
    path = write_result("training", {"params": {**vars(args)}, "loops": per_loop, "baseline_loader": baseline_loader,
                                      "project_phase_seconds": phases,
                                      "ratios": {"project_over_baseline": ratio}, "raw": result})
    print(f"wrote {path}")
    return {"project_over_baseline": ratio}


def _passthrough(args) -> list[str]:
    return ["--nodes", str(args.nodes), "--degree", str(args.degree), "--features", str(args.features),
            "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--rounds", str(args.rounds)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--degree", type=float, default=25.0)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per loop and round (after 1 warm-up step)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)


def main(argv=None) -> int:
    from bench.anchor import anchored_main

    return anchored_main("bench.training", __doc__, add_arguments, run, argv, worker=worker)


if __name__ == "__main__":
    raise SystemExit(main())
