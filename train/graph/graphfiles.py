"""`data.name: files`: a user's own graph, from a saved PyG `Data` (.pt) or a folder of arrays.

A folder holds one file per array, `.npy` or `.pt`: `edge_index` (2 x E node ids), `x` (N x F
floats), `y` (N integer labels, -1 for a node outside every split) and the split, as indices
(`train_idx`, `val_idx`, `test_idx`) or boolean masks (`train_mask`, ...). `.npy` files are
memory-mapped (np.load mmap_mode="r") and `.pt` files loaded with mmap=True, so a graph larger
than memory is paged in from the file system and, with data.share=node, streamed into the
node's one shared copy instead of being held twice. Everything is checked before training,
and each problem is a UserError naming the array and what is wrong.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from train.errors import UserError

ARRAYS = ("edge_index", "x", "y")
SPLITS = ("train", "val", "test")
SUFFIXES = (".npy", ".pt")
UNLABELED = -1
SAVE_EXAMPLE = ('torch.save(Data(x=x, y=y, edge_index=edge_index, train_idx=train_idx, val_idx=val_idx, '
                'test_idx=test_idx), "graph.pt")')


def _tensor(value, name: str, source: str) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise UserError(f"{source}: {name} holds Python objects, not numbers; save it as a numeric array.")
        with warnings.catch_warnings():  # a read-only memory map: torch warns, and never writes to it
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(value)
    raise UserError(f"{source}: {name} is a {type(value).__name__}, expected a tensor or a numpy array.")


def _read_array(path: Path) -> Tensor:
    try:
        if path.suffix == ".npy":
            return _tensor(np.load(path, mmap_mode="r", allow_pickle=False), path.stem, str(path))
        value = torch.load(path, mmap=True, weights_only=True)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a file that does not read is the finding
        raise UserError(f"data.path: {path} cannot be read as an array ({type(exc).__name__}: {exc}); "
                        "save it again with np.save or torch.save.") from None
    return _tensor(value, path.stem, str(path))


def read_folder(folder: Path) -> dict[str, Tensor]:
    """Every known array of `folder`, by name; a name given twice (.npy and .pt) is refused."""
    known = (*ARRAYS, *(f"{s}_idx" for s in SPLITS), *(f"{s}_mask" for s in SPLITS))
    arrays = {}
    for name in known:
        found = [folder / f"{name}{suffix}" for suffix in SUFFIXES if (folder / f"{name}{suffix}").is_file()]
        if len(found) > 1:
            raise UserError(f"data.path: {folder} holds {name} twice ({', '.join(p.name for p in found)}); keep one.")
        if found:
            arrays[name] = _read_array(found[0])
    return arrays


def read_data_file(path: Path) -> dict[str, Tensor]:
    """The arrays of a `torch.save`d PyG `Data` (or a dict of tensors)."""
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    try:
        with torch.serialization.safe_globals([Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]):
            value = torch.load(path, mmap=True, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"data.path: {path} cannot be read as a saved PyG Data ({type(exc).__name__}: {exc}). "
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
    if idx.dim() != 1 or idx.is_floating_point() or idx.dtype == torch.bool:
        raise UserError(f"{source}: {split}_idx has shape {tuple(idx.shape)} and dtype {idx.dtype}; expected a "
                        "vector of integer node ids.")
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= num_nodes):
        raise UserError(f"{source}: {split}_idx holds node ids from {int(idx.min())} to {int(idx.max())}, outside "
                        f"0..{num_nodes - 1} (x has {num_nodes} rows).")
    if torch.unique(idx).numel() != idx.numel():
        raise UserError(f"{source}: {split}_idx lists some nodes more than once.")
    return idx.long()


def validate_graph(arrays: Mapping[str, Tensor], source: str) -> Data:
    """The project's `Data` from named arrays, or a UserError naming the array and its problem."""
    missing = [name for name in ARRAYS if name not in arrays]
    if missing:
        raise UserError(f"{source}: {', '.join(missing)} missing; expected the arrays edge_index (2 x num_edges), "
                        "x (num_nodes x num_features), y (num_nodes) and a split (train/val/test _idx or _mask).")
    x, y, edge_index = arrays["x"], arrays["y"], arrays["edge_index"]
    num_nodes = _check_features(x, source)
    _check_edge_index(edge_index, num_nodes, source)
    y = _check_labels(y, num_nodes, source)
    splits = {split: _split_indices(arrays, split, num_nodes, source) for split in SPLITS}
    _check_splits(splits, y, source)
    return Data(x=x if x.dtype == torch.float32 else x.float(), y=y.long(),
                edge_index=edge_index if edge_index.dtype == torch.long else edge_index.long(),
                train_idx=splits["train"], val_idx=splits["val"], test_idx=splits["test"])


def _check_features(x: Tensor, source: str) -> int:
    """x: a 2-D float array with at least one row, all finite; returns the number of nodes."""
    if x.dim() != 2 or not x.is_floating_point():
        raise UserError(f"{source}: x has shape {tuple(x.shape)} and dtype {x.dtype}; expected a 2-D float "
                        "array (num_nodes x num_features).")
    num_nodes = x.size(0)
    if num_nodes == 0:
        raise UserError(f"{source}: x has no rows; the graph needs at least one node.")
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        bad = (~finite).nonzero().view(-1)
        raise UserError(f"{source}: x holds NaN or infinite values in {bad.numel()} rows (first: row {int(bad[0])}); "
                        "fill or drop them before training.")
    return num_nodes


def _check_edge_index(edge_index: Tensor, num_nodes: int, source: str) -> None:
    """edge_index: integer node ids of shape (2, num_edges), each a row of x."""
    if (edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.is_floating_point()
            or edge_index.dtype == torch.bool):
        raise UserError(f"{source}: edge_index has shape {tuple(edge_index.shape)} and dtype {edge_index.dtype}; "
                        "expected integer node ids of shape (2, num_edges): sources in row 0, targets in row 1.")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise UserError(f"{source}: edge_index holds node ids from {int(edge_index.min())} to "
                        f"{int(edge_index.max())}, outside 0..{num_nodes - 1} (x has {num_nodes} rows).")


def _check_labels(y: Tensor, num_nodes: int, source: str) -> Tensor:
    """y: one integer label per node ((num_nodes, 1) is flattened), a class or UNLABELED; returns it 1-D."""
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if y.dim() != 1 or y.numel() != num_nodes or y.is_floating_point() or y.dtype == torch.bool:
        raise UserError(f"{source}: y has shape {tuple(y.shape)} and dtype {y.dtype}; expected {num_nodes} integer "
                        f"class labels (one per row of x; {UNLABELED} for a node outside every split).")
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


def load_files(path: str) -> Data:
    """data.path: a folder of arrays or a saved `Data` (.pt), validated."""
    if not path:
        raise UserError("data.name=files needs data.path: a folder of arrays (edge_index, x, y, split) or a .pt "
                        f"file saved with {SAVE_EXAMPLE}.")
    where = Path(path)
    if where.is_dir():
        return validate_graph(read_folder(where), f"data.path={path}")
    if where.is_file():
        return validate_graph(read_data_file(where), f"data.path={path}")
    raise UserError(f"data.path={path!r} does not exist; give a folder of arrays or a .pt file saved with "
                    f"{SAVE_EXAMPLE}.")
