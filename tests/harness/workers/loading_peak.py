"""`python -m tests.harness.workers.loading_peak [--warm] CONFIG [OVERRIDE ...]`: the private peak growth of one
process that obtains the config's graph as `python -m train fit` does (train/loop/run.py obtain_graph, one process,
the run's C heap and the modules it imports before loading), measured as bench/plan.py's probe measures a run's
loading step. With --warm the graph is obtained once first and dropped, so that what loading imports (ogb's
loader and pandas) and a dataset's processing are not counted, only the arrays. Prints one JSON line:
{"loading": bytes} (tests/test_plan_held.py)."""
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
    from train.loop.fit import Trainer  # noqa: F401 - imported before loading, as a run imports it
    from train.loop.run import obtain_graph

    warm = sys.argv[1] == "--warm"
    args = sys.argv[2:] if warm else sys.argv[1:]
    config = load_config(args[0], args[1:])
    env = resolve(os.environ)
    if warm:
        obtain_graph(config, env)
        gc.collect()
    probe = Probe()
    probe.measure("loading", lambda: obtain_graph(config, env))
    print(json.dumps({"loading": probe.steps["loading"]["private_peak_growth"]}))


if __name__ == "__main__":
    main()
