"""Graphs to train on: a deterministic synthetic default, PyG's and OGB's datasets by name, or your own files.

Every loader returns a PyG `Data` with `x`, `y`, `edge_index` and the split as index
tensors `train_idx`, `val_idx`, `test_idx`. Preparing (downloading, processing) a real
dataset is done by exactly one process; `prepare_dataset` is what `python -m train data`
runs on a login node, since compute nodes often have no internet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, to_undirected

from train.config import DataConfig
from train.errors import UserError
from train.files import check_dir
from train.graph.ogbn import OGB_NODE_DATASETS, ogb_source, open_ogb
from train.graph.rawfiles import prepare_again, problems


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset on disk: where its folder is, which files processing reads, how to open it.

    `needed` and `processed` are relative to the folder; they let an error name the one file
    that is missing or damaged instead of ending in the library's traceback.
    """

    folder: Callable[[Path], Path]  # data root -> the dataset's folder
    needed: tuple[str, ...]  # the files processing reads (raw files, split files)
    processed: tuple[str, ...]  # what a processed dataset holds
    open: Callable[[Path], Data]  # data root -> Data with split indices (downloads when files are absent)
    # its folder -> where its files come from, and where they go (for a machine without internet)
    source: Callable[[Path], tuple[str, str]]


def _pyg(class_name: str, sub: str, raw: tuple[str, ...], *args) -> DatasetSpec:
    """A `torch_geometric.datasets` class stored under root/`sub`, with the masks as its split."""

    def open_(root: Path) -> Data:
        import torch_geometric.datasets as datasets

        return from_pyg_masks(getattr(datasets, class_name)(str(root / sub.split("/")[0]), *args)[0])

    def source(folder: Path) -> str:
        import torch_geometric.datasets as datasets

        url = getattr(getattr(datasets, class_name), "url", None)  # PyG's own; GraphSAINT's files have ids
        where = (f"Google Drive (the ids in PyG's torch_geometric.datasets.{class_name})" if not url else
                 f"{url} (one zip)" if url.endswith(".zip") else f"{url}/<file>")
        return f"Its raw files ({', '.join(raw)}) come from {where}", f"put them in {folder / 'raw'}/"

    return DatasetSpec(lambda root: root / sub, tuple(f"raw/{f}" for f in raw), ("processed/data.pt",), open_,
                       source)


