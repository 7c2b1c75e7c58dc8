"""Datasets: the synthetic default is deterministic and needs the graph; real PyG datasets load from disk."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.harness.reddit_files import write_reddit_raw
from train.config import DataConfig
from train.errors import UserError
from train.graph.datasets.loading import DATASETS, load_graph, prepare_dataset, synthetic_graph
from train.graph.seeds import epoch_order, rank_shard


def test_synthetic_is_deterministic_and_split_is_a_partition():
    config = DataConfig(num_nodes=3000)
    first, second = synthetic_graph(config), synthetic_graph(config)
    assert torch.equal(first.x, second.x) and torch.equal(first.edge_index, second.edge_index)
    assert not torch.equal(first.x, synthetic_graph(DataConfig(num_nodes=3000, seed=1)).x)
    splits = torch.cat([first.train_idx, first.val_idx, first.test_idx])
    assert torch.equal(splits.sort().values, torch.arange(3000))


def test_synthetic_graph_is_homophilous_and_undirected():
    data = synthetic_graph(DataConfig(num_nodes=5000, homophily=0.8))
    src, dst = data.edge_index
    same = (data.y[src] == data.y[dst]).float().mean()
    assert 0.75 < same < 0.9  # 0.8 inside the class, plus the chance hits of the rest
    pairs = set(zip(src.tolist(), dst.tolist()))
    assert all((d, s) in pairs for s, d in list(pairs)[:2000])
    assert not bool((src == dst).any())


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 7])
def test_shards_cover_every_seed_once(world_size):
    train_idx = torch.arange(1001) * 3
    order = epoch_order(train_idx, seed=5, epoch=2)
    shards = [rank_shard(order, r, world_size) for r in range(world_size)]
    joined = torch.cat(shards)
    assert torch.equal(joined.sort().values, train_idx)
    assert max(s.numel() for s in shards) - min(s.numel() for s in shards) <= 1
    assert not torch.equal(epoch_order(train_idx, 5, 3), order)  # reshuffled each epoch
    assert torch.equal(epoch_order(train_idx, 5, 2), order)  # same on every rank


def test_reddit_loads_from_raw_files(tmp_path):
    node_types = write_reddit_raw(tmp_path)
    data = load_graph(DataConfig(name="Reddit", root=str(tmp_path)))
    assert data.num_nodes == 60 and data.x.size(1) == 7
    assert torch.equal(data.train_idx, torch.from_numpy(np.flatnonzero(node_types == 1)))
    assert torch.equal(data.test_idx, torch.from_numpy(np.flatnonzero(node_types == 3)))
    assert (tmp_path / "Reddit" / "processed" / "data.pt").is_file()


def test_data_root_defaults_to_data_dir(tmp_path):
    write_reddit_raw(tmp_path)
    assert prepare_dataset(DataConfig(name="Reddit"), data_dir=str(tmp_path)) == tmp_path


def test_missing_dataset_offline_says_to_prepare_on_a_login_node(tmp_path, monkeypatch):
    # No route out: a proxy on a closed loopback port refuses every download at once.
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="Reddit", root=str(tmp_path)))
    assert "python -m train data" in str(info.value) and "Reddit" in str(info.value)


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(UserError, match="synthetic, Reddit"):
        load_graph(DataConfig(name="Redit"))


def test_normalize_features_scales_each_row_to_sum_one_as_pygs_transform():
    from torch_geometric.transforms import NormalizeFeatures

    config = DataConfig(num_nodes=300, num_features=16, num_classes=4)
    raw = load_graph(config)
    normalized = load_graph(DataConfig(num_nodes=300, num_features=16, num_classes=4, normalize_features=True))
    torch.testing.assert_close(normalized.x, NormalizeFeatures()(raw.clone()).x)
    torch.testing.assert_close(normalized.x.sum(-1), torch.ones(300))
    assert torch.equal(normalized.edge_index, raw.edge_index) and torch.equal(normalized.y, raw.y)


def test_preparing_offline_says_where_each_datasets_files_come_from(tmp_path, monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    with pytest.raises(UserError) as info:
        prepare_dataset(DataConfig(name="Reddit", root=str(tmp_path)))
    lines = str(info.value).splitlines()
    assert lines[0].startswith("dataset 'Reddit' could not be downloaded: no internet from this machine (")
    assert lines[1:3] == ["Its raw files (reddit_data.npz, reddit_graph.npz) come from "
                          "https://data.dgl.ai/dataset/reddit.zip (one zip).",
                          f"Download them on a machine with internet and put them in {tmp_path}/Reddit/raw/."]
    origin, action = DATASETS["ogbn-products"].origin(tmp_path / "ogbn_products")
    assert origin == "Its files come from http://snap.stanford.edu/ogb/data/nodeproppred/products.zip (one zip)"
    assert action == f"unzip it in {tmp_path}/, renaming the folder it makes (products/) to ogbn_products/"
    origin, _ = DATASETS["Flickr"].origin(tmp_path / "Flickr")
    assert "Google Drive (the ids in PyG's torch_geometric.datasets.Flickr)" in origin
