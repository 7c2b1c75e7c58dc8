"""Graphs to train on: a deterministic synthetic default, PyG's and OGB's datasets by name, or your own files.

The doors that load a graph, with torch: each asks the dataset's kind (train/graph/datasets/kinds.py) with the data
root resolved by train/graph/datasets/lookup.py, the doors that need no torch (re-exported here, where they were
before). Every loader returns a PyG `Data` with `x`, `y`, `edge_index` and the split as index
tensors `train_idx`, `val_idx`, `test_idx`. Preparing (downloading, processing) a real
dataset is done by exactly one process; `prepare_dataset` is what `python -m train data`
runs on a login node, since compute nodes often have no internet.
"""

from __future__ import annotations

from torch_geometric.data import Data
from torch_geometric.transforms import NormalizeFeatures

from train.config import DataConfig
from train.graph.datasets.kind_graphs import from_pyg_masks  # noqa: F401 (where it was before)
from train.graph.datasets.kinds import DATASETS, DatasetKind  # noqa: F401 (where they were before)
from train.graph.datasets.lookup import (  # noqa: F401 (the doors without torch, where they were before)
    checked_data_root,
    data_root,
    dataset_folder,
    dataset_kind,
    prepare_dataset,
    probe_dataset,
    root_source,
    unprepared,
)
from train.graph.datasets.synthetic import synthetic_graph as generate
from train.graph.form import form_of


def load_graph(config: DataConfig, data_dir: str | None = None) -> Data:
    """The graph for `config`; a real dataset must already be prepared (see `prepare_dataset`).
    data.normalize_features: each node's features scaled to sum to 1 (PyG's NormalizeFeatures, the
    Planetoid papers' preprocessing), once, before the graph is shared."""
    kind = dataset_kind(config)
    root = data_root(config, data_dir)
    if kind.in_data_root:
        root = checked_data_root(config, data_dir)
        root.mkdir(parents=True, exist_ok=True)
    data = kind.load(config, root)
    if config.normalize_features:
        data = NormalizeFeatures()(data)
    return data


def num_classes(data: Data) -> int:
    return form_of(data).num_classes(data)


def synthetic_graph(config: DataConfig) -> Data:
    """The synthetic default graph (train/graph/datasets/synthetic.py)."""
    return generate(config)
