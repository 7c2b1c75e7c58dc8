"""`python -m tests.harness.workers.record_sink OUT_DIR [OVERRIDE ...]`: one rank (WORLD_SIZE=1 ... in its
environment) trains the tiny config with a third sink subscribed the way a new output would be (one class
added to train.loop.outputs.SINKS) and a step callback; prints what each received, in order, as
`records {"sink": [...], "callback": [...]}`. tests/test_outputs.py checks them against metrics.jsonl."""
import dataclasses
import json
import os
import sys
from pathlib import Path

from train.cluster.distenv import resolve
from train.cluster.procgroup import process_group
from train.config import load_config
from train.errors import exit_without_teardown
from train.graph.sharing.shared_graph import shared_graphs
from train.loop import outputs
from train.loop.fit import Trainer
from train.loop.records import Sink
from train.loop.run import obtain_graph

RECEIVED: list[dict] = []


class Recorder(Sink):
    """Every call, with its record, as the sinks get them."""

    def __init__(self, config, env, out_dir):
        RECEIVED.append({"call": "init", "out_dir": str(out_dir)})

    def start(self, history):
        RECEIVED.append({"call": "start", "epochs": [r.epoch for r in history]})

    def step(self, record):
        RECEIVED.append({"call": "step", **dataclasses.asdict(record)})

    def epoch(self, record):
        RECEIVED.append({"call": "epoch", **record.row()})

    def close(self):
        RECEIVED.append({"call": "close"})


def main(out_dir: str, overrides: list[str]) -> None:
    outputs.SINKS.append(Recorder)  # what subscribing a new output takes
    config = load_config("tiny", ["dist.backend=gloo", "output.progress=lines", *overrides])
    env = resolve(os.environ)
    callback: list[dict] = []

    def on_step_end(trainer, record) -> bool:
        callback.append(dataclasses.asdict(record))
        return False

    with process_group(env, config.dist) as (_backend, device), shared_graphs():
        trainer = Trainer(config, env, device, obtain_graph(config, env), Path(out_dir))
        trainer.fit(on_step_end=on_step_end)
    print("records " + json.dumps({"sink": RECEIVED, "callback": callback}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
    exit_without_teardown(0)  # as `python -m train` leaves: gloo can abort CPython's own teardown
