"""The task a run trains for (`task.name`): what the loop asks of it, one small class per task.

base: the `Task` interface (the epoch's seeds, its batches, a batch's loss and counts, the evaluation's figures).
node: node classification (one class or several tasks per node), the default.
link: link prediction: edges as seeds with negatives, an encoder from the model plug-in and a head.
"""

from torch_geometric.data import Data

from train.config import Config
from train.graph.link_split import split_on_loading
from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.tasks.link import LinkTask
from train.loop.tasks.node import NodeTask


def task_class(name: str) -> type[Task]:
    """The class of the task `name` (task.name; config.py has checked it)."""
    if name == "link":
        return LinkTask
    return NodeTask


def task_for(parts: TaskParts) -> Task:
    """The task `config.task.name` names."""
    return task_class(parts.config.task.name)(parts)


def prepared_graph(config: Config, data: Data) -> Data:
    """What the task makes of the graph where it is loaded (a node's local rank 0, or each process), before the
    node shares it: a link task's edge split (train/graph/link_split.py), so its ranks map the message-passing
    graph and the split once per node; node classification trains on the graph as loaded."""
    if config.task.name == "link":
        return split_on_loading(data, config)
    return data


__all__ = ["BatchResult", "NodeTask", "Task", "TaskParts", "prepared_graph", "task_class", "task_for"]
