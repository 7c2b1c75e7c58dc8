"""OGB node-property datasets (ogbn-arxiv, ogbn-products, ogbn-papers100M, ogbn-proteins) through `ogb`'s PyG loader.

The `ogb` package is an optional dependency (`pip install '.[ogb]'`), imported only when an
OGB dataset is opened. Its loader downloads a zip, processes it into
`<root>/<ogbn_name>/processed/` and gives the official split; this module only adapts what it
returns to the project's `Data` (labels as a flat long tensor, or ogbn-proteins' 112 binary tasks as
floats: train/graph/labels.py; split as index tensors) and takes away its two interactive prompts,
which a batch job or `make data` cannot answer. ogbn-proteins has no node features: as OGB's and PyG's
examples do, each node's features are the mean of its incident edges' 8 features, computed as it loads.
"""

from __future__ import annotations

import importlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from train.errors import UserError
from train.graph.datasets.raw_files import prepare_again
from train.graph.labels import is_multilabel, multilabel_expected, multilabel_problem, multilabel_targets
from train.graph.sizes import GraphSize

if TYPE_CHECKING:
    from torch import Tensor
    from torch_geometric.data import Data

OGB_VERSION = "1.3.6"  # the version pinned in requirements.lock; the one whose on-disk format is tested
UNLABELED = -1  # papers100M labels only ~1.5 M of its 111 M nodes (NaN in OGB's file)


@dataclass(frozen=True)
class OgbInfo:
    folder: str  # under the data root, as ogb names it
    split: str  # the official split's folder under <folder>/split/
    raw: tuple[str, ...]  # the raw files its processing reads
    features: str = "nodes"  # "nodes": OGB's node features; "edge-mean": the mean of each node's in-edges' features
    target: str = ""  # a heterogeneous dataset's labelled node type (its split lies in split/<split>/<target>/)
    version: int = 1  # OGB's release of it: the mark of a complete download is RELEASE_v<version>.txt

    @property
    def release(self) -> str:
        return f"RELEASE_v{self.version}.txt"

    @property
    def needed(self) -> tuple[str, ...]:
        split = f"split/{self.split}/{self.target}/" if self.target else f"split/{self.split}/"
        return tuple(f"raw/{f}" for f in self.raw) + tuple(f"{split}{s}.csv.gz" for s in SPLIT_FILES)

    @property
    def processed(self) -> tuple[str, ...]:
        return ("processed/geometric_data_processed.pt",)


