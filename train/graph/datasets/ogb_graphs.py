"""OGB's datasets opened with torch and PyG through `ogb`'s PyG loaders: the node-property datasets
(train/graph/datasets/ogb_nodes.py) and ogbl-citation2 with its own split (train/graph/datasets/ogb_links.py).

Those two modules hold the datasets' facts, which the config's checks and the plan read without torch; this one
adapts what ogb's loaders return to the project's `Data`. The `ogb` package is an optional dependency
(`pip install '.[ogb]'`), imported only when an OGB dataset is opened.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage
from torch_geometric.utils import scatter, to_undirected

from train.errors import UserError
from train.graph.datasets.ogb_links import NEGATIVES, OGB_LINK_DATASETS, SOURCE, TARGET
from train.graph.datasets.ogb_nodes import OGB_LOADERS, OGB_NODE_DATASETS, OGB_VERSION, UNLABELED, check_release
from train.graph.datasets.raw_files import file_problem, prepare_again
from train.graph.labels import is_multilabel, multilabel_expected, multilabel_problem, multilabel_targets
from train.graph.link_fields import (
    HELD_OUT_SPLITS,
    LINK_SPLITS,
    neg_dst_key,
    neg_dst_problem,
    pos_edges_key,
    pos_edges_problem,
)
from train.graph.typed_graph import typed_graph


def _processed_globals() -> list:
    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, np._core.multiarray.scalar, np.dtype,
            np.dtypes.Int64DType, np.dtypes.Int32DType]


def ogb_dataset_class(task: str = "nodeproppred"):
    """ogb's PyG dataset class for `task` (OGB_LOADERS) without its prompts (imported here: `ogb` is optional)."""
    try:
        base = getattr(importlib.import_module(f"ogb.{task}"), OGB_LOADERS[task])
        from ogb.utils.url import download_url, extract_zip
    except ImportError as exc:
        raise UserError(f"the OGB datasets need the `ogb` package, which is not installed ({exc}): "
                        f"pip install ogb=={OGB_VERSION} (or pip install '.[ogb]').") from None

    class Dataset(base):
        def __init__(self, name: str, root: str):
            # ogb 1.3.6 torch.loads its processed file with torch's default, weights_only since 2.6:
            # allow what it holds (PyG's storage classes, num_nodes as a numpy integer), only that.
            with torch.serialization.safe_globals(_processed_globals()):
                super().__init__(name, root=root)

        def download(self) -> None:
            # ogb asks "y/N" on stdin before any file over 1 GB; `make data DATASET=...` is the yes.
            path = download_url(self.meta_info["url"], self.original_root)
            extract_zip(path, self.original_root)
            os.unlink(path)
            shutil.rmtree(self.root)
            shutil.move(os.path.join(self.original_root, self.download_name), self.root)

    return Dataset


def edge_mean_features(edge_index: Tensor, edge_attr: Tensor, num_nodes: int) -> Tensor:
    """Each node's features as the mean of its in-edges' features (0 for a node without edges): ogbn-proteins'
    node features in OGB's examples (`adj_t.mean(dim=1)`) and PyG's (examples/ogbn_proteins_deepgcn.py)."""
    return scatter(edge_attr.float(), edge_index[1], dim=0, dim_size=num_nodes, reduce="mean")


def ogb_labels(name: str, y: Tensor) -> Tensor:
    """OGB's labels as the project keeps them: one class per node as a flat long tensor (UNLABELED where OGB has
    NaN), or several tasks per node as checked floats."""
    if is_multilabel(y):
        problem = multilabel_problem(y)
        if problem:
            raise UserError(f"dataset {name!r}: its labels (node-label) {problem}; {multilabel_expected(y.size(0))}. "
                            f"Delete its folder and {prepare_again(name)}.")
        return multilabel_targets(y)
    y = y.view(-1)
    if y.is_floating_point():
        y = torch.where(torch.isnan(y), torch.full_like(y, UNLABELED), y).long()
    return y


def open_ogb(name: str, root: Path) -> Data:
    """ogbn-`name` under `root` as x, y (`ogb_labels`), edge_index and its split."""
    info = OGB_NODE_DATASETS[name]
    dataset_class = ogb_dataset_class()
    check_release(name, root / info.folder, info.release)
    dataset = dataset_class(name, root=str(root))
    split = dataset.get_idx_split()
    graph = dataset[0]
    if info.target:
        return typed_graph(mag_hetero(graph, split, info.target), info.target, source=f"dataset {name!r}")
    x = graph.x if info.features == "nodes" else edge_mean_features(graph.edge_index, graph.edge_attr, graph.num_nodes)
    edges = {} if getattr(graph, "edge_attr", None) is None else {"edge_attr": graph.edge_attr.float()}  # proteins' 8
    return Data(x=x, y=ogb_labels(name, graph.y), edge_index=graph.edge_index, **edges,
                train_idx=split["train"].long(), val_idx=split["valid"].long(), test_idx=split["test"].long())


