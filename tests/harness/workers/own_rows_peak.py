"""`python -m tests.harness.workers.own_rows_peak whole|PARTS CONFIG_OVERRIDE ...`: the private peak growth of one
process loading the synthetic graph whole, or node 0's own rows of it striped over PARTS nodes (load_graph's
`owned`), measured as bench/plan.py's probe measures a loading step (VmHWM growth less the file-backed and shared
pages). Prints one JSON line: {"peak": bytes, "shard": bytes of the x it holds} (tests/test_own_rows.py)."""
import json
import os
import sys

from train.heap import tune_heap


def main() -> None:
    tune_heap(os.environ)  # as `python -m train` does, before torch is imported
    import torch  # noqa: F401 - imported before the probe starts, as a run has it
    from torch_geometric.data import Data  # noqa: F401

    from bench.plan import Probe
    from train.config import load_config
    from train.graph.datasets.loading import load_graph

    config = load_config("synthetic", sys.argv[2:]).data
    parts = None if sys.argv[1] == "whole" else int(sys.argv[1])
    owned = None if parts is None else {"": (slice(0, config.num_nodes, parts),
                                             slice(0, -(-config.num_nodes // parts)))}
    probe = Probe()
    graph = probe.measure("loading", lambda: load_graph(config, owned=owned))
    print(json.dumps({"peak": probe.steps["loading"]["private_peak_growth"],
                      "shard": graph.x.numel() * graph.x.element_size()}))


if __name__ == "__main__":
    main()
