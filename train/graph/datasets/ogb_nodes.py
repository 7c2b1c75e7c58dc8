"""OGB node-property datasets (ogbn-arxiv, ogbn-products, ogbn-papers100M, ogbn-proteins, ogbn-mag): their facts,
without torch (the config's checks and the plan read them on a login node).

The `ogb` package is an optional dependency (`pip install '.[ogb]'`), imported only when an
OGB dataset is opened (train/graph/datasets/ogb_graphs.py, with torch). Its loader downloads a zip, processes it into
`<root>/<ogbn_name>/processed/` and gives the official split; ogb_graphs only adapts what it
returns to the project's `Data` (labels as a flat long tensor, or ogbn-proteins' 112 binary tasks as
floats: train/graph/labels.py; split as index tensors) and takes away its two interactive prompts,
which a batch job or `make data` cannot answer. ogbn-proteins has no node features: as OGB's and PyG's
examples do, each node's features are the mean of its incident edges' 8 features, computed as it loads.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from train.errors import UserError
from train.graph.datasets.raw_files import prepare_again
from train.graph.sizes import GraphSize
from train.graph.typed_meta import HeteroMeta

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


# ogb's module of each kind of task, and its PyG dataset class there
OGB_LOADERS = {"nodeproppred": "PygNodePropPredDataset", "linkproppred": "PygLinkPropPredDataset"}


def ogb_source(name: str, folder: Path, task: str = "nodeproppred") -> tuple[str, str]:
    """Where OGB dataset `name`'s files come from (ogb's own list of the datasets of `task`), and where they go."""
    try:
        import pandas as pd  # optional: pandas comes with ogb (the extra `.[ogb]`)
        listing = Path(importlib.import_module(f"ogb.{task}").__file__).with_name("master.csv")
    except ImportError:
        return "Its files come from OGB (https://ogb.stanford.edu), one zip", f"unzip it into {folder}/"
    meta = pd.read_csv(listing, index_col=0, keep_default_na=False)[name]
    return (f"Its files come from {meta['url']} (one zip)",
            f"unzip it in {folder.parent}/, renaming the folder it makes ({meta['download_name']}/) to {folder.name}/")


def check_release(name: str, folder: Path, mark: str = "RELEASE_v1.txt") -> None:
    """Refuse a folder without ogb's mark of a complete download (`mark`: RELEASE_v<version>.txt), where ogb would
    ask on stdin whether to delete it ("the dataset has been updated")."""
    release = folder / mark
    if folder.is_dir() and not release.is_file():
        raise UserError(f"dataset {name!r}: {str(folder)!r} holds no {release.name}, so it is not a complete OGB "
                        f"download. Delete the folder and {prepare_again(name)}.")


def mag_size() -> GraphSize:
    """ogbn-mag (OGB's paper; its files' counts): 736,389 papers (128 features, 349 venues as classes), 1,134,649
    authors, 8,740 institutions and 59,965 fields of study, without features; edges as `mag_hetero` makes them:
    cites (5,416,271) both ways, the others (1,043,998 affiliated_with, 7,145,660 writes, 7,505,078 has_topic) with
    their reverses; the time split of the papers."""
    edges = {"affiliated_with": 1_043_998, "writes": 7_145_660, "cites": 5_416_271, "has_topic": 7_505_078}
    types = tuple(t for src, rel, dst in MAG_RELATIONS
                  for t in ((src, rel, dst),) + (((dst, f"rev_{rel}", src),) if src != dst else ()))
    counts = {"author": 1_134_649, "field_of_study": 59_965, "institution": 8_740, "paper": 736_389}
    meta = HeteroMeta(tuple(counts), types, tuple(counts.values()), (0, 0, 0, 128), "paper")
    return GraphSize(sum(counts.values()), 2 * sum(edges.values()), 128, 349, (629_571, 64_879, 41_939),
                     form="heterogeneous", meta=meta)
