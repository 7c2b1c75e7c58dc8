"""The task a run trains for (`task.name`): what the loop asks of it, one small class per task, named by its row
in train/builtin_tasks.py (TASKS).

base: the `Task` interface (the epoch's seeds, its batches, a batch's loss and counts, the evaluation's figures).
node: node classification (one class or several tasks per node), the default.
link: link prediction: edges as seeds with negatives, an encoder from the model plug-in and a head.
"""

import importlib

from torch_geometric.data import Data

from train.builtin_tasks import task_row
from train.config import Config
from train.graph.link_split import split_on_loading
from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.tasks.node import NodeTask


def task_class(name: str) -> type[Task]:
    """The class of the task `name` (task.name, checked by the config): its row's `task_class`, imported here."""
    module, _, class_name = task_row(name).task_class.partition(":")
    return getattr(importlib.import_module(module), class_name)


def task_for(parts: TaskParts) -> Task:
    """The task `config.task.name` names."""
    return task_class(parts.config.task.name)(parts)


def prepared_graph(config: Config, data: Data) -> Data:
    """What the task makes of the graph where it is loaded (a node's local rank 0, or each process), before the
    node shares it: a task with an edge split (its row's `edge_split`: link prediction) splits the edges
    (train/graph/link_split.py), so its ranks map the message-passing graph and the split once per node; node
    classification trains on the graph as loaded."""
    if task_row(config.task.name).edge_split:
        return split_on_loading(data, config)
    return data


__all__ = ["BatchResult", "NodeTask", "Task", "TaskParts", "prepared_graph", "task_class", "task_for"]
