"""On a GPU: seeds per second with GPU-side sampling (sampler.device=cuda) against CPU sampling.

One process, the project's Trainer on the same graph and model, `sampler.device=cpu` then
`cuda`, twice (A B A B). Also the sampler alone (edges per second) on the GPU against the
CPU. Prints, and records, the float32 matmul settings in force (TF32 or not): the project
trains in float32 without autocast, so no bf16 is used. Without CUDA it says so and writes
a result marked skipped.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench.common import bench_main, free_port, table, write_result
from bench.training_loops import project_steps


def precision_settings() -> dict:
    import torch

    return {
        "dtype": "float32 (no autocast: the project does not use bf16)",
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
    }


def run(args) -> dict:
    import torch

    if not torch.cuda.is_available():
        print("gpu: skipped, no CUDA device visible (GPU-side sampling is measured only where a GPU is lent).")
        path = write_result("gpu", {"skipped": "no CUDA device", "precision": precision_settings()})
        print(f"wrote {path}")
        return {}

    from dataclasses import replace

    from torch_geometric.data import Data
    from torch_geometric.sampler import NodeSamplerInput

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sampling.samplers import make_node_sampler
    from train.graph.sharing.shared_graph import graph_csc, shared_graphs
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph

    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))  # one process, wherever it runs
    config = load_config("synthetic", [f"data.num_nodes={args.nodes}", f"data.avg_degree={args.degree}",
                                       f"data.num_features={args.features}", "sampler.num_neighbors=[25,10]",
                                       f"sampler.batch_size={args.batch_size}", "model.hidden=256", "trainer.epochs=1",
                                       "trainer.log_every=1000000", "dist.backend=nccl"])
    env = resolve(os.environ)
    results: dict = {"precision": precision_settings()}
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        trainers = {}
        for where in ("cpu", "cuda"):
            cfg = replace(config, sampler=replace(config.sampler, device=where))
            trainers[where] = Trainer(cfg, env, device, data, out_dir=Path(out))
            results.setdefault("placement", {})[where] = trainers[where].sampling.note or "CPU sampling"
        measured = {"cpu": [0, 0.0], "cuda": [0, 0.0]}
        for round_ in range(args.rounds):
            for where, trainer in trainers.items():
                seeds, seconds = project_steps(trainer, round_, args.steps, torch.cuda.synchronize)
                measured[where][0] += seeds
                measured[where][1] += seconds
        training = {w: m[0] / m[1] for w, m in measured.items()}

        sampling = {}
        seeds = data.train_idx[torch.randperm(data.train_idx.numel())][: args.batch_size * (args.steps + 2)]
        for where in ("cpu", "cuda"):
            csc = tuple(t.to(where) if t is not None else None for t in graph_csc(data))
            # the sampler each setting trains with (sampler.device=cuda: FusedNeighborSampler)
            sampler = make_node_sampler(Data(num_nodes=data.num_nodes), [25, 10], csc=csc, device=where,
                                        force_torch_sampler=True)
            sampler.configure([25, 10], seed=1, epoch=0)
            edges, started = 0, None
            for i, batch in enumerate(seeds.split(args.batch_size)):
                if i == 2:
                    if where == "cuda":
                        torch.cuda.synchronize()
                    started = time.perf_counter()
                out = sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=batch))
                if i >= 2:
                    edges += sum(out.num_sampled_edges)
            if where == "cuda":
                torch.cuda.synchronize()
            sampling[where] = edges / (time.perf_counter() - started)
    results.update(training_seeds_per_s=training, sampler_edges_per_s=sampling,
                   ratios={"training_cuda_over_cpu": training["cuda"] / training["cpu"],
                           "sampler_cuda_over_cpu": sampling["cuda"] / sampling["cpu"]})
    print()
    print(f"GPU: {torch.cuda.get_device_name(0)}, synthetic graph {args.nodes:,} nodes, avg degree {args.degree}, "
          f"{args.features} features, fanouts [25, 10], batch {args.batch_size}")
    print(table(["sampler.device", "training seeds/s", "sampler edges/s", "placement"],
                [[w, round(training[w], 1), round(sampling[w]), results["placement"][w]] for w in ("cpu", "cuda")]))
    print(f"\ntraining seeds/s cuda/cpu sampling = {results['ratios']['training_cuda_over_cpu']:.2f}; "
          f"sampler edges/s cuda/cpu = {results['ratios']['sampler_cuda_over_cpu']:.1f}")
    print("precision: " + ", ".join(f"{k}={v}" for k, v in results["precision"].items()))
    path = write_result("gpu", {"params": vars(args), **results})
    print(f"wrote {path}")
    return results["ratios"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--degree", type=float, default=25.0)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)


def main(argv=None) -> int:
    return bench_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
