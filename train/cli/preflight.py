"""Checks of a `fit` that need no rendezvous, run on every rank before anything is written.

A refused run must leave nothing behind: these checks run before the process group exists,
and the run directory and its config.yaml are written only once the data is loaded and the
resume decision (trainer.resume) has been accepted (train/loop/fit.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from train.config import Config
from train.dist.distenv import DistEnv
from train.errors import UserError


def planned_run_dir(config: Config, env: DistEnv) -> Path:
    """The run directory, or (a timestamped run) the folder it will be created in."""
    if config.output.dir:
        return Path(config.output.dir)
    return Path("runs", env.job_id) if env.job_id else Path("runs")


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
    from train.graph.data import check_dataset_name, data_root

    check_dataset_name(config.data.name)
    root = data_root(config.data, env.data_dir)
    if root.exists() and not root.is_dir():
        source = "data.root" if config.data.root else "DATA_DIR" if env.data_dir else "the default data root"
        raise UserError(f"{source}={str(root)!r} is a file, not a directory; give the datasets folder.")
    what = "output.dir" if config.output.dir else "the run directory"
    check_writable_dir(planned_run_dir(config, env), what)
    resume = config.trainer.resume
    if resume not in ("auto", "never"):
        path = Path(resume)
        if not path.is_file():
            raise UserError(f"trainer.resume={resume!r} is not a file; expected auto, never, or the path of a "
                            "checkpoint file (e.g. runs/<id>/checkpoints/ckpt-e000002-s00000000.pt).")
        if not os.access(path, os.R_OK):
            raise UserError(f"trainer.resume={resume!r} cannot be read by this user.")
    from train.loop.models.contract import check_model

    check_model(config.model)  # imports the model, checks model.kwargs, runs it on a tiny sampled batch
