"""The dataset doors that need no torch: which kind a `data.name` is (and what the config must give for it),
where its files are, whether a job could load them, what the doctor records of them, and preparing them.

The login node's checks (login/config_check.py), `make submit`'s plan and the doctor go through these without torch;
preparing a real dataset (`prepare_dataset`, what `python -m train data` runs on a login node, since compute nodes
often have no internet) imports torch only where the kind opens its files. Loading a graph, with torch:
train/graph/datasets/loading.py.
"""

from __future__ import annotations

from pathlib import Path

from train.config import DataConfig
from train.errors import UserError
from train.files import check_dir
from train.graph.datasets import kinds
from train.graph.datasets.kinds import DatasetKind


def data_root(config: DataConfig, data_dir: str | None = None) -> Path:
    """`data.root`, else `data_dir` ($DATA_DIR, resolved at the entry: `DistEnv.data_dir`), else ./data."""
    return Path(config.root or data_dir or "data")


def root_source(config: DataConfig, data_dir: str | None = None) -> str:
    """Which setting gave the data root, for messages."""
    return "data.root" if config.root else "DATA_DIR" if data_dir else "the default data root"


def checked_data_root(config: DataConfig, data_dir: str | None = None) -> Path:
    """The data root (`data_root`), refused naming its source when it is not a directory this user can use:
    a regular file, a dangling link, under a file, unreadable, or missing where it cannot be made."""
    root = data_root(config, data_dir)
    check_dir(root, f"{root_source(config, data_dir)}={str(root)!r}",
              "give the folder that holds (or will hold) the datasets", create=True)
    return root


def dataset_kind(data: DataConfig, task: str | None = None) -> DatasetKind:
    """The kind of `data.name`, with what the config must give for it checked, and `task` (task.name) among what
    it can be trained for where given (raises UserError)."""
    kind = kinds.dataset_kind(data.name)
    kind.check(data)
    if task is not None and task not in kind.tasks:
        raise UserError(f"task.name={task!r} does not fit data.name={data.name!r}: it can be trained for "
                        f"{', '.join(kind.tasks)} only (task.name={kind.tasks[0]}).")
    if data.target_node_type and kind.typed is False:
        raise UserError(kinds.untyped_target(data))
    return kind


def dataset_folder(config: DataConfig, data_dir: str | None = None) -> Path | None:
    """Where dataset `config.name` lives on disk (data.path for files; None for synthetic), for checks."""
    return kinds.dataset_kind(config.name).folder(config, data_root(config, data_dir))


def unprepared(config: DataConfig, data_dir: str | None = None) -> str:
    """'' when a job can load the dataset from its data root without internet; else one sentence saying what
    is missing and which `make data` prepares it (checked before a job is queued: login/config_check.py)."""
    kind = dataset_kind(config)
    root = data_root(config, data_dir)
    if kind.is_prepared(config, root):
        return ""
    return kind.unprepared(config, root, root_source(config, data_dir))


def probe_dataset(config: DataConfig, data_dir: str | None) -> dict:
    """What the doctor records of the dataset on this node (never downloading): the kind's probe."""
    return kinds.dataset_kind(config.name).probe(config, data_root(config, data_dir))


def prepare_dataset(config: DataConfig, data_dir: str | None = None) -> Path:
    """Download and process a real dataset into the data root (run once, on a login node)."""
    kind = dataset_kind(config)
    if not kind.in_data_root:
        return data_root(config, data_dir)  # generated, or the user's own files (checked as they load)
    root = checked_data_root(config, data_dir)
    kind.prepare(config, root)
    return root
