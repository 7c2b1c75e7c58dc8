"""OGB node datasets by name, read by the real `ogb` loader from small files in OGB's on-disk format."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.harness.localjob import ROOT, final_summary, make_data, run_local_job
from tests.harness.ogb_files import write_ogb, write_ogbn_proteins
from train.config import DataConfig, load_config
from train.errors import UserError
from train.graph.datasets.loading import load_graph, num_classes
from train.graph.datasets.ogb_nodes import OGB_NODE_DATASETS, UNLABELED


# ogbn-proteins: below; ogbn-mag (heterogeneous): tests/test_hetero_data.py
@pytest.mark.parametrize("name", sorted(set(OGB_NODE_DATASETS) - {"ogbn-proteins", "ogbn-mag"}))
def test_ogb_dataset_loads_with_its_official_split(tmp_path, name):
    written = write_ogb(tmp_path, name, unlabeled_fraction=0.4 if name == "ogbn-papers100M" else 0.0)
    data = load_graph(DataConfig(name=name, root=str(tmp_path)))
    assert torch.allclose(data.x, torch.from_numpy(written["x"]), atol=1e-5)
    for ours, theirs in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test")):
        assert torch.equal(data[ours], torch.from_numpy(written[theirs]))
    labels = written["labels"]
    expected_y = torch.from_numpy(np.where(np.isnan(labels), UNLABELED, labels).astype(np.int64))
    assert data.y.dtype == torch.long and torch.equal(data.y, expected_y)
    assert num_classes(data) == 5
    pairs = set(map(tuple, written["edge"].tolist()))
    got = set(map(tuple, data.edge_index.t().tolist()))
    if name == "ogbn-products":  # OGB adds the inverse edges of products (add_inverse_edge)
        pairs |= {(d, s) for s, d in pairs}
    assert got == pairs
    assert (tmp_path / OGB_NODE_DATASETS[name].folder / "processed" / "geometric_data_processed.pt").is_file()
    again = load_graph(DataConfig(name=name, root=str(tmp_path)))  # from the processed file
    assert torch.equal(again.edge_index, data.edge_index) and torch.equal(again.y, data.y)


def test_make_data_prepares_ogbn_products_and_two_ranks_train_on_it(tmp_path):
    write_ogb(tmp_path / "data", "ogbn-products", num_nodes=400, num_edges=2400)
    done = make_data("DATASET=ogbn-products", f"DATA_DIR={tmp_path / 'data'}", "IMAGE=none")
    assert done.returncode == 0, done.stderr
    assert "ready under" in done.stdout
    assert (tmp_path / "data" / "ogbn_products" / "processed" / "geometric_data_processed.pt").is_file()
    out = tmp_path / "run"
    job = run_local_job(["fit", "--config", "ogbn-products", "model.hidden=32", "sampler.num_neighbors=[5,5,5]",
                         "sampler.batch_size=64", "sampler.num_workers=0", "trainer.epochs=4", "trainer.eval_every=1",
                         "optim.lr=0.01", f"output.dir={out}"],
                        world_size=2, extra_env={"DATA_DIR": str(tmp_path / "data")})
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    assert final_summary(out)["final_test_acc"] > 0.5  # 5 classes: chance is 0.2; labels follow the features


def test_ogbn_proteins_tasks_and_node_features_from_the_mean_of_their_edges(tmp_path):
    written = write_ogbn_proteins(tmp_path)
    data = load_graph(DataConfig(name="ogbn-proteins", root=str(tmp_path)))
    assert data.y.dtype == torch.float32 and torch.equal(data.y, torch.from_numpy(written["labels"]).float())
    assert num_classes(data) == written["labels"].shape[1]  # one output per task
    edge, feat = written["edge"], written["edge_feat"]
    both = np.concatenate([edge, edge[:, ::-1]])  # OGB adds the inverse edges (add_inverse_edge)
    mean = np.stack([feat[np.flatnonzero(both[:, 1] == v) % len(edge)].mean(axis=0) for v in range(len(data.y))])
    assert torch.allclose(data.x, torch.from_numpy(mean).float(), atol=1e-5)
    # and the edges keep their own 8 features, each edge's row (both directions) for a model that reads them
    rows_of: dict[tuple[int, int], list] = {}
    for (source, target), row in zip(edge.tolist(), feat.tolist()):  # a pair drawn twice has two rows
        rows_of.setdefault((source, target), []).append(row)
        rows_of.setdefault((target, source), []).append(row)
    assert data.edge_attr.shape == (data.edge_index.size(1), feat.shape[1]) and data.edge_attr.dtype == torch.float32
    for pair, row in zip(data.edge_index.t().tolist(), data.edge_attr.tolist()):
        assert any(row == pytest.approx(theirs, abs=1e-5) for theirs in rows_of[tuple(pair)]), pair
    for ours, theirs in (("train_idx", "train"), ("val_idx", "valid"), ("test_idx", "test")):
        assert torch.equal(data[ours], torch.from_numpy(written[theirs]))


def test_make_data_prepares_ogbn_proteins_and_two_ranks_train_on_it(tmp_path):
    write_ogbn_proteins(tmp_path / "data", num_nodes=400, num_edges=4000)
    done = make_data("DATASET=ogbn-proteins", f"DATA_DIR={tmp_path / 'data'}", "IMAGE=none")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / "ogbn_proteins" / "processed" / "geometric_data_processed.pt").is_file()
    out = tmp_path / "run"
    job = run_local_job(["fit", "--config", "ogbn-proteins", "model.hidden=32", "sampler.num_neighbors=[5,5,5]",
                         "sampler.batch_size=16", "sampler.num_workers=0", "trainer.epochs=4", "trainer.eval_every=2",
                         f"output.dir={out}"], world_size=2, extra_env={"DATA_DIR": str(tmp_path / "data")})
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    assert final_summary(out)["test_rocauc_at_best_val"] > 0.7  # chance is 0.5; the kinds show in the edges


def test_ogbn_arxiv_by_data_name_on_the_command_line(tmp_path):
    write_ogb(tmp_path, "ogbn-arxiv")
    proc = subprocess.run([sys.executable, "-m", "train", "data", "--config", "synthetic", "data.name=ogbn-arxiv"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ogbn_arxiv" / "processed" / "geometric_data_processed.pt").is_file()


def test_offline_compute_node_is_told_to_prepare_on_a_login_node(tmp_path, monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="ogbn-products", root=str(tmp_path)))
    message = str(info.value)
    assert "ogbn-products" in message and "python -m train data" in message and "make data" in message
    assert "login node" in message and "edge.csv.gz is missing" in message


def test_truncated_ogb_file_is_named(tmp_path):
    write_ogb(tmp_path, "ogbn-arxiv", num_nodes=2000, num_edges=20000)
    path = tmp_path / "ogbn_arxiv" / "raw" / "node-feat.csv.gz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="ogbn-arxiv", root=str(tmp_path)))
    assert str(path) in str(info.value) and "make data DATASET=ogbn-arxiv" in str(info.value)


def test_incomplete_ogb_folder_is_refused_instead_of_asking_on_stdin(tmp_path):
    write_ogb(tmp_path, "ogbn-arxiv")
    (tmp_path / "ogbn_arxiv" / "RELEASE_v1.txt").unlink()
    with pytest.raises(UserError, match="RELEASE_v1.txt"):
        load_graph(DataConfig(name="ogbn-arxiv", root=str(tmp_path)))


def test_missing_ogb_package_says_how_to_install_it(tmp_path, monkeypatch):
    write_ogb(tmp_path, "ogbn-arxiv")
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)  # as if ogb were not installed
    with pytest.raises(UserError, match=r"pip install ogb==1\.3\.6"):
        load_graph(DataConfig(name="ogbn-arxiv", root=str(tmp_path)))


@pytest.mark.parametrize("name,layers", [("ogbn-products", 3), ("ogbn-papers100M", 2)])
def test_shipped_ogb_configs_load_and_validate(name, layers):
    config = load_config(name)
    assert config.data.name == name and config.model.num_layers == layers
    assert len(config.sampler.num_neighbors) == layers


def test_importing_train_data_does_not_import_ogb():
    code = "import sys, train.graph.datasets.loading; assert 'ogb' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_dataset_folder_names_where_each_dataset_lives(tmp_path):
    from train.graph.datasets.loading import dataset_folder

    assert dataset_folder(DataConfig(name="ogbn-products", root=str(tmp_path))) == tmp_path / "ogbn_products"
    assert dataset_folder(DataConfig(name="Cora", root=str(tmp_path))) == tmp_path / "Planetoid" / "Cora"
    assert dataset_folder(DataConfig(name="files", path=str(tmp_path / "g"))) == tmp_path / "g"
    assert dataset_folder(DataConfig()) is None
