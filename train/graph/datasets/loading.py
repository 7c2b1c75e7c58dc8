"""Graphs to train on: a deterministic synthetic default, PyG's and OGB's datasets by name, or your own files.

The doors the package goes through: each asks the dataset's kind (train/graph/datasets/kinds.py) with the data root
resolved here. Every loader returns a PyG `Data` with `x`, `y`, `edge_index` and the split as index
tensors `train_idx`, `val_idx`, `test_idx`. Preparing (downloading, processing) a real
dataset is done by exactly one process; `prepare_dataset` is what `python -m train data`
runs on a login node, since compute nodes often have no internet.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from train.config import DataConfig
from train.errors import UserError
from train.files import check_dir
from train.graph.datasets import kinds
from train.graph.datasets.kinds import DATASETS, DatasetKind, from_pyg_masks  # noqa: F401 (where they were before)

if TYPE_CHECKING:  # PyG is imported where a graph is made (the doctor probes a synthetic graph without it)
    from torch_geometric.data import Data

    from train.graph.datasets.own_rows import OwnedRows


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


def load_graph(config: DataConfig, data_dir: str | None = None, owned: OwnedRows | None = None) -> Data:
    """The graph for `config`; a real dataset must already be prepared (see `prepare_dataset`).
    data.normalize_features: each node's features scaled to sum to 1 (PyG's NormalizeFeatures, the
    Planetoid papers' preprocessing), once, before the graph is shared. `owned` (data.features=sharded): x holds
    this node's own rows alone, never the whole matrix (own_rows_of)."""
    kind = dataset_kind(config)
    root = data_root(config, data_dir)
    if kind.in_data_root:
        root = checked_data_root(config, data_dir)
        root.mkdir(parents=True, exist_ok=True)
    data = kind.load(config, root) if owned is None else own_rows_of(kind, config, root, owned)
    if config.normalize_features:
        from torch_geometric.transforms import NormalizeFeatures

        data = NormalizeFeatures()(data)
    return data


def own_rows_of(kind: DatasetKind, config: DataConfig, root: Path, owned: OwnedRows) -> Data:
    """The graph of `kind` whose x is the node's shard (train/graph/datasets/own_rows.py): generated kinds draw only
    their own rows (the very rows of the whole draw), the files kinds read only theirs from the memory-mapped files,
    and a downloaded set (Planetoid, OGB: small enough) is loaded whole, then cut."""
    from train.graph.datasets.graph_files import own_files
    from train.graph.datasets.hetero_files import files_target, is_hetero, read_hetero, read_igbh
    from train.graph.datasets.hetero_synthetic import TARGET, hetero_synthetic_rows
    from train.graph.datasets.own_rows import hetero_own_rows, keep_own_rows, typed_own_rows
    from train.graph.datasets.synthetic import synthetic_graph as generate

    source = f"data.path={config.path}"
    if isinstance(kind, kinds.Synthetic):
        return generate(config, owned)
    if isinstance(kind, kinds.HeteroSynthetic):
        hetero, parts = hetero_synthetic_rows(config, owned)
        widths = {node_type: int(rows.size(1)) for node_type, rows in parts.items()}
        return typed_own_rows(hetero, parts, widths, owned, TARGET, config.featureless, "data.name=hetero-synthetic")
    if isinstance(kind, kinds.Igbh):
        hetero = read_igbh(Path(config.path), config.num_classes)
        return hetero_own_rows(hetero, owned, kinds.IGBH_TYPES[0], config.featureless, source)
    if isinstance(kind, kinds.Files):
        if not is_hetero(config.path):
            if config.target_node_type:
                raise UserError(kinds.untyped_target(config))
            return own_files(config.path, owned)
        hetero = read_hetero(config.path)
        return hetero_own_rows(hetero, owned, files_target(config, hetero), config.featureless, source)
    return keep_own_rows(kind.load(config, root), owned)


def num_classes(data: Data) -> int:
    from train.graph.form import form_of

    return form_of(data).num_classes(data)


def synthetic_graph(config: DataConfig) -> Data:
    """The synthetic default graph (train/graph/datasets/synthetic.py)."""
    from train.graph.datasets.synthetic import synthetic_graph as generate

    return generate(config)
