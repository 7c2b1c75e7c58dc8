"""A graph's labels: one class per node, or several binary tasks per node (multi-label), told apart by y's shape.

`y` of shape [N] (or [N, 1]) holds one class per node: single-label, trained with cross-entropy and scored by
accuracy. `y` of shape [N, T] with T > 1 holds T binary tasks per node (ogbn-proteins: 112): 0, 1, or NaN
where a node's task is unlabelled; trained with BCE and scored by ROC-AUC (train/loop/targets.py). The shape
alone decides, so OGB's ogbn-proteins (an integer [N, 112]) and a user's float [N, T] with NaNs need no knob;
a single binary task is the two-class single-label case ([N] of 0/1).
"""

from __future__ import annotations

import torch
from torch import Tensor

SHOWN_VALUES = 5  # bad values a message names (the smallest)


def is_multilabel(y: Tensor) -> bool:
    """Several binary tasks per node: y of shape [N, T] with T > 1."""
    return y.dim() == 2 and y.size(1) > 1


def num_outputs(y: Tensor) -> int:
    """The model's out_channels: the tasks of a multi-label y, else the classes (the largest label + 1)."""
    return int(y.size(1)) if is_multilabel(y) else int(y.max()) + 1


def multilabel_problem(y: Tensor) -> str | None:
    """What is wrong with a multi-label y's values (None: only 0, 1 and NaN), naming the bad values."""
    if y.dtype == torch.bool:
        return None
    if y.is_complex():
        return f"is complex ({y.dtype})"
    values = y if y.is_floating_point() else y.long()
    bad = ~((values == 0) | (values == 1) | (torch.isnan(values) if values.is_floating_point() else False))
    if not bool(bad.any()):
        return None
    found = torch.unique(values[bad])
    shown = ", ".join(f"{v:g}" for v in found[:SHOWN_VALUES].tolist())
    more = f" and {found.numel() - SHOWN_VALUES} other values" if found.numel() > SHOWN_VALUES else ""
    return f"holds {shown}{more} in {int(bad.sum())} entries"


def multilabel_targets(y: Tensor) -> Tensor:
    """A checked multi-label y as float32 (0., 1., NaN for unlabelled): what BCE and ROC-AUC read."""
    return y if y.dtype == torch.float32 else y.float()


def multilabel_expected(num_nodes: int) -> str:
    """What a multi-label y must be, for messages."""
    return (f"a multi-label y is {num_nodes} x T (one row per node, one column per task, T > 1) of 0 and 1, "
            "with NaN where a node's task is unlabelled")
