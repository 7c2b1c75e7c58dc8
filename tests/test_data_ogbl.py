"""ogbl-citation2 by name, read by the real `ogb` loader from small files in OGB's on-disk format (its split
files pickled NumPy arrays, as OGB's are), with its link split: the training edges, and the held-out citations
with their own negatives; a missing, damaged or foreign split file named."""

from __future__ import annotations

from argparse import Namespace

import pytest
import torch

from tests.harness.localjob import make_data
from tests.harness.ogb_files import write_ogbl_citation2
from train.config import DataConfig
from train.errors import UserError
from train.graph.datasets.loading import dataset_kind, load_graph, prepare_dataset, unprepared
from train.graph.datasets.ogb_links import OGB_LINK_DATASETS
from train.graph.link_fields import has_link_split, neg_dst, neg_dst_problem, pos_edges, pos_edges_problem

NAME = "ogbl-citation2"
INFO = OGB_LINK_DATASETS[NAME]


def config(root) -> DataConfig:
    return DataConfig(name=NAME, root=str(root))


@pytest.mark.parametrize("numpy1", [True, False], ids=["numpy1-pickles", "numpy2-pickles"])
def test_citation2_loads_with_its_split_and_the_negatives_of_each_held_out_citation(tmp_path, numpy1):
    written = write_ogbl_citation2(tmp_path, numpy1=numpy1)
    data = load_graph(config(tmp_path))
    assert torch.allclose(data.x, torch.from_numpy(written["x"]), atol=1e-5) and data.x.dtype == torch.float32
    assert has_link_split(data) and "y" not in data and "train_idx" not in data  # its seeds are edges
    for ours, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert pos_edges(data, ours).dtype == torch.long
        assert torch.equal(pos_edges(data, ours), torch.from_numpy(written[theirs]))  # OGB's order, directed
    for ours, theirs in (("val", "valid"), ("test", "test")):
        assert torch.equal(neg_dst(data, ours), torch.from_numpy(written[f"{theirs}_neg"]))
    assert neg_dst(data, "train") is None
    # messages pass over the training citations in both directions; no held-out citation is among them
    train = {tuple(e) for e in written["train"].T.tolist()}
    assert {tuple(e) for e in data.edge_index.t().tolist()} == train | {(d, s) for s, d in train}
    held = {tuple(e) for part in ("valid", "test") for e in written[part].T.tolist()}
    assert held and not held & {tuple(e) for e in data.edge_index.t().tolist()}
    again = load_graph(config(tmp_path))  # from the processed file
    assert torch.equal(again.edge_index, data.edge_index) and torch.equal(again.test_neg_dst, data.test_neg_dst)


def test_prepared_once_processed_and_only_with_its_split_files(tmp_path):
    assert unprepared(config(tmp_path)).endswith(f"make data DATASET={NAME} DATA_DIR={tmp_path}")
    write_ogbl_citation2(tmp_path)
    assert unprepared(config(tmp_path)) == ""
    prepare_dataset(config(tmp_path))
    folder = tmp_path / INFO.folder
    assert (folder / "processed" / "geometric_data_processed.pt").is_file() and unprepared(config(tmp_path)) == ""
    (folder / "split" / "time" / "valid.pt").unlink()  # read at every load, processed or not
    assert unprepared(config(tmp_path)).startswith(
        f"dataset '{NAME}' is not prepared in '{tmp_path}' (data.root): {folder}/split/time/valid.pt is missing; ")
    with pytest.raises(UserError) as refused:
        load_graph(config(tmp_path))
    assert str(refused.value) == (f"dataset '{NAME}': {folder}/split/time/valid.pt is missing; prepare it again on a "
                                  f"login node (with internet): `make data DATASET={NAME}` or `python -m train data "
                                  f"--config CONFIG data.name={NAME}`, with the same data.root / DATA_DIR.")


def test_a_damaged_split_file_is_named(tmp_path):
    write_ogbl_citation2(tmp_path)
    path = tmp_path / INFO.folder / "split" / "time" / "test.pt"
    path.write_bytes(path.read_bytes()[:200])  # cut short
    with pytest.raises(UserError) as refused:
        load_graph(config(tmp_path))
    assert str(refused.value).startswith(f"dataset '{NAME}': {path} is ")
    assert "Delete it and prepare it again" in str(refused.value)


def _rewrite(path, change) -> None:
    """One split file, its arrays changed by `change` and saved back (NumPy arrays, as OGB's)."""
    arrays = dict(torch.load(path, weights_only=False))
    change(arrays)
    torch.save(arrays, path)


