"""`python tests/harness/workers/worked_examples.py knob|task` with PYTHONPATH set to a copy of the package that
CONTRIBUTING.md's worked example was applied to (tests/test_worked_examples.py): checks what the example says
follows from its one declaration, and prints `ok`. An AssertionError's traceback names what did not follow."""
import argparse
import sys

from train.config import Config, load_config
from train.errors import UserError


def refusal(overrides: list[str]) -> str:
    try:
        load_config("tiny", overrides)
    except UserError as exc:
        return str(exc)
    raise AssertionError(f"{overrides} was accepted")


def knob() -> None:
    """trainer.warmup_epochs: taken, typed, range-checked, listed among the valid keys and by --help."""
    from train.cli.fit import add_config_arguments

    assert load_config("tiny", ["trainer.warmup_epochs=2"]).trainer.warmup_epochs == 2
    assert Config().trainer.warmup_epochs == 0
    assert refusal(["trainer.warmup_epochs=-1"]) == "trainer.warmup_epochs=-1 must be >= 0."
    assert refusal(["trainer.warmup_epochs=two"]) == "trainer.warmup_epochs='two' must be of type int."
    assert "warmup_epochs" in refusal(["trainer.warmup=1"])  # the valid keys a typo is told
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert "trainer.warmup_epochs (int, default 0; >= 0)" in parser.format_help()


def task() -> None:
    """task.name=node-smoothed: accepted, its class found by the loop's registry, every dataset kind takes it, and
    the plan reads its row."""
    from train.cli.plan_run import graph_size
    from train.graph.datasets.loading import dataset_kind
    from train.loop.tasks import task_class
    from train.loop.tasks.base import Task
    from train.plan.hops import batch_seeds
    from train.plan.terms import make_plan

    config = load_config("tiny", ["task.name=node-smoothed"])
    assert "node-smoothed" in refusal(["task.name=nodes"])  # the valid names a typo is told
    found = task_class("node-smoothed")
    assert issubclass(found, Task) and found.name == "node-smoothed" and found.__name__ == "SmoothedNodeTask"
    dataset_kind(config.data, "node-smoothed")
    assert batch_seeds(config) == config.sampler.batch_size  # seeds="nodes"
    assert make_plan(config, graph_size(config), 1, 1, gpus=False).rank_peak > 0


if __name__ == "__main__":
    {"knob": knob, "task": task}[sys.argv[1]]()
    print("ok")
