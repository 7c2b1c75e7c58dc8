"""A heterogeneous graph from files: a saved PyG `HeteroData` (.pt), a folder of node-type and relation folders
(`data.name=files`), or a folder in IGBH's layout (`data.name=igbh`), read as a `HeteroData` and then turned
into the typed graph training reads (train/graph/typed_graph.py).

The folder (`data.path`): one folder per node type, `<type>/x.npy` (N x F floats; a type without x has as many
nodes as the largest id its relations name, plus one), the target type's `<type>/y.npy` and split
(`train_idx`/`val_idx`/`test_idx` or `_mask`, in the target type's own ids), and one folder per relation
`<src>__<rel>__<dst>/edge_index.npy` (2 x E, or E x 2, of ids within each end's type). `.npy` files are
memory-mapped and `.pt` files loaded with mmap=True, as train/graph/datasets/graph_files.py reads a homogeneous folder.

IGBH (IllinoisGraphBenchmark/IGB-Datasets, MLPerf's GNN benchmark): `<path>/[processed/]<type>/node_feat.npy`,
`paper/node_label_19.npy` (or `node_label_2K.npy` for 2983 classes: data.num_classes), and
`<src>__<rel>__<dst>/edge_index.npy` (E x 2), for MLPerf's four node types and relations. Its split is IGB's:
the first 60% of the papers train, the next 20% validate, the rest test (`paper/train_idx.npy` and
`val_idx.npy` there take precedence: MLPerf's own split). Each relation's reverse is added (`rev_<rel>`), as
MLPerf's reference does, so messages reach papers from authors, institutes and fields. Its types, relations, label
files and published sizes, which the config's checks read without torch: train/graph/datasets/igbh.py.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import torch
from torch import Tensor
from torch_geometric.data import HeteroData
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import BaseStorage, EdgeStorage, GlobalStorage, NodeStorage

from train.config import DataConfig
from train.errors import UserError
from train.files import file_problem
from train.graph.datasets.graph_files import ARRAYS, SUFFIXES, _read_array
from train.graph.datasets.igbh import IGBH_RELATIONS, IGBH_SPLIT, IGBH_TYPES, igbh_label_name
from train.graph.labels import num_outputs
from train.graph.sizes import GraphSize
from train.graph.typed_graph import node_count
from train.graph.typed_meta import HeteroMeta, check_target


def saved_hetero(path: Path) -> bool:
    """Whether a .pt file holds a PyG `HeteroData` (its pickle names the class), without loading it. Only a regular
    file is opened (a FIFO would block the open forever): any other is the homogeneous reader's to name."""
    if file_problem(path) is not None:
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            pickle = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
            return pickle is not None and b"HeteroData" in archive.read(pickle)
    except (OSError, zipfile.BadZipFile):
        return False


def hetero_folder(path: Path) -> bool:
    """Whether a folder holds a heterogeneous graph: folders (node types and relations), and none of a homogeneous
    graph's arrays (graph_files.ARRAYS) at its top, whatever they are (an odd one, a folder named x.npy say, is the
    homogeneous reader's to name)."""
    if not path.is_dir():
        return False
    try:
        children = list(path.iterdir())
    except OSError:  # a folder this user cannot list: the homogeneous reader names what it cannot read
        return False
    homogeneous = any(child.name.split(".")[0] in ARRAYS for child in children)
    return not homogeneous and any(child.is_dir() for child in children)


def is_hetero(path: str) -> bool:
    where = Path(path)
    return hetero_folder(where) or where.suffix == ".pt" and saved_hetero(where)


def read_saved_hetero(path: Path):
    """The `HeteroData` of a .pt file, loaded memory-mapped with only PyG's data classes allowed."""
    allowed = [HeteroData, BaseStorage, NodeStorage, EdgeStorage, GlobalStorage, DataEdgeAttr, DataTensorAttr]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, mmap=True, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a file that does not read is the finding
        raise UserError(f"data.path: {path} cannot be read as a saved PyG HeteroData ({type(exc).__name__}: "
                        f"{exc}); save it with torch.save(hetero_data, path).") from None


def _array(folder: Path, name: str) -> Tensor | None:
    found = [folder / f"{name}{suffix}" for suffix in SUFFIXES if os.path.lexists(folder / f"{name}{suffix}")]
    if len(found) > 1:
        raise UserError(f"data.path: {folder} holds {name} twice ({', '.join(p.name for p in found)}); keep one.")
    return _read_array(found[0]) if found else None


def _edge_index(folder: Path, name: str) -> Tensor:
    """A relation's edge_index as 2 x E: IGB saves E x 2."""
    edges = _array(folder, "edge_index")
    if edges is None:
        raise UserError(f"data.path: relation folder {folder} has no edge_index.npy (or .pt); give the relation's "
                        f"edges as 2 x num_edges ids ({name}).")
    return edges.t() if edges.dim() == 2 and edges.size(1) == 2 and edges.size(0) != 2 else edges


def _relation(name: str) -> tuple[str, str, str] | None:
    parts = name.split("__")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def _add_relation(hetero, relation: tuple[str, str, str], edge_index: Tensor, counts: dict[str, int]) -> None:
    """The relation's edges; a featureless end type (absent from `counts`, which holds the types with x) counts
    as many nodes as the largest id its relations name, plus one."""
    hetero[relation].edge_index = edge_index
    for row, end in ((0, relation[0]), (1, relation[2])):
        if hetero[end].get("x") is None and edge_index.numel():
            hetero[end].num_nodes = max(int(hetero[end].get("num_nodes") or 0), int(edge_index[row].max()) + 1)