@pytest.mark.parametrize("change,said", [
    (lambda a: a.pop("target_node_neg"), "holds no target_node_neg (it holds: source_node, target_node)"),
    (lambda a: a["target_node_neg"].__setitem__((3, 1), 300), "its target_node_neg names node 300, outside 0..299"),
    (lambda a: a.__setitem__("target_node_neg", a["target_node_neg"][:-1]),
     "its target_node_neg has shape [29, 20], not [30, K]"),
    (lambda a: a.__setitem__("target_node", a["target_node"][:-1]),
     "its source_node (30) and target_node (29) differ in length"),
    (lambda a: a.__setitem__("source_node", a["source_node"] * 0.5),
     "its source_node, target_node holds torch.float64"),
    (lambda a: a.__setitem__("source_node", [{"a": 1}]), "its source_node is a list that is not an array of numbers"),
    (lambda a: a.__setitem__("source_node", Namespace()), "is not one of OGB's split files (UnpicklingError: "
                                                          "Unsupported global: GLOBAL argparse.Namespace was not an"),
], ids=["no-negatives", "negative-out-of-range", "negatives-short", "lengths-differ", "float-ids", "objects",
        "foreign-class"])
def test_a_split_file_with_the_wrong_arrays_is_named(tmp_path, change, said):
    write_ogbl_citation2(tmp_path)
    path = tmp_path / INFO.folder / "split" / "time" / "valid.pt"
    _rewrite(path, change)
    with pytest.raises(UserError) as refused:
        load_graph(config(tmp_path))
    assert str(refused.value).startswith(f"dataset '{NAME}': {path}") and said in str(refused.value)
    assert "Delete it and prepare it again" in str(refused.value)


def test_a_missing_raw_file_offline_is_named(tmp_path, monkeypatch):
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    write_ogbl_citation2(tmp_path)
    (tmp_path / INFO.folder / "raw" / "edge.csv.gz").unlink()
    with pytest.raises(UserError) as refused:
        load_graph(config(tmp_path))
    assert f"{tmp_path / INFO.folder / 'raw' / 'edge.csv.gz'} is missing" in str(refused.value)
    assert f"make data DATASET={NAME}" in str(refused.value)


def test_it_is_a_link_dataset_only(tmp_path):
    kind = dataset_kind(config(tmp_path))
    assert kind.tasks == ("link",) and dataset_kind(DataConfig(name="ogbn-arxiv")).tasks == ("node", "link")
    assert kind.describe() == (f"OGB's link-property dataset {NAME}, downloaded from snap.stanford.edu/ogb; "
                               f"`make data DATASET={NAME}` prepares it")
    assert kind.origin(tmp_path / INFO.folder)[0] == \
        "Its files come from http://snap.stanford.edu/ogb/data/linkproppred/citation-v2.zip (one zip)"
    size = kind.plan_size(config(tmp_path))
    assert (size.nodes, size.features, size.classes, size.split) == (2_927_963, 128, 0, (0, 0, 0))  # seeds: edges
    assert size.link_ids == 2 * 30_561_187 + 2 * 86_596 * 1_000  # each citation's ends, each held-out's negatives


def test_missing_ogb_package_says_how_to_install_it(tmp_path, monkeypatch):
    import sys
    write_ogbl_citation2(tmp_path)
    monkeypatch.setitem(sys.modules, "ogb.linkproppred", None)  # as if ogb were not installed
    with pytest.raises(UserError, match=r"pip install ogb==1\.3\.6"):
        load_graph(config(tmp_path))


def test_make_data_prepares_it(tmp_path):
    write_ogbl_citation2(tmp_path / "data")
    done = make_data(f"DATASET={NAME}", f"DATA_DIR={tmp_path / 'data'}", "IMAGE=none")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "data" / INFO.folder / "processed" / "geometric_data_processed.pt").is_file()


def test_the_link_splits_checks_name_each_problem():
    assert pos_edges_problem(torch.tensor([[0, 4], [1, 2]]), 5) is None
    assert pos_edges_problem(torch.zeros(3, 2, dtype=torch.long), 5) == \
        "has shape [3, 2], not [2, M] (sources, targets)"
    assert pos_edges_problem(torch.tensor([[0, 5], [-1, 2]]), 5) == "names node 5, outside 0..4"
    assert pos_edges_problem(torch.ones(2, 2, dtype=torch.bool), 5) == "holds torch.bool, not node ids (integers)"
    assert neg_dst_problem(torch.zeros(3, 4, dtype=torch.long), 3, 5) is None
    assert neg_dst_problem(torch.zeros(3, 0, dtype=torch.long), 3, 5) == \
        "has shape [3, 0], not [3, K] (K negatives for each of the positives)"
