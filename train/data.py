"""Graphs to train on: a deterministic synthetic default, or PyG's real datasets by name.

Every loader returns a PyG `Data` with `x`, `y`, `edge_index` and the split as index
tensors `train_idx`, `val_idx`, `test_idx`. Preparing (downloading, processing) a real
dataset is done by exactly one process; `prepare_dataset` is what `python -m train data`
runs on a login node, since compute nodes often have no internet.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, to_undirected

from train.config import DataConfig
from train.errors import UserError


def _reddit(root: Path):
    from torch_geometric.datasets import Reddit

    return Reddit(str(root / "Reddit"))


def _reddit2(root: Path):
    from torch_geometric.datasets import Reddit2

    return Reddit2(str(root / "Reddit2"))


def _flickr(root: Path):
    from torch_geometric.datasets import Flickr

    return Flickr(str(root / "Flickr"))


def _planetoid(name: str) -> Callable[[Path], object]:
    def load(root: Path):
        from torch_geometric.datasets import Planetoid

        return Planetoid(str(root / "Planetoid"), name)

    return load


# PyG datasets by the name used in `data.name`; each takes the data root.
DATASETS: dict[str, Callable[[Path], object]] = {
    "Reddit": _reddit,
    "Reddit2": _reddit2,
    "Flickr": _flickr,
    "Cora": _planetoid("Cora"),
    "CiteSeer": _planetoid("CiteSeer"),
    "PubMed": _planetoid("PubMed"),
}
SYNTHETIC = "synthetic"


def data_root(config: DataConfig, environ=os.environ) -> Path:
    """`data.root`, else $DATA_DIR, else ./data (a shared path on a cluster)."""
    return Path(config.root or environ.get("DATA_DIR") or "data")


def check_dataset_name(name: str) -> None:
    if name != SYNTHETIC and name not in DATASETS:
        raise UserError(f"data.name={name!r} is not known; expected one of: {SYNTHETIC}, {', '.join(DATASETS)}.")


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


def _from_pyg_dataset(dataset) -> Data:
    data = dataset[0]
    out = Data(x=data.x, y=data.y.view(-1), edge_index=coalesce(data.edge_index, num_nodes=data.num_nodes))
    for split in ("train", "val", "test"):
        mask = getattr(data, f"{split}_mask")
        if mask.dim() > 1:  # some datasets ship several splits; use the first
            mask = mask[:, 0]
        out[f"{split}_idx"] = mask.nonzero().view(-1)
    return out


def prepare_dataset(config: DataConfig, environ=os.environ) -> Path:
    """Download and process a real dataset into the data root (run once, on a login node)."""
    check_dataset_name(config.name)
    root = data_root(config, environ)
    if config.name == SYNTHETIC:
        return root  # generated on the fly from the seed, nothing to prepare
    root.mkdir(parents=True, exist_ok=True)
    try:
        DATASETS[config.name](root)
    except (OSError, ConnectionError) as exc:  # URLError is an OSError
        raise UserError(
            f"dataset {config.name!r} is not prepared under {str(root)!r} and could not be downloaded "
            f"({exc}). Compute nodes often have no internet: run `python -m train data --config ...` "
            "(or `make data`) on a login node first, with the same data.root / DATA_DIR."
        ) from None
    return root


def load_graph(config: DataConfig, environ=os.environ) -> Data:
    """The graph for `config`; a real dataset must already be prepared (see `prepare_dataset`)."""
    check_dataset_name(config.name)
    if config.name == SYNTHETIC:
        return synthetic_graph(config)
    return _from_pyg_dataset(DATASETS[config.name](prepare_dataset(config, environ)))


def num_classes(data: Data) -> int:
    return int(data.y.max()) + 1