SPLIT_FILES = ("train", "valid", "test")
# ogbn-mag's relations; each gets its reverse (rev_<relation>), and cites is made undirected, as OGB's R-GCN example
MAG_RELATIONS = (("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
                 ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study"))
_CSV = ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz", "num-node-list.csv.gz", "num-edge-list.csv.gz")
OGB_NODE_DATASETS: dict[str, OgbInfo] = {
    "ogbn-arxiv": OgbInfo("ogbn_arxiv", "time", _CSV + ("node_year.csv.gz",)),
    "ogbn-products": OgbInfo("ogbn_products", "sales_ranking", _CSV),
    "ogbn-papers100M": OgbInfo("ogbn_papers100M", "time", ("data.npz", "node-label.npz")),
    "ogbn-proteins": OgbInfo("ogbn_proteins", "species",
                             ("edge.csv.gz", "edge-feat.csv.gz", "node-label.csv.gz", "node_species.csv.gz",
                              "num-node-list.csv.gz", "num-edge-list.csv.gz"), features="edge-mean"),
    "ogbn-mag": OgbInfo("ogbn_mag", "time", ("num-node-dict.csv.gz", "triplet-type-list.csv.gz",
                                            "nodetype-has-label.csv.gz", "node-feat/paper/node-feat.csv.gz",
                                            "node-label/paper/node-label.csv.gz",
                                            *(f"relations/{'___'.join(r)}/edge.csv.gz" for r in MAG_RELATIONS)),
                        target="paper", version=2),
}


def _processed_globals() -> list:
    import numpy as np
    from torch_geometric.data.data import Data, DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage, np._core.multiarray.scalar, np.dtype,
            np.dtypes.Int64DType, np.dtypes.Int32DType]


# ogb's module of each kind of task, and its PyG dataset class there
OGB_LOADERS = {"nodeproppred": "PygNodePropPredDataset", "linkproppred": "PygLinkPropPredDataset"}


def ogb_dataset_class(task: str = "nodeproppred"):
    """ogb's PyG dataset class for `task` (OGB_LOADERS) without its prompts (imported here: `ogb` is optional)."""
    import torch  # on use: the config's checks import this module without torch

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


def ogb_source(name: str, folder: Path, task: str = "nodeproppred") -> tuple[str, str]:
    """Where OGB dataset `name`'s files come from (ogb's own list of the datasets of `task`), and where they go."""
    try:
        import pandas as pd
        listing = Path(importlib.import_module(f"ogb.{task}").__file__).with_name("master.csv")
    except ImportError:
        return "Its files come from OGB (https://ogb.stanford.edu), one zip", f"unzip it into {folder}/"
    meta = pd.read_csv(listing, index_col=0, keep_default_na=False)[name]
    return (f"Its files come from {meta['url']} (one zip)",
            f"unzip it in {folder.parent}/, renaming the folder it makes ({meta['download_name']}/) to {folder.name}/")


def edge_mean_features(edge_index: Tensor, edge_attr: Tensor, num_nodes: int) -> Tensor:
    """Each node's features as the mean of its in-edges' features (0 for a node without edges): ogbn-proteins'
    node features in OGB's examples (`adj_t.mean(dim=1)`) and PyG's (examples/ogbn_proteins_deepgcn.py)."""
    from torch_geometric.utils import scatter

    return scatter(edge_attr.float(), edge_index[1], dim=0, dim_size=num_nodes, reduce="mean")


def ogb_labels(name: str, y: Tensor) -> Tensor:
    """OGB's labels as the project keeps them: one class per node as a flat long tensor (UNLABELED where OGB has
    NaN), or several tasks per node as checked floats."""
    import torch  # on use: the config's checks import this module without torch

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


def check_release(name: str, folder: Path, mark: str = "RELEASE_v1.txt") -> None:
    """Refuse a folder without ogb's mark of a complete download (`mark`: RELEASE_v<version>.txt), where ogb would
    ask on stdin whether to delete it ("the dataset has been updated")."""
    release = folder / mark
    if folder.is_dir() and not release.is_file():
        raise UserError(f"dataset {name!r}: {str(folder)!r} holds no {release.name}, so it is not a complete OGB "
                        f"download. Delete the folder and {prepare_again(name)}.")


def open_ogb(name: str, root: Path) -> Data:
    """ogbn-`name` under `root` as x, y (`ogb_labels`), edge_index and its split."""
    from torch_geometric.data import Data

    info = OGB_NODE_DATASETS[name]
    dataset_class = ogb_dataset_class()
    check_release(name, root / info.folder, info.release)
    dataset = dataset_class(name, root=str(root))
    split = dataset.get_idx_split()
    graph = dataset[0]
    if info.target:
        from train.graph.typed_graph import typed_graph

        return typed_graph(mag_hetero(graph, split, info.target), info.target, source=f"dataset {name!r}")
    x = graph.x if info.features == "nodes" else edge_mean_features(graph.edge_index, graph.edge_attr, graph.num_nodes)
    edges = {} if getattr(graph, "edge_attr", None) is None else {"edge_attr": graph.edge_attr.float()}  # proteins' 8
    return Data(x=x, y=ogb_labels(name, graph.y), edge_index=graph.edge_index, **edges,
                train_idx=split["train"].long(), val_idx=split["valid"].long(), test_idx=split["test"].long())


def mag_hetero(graph, split: dict, target: str):
    """ogb's heterogeneous graph (its dicts by type) as a PyG `HeteroData`, as OGB's R-GCN example reads it: cites
    made undirected, every other relation with its reverse; the target type's labels and official split."""
    from torch_geometric.data import HeteroData
    from torch_geometric.utils import to_undirected

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


def mag_size() -> GraphSize:
    """ogbn-mag (OGB's paper; its files' counts): 736,389 papers (128 features, 349 venues as classes), 1,134,649
    authors, 8,740 institutions and 59,965 fields of study, without features; edges as `mag_hetero` makes them:
    cites (5,416,271) both ways, the others (1,043,998 affiliated_with, 7,145,660 writes, 7,505,078 has_topic) with
    their reverses; the time split of the papers."""
    from train.graph.typed_meta import HeteroMeta

    edges = {"affiliated_with": 1_043_998, "writes": 7_145_660, "cites": 5_416_271, "has_topic": 7_505_078}
    types = tuple(t for src, rel, dst in MAG_RELATIONS
                  for t in ((src, rel, dst),) + (((dst, f"rev_{rel}", src),) if src != dst else ()))
    counts = {"author": 1_134_649, "field_of_study": 59_965, "institution": 8_740, "paper": 736_389}
    meta = HeteroMeta(tuple(counts), types, tuple(counts.values()), (0, 0, 0, 128), "paper")
    return GraphSize(sum(counts.values()), 2 * sum(edges.values()), 128, 349, (629_571, 64_879, 41_939),
                     form="heterogeneous", meta=meta)