def read_hetero_folder(folder: Path):
    """A folder of `<type>/` and `<src>__<rel>__<dst>/` folders as a `HeteroData` (module docstring)."""
    hetero, counts = HeteroData(), {}
    children = sorted(child for child in folder.iterdir() if child.is_dir())
    for child in children:
        if _relation(child.name) is None:
            x = _array(child, "x")
            if x is not None:
                hetero[child.name].x = x
                counts[child.name] = int(x.size(0))
            for name in ("y", *(f"{s}_{k}" for s in ("train", "val", "test") for k in ("idx", "mask"))):
                value = _array(child, name)
                if value is not None:
                    hetero[child.name][name] = value
    for child in children:
        if (relation := _relation(child.name)) is not None:
            _add_relation(hetero, relation, _edge_index(child, child.name), counts)
    return hetero


def igbh_folder(path: Path) -> Path:
    """The folder that holds IGBH's type folders: data.path, or its `processed/`."""
    return path / "processed" if (path / "processed" / "paper").is_dir() else path


def read_igbh(path: Path, num_classes: int):
    """IGBH's folder as a `HeteroData` with the papers' labels and split, each relation with its reverse."""
    folder, hetero, counts = igbh_folder(path), HeteroData(), {}
    label_name = igbh_label_name(num_classes)
    for node_type in IGBH_TYPES:
        x = _array(folder / node_type, "node_feat")
        if x is None:
            raise UserError(f"data.path: {folder / node_type} has no node_feat.npy; data.name=igbh reads IGBH's "
                            f"layout: {', '.join(IGBH_TYPES)}/node_feat.npy (IllinoisGraphBenchmark/IGB-Datasets).")
        hetero[node_type].x, counts[node_type] = x, int(x.size(0))
    papers = hetero["paper"]
    y = _array(folder / "paper", label_name)
    if y is None:
        raise UserError(f"data.path: {folder / 'paper'} has no {label_name}.npy (data.num_classes={num_classes}).")
    papers.y = y
    own = {split: _array(folder / "paper", f"{split}_idx") for split in ("train", "val")}
    n = counts["paper"]
    train, val = int(n * IGBH_SPLIT[0]), int(n * IGBH_SPLIT[1])
    papers.train_idx = own["train"] if own["train"] is not None else torch.arange(train)
    papers.val_idx = own["val"] if own["val"] is not None else torch.arange(train, train + val)
    # MLPerf's own split has no test papers: test then reports the validation papers (docs/data.md)
    papers.test_idx = torch.arange(train + val, n) if own["train"] is None else papers.val_idx
    for relation in IGBH_RELATIONS:
        name = "__".join(relation)
        edge_index = _edge_index(folder / name, name)
        _add_relation(hetero, relation, edge_index, counts)
        if relation[0] != relation[2]:
            _add_relation(hetero, (relation[2], f"rev_{relation[1]}", relation[0]), edge_index.flip(0), counts)
    return hetero


def read_hetero(path: str):
    """data.name=files: the `HeteroData` at data.path, a saved one or a folder."""
    where = Path(path)
    if where.is_dir():
        return read_hetero_folder(where)
    value = read_saved_hetero(where)
    if not hasattr(value, "node_types"):
        raise UserError(f"data.path: {where} holds a {type(value).__name__}, expected a PyG HeteroData.")
    return value


def hetero_meta_of(hetero, target: str, source: str):
    """The types and sizes of a `HeteroData` without building its typed graph: what the plan reads."""
    node_types = tuple(hetero.node_types)
    check_target(node_types, target, source)
    widths = tuple(int(hetero[t].x.size(1)) if hetero[t].get("x") is not None else 0 for t in node_types)
    return HeteroMeta(node_types, tuple(tuple(e) for e in hetero.edge_types),
                      tuple(node_count(hetero[t], t) for t in node_types), widths, target)


def files_target(data: DataConfig, hetero) -> str:
    """data.target_node_type for the user's heterogeneous graph: needed, unless the graph has one node type."""
    if data.target_node_type or len(hetero.node_types) == 1:
        return data.target_node_type or hetero.node_types[0]
    raise UserError(f"data.path={data.path} holds a heterogeneous graph; set data.target_node_type to the node type "
                    f"to classify, one of: {', '.join(hetero.node_types)}.")


def hetero_size(hetero, target: str, source: str, classes: int | None = None) -> GraphSize:
    """The plan's size of a `HeteroData` (memory-mapped: only its labels and splits are read)."""
    meta = hetero_meta_of(hetero, target, source)
    store = hetero[target]
    if store.get("y") is None:
        raise UserError(f"{source}: the target node type {target!r} has no y; give its labels as "
                        f"data[{target!r}].y (one class per node, -1 for a node outside every split).")
    split = tuple(int(store[f"{s}_idx"].numel()) if store.get(f"{s}_idx") is not None
                  else int(store[f"{s}_mask"].sum()) if store.get(f"{s}_mask") is not None else 0
                  for s in ("train", "val", "test"))
    edges = sum(int(hetero[e].edge_index.numel() // 2) for e in hetero.edge_types)
    return GraphSize(sum(meta.counts), edges, max(max(meta.widths), 1),
                     classes or num_outputs(store.y.long() if store.y.dim() == 1 else store.y), split,
                     form="heterogeneous", meta=meta)