def mag_hetero(graph, split: dict, target: str):
    """ogb's heterogeneous graph (its dicts by type) as a PyG `HeteroData`, as OGB's R-GCN example reads it: cites
    made undirected, every other relation with its reverse; the target type's labels and official split."""
    hetero = HeteroData()
    for node_type, count in graph.num_nodes_dict.items():
        hetero[node_type].num_nodes = int(count)
    for node_type, x in graph.x_dict.items():
        hetero[node_type].x = x.float()
    hetero[target].y = ogb_labels("ogbn-mag", graph.y_dict[target])
    for name, part in (("train", "train"), ("val", "valid"), ("test", "test")):
        hetero[target][f"{name}_idx"] = split[part][target].long()
    for (src, rel, dst), edge_index in graph.edge_index_dict.items():
        if src == dst:
            hetero[src, rel, dst].edge_index = to_undirected(edge_index, num_nodes=int(graph.num_nodes_dict[src]))
        else:
            hetero[src, rel, dst].edge_index = edge_index
            hetero[dst, f"rev_{rel}", src].edge_index = edge_index.flip(0)
    return hetero


def _split_globals() -> list:
    """What OGB's pickled split files hold besides plain containers: NumPy arrays of integers. NumPy 1 (OGB's)
    named the array's rebuilder numpy.core.multiarray._reconstruct, NumPy 2 numpy._core: both, only that."""
    rebuild = (np._core if hasattr(np, "_core") else np.core).multiarray._reconstruct  # NumPy 2, else 1
    names = [(rebuild, f"{package}.multiarray._reconstruct") for package in ("numpy.core", "numpy._core")]
    # a dtype is rebuilt as its class (Int64DType, ...) and then given its state; floats too, to be named as such
    return [rebuild, *names, np.ndarray, np.dtype, np.dtypes.Int64DType, np.dtypes.Int32DType, np.dtypes.Float64DType,
            np.dtypes.Float32DType]


def _unpickling_detail(exc: Exception) -> str:
    """The reason in torch's long weights-only refusal (after "WeightsUnpickler error:"), else its first line."""
    text = str(exc)
    reason = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0] \
        if "WeightsUnpickler error:" in text else text.splitlines()[0] if text else ""
    return " ".join(reason.split())[:200]


def read_split_file(name: str, path: Path) -> dict:
    """One of OGB's split files as a dict of arrays; a missing, damaged or foreign file named (UserError)."""
    try:
        with torch.serialization.safe_globals(_split_globals()):
            loaded = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
        problem = file_problem(path, thorough=True)
        if problem == "missing":
            raise UserError(f"dataset {name!r}: {path} is missing; {prepare_again(name)}.") from None
        what = problem or f"not one of OGB's split files ({type(exc).__name__}: {_unpickling_detail(exc)})"
        raise UserError(f"dataset {name!r}: {path} is {what}. Delete it and {prepare_again(name)}.") from None
    if not isinstance(loaded, dict):
        raise UserError(f"dataset {name!r}: {path} holds a {type(loaded).__name__}, not OGB's dict of arrays. "
                        f"Delete it and {prepare_again(name)}.")
    return loaded


def _array(name: str, path: Path, arrays: dict, key: str) -> torch.Tensor:
    """arrays[key] as a tensor; anything that is not an array of numbers named (UserError)."""
    try:
        return torch.as_tensor(arrays[key])
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"dataset {name!r}: {path}: its {key} is a {type(arrays[key]).__name__} that is not an array "
                        f"of numbers. Delete it and {prepare_again(name)}.") from None


def split_fields(name: str, split: str, path: Path, arrays: dict, num_nodes: int) -> dict[str, torch.Tensor]:
    """One split's fields (train/graph/link_fields.py) from OGB's arrays, each checked; a bad one named."""
    wanted = (SOURCE, TARGET, NEGATIVES) if split in HELD_OUT_SPLITS else (SOURCE, TARGET)
    missing = [key for key in wanted if key not in arrays]
    if missing:
        raise UserError(f"dataset {name!r}: {path} holds no {', '.join(missing)} (it holds: "
                        f"{', '.join(map(str, arrays)) or 'nothing'}). Delete it and {prepare_again(name)}.")
    source, target = (_array(name, path, arrays, key).reshape(-1) for key in (SOURCE, TARGET))
    fields = {}
    problem = (f"its {SOURCE} ({source.numel():,}) and {TARGET} ({target.numel():,}) differ in length"
               if source.numel() != target.numel() else None)
    if problem is None:
        edges = torch.stack([source, target])
        problem = pos_edges_problem(edges, num_nodes)
        problem = problem and f"its {SOURCE}, {TARGET} {problem}"
        fields[pos_edges_key(split)] = edges.long()
    if problem is None and NEGATIVES in wanted:
        negatives = _array(name, path, arrays, NEGATIVES)
        problem = neg_dst_problem(negatives, source.numel(), num_nodes)
        problem = problem and f"its {NEGATIVES} {problem}"
        fields[neg_dst_key(split)] = negatives.long()
    if problem:
        raise UserError(f"dataset {name!r}: {path}: {problem}. Delete it and {prepare_again(name)}.")
    return fields


def open_ogbl(name: str, root: Path) -> Data:
    """ogbl-`name` under `root` as x, the undirected message-passing graph of its training edges, and its split."""
    info = OGB_LINK_DATASETS[name]
    folder = root / info.folder
    dataset_class = ogb_dataset_class("linkproppred")
    check_release(name, folder)
    graph = dataset_class(name, root=str(root))[0]
    num_nodes = int(graph.num_nodes)
    fields: dict[str, torch.Tensor] = {}
    for split in LINK_SPLITS:
        path = folder / info.split_file(split)
        fields.update(split_fields(name, split, path, read_split_file(name, path), num_nodes))
    edge_index = to_undirected(graph.edge_index, num_nodes=num_nodes)
    return Data(x=graph.x.float(), edge_index=edge_index, num_nodes=num_nodes, **fields)
