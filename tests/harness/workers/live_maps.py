"""`python -m tests.harness.workers.live_maps EVAL_MODE [OVERRIDE ...]`: one rank (WORLD_SIZE=1 ... in its
environment) trains the tiny config for four epochs, evaluating after each, with the cyclic garbage collector
off (as between two of its rare full runs), and prints after each epoch how many samplers hold a node map, per
device type: `maps [{"cpu": n0}, ...]`. tests/test_sampler.py checks that it stays one: every epoch and
evaluation reuse the run's sampler."""
import gc
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from train.cluster.distenv import resolve
from train.cluster.procgroup import process_group
from train.config import load_config
from train.errors import exit_without_teardown
from train.graph.sampling.samplers import TorchNeighborSampler
from train.graph.sharing.shared_graph import shared_graphs
from train.loop.fit import Trainer
from train.loop.run import obtain_graph


def live_maps() -> dict[str, int]:
    """Samplers that hold a node map, reachable or not (an unreachable cycle lives until a full collection)."""
    maps = [o._to_local for o in gc.get_objects() if isinstance(o, TorchNeighborSampler) and o._to_local is not None]
    return dict(Counter(m.device.type for m in maps))


def main(eval_mode: str, overrides: list[str]) -> None:
    config = load_config("tiny", ["trainer.epochs=4", "trainer.eval_every=1", "dist.backend=gloo",
                                  "output.progress=lines", f"eval.mode={eval_mode}", "data.share=process", *overrides])
    env = resolve(os.environ)
    counts = []
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        data = obtain_graph(config, env)
        trainer = Trainer(config, env, device, data, Path(out))
        gc.collect()
        gc.disable()
        trainer.fit(on_epoch_end=lambda _trainer, _record: counts.append(live_maps()))
        gc.enable()
    print("maps " + json.dumps(counts), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
    exit_without_teardown(0)  # as `python -m train` leaves: gloo can abort CPython's own teardown
