"""`data.name: files`: a user's own graph, from a saved PyG `Data` (.pt) or a folder of arrays.

A folder holds one file per array, `.npy` or `.pt`: `edge_index` (2 x E node ids), `x` (N x F
floats), `y` (N integer labels, -1 for a node outside every split; or N x T multi-label tasks:
train/graph/labels.py), the split, as indices (`train_idx`, `val_idx`, `test_idx`) or boolean masks
(`train_mask`, ...), and optionally the edges' values `edge_attr` (E x D floats) and `edge_weight` (E floats),
row i for column i of edge_index. `.npy` files are
memory-mapped (np.load mmap_mode="r") and `.pt` files loaded with mmap=True, so a graph larger
than memory is paged in from the file system and, with data.share=node, streamed into the
node's one shared copy instead of being held twice. Everything is checked before training,
and each problem is a UserError naming the array (or the file: empty, cut short, not an array
file, a directory, unreadable) and what is wrong. `python -m train plan` reads the same files
through `read_graph_arrays` and `check_graph(..., scan_values=False)`: shapes, dtypes, labels
and split, without reading a feature or an edge.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
from torch_geometric.data.storage import GlobalStorage

from train.errors import UserError
from train.files import dir_problem, file_problem
from train.graph.datasets.own_rows import OwnedRows, check_feature_rows, check_finite, place_rows, take_rows
from train.graph.datasets.raw_files import npy_problem, pt_problem
from train.graph.edge_rows import EDGE_VALUES
from train.graph.labels import is_multilabel, multilabel_expected, multilabel_problem, multilabel_targets

ARRAYS = ("edge_index", "x", "y")
SPLITS = ("train", "val", "test")
SUFFIXES = (".npy", ".pt")
UNLABELED = -1
SAVE_EXAMPLE = ('torch.save(Data(x=x, y=y, edge_index=edge_index, train_idx=train_idx, val_idx=val_idx, '
                'test_idx=test_idx), "graph.pt")')
NUMERIC_KINDS = "biuf"  # numpy kinds of bool, signed and unsigned integer, float arrays
# Unsigned integers torch stores but cannot take min/max/isin of: checked (and indexed) as int64.
WIDEN = (torch.uint16, torch.uint32, torch.uint64)


def _tensor(value, name: str, source: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in NUMERIC_KINDS:
            what = "Python objects" if value.dtype == object else f"{value.dtype} values"
            raise UserError(f"{source}: {name} holds {what}, not real numbers; save it as a bool, integer or "
                            "float array.")
        if not value.dtype.isnative:
            value = value.astype(value.dtype.newbyteorder("="))  # torch takes native byte order only
        with warnings.catch_warnings():  # a read-only memory map: torch warns, and never writes to it
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(value)
    raise UserError(f"{source}: {name} is a {type(value).__name__}, expected a tensor or a numpy array.")


def _unreadable(path: Path, exc: Exception, what: str) -> str:
    """Why a checked file did not load, in words: cut short, another format; else the library's error."""
    problem = npy_problem(path) if path.suffix == ".npy" else pt_problem(path)
    return problem or f"cannot be read as {what} ({type(exc).__name__}: {exc})"


def _read_array(path: Path) -> Tensor:
    problem = file_problem(path)
    if problem is not None:
        raise UserError(f"data.path: {path} {problem}; give the array as a .npy or .pt file.")
    try:
        if path.suffix == ".npy":
            return _tensor(np.load(path, mmap_mode="r", allow_pickle=False), path.stem, str(path))
        value = torch.load(path, mmap=True, weights_only=True)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file that does not read is the finding
        raise UserError(f"data.path: {path} {_unreadable(path, exc, 'an array')}; save it again with np.save or "
                        "torch.save.") from None
    return _tensor(value, path.stem, str(path))


def read_folder(folder: Path) -> dict[str, Tensor]:
    """Every known array of `folder`, by name; a name given twice (.npy and .pt) is refused."""
    known = (*ARRAYS, *EDGE_VALUES, *(f"{s}_idx" for s in SPLITS), *(f"{s}_mask" for s in SPLITS))
    arrays = {}
    for name in known:  # present, even as a directory or a dangling link: then named for what it is
        found = [folder / f"{name}{suffix}" for suffix in SUFFIXES if os.path.lexists(folder / f"{name}{suffix}")]
        if len(found) > 1:
            raise UserError(f"data.path: {folder} holds {name} twice ({', '.join(p.name for p in found)}); keep one.")
        if found:
            arrays[name] = _read_array(found[0])
    return arrays


