"""The strongest anchor for the model step: PyG's own models with `trim_to_layer`, in `make bench BENCH=training`.

A user who knows PyG trains `GraphSAGE`/`GAT`/`GIN` from `torch_geometric.nn.models` and passes the batch's
`num_sampled_nodes_per_hop`/`num_sampled_edges_per_hop`: BasicGNN's forward then trims each layer's sources
(`trim_to_layer`). The project trims each layer's targets too (train/models/trim.py). Both loops here
train the same model class from the same initial weights on the same batches (the project's loader, same
epoch, same seeds), in the same processes, A B A B:

* project: `Trainer.train_epoch` (the model called through `ModelStep`: target trimming);
* PyG trim_to_layer: `zero_grad / ddp(x, edge_index, num_sampled_nodes_per_hop=..., ...) / cross_entropy /
  backward / step` over the same batches.

Then the time each needs to a target validation accuracy (same exact evaluation after every epoch), and
for each model one batch's forward time per layer (GAT's split into the source transform `lin`, the
attention coefficients and the message passing) and the backward pass, to show where the time goes.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench import training_loops as loops
from bench.common import emit, launch_local_ranks, table

LOOPS = ("project", "PyG trim_to_layer")


def model_overrides(model: str, args) -> list[str]:
    extra = [f"model.kwargs.heads={args.gat_heads}"] if model == "gat" else []
    return [f"model.name={model}", *extra]


def anchor_parts(trainer):
    """PyG's model of the trainer's class and initial weights (same seed), its DDP and its Adam."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from train.graph.datasets.loading import num_classes
    from train.models import build_model

    config, device = trainer.config, trainer.device
    model = build_model(config.model, trainer.data.num_features, num_classes(trainer.data), config.trainer.seed)
    model = model.to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    return model, ddp, optimizer


def anchor_steps(trainer, ddp, optimizer, epoch: int, steps: int | None) -> tuple[int, float]:
    """PyG's trim_to_layer step over the project's batches of `epoch`, timed as the project's loop is (from one
    step's end to the next: the wait for the batch included): `steps` steps after one warm-up step, or
    (None) the whole shard. (seeds, seconds of the timed steps)."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.algorithms.join import Join

    from train.graph.seeds import derive_seed

    ddp.train()
    total = trainer.steps_in_epoch(epoch) if steps is None else min(trainer.steps_in_epoch(epoch), steps + 1)
    marks = [(time.perf_counter(), 0)]  # (time, seeds so far) at the start and after each step
    with Join([ddp]):
        for done, batch in enumerate(trainer.batches(trainer.epoch_shard(epoch), epoch)):
            if done >= total:
                break
            torch.manual_seed(derive_seed(trainer.config.trainer.seed, epoch, done, trainer.env.rank))
            batch = batch.to(trainer.device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            out = ddp(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                      num_sampled_edges_per_hop=batch.num_sampled_edges)[: batch.batch_size]
            F.cross_entropy(out, batch.y[: batch.batch_size]).backward()
            optimizer.step()
            marks.append((time.perf_counter(), marks[-1][1] + batch.batch_size))
    first = marks[0] if steps is None else marks[min(1, len(marks) - 1)]  # after the warm-up step
    return marks[-1][1] - first[1], marks[-1][0] - first[0]


def layer_profile(model, call, batch, repeats: int = 3) -> dict:
    """One batch's forward time per layer (ms, the best of `repeats`; GAT layers split into lin, attention and
    message passing) and the backward pass of all layers, for `call(model, batch) -> logits of the seeds`."""
    import torch.nn.functional as F

    best: dict[str, float] = {}
    for _ in range(repeats):
        spans: dict[str, float] = defaultdict(float)
        handles = []
        for index, conv in enumerate(model.convs):
            handles += _timed(conv, f"layer {index}", spans)
            if type(conv).__name__ in ("GATConv", "GATv2Conv"):
                parts = [("lin", getattr(conv, "lin", None) or getattr(conv, "lin_src", None))]
                handles += _timed(parts[0][1], f"layer {index} lin", spans)
                handles += _timed_hooks(conv, "edge_update", f"layer {index} attention", spans)
                handles += _timed_hooks(conv, "propagate", f"layer {index} message passing", spans)
        started = time.perf_counter()
        out = call(model, batch)
        spans["forward"] = time.perf_counter() - started
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        started = time.perf_counter()
        loss.backward()
        spans["backward"] = time.perf_counter() - started
        model.zero_grad(set_to_none=True)
        for handle in handles:
            handle.remove()
        for key, value in spans.items():
            best[key] = min(best.get(key, float("inf")), value)
    return {key: 1000 * value for key, value in best.items()}


def _timed(module, name: str, spans: dict) -> list:
    marks: list[float] = []
    pre = module.register_forward_pre_hook(lambda *_: marks.append(time.perf_counter()))
    post = module.register_forward_hook(lambda *_: spans.__setitem__(name, spans[name] + time.perf_counter()
                                                                    - marks.pop()))
    return [pre, post]


def _timed_hooks(conv, kind: str, name: str, spans: dict) -> list:
    """Time MessagePassing.propagate / edge_updater through PyG's own hooks on them."""
    marks: list[float] = []
    register_pre = getattr(conv, f"register_{kind}_forward_pre_hook")
    register_post = getattr(conv, f"register_{kind}_forward_hook")
    pre = register_pre(lambda *_: marks.append(time.perf_counter()))
    post = register_post(lambda *_: spans.__setitem__(name, spans[name] + time.perf_counter() - marks.pop()))
    return [pre, post]