def _planetoid(name: str) -> DatasetSpec:
    raw = tuple(f"ind.{name.lower()}.{part}" for part in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"))
    return _pyg("Planetoid", f"Planetoid/{name}", raw, name)


_SAINT = ("adj_full.npz", "feats.npy", "class_map.json", "role.json")
# Datasets by the name used in `data.name`.
DATASETS: dict[str, DatasetSpec] = {
    "Reddit": _pyg("Reddit", "Reddit", ("reddit_data.npz", "reddit_graph.npz")),
    "Reddit2": _pyg("Reddit2", "Reddit2", _SAINT),
    "Flickr": _pyg("Flickr", "Flickr", _SAINT),
    "Cora": _planetoid("Cora"),
    "CiteSeer": _planetoid("CiteSeer"),
    "PubMed": _planetoid("PubMed"),
    **{name: DatasetSpec(lambda root, d=info.folder: root / d, info.needed, info.processed,
                         lambda root, n=name: open_ogb(n, root), lambda folder, n=name: ogb_source(n, folder))
       for name, info in OGB_NODE_DATASETS.items()},
}
SYNTHETIC = "synthetic"
FILES = "files"  # the user's own graph at data.path (train/graph/graphfiles.py)


def data_root(config: DataConfig, data_dir: str | None = None) -> Path:
    """`data.root`, else `data_dir` ($DATA_DIR, resolved at the entry: `DistEnv.data_dir`), else ./data."""
    return Path(config.root or data_dir or "data")


def checked_data_root(config: DataConfig, data_dir: str | None = None) -> Path:
    """The data root (`data_root`), refused naming its source when it is not a directory this user can use:
    a regular file, a dangling link, under a file, unreadable, or missing where it cannot be made."""
    root = data_root(config, data_dir)
    source = "data.root" if config.root else "DATA_DIR" if data_dir else "the default data root"
    check_dir(root, f"{source}={str(root)!r}", "give the folder that holds (or will hold) the datasets", create=True)
    return root


def _checked_folder(name: str, root: Path) -> Path:
    """Dataset `name`'s folder under the root: a directory, or one that can be made there."""
    folder = DATASETS[name].folder(root)
    check_dir(folder, f"dataset {name!r}: its folder {str(folder)!r}",
              f"move it away, or give another data.root; then {prepare_again(name)}", create=True)
    return folder


def check_dataset_name(name: str) -> None:
    if name not in (SYNTHETIC, FILES) and name not in DATASETS:
        raise UserError(f"data.name={name!r} is not known; expected one of: {SYNTHETIC}, {', '.join(DATASETS)}, "
                        f"or {FILES} (your own graph at data.path).")


def synthetic_graph(config: DataConfig) -> Data:
    """A stochastic block model with noisy class-dependent features, fixed by `config.seed`.

    Features alone separate the classes poorly (`feature_signal` is small against unit
    noise); a node's neighbours mostly share its class (`homophily`), so averaging over
    them denoises the features: a GNN must use the graph to do well.
    """
    gen = torch.Generator().manual_seed(config.seed)
    n, c = config.num_nodes, config.num_classes
    y = torch.randint(c, (n,), generator=gen)

    # Nodes grouped by class, so "a random node of class k" is one index lookup.
    by_class = torch.argsort(y, stable=True)
    class_count = torch.bincount(y, minlength=c)
    class_start = torch.cumsum(class_count, 0) - class_count

    num_pairs = int(n * config.avg_degree / 2)
    src = torch.randint(n, (num_pairs,), generator=gen)
    same_class = torch.rand(num_pairs, generator=gen) < config.homophily
    dst_class = torch.where(same_class, y[src], torch.randint(c, (num_pairs,), generator=gen))
    offset = (torch.rand(num_pairs, generator=gen) * class_count[dst_class]).long()
    dst = by_class[class_start[dst_class] + offset]
    edge_index = torch.stack([src, dst])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    edge_index = to_undirected(edge_index, num_nodes=n)

    centroids = torch.randn(c, config.num_features, generator=gen)
    x = config.feature_signal * centroids[y] + torch.randn(n, config.num_features, generator=gen)

    perm = torch.randperm(n, generator=gen)
    num_train = int(n * config.train_fraction)
    num_val = int(n * config.val_fraction)
    return Data(
        x=x,
        y=y,
        edge_index=edge_index,
        train_idx=perm[:num_train].sort().values,
        val_idx=perm[num_train : num_train + num_val].sort().values,
        test_idx=perm[num_train + num_val :].sort().values,
    )


def from_pyg_masks(data) -> Data:
    """x, y, a coalesced edge_index and the split as indices, from a PyG graph with split masks."""
    out = Data(x=data.x, y=data.y.view(-1), edge_index=coalesce(data.edge_index, num_nodes=data.num_nodes))
    for split in ("train", "val", "test"):
        mask = getattr(data, f"{split}_mask")
        if mask.dim() > 1:  # some datasets ship several splits; use the first
            mask = mask[:, 0]
        out[f"{split}_idx"] = mask.nonzero().view(-1)
    return out


def _open(name: str, root: Path, preparing: bool = False) -> Data:
    """Open (processing on first use, downloading when absent) dataset `name`, naming a bad file.

    Before processing, the files it reads are checked (cheaply for large ones); a missing one
    is named when the download that PyG or OGB then tries fails, as it does offline (`preparing`:
    where the files come from and where to copy them instead); a failure while processing or
    reading the processed file is traced back to the file that caused it.
    """
    spec = DATASETS[name]
    folder = _checked_folder(name, root)
    processed = is_prepared(name, root)
    if not processed and any((folder / f).exists() for f in spec.needed):
        damaged = [p for p in problems(folder, spec.needed) if not p.endswith(" is missing")]
        if damaged:
            raise UserError(f"dataset {name!r}: {'; '.join(damaged)}. Delete it and {prepare_again(name)}.")
    try:
        return spec.open(root)
    except UserError:
        raise
    except (OSError, ConnectionError) as exc:  # URLError is an OSError; so is a file not found
        if preparing and not is_prepared(name, root):
            origin, action = spec.source(folder)
            raise UserError(f"dataset {name!r} could not be downloaded: no internet from this machine ({exc}).\n"
                            f"{origin}.\nDownload them on a machine with internet and {action}.\n"
                            "Then run this again: it prepares the files it finds there, with no download.") from None
        missing = [p for p in problems(folder, spec.needed, thorough=False) if p.endswith(" is missing")]
        what = f"{'; '.join(missing)}" if missing else f"{str(folder)!r} could not be read"
        raise UserError(
            f"dataset {name!r} is not prepared under {str(root)!r}: {what}, and it could not be downloaded "
            f"({exc}). Compute nodes often have no internet: {prepare_again(name)}."
        ) from None
    except Exception as exc:
        found = problems(folder, spec.processed if processed else spec.needed, thorough=True)
        if not found:
            raise
        advice = f"delete {str(folder / 'processed')!r}" if processed else "delete it"
        raise UserError(f"dataset {name!r}: {'; '.join(found)} ({type(exc).__name__} while loading). "
                        f"{advice[0].upper()}{advice[1:]} and {prepare_again(name)}.") from None


def dataset_folder(config: DataConfig, data_dir: str | None = None) -> Path | None:
    """Where dataset `config.name` lives on disk (data.path for files; None for synthetic), for checks."""
    check_dataset_name(config.name)
    if config.name == SYNTHETIC:
        return None
    if config.name == FILES:
        return Path(config.path)
    return DATASETS[config.name].folder(data_root(config, data_dir))


def is_prepared(name: str, root: Path) -> bool:
    spec = DATASETS[name]
    return all((spec.folder(root) / f).is_file() for f in spec.processed)


def prepare_dataset(config: DataConfig, data_dir: str | None = None) -> Path:
    """Download and process a real dataset into the data root (run once, on a login node)."""
    check_dataset_name(config.name)
    if config.name in (SYNTHETIC, FILES):
        return data_root(config, data_dir)  # generated, or the user's own files (checked as they load)
    root = checked_data_root(config, data_dir)
    if is_prepared(config.name, root):
        return root  # processed already
    root.mkdir(parents=True, exist_ok=True)
    _open(config.name, root, preparing=True)
    return root


def load_graph(config: DataConfig, data_dir: str | None = None) -> Data:
    """The graph for `config`; a real dataset must already be prepared (see `prepare_dataset`).
    data.normalize_features: each node's features scaled to sum to 1 (PyG's NormalizeFeatures, the
    Planetoid papers' preprocessing), once, before the graph is shared."""
    data = _load(config, data_dir)
    if config.normalize_features:
        from torch_geometric.transforms import NormalizeFeatures

        data = NormalizeFeatures()(data)
    return data


def _load(config: DataConfig, data_dir: str | None) -> Data:
    check_dataset_name(config.name)
    if config.name == SYNTHETIC:
        return synthetic_graph(config)
    if config.name == FILES:
        from train.graph.graphfiles import load_files

        return load_files(config.path)
    root = checked_data_root(config, data_dir)
    root.mkdir(parents=True, exist_ok=True)
    return _open(config.name, root)


def num_classes(data: Data) -> int:
    return int(data.y.max()) + 1
