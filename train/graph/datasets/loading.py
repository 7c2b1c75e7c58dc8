"""Graphs to train on: a deterministic synthetic default, PyG's and OGB's datasets by name, or your own files.

The doors that load a graph, with torch: each asks the dataset's kind (train/graph/datasets/kinds.py) with the data
root resolved by train/graph/datasets/lookup.py, the doors that need no torch (re-exported here, where they were
before). Every loader returns a PyG `Data` with `x`, `y`, `edge_index` and the split as index
tensors `train_idx`, `val_idx`, `test_idx`. Preparing (downloading, processing) a real
dataset is done by exactly one process; `prepare_dataset` is what `python -m train data`
runs on a login node, since compute nodes often have no internet.
"""

from __future__ import annotations

from pathlib import Path

from torch_geometric.data import Data
from torch_geometric.transforms import NormalizeFeatures

from train.config import DataConfig
from train.errors import UserError
from train.graph.datasets import kinds
from train.graph.datasets.graph_files import own_files
from train.graph.datasets.hetero_files import files_target, is_hetero, read_hetero, read_igbh
from train.graph.datasets.hetero_synthetic import TARGET
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
from train.graph.datasets.own_rows import OwnedRows, hetero_own_rows, keep_own_rows, typed_own_rows
from train.graph.datasets.synthetic import hetero_synthetic_rows
from train.graph.datasets.synthetic import synthetic_graph as generate
from train.graph.form import form_of


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
        data = NormalizeFeatures()(data)
    return data


def own_rows_of(kind: DatasetKind, config: DataConfig, root: Path, owned: OwnedRows) -> Data:
    """The graph of `kind` whose x is the node's shard (train/graph/datasets/own_rows.py): generated kinds draw only
    their own rows (the very rows of the whole draw), the files kinds read only theirs from the memory-mapped files,
    and a downloaded set (Planetoid, OGB: small enough) is loaded whole, then cut."""
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
    return form_of(data).num_classes(data)


def synthetic_graph(config: DataConfig) -> Data:
    """The synthetic default graph (train/graph/datasets/synthetic.py)."""
    return generate(config)
