"""`python -m tests.harness.workers.loading_peak CONFIG [OVERRIDE ...]`: the private peak growth of one process
that obtains the config's graph as `python -m train fit` does (train/loop/run.py obtain_graph, one process, the
run's C heap), measured as bench/plan.py's probe measures a run's loading step. The graph is obtained once first
and dropped, so that what the measured load imports (and a dataset's processing) is not counted. Prints one JSON
line: {"loading": bytes} (tests/test_plan_held.py)."""
import gc
import json
import os
import sys

from train.heap import tune_heap


def main() -> None:
    tune_heap(os.environ)  # as `python -m train` does, before torch is imported
    from bench.plan import Probe
    from train.cluster.distenv import resolve
    from train.config import load_config
    from train.loop.run import obtain_graph

    config = load_config(sys.argv[1], sys.argv[2:])
    env = resolve(os.environ)
    warm = obtain_graph(config, env)
    del warm
    gc.collect()
    probe = Probe()
    probe.measure("loading", lambda: obtain_graph(config, env))
    print(json.dumps({"loading": probe.steps["loading"]["private_peak_growth"]}))


if __name__ == "__main__":
    main()
