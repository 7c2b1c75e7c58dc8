"""OGB's link-property dataset ogbl-citation2 through `ogb`'s PyG loader, with its own split, for the link task.

ogb processes the raw files into `<root>/ogbl_citation2/processed/` as for the ogbn datasets
(train/graph/datasets/ogb_nodes.py:
the same loader without its prompts): raw/edge.csv.gz (the training citations, source cites target),
node-feat.csv.gz (128 features per paper), node_year.csv.gz, num-node-list.csv.gz and num-edge-list.csv.gz. The
split is OGB's by time, split/time/{train,valid,test}.pt: each a dict of `source_node` and `target_node` [M], and
in valid and test `target_node_neg` [M, 1000], each held-out citation's own 1,000 negative targets. OGB pickled
them as NumPy arrays, which torch's weights-only load refuses by default; this module reads them itself,
allowing NumPy's arrays (under NumPy 1's and 2's names) and nothing more, and names a file that is missing,
damaged or holds the wrong arrays.

The graph as the link task reads it (the fields' names: train/graph/link_fields.py):
- `x` [N, 128];
- `edge_index`: the training citations in both directions. A new paper cites but is not yet cited, so over the
  directed graph no message would reach the source of a held-out citation; OGB's citation2 examples and its
  leaderboard's neighbour-sampled GraphSAGE pass messages over this same undirected graph (`to_undirected`);
- `train_pos_edge_index`: the training citations as OGB gives them (directed), the positives to train on;
- `val_pos_edge_index`, `test_pos_edge_index` and `val_neg_dst`, `test_neg_dst` (1,000 per positive).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from train.errors import UserError
from train.graph.datasets.ogb_nodes import check_release, ogb_dataset_class
from train.graph.datasets.raw_files import file_problem, prepare_again
from train.graph.link_fields import (
    HELD_OUT_SPLITS,
    LINK_SPLITS,
    neg_dst_key,
    neg_dst_problem,
    pos_edges_key,
    pos_edges_problem,
)

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}  # our split: OGB's file
SOURCE, TARGET, NEGATIVES = "source_node", "target_node", "target_node_neg"  # the arrays in OGB's split files


@dataclass(frozen=True)
class OgbLinkInfo:
    folder: str  # under the data root, as ogb names it
    split: str  # the official split's folder under <folder>/split/
    raw: tuple[str, ...]  # the raw files its processing reads

    def split_file(self, split: str) -> str:
        """The file of our `split` (train, val, test), relative to the folder."""
        return f"split/{self.split}/{SPLIT_FILES[split]}.pt"

    @property
    def split_files(self) -> tuple[str, ...]:
        return tuple(self.split_file(split) for split in SPLIT_FILES)

    @property
    def needed(self) -> tuple[str, ...]:
        return tuple(f"raw/{f}" for f in self.raw) + self.split_files

    @property
    def processed(self) -> tuple[str, ...]:
        return ("processed/geometric_data_processed.pt",)


OGB_LINK_DATASETS: dict[str, OgbLinkInfo] = {
    "ogbl-citation2": OgbLinkInfo("ogbl_citation2", "time", ("edge.csv.gz", "node-feat.csv.gz", "node_year.csv.gz",
                                                             "num-node-list.csv.gz", "num-edge-list.csv.gz")),
}


def _split_globals() -> list:
    """What OGB's pickled split files hold besides plain containers: NumPy arrays of integers. NumPy 1 (OGB's)
    named the array's rebuilder numpy.core.multiarray._reconstruct, NumPy 2 numpy._core: both, only that."""
    import numpy as np

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
    import torch  # on use: the config's checks import this module without torch

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
    import torch  # on use: the config's checks import this module without torch

    try:
        return torch.as_tensor(arrays[key])
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"dataset {name!r}: {path}: its {key} is a {type(arrays[key]).__name__} that is not an array "
                        f"of numbers. Delete it and {prepare_again(name)}.") from None


def split_fields(name: str, split: str, path: Path, arrays: dict, num_nodes: int) -> dict[str, torch.Tensor]:
    """One split's fields (train/graph/link_fields.py) from OGB's arrays, each checked; a bad one named."""
    import torch  # on use: the config's checks import this module without torch

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
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

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