def read_data_file(path: Path) -> dict[str, Tensor]:
    """The arrays of a `torch.save`d PyG `Data` (or a dict of tensors)."""
    try:
        with torch.serialization.safe_globals([Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]):
            value = torch.load(path, mmap=True, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"data.path: {path} {_unreadable(path, exc, 'a saved PyG Data')}. "
                        f"Save the graph with {SAVE_EXAMPLE}.") from None
    if isinstance(value, Data):
        value = value.to_dict()
    if not isinstance(value, Mapping):
        raise UserError(f"data.path: {path} holds a {type(value).__name__}, expected a PyG Data: {SAVE_EXAMPLE}.")
    return {str(k): _tensor(v, str(k), str(path)) for k, v in value.items() if isinstance(v, (Tensor, np.ndarray))}


def _split_indices(arrays: Mapping[str, Tensor], split: str, num_nodes: int, source: str) -> Tensor:
    idx, mask = arrays.get(f"{split}_idx"), arrays.get(f"{split}_mask")
    if idx is not None and mask is not None:
        raise UserError(f"{source}: both {split}_idx and {split}_mask are given; keep one.")
    if mask is not None:
        if mask.dtype != torch.bool or mask.dim() != 1 or mask.numel() != num_nodes:
            raise UserError(f"{source}: {split}_mask has shape {tuple(mask.shape)} and dtype {mask.dtype}; expected "
                            f"a boolean vector of {num_nodes} entries (one per row of x).")
        return mask.nonzero().view(-1)
    if idx is None:
        raise UserError(f"{source}: the {split} split is missing; give {split}_idx (node ids) or {split}_mask "
                        "(one boolean per node).")
    if idx.dim() != 1 or not _is_integer(idx):
        raise UserError(f"{source}: {split}_idx has shape {tuple(idx.shape)} and dtype {idx.dtype}; expected a "
                        "vector of integer node ids.")
    idx = _widened(idx)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= num_nodes):
        raise UserError(f"{source}: {split}_idx holds node ids from {int(idx.min())} to {int(idx.max())}, outside "
                        f"0..{num_nodes - 1} (x has {num_nodes} rows).")
    if torch.unique(idx).numel() != idx.numel():
        raise UserError(f"{source}: {split}_idx lists some nodes more than once.")
    return idx.long()


def check_graph(arrays: Mapping[str, Tensor], source: str, scan_values: bool = True,
                scan_features: bool = True) -> tuple[Tensor, dict[str, Tensor]]:
    """Every array's shape and dtype, the labels and the split; (y as a 1-D vector, or N x T when
    multi-label; the split as indices).

    `scan_values=False` (the memory plan) reads no feature and no edge: x's NaNs and edge_index's
    node ids are left to the check `fit` makes. `scan_features=False`: x's values are not read (a node reading
    its own rows checks those: own_files).
    """
    missing = [name for name in ARRAYS if name not in arrays]
    if missing:
        raise UserError(f"{source}: {', '.join(missing)} missing; expected the arrays edge_index (2 x num_edges), "
                        "x (num_nodes x num_features), y (num_nodes) and a split (train/val/test _idx or _mask).")
    num_nodes = _check_features(arrays["x"], source, scan_values and scan_features)
    _check_x_rows(arrays, source)
    _check_edge_index(arrays["edge_index"], num_nodes, source, scan_values)
    check_edge_values(arrays, source, scan_values)
    y = _check_labels(arrays["y"], num_nodes, source)
    splits = {split: _split_indices(arrays, split, num_nodes, source) for split in SPLITS}
    _check_splits(splits, y, source)
    return y, splits


def validate_graph(arrays: Mapping[str, Tensor], source: str, features: Tensor | None = None) -> Data:
    """The project's `Data` from named arrays, or a UserError naming the array and its problem. `features`: the
    node's own rows of x, read and checked (own_files), in x's place; x's values are then not read."""
    y, splits = check_graph(arrays, source, scan_features=features is None)
    x, edge_index = (arrays["x"] if features is None else features), arrays["edge_index"]
    y = multilabel_targets(y) if is_multilabel(y) else y.long()
    values = {name: _float32(value) for name, value in check_edge_values(arrays, source, scan_values=False).items()}
    nodes = {} if features is None else {"num_nodes": int(arrays["x"].size(0))}  # x: the node's rows alone
    return Data(x=_float32(x), y=y,
                edge_index=edge_index if edge_index.dtype == torch.long else edge_index.long(),
                train_idx=splits["train"], val_idx=splits["val"], test_idx=splits["test"], **values, **nodes)


