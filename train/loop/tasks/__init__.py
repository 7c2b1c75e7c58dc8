"""The task a run trains for (`task.name`): what the loop asks of it, one small class per task.

base: the `Task` interface (the epoch's seeds, its batches, a batch's loss and counts, the evaluation's figures).
node: node classification (one class or several tasks per node), the default.
link: link prediction: edges as seeds with negatives, an encoder from the model plug-in and a head.
"""

from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.tasks.node import NodeTask


def task_class(name: str) -> type[Task]:
    """The class of the task `name` (task.name; config.py has checked it)."""
    if name == "link":
        from train.loop.tasks.link import LinkTask

        return LinkTask
    return NodeTask


def task_for(parts: TaskParts) -> Task:
    """The task `config.task.name` names."""
    return task_class(parts.config.task.name)(parts)


__all__ = ["BatchResult", "NodeTask", "Task", "TaskParts", "task_class", "task_for"]