def worker(args) -> None:
    """Throughput (A B A B), one batch's per-layer profile, and time to target, per model, in one process group."""
    import torch
    import torch.distributed as dist

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.fit import Trainer
    from train.loop.run import obtain_graph
    from train.models import ModelStep

    models = [m for m in args.anchor_models.split(",") if m]
    target = args.target_acc > 0
    graph = loops.target_overrides(args) if target else loops.overrides(args)
    env = resolve(os.environ)
    config = load_config("synthetic", graph)
    rows: dict[str, dict] = {}
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        for model_name in models:
            trainer = Trainer(load_config("synthetic", [*graph, *model_overrides(model_name, args)]), env, device,
                              data, out_dir=Path(out))
            model, ddp, optimizer = anchor_parts(trainer)
            if target:
                def anchor_epoch(epoch: int, trainer=trainer, ddp=ddp, optimizer=optimizer) -> None:
                    anchor_steps(trainer, ddp, optimizer, epoch, None)

                others = {LOOPS[1]: (anchor_epoch, ModelStep(model))}
                rows[model_name] = {"curves": loops.race_to_target(trainer, others, args.max_epochs, args.target_acc,
                                                                   device)}
                continue
            measured = {name: [0, 0.0] for name in LOOPS}
            phases: dict[str, float] = {}
            for round_ in range(args.rounds):
                for name in LOOPS:
                    dist.barrier()
                    if name == "project":
                        seeds, seconds = loops.project_steps(trainer, round_, args.steps)
                        for phase, value in trainer.timer.totals().items():  # includes the warm-up step
                            phases[phase] = phases.get(phase, 0.0) + value
                    else:
                        seeds, seconds = anchor_steps(trainer, ddp, optimizer, round_, args.steps)
                    measured[name][0] += seeds
                    measured[name][1] += seconds
            batch = next(iter(trainer.batches(trainer.epoch_shard(0), 0))).to(device)
            hops = (batch.num_sampled_nodes, batch.num_sampled_edges)
            profile = {
                "project": layer_profile(model, lambda m, b: ModelStep(m)(b.x, b.edge_index, *hops), batch),
                "PyG trim_to_layer": layer_profile(model, lambda m, b: m(
                    b.x, b.edge_index, num_sampled_nodes_per_hop=hops[0], num_sampled_edges_per_hop=hops[1])
                    [: b.batch_size], batch)}
            rows[model_name] = {"loops": {k: {"seeds": v[0], "seconds": v[1]} for k, v in measured.items()},
                                "profile": profile, "project_phase_seconds": phases,
                                "batch_nodes": int(batch.num_nodes),
                                "batch_edges": int(batch.edge_index.size(1))}
            del trainer, model, ddp, optimizer
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
        gathered: list = [None] * env.world_size
        dist.all_gather_object(gathered, rows)
        if env.rank == 0:
            emit({"ranks": gathered})