def _float32(t: Tensor) -> Tensor:
    """float32, as the model computes (a memory-mapped float32 array stays mapped)."""
    return t if t.dtype == torch.float32 else t.float()


EDGE_SHAPES = {"edge_attr": "(num_edges, num_edge_features), or (num_edges) for one feature",
               "edge_weight": "(num_edges), one weight per edge"}


def check_edge_values(arrays: Mapping[str, Tensor], source: str, scan_values: bool = True) -> dict[str, Tensor]:
    """The optional per-edge values, checked: floats, one row per column of edge_index (row i for edge i), all
    finite. edge_attr comes back 2-D ([E] read as [E, 1]), edge_weight 1-D ([E, 1] read as [E])."""
    num_edges = arrays["edge_index"].size(-1)
    out = {}
    for name in EDGE_VALUES:
        value = arrays.get(name)
        if value is None:
            continue
        if value.dim() == 1 and name == "edge_attr":
            value = value.view(-1, 1)
        elif value.dim() == 2 and value.size(1) == 1 and name == "edge_weight":
            value = value.view(-1)
        wanted_dim = 2 if name == "edge_attr" else 1
        if value.dim() != wanted_dim or not value.is_floating_point() or value.size(0) != num_edges:
            rows = f"{value.size(0)} rows" if value.dim() else "no rows"
            raise UserError(f"{source}: {name} has shape {tuple(value.shape)} ({rows}) and dtype {value.dtype}; "
                            f"expected floats of shape {EDGE_SHAPES[name]}: one row per edge, and edge_index has "
                            f"{num_edges} edges (columns), row i belonging to column i.")
        if name == "edge_attr" and value.size(1) == 0:
            raise UserError(f"{source}: edge_attr has no columns (shape {tuple(value.shape)}); leave it out, or give "
                            "each edge at least one feature.")
        if scan_values:
            finite = torch.isfinite(value) if value.dim() == 1 else torch.isfinite(value).all(dim=1)
            if not bool(finite.all()):
                bad = (~finite).nonzero().view(-1)
                raise UserError(f"{source}: {name} holds NaN or infinite values in {bad.numel()} rows (first: row "
                                f"{int(bad[0])}, the edge in column {int(bad[0])} of edge_index); fill or drop them "
                                "before training.")
        out[name] = value
    return out


def _check_features(x: Tensor, source: str, scan_values: bool = True) -> int:
    """x: a 2-D float array with at least one row and one column, all finite; returns the number of nodes."""
    if x.dim() != 2 or not x.is_floating_point():
        raise UserError(f"{source}: x has shape {tuple(x.shape)} and dtype {x.dtype}; expected a 2-D float "
                        "array (num_nodes x num_features).")
    num_nodes = x.size(0)
    if num_nodes == 0:
        raise UserError(f"{source}: x has no rows (shape {tuple(x.shape)}); the graph needs at least one node.")
    if x.size(1) == 0:
        raise UserError(f"{source}: x has no columns (shape {tuple(x.shape)}); every node needs at least one "
                        "feature (e.g. a constant 1.0 column, or its degree).")
    if not scan_values:
        return num_nodes
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        bad = (~finite).nonzero().view(-1)
        raise UserError(f"{source}: x holds NaN or infinite values in {bad.numel()} rows (first: row {int(bad[0])}); "
                        "fill or drop them before training.")
    return num_nodes


def _check_x_rows(arrays: Mapping[str, Tensor], source: str) -> None:
    """x holds a row for each node y labels (a shorter x is named as the feature file it is, not as a long y)."""
    labels = int(arrays["y"].size(0)) if arrays["y"].dim() else 0
    check_feature_rows(int(arrays["x"].size(0)), labels, f"{source}: x", f"y holds {labels:,} labels, one per node")


