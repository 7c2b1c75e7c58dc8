"""`python -m tests.harness.workers.step_peaks CONFIG MODEL[:KEY=VALUE,...] ... -- [OVERRIDE ...]`: one training
step of each model on a batch of the config's graph, in this one process, beside the memory plan's term for it
(tests/test_plan_models.py).

The graph is obtained as `python -m train fit` obtains it (one rank, the run's C heap: train/heap.py) and batches
come from the run's sampler (train/graph/sampling/device_plan.py). Per model: a first step that makes the
gradients and Adam's state (the plan counts those in the model's own term), then one measured step: the batch
sampled, forward, backward and the optimizer's step, its peak RSS growth read as bench/plan.py's probe reads a run's
(VmHWM reset before it, through /proc/self/clear_refs). With the run's heap a step's large tensors go back to the
system when it ends; its tensors below the heap's mmap threshold (8 MiB) go back to glibc's arena, which keeps them
(measured: 109 MiB of hetero-gat's first step, whose relations' tensors are small), so the arena is trimmed
(malloc_trim) before the measured step: else it reuses them and its growth misses them. Each model's peak is its
own. Prints one JSON line per model: {"model", "measured", "planned"} in bytes, `planned` the plan's training-batch
term (train/plan/terms.py forward_bytes)."""
import ctypes
import gc
import json
import os
import sys

from train.heap import tune_heap


def model_config(config, spec: str):
    """The config with model `NAME:key=value,...` (integers read as such)."""
    import dataclasses

    name, _, given = spec.partition(":")
    kwargs = {}
    for item in filter(None, given.split(",")):
        key, value = item.split("=", 1)
        kwargs[key] = int(value) if value.lstrip("-").isdigit() else value
    return dataclasses.replace(config, model=dataclasses.replace(config.model, name=name, kwargs=kwargs))


def one_step(step, optimizer, batches) -> tuple[list[int], list[int]]:
    """A training step on the first of `batches()`; the batch's nodes and edges per hop."""
    import torch

    from train.models import edge_inputs

    batch = next(iter(batches()))
    if not step.uses_graph:  # a feature-only model's batch: its seeds' features (train/loop/tasks/node.py)
        out = step(batch.x)
        nodes, edges = [batch.x.size(0)], []
    else:
        out = step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges, **edge_inputs(batch))
        nodes, edges = [int(n) for n in batch.num_sampled_nodes], [int(e) for e in batch.num_sampled_edges]
    seeds = len(batch.y) if not step.uses_graph else batch.batch_size
    torch.nn.functional.cross_entropy(out[:seeds], batch.y[:seeds]).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    return nodes, edges


def measure(config, spec: str, data, sampling) -> dict:
    """One model's measured step (after a first one) and the plan's term, for the batch the run would make."""
    import torch

    from bench.plan import Probe
    from train.graph.form import form_of, graph_meta
    from train.models import ModelStep, build_model
    from train.plan.hops import Hops, batch_seeds, sampled_hops
    from train.plan.terms import forward_bytes, graph_size_of

    form, size = form_of(data), graph_size_of(data)
    train_nodes = form.split_nodes(data, "train")
    fanouts, batch_size = config.sampler.num_neighbors, config.sampler.batch_size
    config = model_config(config, spec)
    step = ModelStep(build_model(config.model, form.feature_width(data), form.num_classes(data), seed=0,
                                 meta=graph_meta(data)))
    optimizer = torch.optim.Adam(step.parameters(), lr=0.01)

    def batches(seeds, seed: int):
        if not step.uses_graph:
            return [form.feature_batch(data, seeds)]
        return sampling.loader(seeds, fanouts, batch_size, seed=seed)

    one_step(step, optimizer, lambda: batches(train_nodes[:batch_size], 0))
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # what the first step freed into the arena goes back (the docstring)
    probe = Probe()
    seeds = train_nodes[batch_size: 2 * batch_size]
    nodes, edges = probe.measure("step", lambda: one_step(step, optimizer, lambda: batches(seeds, 1)))
    hops = sampled_hops(batch_seeds(config), fanouts, size)
    return {"model": spec, "measured": probe.steps["step"]["private_peak_growth"],
            "planned": forward_bytes(config, size, hops, backward=True),
            "planned_at_batch": forward_bytes(config, size, Hops(tuple(nodes), tuple(edges)), backward=True),
            "nodes": nodes, "edges": edges, "planned_nodes": hops.nodes, "planned_edges": hops.edges}


def main() -> None:
    tune_heap(os.environ)  # as `python -m train` does, before torch is imported
    import torch

    from train.cluster.distenv import resolve
    from train.config import load_config
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.run import obtain_graph

    torch.set_num_threads(1)
    split = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    config = load_config(sys.argv[1], sys.argv[split + 1:])
    data = obtain_graph(config, resolve(os.environ))
    sampling = plan_sampling(data, config.sampler, torch.device("cpu"))
    for spec in sys.argv[2:split]:
        print(json.dumps(measure(config, spec, data, sampling)), flush=True)
        gc.collect()


if __name__ == "__main__":
    main()
