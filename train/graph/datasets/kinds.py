"""Dataset kinds: each kind of dataset answers, in one class, everything the package asks of a `data.name`.

How it loads, what it is and where its files come from (`describe`), its size for the memory plan without
loading it (`plan_size`), what the doctor looks at on a node (`probe`), whether its files are ready in a
data root (`is_prepared`, checked before a job is queued) and how to prepare them. DATASETS maps each
`data.name` to its kind: a new dataset of a known kind is one row, a new kind one class. Every loader
returns a PyG `Data` (train/graph/form.py): x, y, edge_index and the split as index tensors; a heterogeneous
graph's is its typed form (train/graph/typed_graph.py: node_type, edge_type and its HeteroMeta beside it).
`DatasetKind`, the interface every kind answers, is in train/graph/datasets/base.py.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING

from train.config import DataConfig
from train.errors import UserError
from train.files import check_dir
from train.graph.datasets.base import DatasetKind, make_data
from train.graph.datasets.hetero_synthetic import TARGET, hetero_synthetic_edges, hetero_synthetic_meta
from train.graph.datasets.igbh import IGBH_TYPES, igbh_full, igbh_full_unprepared, igbh_label_name
from train.graph.datasets.ogb_links import OGB_LINK_DATASETS
from train.graph.datasets.ogb_nodes import OGB_NODE_DATASETS, mag_size, ogb_source
from train.graph.datasets.raw_files import prepare_again, problems
from train.graph.link_fields import ranked_split_ids
from train.graph.sizes import GraphSize
from train.graph.typed_meta import check_target

if TYPE_CHECKING:  # PyG is imported where a graph is made: the doctor's probe of a synthetic graph needs none
    from types import ModuleType

    from torch_geometric.data import Data


def _graphs() -> ModuleType:
    """The kinds' torch half (train/graph/datasets/kind_graphs.py), imported where a graph is read or made: what a
    kind is, checked on a login node or probed by the doctor, needs no torch."""
    from train.graph.datasets import kind_graphs  # here: it imports torch and PyG

    return kind_graphs


def untyped_target(data: DataConfig) -> str:
    return (f"data.target_node_type={data.target_node_type!r} is set, but data.name={data.name} is a graph of one "
            "node type; leave data.target_node_type empty, or give a heterogeneous graph (docs/data.md).")


class Synthetic(DatasetKind):
    name, kind, loader, in_data_root = "synthetic", "generated", "synthetic", False

    def describe(self) -> str:
        return "a stochastic block model generated from data.seed and its data.* sizes: nothing to prepare"

    def folder(self, data: DataConfig, root: Path) -> Path | None:
        return None

    def plan_size(self, data: DataConfig) -> GraphSize:
        train = int(data.num_nodes * data.train_fraction)
        val = int(data.num_nodes * data.val_fraction)
        edges = 2 * int(data.num_nodes * data.avg_degree / 2)  # an upper bound: self-loops and repeats are dropped
        return GraphSize(data.num_nodes, edges, data.num_features, data.num_classes,
                         (train, val, data.num_nodes - train - val), edge_features=data.edge_features)

    def load(self, data: DataConfig, root: Path) -> Data:
        return _graphs().synthetic_graph(data)

    def is_prepared(self, data: DataConfig, root: Path) -> bool:
        return True

    def probe(self, data: DataConfig, root: Path) -> dict:
        edges = int(data.num_nodes * data.avg_degree)  # rough: features, labels, edge_index and CSC
        return {"name": self.name, "state": "generated", "root": "-", "dir": "-", "detail": "generated from data.seed",
                "bytes": data.num_nodes * (data.num_features * 4 + 16) + edges * 32}


class Files(DatasetKind):
    """The user's own graph at data.path (train/graph/datasets/graph_files.py)."""

    name, kind, loader, in_data_root, typed = "files", "your own", "files", False, None
    fix = "set data.path to your graph (a folder of arrays or a saved .pt) on storage every node mounts"

    def check(self, data: DataConfig) -> None:
        if not data.path:
            raise UserError("data.name=files needs data.path: a folder of arrays (edge_index, x, y and the split) "
                            "or a .pt file holding a saved PyG Data.")

    def describe(self) -> str:
        return "your own graph at data.path, a folder of arrays or a saved PyG Data (.pt): nothing to prepare"

    def folder(self, data: DataConfig, root: Path) -> Path | None:
        return Path(data.path)

    def plan_size(self, data: DataConfig) -> GraphSize:
        """Shapes from the memory-mapped arrays (headers), checked as `fit` checks them but without reading a
        feature or an edge: an empty, cut-short or ill-shaped file is named, never a traceback. A heterogeneous
        graph's types and sizes from its arrays' shapes (and the largest id of a featureless type's relations)."""
        graphs = _graphs()
        if graphs.is_hetero(data.path):
            hetero = graphs.read_hetero(data.path)
            return graphs.hetero_size(hetero, graphs.files_target(data, hetero), f"data.path={data.path}")

        arrays, source = graphs.read_graph_arrays(data.path)
        y, splits = graphs.check_graph(arrays, source, scan_values=False)
        x, edges = arrays["x"], arrays["edge_index"]
        values = graphs.check_edge_values(arrays, source, scan_values=False)
        classes = graphs.num_outputs(y)  # check_graph: a labeled, non-empty train split
        return GraphSize(x.size(0), edges.size(-1), x.size(-1), classes,
                         tuple(splits[s].numel() for s in ("train", "val", "test")),
                         edge_features=values["edge_attr"].size(1) if "edge_attr" in values else 0,
                         edge_weight="edge_weight" in values, multilabel=graphs.is_multilabel(y))

    def load(self, data: DataConfig, root: Path) -> Data:
        graphs = _graphs()
        if graphs.is_hetero(data.path):
            hetero = graphs.read_hetero(data.path)
            return graphs.typed_graph(hetero, graphs.files_target(data, hetero), data.featureless,
                                      f"data.path={data.path}")
        if data.target_node_type:
            raise UserError(untyped_target(data))
        return graphs.load_files(data.path)

    def is_prepared(self, data: DataConfig, root: Path) -> bool:
        return bool(data.path) and Path(data.path).exists()

    def unprepared(self, data: DataConfig, root: Path, source: str) -> str:
        return f"data.path={data.path!r} does not exist here: {self.fix}"

    def probe(self, data: DataConfig, root: Path) -> dict:
        out = {"name": self.name, "root": data.path or "-", "dir": data.path or "-", "fix": self.fix}
        if not data.path:
            return {**out, "state": "missing", "detail": "data.path is empty"}
        path = Path(data.path)
        files = [path] if path.is_file() else sorted(p for p in path.glob("*") if p.is_file())
        if not files:
            return {**out, "state": "missing", "detail": f"no files at data.path={data.path}"}
        return {**out, "state": "present", "detail": "files", "counted": files, "opened": files}


