"""The tasks' table (train/builtin_tasks.py) is the one home of a task's name and facts: the config, the plan and
the loop's registry read it, and no module compares task.name with a task's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from train.builtin_tasks import TASKS, BuiltinTask
from train.config import load_config
from train.graph.datasets.kinds import DATASETS
from train.loop.tasks import task_class
from train.loop.tasks.base import Task
from train.plan.hops import batch_seeds

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", TASKS)
def test_each_rows_class_is_a_task_of_that_name(name):
    found = task_class(name)
    assert issubclass(found, Task) and found.name == name
    assert f"{found.__module__}:{found.__name__}" == TASKS[name].task_class


def test_the_rows_facts_are_the_plans():
    """A task whose seeds are edges plans each batch's endpoints and negatives; one of nodes, its seeds."""
    for name, row in TASKS.items():
        config = load_config("tiny", [f"task.name={name}"])
        seeds = batch_seeds(config)
        assert (seeds == config.sampler.batch_size) == (row.seeds == "nodes"), name


def test_every_dataset_kind_names_tasks_of_the_table():
    for name, kind in DATASETS.items():
        assert kind.tasks and set(kind.tasks) <= set(TASKS), name


def test_a_row_with_unknown_seeds_is_refused():
    with pytest.raises(ValueError, match="seeds='pairs'"):
        BuiltinTask("x:Y", seeds="pairs", edge_split=False, doc="")


def test_no_module_compares_task_name_with_a_tasks_name():
    """`task.name == "link"` was the task in six places: now each reads the row (task_row(name).edge_split, ...)."""
    compare = re.compile(r"task\.name\s*[!=]=\s*['\"]")
    found = [f"{path.relative_to(ROOT)}:{number}" for folder in ("train", "bench", "login")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1) if compare.search(line)]
    assert found == []
