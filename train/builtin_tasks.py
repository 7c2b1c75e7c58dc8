"""The tasks `task.name` names, one row each: the one home of their names and of the facts the torch-free parts
ask of a task.

Plain data with no import of torch, beside train/builtin_models.py: the config check (the allowed task.name
values, on a login node), the memory plan (train/plan/: a batch's seeds, the split a task holds) and the loop's
registry (train/loop/tasks/__init__.py: the class that trains it) read it. A new task is one row here and one
`Task` class (train/loop/tasks/base.py); CONTRIBUTING.md ("Adding a task") shows the steps.
"""

from __future__ import annotations

from dataclasses import dataclass

SEEDS = ("nodes", "edges")  # what an epoch's seeds are


@dataclass(frozen=True)
class BuiltinTask:
    """One task's row.

    Args:
        task_class: `package.module:ClassName` of its `Task` subclass (imported only by the loop, with torch).
        seeds: what an epoch's seeds are: "nodes" (a batch is its seed nodes) or "edges" (a batch's seeds are its
            edges' endpoints and their negatives: train/plan/hops.py counts them so).
        edge_split: whether the graph it trains on holds an edge split, made where the graph is loaded
            (train/graph/link_split.py) unless the dataset has its own.
        doc: what it trains, for the docs.
    """

    task_class: str
    seeds: str
    edge_split: bool
    doc: str

    def __post_init__(self):
        if self.seeds not in SEEDS:  # the table's own mistake, caught when the module is imported
            raise ValueError(f"seeds={self.seeds!r}: expected one of {SEEDS}")


TASKS: dict[str, BuiltinTask] = {
    "node": BuiltinTask("train.loop.tasks.node:NodeTask", seeds="nodes", edge_split=False,
                        doc="classify nodes (one class, or several tasks per node)"),
    "link": BuiltinTask("train.loop.tasks.link:LinkTask", seeds="edges", edge_split=True,
                        doc="predict edges: edges as seeds with negatives, an encoder and a head"),
}


def task_row(name: str) -> BuiltinTask:
    """The row of `name` (task.name, which the config has checked against TASKS)."""
    return TASKS[name]