class OnDisk(DatasetKind):
    """A published dataset that a library downloads and processes into its folder under the data root."""

    needed: tuple[str, ...]  # the files processing reads (raw files, split files), relative to the folder
    processed: tuple[str, ...]  # what a processed dataset holds
    source: str  # where the library downloads it from
    size: GraphSize  # published sizes (PyG's docs, OGB's paper and leaderboards), as this project stores it

    def describe(self) -> str:
        return f"{self.kind} {self.name}, downloaded from {self.source}; `make data DATASET={self.name}` prepares it"

    def plan_size(self, data: DataConfig) -> GraphSize:
        return self.size

    def is_processed(self, root: Path) -> bool:
        return all((self.folder(None, root) / f).is_file() for f in self.processed)

    marks: tuple[str, ...] = ()  # files a usable folder always holds, processed or not

    def is_prepared(self, data: DataConfig, root: Path) -> bool:
        """Processed, or every file processing reads is there (the job processes them without internet)."""
        folder = self.folder(data, root)
        return all((folder / f).is_file() for f in self.marks) and (
            self.is_processed(root) or all((folder / f).is_file() for f in self.needed))

    def unprepared(self, data: DataConfig, root: Path, source: str) -> str:
        folder = self.folder(data, root)
        missing = next(str(folder / f) for f in (*self.processed, *self.marks, *self.needed)
                       if not (folder / f).is_file())
        return (f"dataset {self.name!r} is not prepared in {str(root)!r} ({source}): {missing} is missing; prepare "
                f"it on a login node (with internet): {make_data(self.name, root)}")

    @abstractmethod
    def open(self, root: Path) -> Data:
        """Open it (processing on first use, downloading when absent)."""

    @abstractmethod
    def origin(self, folder: Path) -> tuple[str, str]:
        """Where its files come from, and where to put them (for a machine without internet)."""

    def prepare(self, data: DataConfig, root: Path) -> None:
        if not self.is_processed(root):
            root.mkdir(parents=True, exist_ok=True)
            self.load(data, root, preparing=True)

    def load(self, data: DataConfig, root: Path, preparing: bool = False) -> Data:
        """Open it, naming a bad file. Before processing, the files it reads are checked (cheaply for large
        ones); a missing one is named when the download that PyG or OGB then tries fails, as it does
        offline (`preparing`: where the files come from and where to copy them instead); a failure while
        processing or reading the processed file is traced back to its file."""
        folder = self.folder(data, root)
        check_dir(folder, f"dataset {self.name!r}: its folder {str(folder)!r}",
                  f"move it away, or give another data.root; then {prepare_again(self.name)}", create=True)
        processed = self.is_processed(root)
        if not processed and any((folder / f).exists() for f in self.needed):
            damaged = [p for p in problems(folder, self.needed) if not p.endswith(" is missing")]
            if damaged:
                raise UserError(f"dataset {self.name!r}: {'; '.join(damaged)}. Delete it and "
                                f"{prepare_again(self.name)}.")
        try:
            return self.open(root)
        except UserError:
            raise
        except (OSError, ConnectionError) as exc:  # URLError is an OSError; so is a file not found
            if preparing and not self.is_processed(root):
                origin, action = self.origin(folder)
                raise UserError(
                    f"dataset {self.name!r} could not be downloaded: no internet from this machine ({exc}).\n"
                    f"{origin}.\nDownload them on a machine with internet and {action}.\n"
                    "Then run this again: it prepares the files it finds there, with no download.") from None
            missing = [p for p in problems(folder, self.needed, thorough=False) if p.endswith(" is missing")]
            what = f"{'; '.join(missing)}" if missing else f"{str(folder)!r} could not be read"
            raise UserError(
                f"dataset {self.name!r} is not prepared under {str(root)!r}: {what}, and it could not be downloaded "
                f"({exc}). Compute nodes often have no internet: {prepare_again(self.name)}.") from None
        except Exception as exc:
            found = problems(folder, self.processed if processed else self.needed, thorough=True)
            if not found:
                raise
            advice = f"delete {str(folder / 'processed')!r}" if processed else "delete it"
            raise UserError(f"dataset {self.name!r}: {'; '.join(found)} ({type(exc).__name__} while loading). "
                            f"{advice[0].upper()}{advice[1:]} and {prepare_again(self.name)}.") from None

    def probe(self, data: DataConfig, root: Path) -> dict:
        directory = self.folder(data, root)
        out = {"name": self.name, "root": str(root), "dir": str(directory)}
        processed = sorted(p for p in (directory / "processed").glob("*") if p.is_file())
        raw = sorted(p for p in (directory / "raw").glob("*") if p.is_file())
        if not processed + raw:
            return {**out, "state": "missing", "detail": "no files in its processed/ or raw/ folder"}
        kind = "processed" if processed else "raw only (processed on first load)"
        return {**out, "state": "present", "detail": kind, "counted": processed or raw, "opened": processed + raw}


