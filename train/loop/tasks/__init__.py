"""The task a run trains for (`task.name`): what the loop asks of it, one small class per task.

base: the `Task` interface (the epoch's seeds, its batches, a batch's loss and counts, the evaluation's figures).
node: node classification (one class or several tasks per node), the default.
link: link prediction: edges as seeds with negatives, an encoder from the model plug-in and a head.
"""

from train.loop.tasks.base import BatchResult, Task, TaskParts
from train.loop.tasks.node import NodeTask


def task_for(parts: TaskParts) -> Task:
    """The task `config.task.name` names (config.py has checked the name)."""
    if parts.config.task.name == "link":
        from train.loop.tasks.link import LinkTask

        return LinkTask(parts)
    return NodeTask(parts)


__all__ = ["BatchResult", "NodeTask", "Task", "TaskParts", "task_for"]
