"""`python -m tests.harness.workers.rgat_step_peak NAME [KEY=VALUE ...]`: one training step of the built-in
relational model NAME on the whole typed citation graph (tests/harness/citation_graph.py: every node and edge
in one batch, the most any sampled batch holds), in this fresh process. Prints one JSON line: the process's peak
RSS before and after the step, in bytes, and the memory plan's training-batch term for that batch
(train/plan/terms.py forward_bytes) (tests/test_rgat.py)."""
import contextlib
import json
import os
import resource
import sys
from pathlib import Path

from train.heap import tune_heap


def peak_rss() -> int:
    """The process's peak RSS since the last `reset_peak` (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # no /proc: the peak since the start


def reset_peak() -> None:
    """The peak starts again from the RSS of now (Linux's clear_refs 5), so the step's own peak is read, not the
    building of the graph before it (as bench/plan.py's probe reads a run's)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def main() -> None:
    tune_heap(os.environ)  # as `python -m train` does, before torch is imported
    import torch

    from tests.harness.citation_graph import citation_graph
    from train.config import Config, ModelConfig
    from train.graph.form import form_of, graph_meta
    from train.graph.typed_graph import typed_graph
    from train.models import ModelStep, build_model, edge_inputs
    from train.plan.hops import Hops
    from train.plan.terms import forward_bytes, graph_size_of

    torch.set_num_threads(1)
    kwargs = dict(item.split("=", 1) for item in sys.argv[2:])
    data = typed_graph(citation_graph(), "paper")
    form = form_of(data)
    config = ModelConfig(name=sys.argv[1], hidden=64, num_layers=2, kwargs={k: int(v) for k, v in kwargs.items()})
    step = ModelStep(build_model(config, form.feature_width(data), form.num_classes(data), seed=0,
                                 meta=graph_meta(data)))
    optimizer = torch.optim.Adam(step.parameters(), lr=0.01)
    data.n_id = torch.arange(data.num_nodes)
    reset_peak()
    before = peak_rss()
    papers = data.node_type == graph_meta(data).target_index
    out = step(data.x, data.edge_index, **edge_inputs(data))
    loss = torch.nn.functional.cross_entropy(out[papers], data.y[papers])
    loss.backward()
    optimizer.step()
    edges = int(data.edge_index.size(1))
    planned = forward_bytes(Config(model=config), graph_size_of(data), Hops((data.num_nodes,), (edges,)), backward=True)
    print(json.dumps({"before": before, "peak": peak_rss(), "planned": planned, "edges": edges,
                      "nodes": int(data.num_nodes), "loss": loss.item()}))


if __name__ == "__main__":
    main()
