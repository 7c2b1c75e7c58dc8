"""Checks of a `fit` that need no rendezvous, run on every rank before anything is written.

A refused run must leave nothing behind: these checks run before the process group exists,
and the run directory and its config.yaml are written only once the data is loaded and the
resume decision (trainer.resume) has been accepted (train/loop/fit.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from train.cluster.distenv import DistEnv
from train.config import Config, check_layer_fanouts
from train.errors import UserError
from train.files import check_file
from train.graph.datasets.lookup import checked_data_root, data_root, dataset_kind
from train.loop import tensorboard_events
from train.loop.rundir import decide
from train.loop.tasks import task_class
from train.models.contract import check_model


def planned_run_dir(config: Config, env: DistEnv) -> Path:
    """The run directory the run will take (train/loop/rundir.py decides; a timestamped one may differ by seconds)."""
    return decide(config.output.dir, env)[0]


def check_writable_dir(path: Path, what: str) -> None:
    """`path` is a directory we can write, or can be created: no file in the way, not read-only."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{what}={str(path)!r} is a file, not a directory; give a directory path.")
    ancestor = path
    while not ancestor.exists():
        if ancestor.is_symlink():
            raise UserError(f"{what}={str(path)!r}: {str(ancestor)!r} is a dangling symbolic link.")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UserError(f"{what}={str(path)!r} cannot be created: {str(ancestor)!r} is a file, not a directory.")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UserError(f"{what}={str(path)!r} cannot be written: {str(ancestor)!r} is read-only for this user; "
                        "give a writable directory.")


def check_fit(config: Config, env: DistEnv) -> None:
    """Everything about a fit's input that each rank can check alone; `UserError` names the value."""
    kind = dataset_kind(config.data, config.task.name)  # a known name, what its kind needs, the task it takes
    if kind.in_data_root or os.path.lexists(data_root(config.data, env.data_dir)):
        checked_data_root(config.data, env.data_dir)  # a file, a link loop... named; unused and absent: fine
    what = "output.dir" if config.output.dir else "the run directory"
    check_writable_dir(planned_run_dir(config, env), what)
    resume = config.trainer.resume
    if resume not in ("auto", "never"):  # a missing, empty or unreadable file, a directory, a FIFO: named
        check_file(resume, f"trainer.resume={resume!r}", "expected auto, never, or the path of a checkpoint file "
                   "(e.g. runs/<id>/checkpoints/ckpt-e000002-s00000000.pt)")
    check_model_input(config)
    check_outputs(config)


def check_outputs(config: Config) -> None:
    """output.tensorboard=true where the tensorboard package is missing (auto says so and trains without)."""
    missing = tensorboard_events.unavailable() if config.output.tensorboard == "true" else None
    if missing:
        raise UserError(f"output.tensorboard=true, but {missing}; or output.tensorboard=auto to train without "
                        "event files (the log then says so).")


def check_model_input(config: Config) -> None:
    """The model: imported, model.kwargs checked, run on a tiny sampled batch, and its fanouts against its layers
    (a user's model says only through its forward whether it reads the graph)."""
    step = check_model(config.model)
    check_layer_fanouts(config, step.uses_graph)
    if step.one_row_norm and config.sampler.batch_size == 1 and task_class(config.task.name).seed_is_one_row:
        raise UserError(f"sampler.batch_size=1 makes every batch one node, and the model's batch norm "
                        f"({step.one_row_norm}) cannot train on one row (its batch statistics); give a "
                        "sampler.batch_size of 2 or more, or a norm without batch statistics (model.kwargs.norm, "
                        "e.g. layer_norm).")