class PygDataset(OnDisk):
    """A `torch_geometric.datasets` class stored under root/`sub`, with its masks as the split."""

    loader = "pyg"

    def __init__(self, name: str, size: GraphSize, raw: tuple[str, ...], sub: str = "", args: tuple = (),
                 class_name: str = "", kind: str = "", source: str = ""):
        self.name, self.size, self.sub, self.args = name, size, sub or name, args
        self.class_name, self.kind, self.source = class_name or name, kind, source
        self.needed, self.processed = tuple(f"raw/{f}" for f in raw), ("processed/data.pt",)

    def folder(self, data: DataConfig | None, root: Path) -> Path:
        return root / self.sub

    def open(self, root: Path) -> Data:
        graphs = _graphs()
        dataset = getattr(graphs.pyg_datasets, self.class_name)(str(root / self.sub.split("/")[0]), *self.args)
        return graphs.from_pyg_masks(dataset[0])

    def origin(self, folder: Path) -> tuple[str, str]:
        datasets = _graphs().pyg_datasets
        url = getattr(getattr(datasets, self.class_name), "url", None)  # PyG's own; GraphSAINT's files have ids
        where = (f"Google Drive (the ids in PyG's torch_geometric.datasets.{self.class_name})" if not url else
                 f"{url} (one zip)" if url.endswith(".zip") else f"{url}/<file>")
        raw = ", ".join(f.removeprefix("raw/") for f in self.needed)
        return f"Its raw files ({raw}) come from {where}", f"put them in {folder / 'raw'}/"