def _is_integer(t: Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def _widened(t: Tensor) -> Tensor:
    """Unsigned 16-64 bit integers as int64 (torch has no min, max or isin for them); others as they are."""
    return t.long() if t.dtype in WIDEN else t


def _check_edge_index(edge_index: Tensor, num_nodes: int, source: str, scan_values: bool = True) -> None:
    """edge_index: integer node ids of shape (2, num_edges), each a row of x."""
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or not _is_integer(edge_index):
        raise UserError(f"{source}: edge_index has shape {tuple(edge_index.shape)} and dtype {edge_index.dtype}; "
                        "expected integer node ids of shape (2, num_edges): sources in row 0, targets in row 1.")
    edge_index = _widened(edge_index) if scan_values else edge_index
    if scan_values and edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise UserError(f"{source}: edge_index holds node ids from {int(edge_index.min())} to "
                        f"{int(edge_index.max())}, outside 0..{num_nodes - 1} (x has {num_nodes} rows).")


def _check_labels(y: Tensor, num_nodes: int, source: str) -> Tensor:
    """y: one integer label per node ((num_nodes, 1) is flattened), a class or UNLABELED, returned 1-D; or a
    multi-label y (train/graph/labels.py) of 0, 1 and NaN, returned as it is."""
    if is_multilabel(y):
        problem = None if y.size(0) == num_nodes else f"has {y.size(0)} rows"
        problem = problem or multilabel_problem(y)
        if problem:
            raise UserError(f"{source}: y (shape {tuple(y.shape)}, {y.dtype}) {problem}; "
                            f"{multilabel_expected(num_nodes)}.")
        return y
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if y.dim() != 1 or y.numel() != num_nodes or not _is_integer(y):
        raise UserError(f"{source}: y has shape {tuple(y.shape)} and dtype {y.dtype}; expected {num_nodes} integer "
                        f"class labels (one per row of x; {UNLABELED} for a node outside every split), or "
                        f"{multilabel_expected(num_nodes)}.")
    y = _widened(y)
    if int(y.min()) < UNLABELED:
        raise UserError(f"{source}: y holds the label {int(y.min())}; labels are 0..num_classes-1, or {UNLABELED} "
                        "for an unlabeled node.")
    return y


def _check_splits(splits: dict[str, Tensor], y: Tensor, source: str) -> None:
    """A non-empty train split; every split node labeled; no node in two splits."""
    if splits["train"].numel() == 0:
        raise UserError(f"{source}: the train split is empty; give at least one training node.")
    for split, idx in splits.items():
        unlabeled = int((y[idx] == UNLABELED).sum())
        if unlabeled:
            raise UserError(f"{source}: {unlabeled} nodes of the {split} split have the label {UNLABELED} in y "
                            "(unlabeled); a split node needs a class 0..num_classes-1.")
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        if torch.isin(splits[a], splits[b]).any():
            raise UserError(f"{source}: the {a} and {b} splits share nodes; each node belongs to one split at most.")


def read_graph_arrays(path: str) -> tuple[dict[str, Tensor], str]:
    """The arrays at data.path (a folder of arrays or a saved `Data`), read lazily, and the name for messages."""
    if not path:
        raise UserError("data.name=files needs data.path: a folder of arrays (edge_index, x, y, split) or a .pt "
                        f"file saved with {SAVE_EXAMPLE}.")
    where, source = Path(path), f"data.path={path}"
    if os.path.isdir(where):
        problem = dir_problem(where)
        arrays = {} if problem else read_folder(where)
        if not problem and not arrays:
            names = sorted(p.name for p in where.iterdir())[:8]
            problem = (f"holds none of the arrays (edge_index, x, y, split as .npy or .pt files); it holds "
                       f"{', '.join(names) if names else 'nothing'}")
    else:
        problem = file_problem(where)
        arrays = {} if problem else read_data_file(where)
    if problem:
        raise UserError(f"data.path={path!r} {problem}; give a folder of arrays or a .pt file saved with "
                        f"{SAVE_EXAMPLE}.")
    return arrays, source


def load_files(path: str) -> Data:
    """data.path: a folder of arrays or a saved `Data` (.pt), validated."""
    return validate_graph(*read_graph_arrays(path))


def own_files(path: str, owned: OwnedRows) -> Data:
    """data.path read as `load_files` reads it, but x: only the node's own rows are read from the memory-mapped file
    (train/graph/datasets/own_rows.py), and only they are checked for NaNs (each node checks its own)."""
    arrays, source = read_graph_arrays(path)
    if "x" in arrays and "y" in arrays:  # else check_graph names what is missing
        _check_features(arrays["x"], source, scan_values=False)
        _check_x_rows(arrays, source)
        rows = owned[""][0]
        own = take_rows(arrays["x"], rows)
        check_finite(own, rows, f"{source}: x")
        features = place_rows({"": own}, owned, int(arrays["x"].size(1)))
        return validate_graph(arrays, source, features)
    return validate_graph(arrays, source)