def run(args) -> dict:
    """Launch the ranks for the throughput and the time to target; print the tables; the figures for the JSON."""
    models = [m for m in args.anchor_models.split(",") if m]
    if not models:
        return {}
    common = ["--worker", "--anchor-run", "--anchor-models", args.anchor_models, "--gat-heads", str(args.gat_heads)]
    print(f"\ntraining: the project's model step against PyG's own models with trim_to_layer ({', '.join(models)}; "
          f"same batches, same initial weights) ...", flush=True)
    throughput = launch_local_ranks("bench.training", [*common, *loops.passthrough(args), "--target-acc", "0"],
                                    args.ranks, timeout=args.timeout)["ranks"]
    result: dict[str, dict] = {}
    rows, layer_rows = [], []
    for model in models:
        rates = {name: [r[model]["loops"][name]["seeds"] / r[model]["loops"][name]["seconds"] for r in throughput]
                 for name in LOOPS}
        mean = {name: sum(v) / len(v) for name, v in rates.items()}
        ratio = mean["project"] / mean["PyG trim_to_layer"]
        phases = throughput[0][model]["project_phase_seconds"]
        result[model] = {"seeds_per_s_per_rank": mean, "project_over_trim_to_layer": ratio,
                         "profile_ms_rank0": throughput[0][model]["profile"], "project_phase_seconds_rank0": phases,
                         "batch": {k: throughput[0][model][k] for k in ("batch_nodes", "batch_edges")}}
        total = sum(phases.values()) or 1.0
        rows.append([model, round(mean["project"], 1), round(mean["PyG trim_to_layer"], 1), round(ratio, 2),
                     " | ".join(f"{k} {v / total:.0%}" for k, v in phases.items() if v / total >= 0.005)])
        for loop, spans in throughput[0][model]["profile"].items():
            for part, ms in spans.items():
                layer_rows.append([model, loop, part, round(ms, 1)])
    print(table(["model", "project seeds/s per rank", "PyG trim_to_layer seeds/s per rank", "project / PyG",
                 "project's step time (rank 0)"], rows))
    print("\nOne batch on rank 0, forward per layer (best of 3; GAT layers split) and backward, ms:")
    print(table(["model", "loop", "part", "ms"], layer_rows))
    if args.target_acc > 0:
        print(f"\ntime to val_acc >= {args.target_acc} (same initial weights and batches; training seconds) ...",
              flush=True)
        curves = launch_local_ranks("bench.training", [*common, *loops.passthrough(args)], args.ranks,
                                    timeout=args.timeout)["ranks"][0]
        target_rows = []
        for model in models:
            reached = {name: loops.first_at_target(curves[model]["curves"][name], args.target_acc) for name in LOOPS}
            ratio = (reached["PyG trim_to_layer"]["train_seconds"] / reached["project"]["train_seconds"]
                     if all(reached.values()) else None)
            result[model]["time_to_target"] = {"curves": curves[model]["curves"], "ratio": ratio}
            target_rows.append([model, *[f"{r['train_seconds']:.1f} s (epoch {r['epoch'] + 1})" if r else "not reached"
                                         for r in reached.values()], "-" if ratio is None else round(ratio, 2)])
        print(table(["model", "project", "PyG trim_to_layer", "PyG / project"], target_rows))
    return result