def planetoid(name: str, size: GraphSize) -> PygDataset:
    """Planetoid's citation graph `name` with its public split (PyG's `Planetoid`)."""
    raw = tuple(f"ind.{name.lower()}.{part}" for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"))
    return PygDataset(name, size, raw, f"Planetoid/{name}", (name,), "Planetoid", "Planetoid's citation graph",
                      "github.com/kimiyoung/planetoid")


class OgbNode(OnDisk):
    """OGB's node-property datasets (train/graph/datasets/ogb_nodes.py), with the official split."""

    kind, loader, source = "OGB's node-property dataset", "ogb", "snap.stanford.edu/ogb"
    def __init__(self, name: str, size: GraphSize):
        info = OGB_NODE_DATASETS[name]
        self.name, self.size, self.sub = name, size, info.folder
        self.needed, self.processed = info.needed, info.processed
        self.marks = (info.release,)  # ogb's mark of a complete download: open_ogb refuses a folder without it
        self.typed = bool(info.target)

    def folder(self, data: DataConfig | None, root: Path) -> Path:
        return root / self.sub

    def open(self, root: Path) -> Data:
        return _graphs().open_ogb(self.name, root)

    def origin(self, folder: Path) -> tuple[str, str]:
        return ogb_source(self.name, folder)


class OgbLink(OgbNode):
    """OGB's link-property datasets (train/graph/datasets/ogb_links.py), with the official split and its negatives:
    no node labels, so for link prediction only."""

    kind = "OGB's link-property dataset"
    tasks = ("link",)
    own_link_split = True

    def __init__(self, name: str, size: GraphSize):
        info = OGB_LINK_DATASETS[name]
        self.name, self.size, self.sub = name, size, info.folder
        self.needed, self.processed = info.needed, info.processed
        self.marks = ("RELEASE_v1.txt", *info.split_files)  # read at every load, processed or not

    def open(self, root: Path) -> Data:
        return _graphs().open_ogbl(self.name, root)

    def origin(self, folder: Path) -> tuple[str, str]:
        return ogb_source(self.name, folder, "linkproppred")


class HeteroSynthetic(DatasetKind):
    """The synthetic heterogeneous default (train/graph/datasets/hetero_synthetic.py): papers, authors, venues."""

    name, kind, loader, in_data_root, typed = "hetero-synthetic", "generated", "hetero", False, True
    tasks = ("node",)  # link prediction is for homogeneous graphs (train/graph/link_split.py)

    def check(self, data: DataConfig) -> None:
        if data.target_node_type:
            check_target(hetero_synthetic_meta(data).node_types, data.target_node_type, "data.name=hetero-synthetic")

    def describe(self) -> str:
        return ("papers, authors and venues generated from data.seed, whose papers' class shows only through their "
                "authors: nothing to prepare")

    def folder(self, data: DataConfig, root: Path) -> Path | None:
        return None

    def plan_size(self, data: DataConfig) -> GraphSize:
        meta = hetero_synthetic_meta(data)
        papers = meta.counts[meta.target_index]
        train, val = int(papers * data.train_fraction), int(papers * data.val_fraction)
        return GraphSize(sum(meta.counts), hetero_synthetic_edges(data), max(meta.widths), data.num_classes,
                         (train, val, papers - train - val), form="heterogeneous", meta=meta)

    def load(self, data: DataConfig, root: Path) -> Data:
        graphs = _graphs()
        return graphs.typed_graph(graphs.hetero_synthetic_graph(data), TARGET, data.featureless,
                                  "data.name=hetero-synthetic")

    def is_prepared(self, data: DataConfig, root: Path) -> bool:
        return True

    def probe(self, data: DataConfig, root: Path) -> dict:
        size = self.plan_size(data)
        return {"name": self.name, "state": "generated", "root": "-", "dir": "-", "detail": "generated from data.seed",
                "bytes": size.feature_bytes + size.edges * 40}


class Igbh(Files):
    """A folder in IGBH's layout at data.path (train/graph/datasets/hetero_files.py), MLPerf's GNN benchmark graph.
    `full`: IGBH-full's published size, for the plan without the 2.2 TB of files (data.name=igbh-full)."""

    kind, loader, typed, reads = "IGBH (MLPerf GNN)", "hetero", True, ("num_classes",)
    tasks = ("node",)  # link prediction is for homogeneous graphs (train/graph/link_split.py)
    fix = "set data.path to an IGBH folder (IllinoisGraphBenchmark/IGB-Datasets' download scripts)"

    def __init__(self, name: str, full: bool = False):
        self.name, self.full = name, full

    def check(self, data: DataConfig) -> None:
        igbh_label_name(data.num_classes)
        if data.target_node_type:
            check_target(IGBH_TYPES, data.target_node_type, f"data.name={self.name}")
        if not data.path and not self.full:
            raise UserError(f"data.name={self.name} needs data.path: {self.fix}.")

    def describe(self) -> str:
        return "an IGBH folder at data.path (paper, author, institute, fos and their relations): nothing to prepare"

    def plan_size(self, data: DataConfig) -> GraphSize:
        if self.full:
            return igbh_full()
        graphs = _graphs()
        return graphs.hetero_size(graphs.read_igbh(Path(data.path), data.num_classes), IGBH_TYPES[0],
                                  f"data.path={data.path}", classes=data.num_classes)

    def unprepared(self, data: DataConfig, root: Path, source: str) -> str:
        if self.full and not data.path:
            return igbh_full_unprepared(self.name)
        return super().unprepared(data, root, source)

    def load(self, data: DataConfig, root: Path) -> Data:
        graphs = _graphs()
        return graphs.typed_graph(graphs.read_igbh(Path(data.path), data.num_classes), IGBH_TYPES[0], data.featureless,
                                  f"data.path={data.path}")


_SAINT = ("adj_full.npz", "feats.npy", "class_map.json", "role.json")
_SAINT_SOURCE = "GraphSAINT's Google Drive folder"
# Every data.name, as the user writes it, and its kind.
DATASETS: dict[str, DatasetKind] = {kind.name: kind for kind in (
    Synthetic(),
    PygDataset("Reddit", GraphSize(232_965, 114_615_892, 602, 41, (153_431, 23_831, 55_703)),
               ("reddit_data.npz", "reddit_graph.npz"), kind="the Reddit post graph", source="data.dgl.ai"),
    PygDataset("Reddit2", GraphSize(232_965, 23_213_838, 602, 41, (153_932, 23_699, 55_334)), _SAINT,
               kind="GraphSAINT's sparser Reddit graph", source=_SAINT_SOURCE),
    PygDataset("Flickr", GraphSize(89_250, 899_756, 500, 7, (44_625, 22_312, 22_313)), _SAINT,
               kind="GraphSAINT's Flickr image graph", source=_SAINT_SOURCE),
    planetoid("Cora", GraphSize(2_708, 10_556, 1_433, 7, (140, 500, 1_000))),
    planetoid("CiteSeer", GraphSize(3_327, 9_104, 3_703, 6, (120, 500, 1_000))),
    planetoid("PubMed", GraphSize(19_717, 88_648, 500, 3, (60, 500, 1_000))),
    OgbNode("ogbn-arxiv", GraphSize(169_343, 1_166_243, 128, 40, (90_941, 29_799, 48_603))),
    OgbNode("ogbn-products", GraphSize(2_449_029, 123_718_280, 100, 47, (196_615, 39_323, 2_213_091))),
    OgbNode("ogbn-papers100M", GraphSize(111_059_956, 1_615_685_872, 128, 172, (1_207_179, 125_265, 214_338))),
    OgbNode("ogbn-proteins", GraphSize(132_534, 79_122_504, 8, 112, (86_619, 21_236, 24_679),  # 112 tasks
                                       edge_features=8, multilabel=True)),
    OgbNode("ogbn-mag", mag_size()),
    # No node classes and no node split (its seeds are edges). Edges: the training citations in both directions,
    # as the graph loads (an upper bound: a pair citing each other is one edge twice). Beside them its own split's
    # ids: the training citations, and the 86,596 validation and test citations each with its 1,000 negatives.
    OgbLink("ogbl-citation2", GraphSize(2_927_963, 2 * 30_387_995, 128, 0, (0, 0, 0),
                                        link_ids=ranked_split_ids(30_387_995, (86_596, 86_596), 1_000))),
    Files(), HeteroSynthetic(), Igbh("igbh"), Igbh("igbh-full", full=True),
)}


def dataset_kind(name: str) -> DatasetKind:
    """The kind of `data.name`; an unknown name is refused with the list of known ones."""
    if name not in DATASETS:
        named = [n for n in DATASETS if n != Files.name]
        raise UserError(f"data.name={name!r} is not known; expected one of: {', '.join(named)}, "
                        f"or {Files.name} (your own graph at data.path).")
    return DATASETS[name]
