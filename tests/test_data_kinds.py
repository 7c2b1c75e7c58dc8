"""Dataset kinds (train/graph/datasets/kinds.py): every data.name through the one interface, the registry and its
refusal,
the plan's sizes against what loading gives, and whether a data root holds a dataset prepared."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from tests.harness.ogb_files import write_ogb
from tests.harness.reddit_files import write_reddit_raw
from tests.test_data_files import good_arrays, write_folder
from tests.test_planetoid import SHARED_CORA, needs_cora
from train.cli.plan_run import graph_size
from train.config import DataConfig, load_config
from train.errors import UserError
from train.graph.datasets import kinds
from train.graph.datasets.kinds import (
    DATASETS,
    DatasetKind,
    Files,
    HeteroSynthetic,
    Igbh,
    OgbLink,
    OgbNode,
    PygDataset,
    Synthetic,
)
from train.graph.datasets.loading import dataset_kind, load_graph, prepare_dataset, probe_dataset, unprepared
from train.graph.sizes import GraphSize

ON_DISK = [name for name, kind in DATASETS.items() if kind.in_data_root]


def loaded_size(data) -> GraphSize:
    return GraphSize(data.num_nodes, data.edge_index.size(1), data.num_features, int(data.y.max()) + 1,
                     (data.train_idx.numel(), data.val_idx.numel(), data.test_idx.numel()))


# ---- the registry ----------------------------------------------------------------------------------

def test_the_registry_names_every_dataset_with_its_kind():
    kinds_of = {name: type(kind) for name, kind in DATASETS.items()}
    assert kinds_of == {
        "synthetic": Synthetic, "files": Files,
        **dict.fromkeys(("Reddit", "Reddit2", "Flickr", "Cora", "CiteSeer", "PubMed"), PygDataset),
        **dict.fromkeys(("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-proteins", "ogbn-mag"), OgbNode),
        "ogbl-citation2": OgbLink, "hetero-synthetic": HeteroSynthetic, "igbh": Igbh, "igbh-full": Igbh}
    assert all(kind.name == name for name, kind in DATASETS.items())
    assert {DATASETS[n].sub for n in ("Cora", "CiteSeer", "PubMed")} == {"Planetoid/Cora", "Planetoid/CiteSeer",
                                                                          "Planetoid/PubMed"}


def test_an_unknown_name_is_refused_with_every_valid_one():
    with pytest.raises(UserError) as refused:
        dataset_kind(DataConfig(name="Coraa"))
    message = str(refused.value)
    assert message.startswith("data.name='Coraa' is not known; expected one of: synthetic, Reddit, ")
    assert all(name in message for name in DATASETS)
    assert message.endswith("or files (your own graph at data.path).")
    for door in (lambda c: graph_size(c), lambda c: load_graph(c.data), lambda c: unprepared(c.data, "data")):
        with pytest.raises(UserError, match="data.name='Coraa' is not known"):
            door(load_config("tiny", ["data.name=Coraa"]))


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_each_kind_describes_itself_in_one_sentence(name):
    text = DATASETS[name].describe()
    assert "\n" not in text and len(text) < 200
    if name in ON_DISK:  # where its files come from, and what prepares them
        assert "downloaded from " in text and f"`make data DATASET={name}` prepares it" in text
    else:
        assert text.endswith("nothing to prepare")


def test_a_new_kind_is_one_class_in_the_registry(monkeypatch, tmp_path):
    """Every door (load, plan, prepared, probe) asks the kind: a kind added to DATASETS serves them all."""
    class Ring(Synthetic):
        name, kind = "ring", "a ring"

        def plan_size(self, data):
            return GraphSize(5, 10, 2, 2, (1, 1, 3))

        def is_prepared(self, data, root):
            return (root / "ring.ok").exists()

    monkeypatch.setitem(DATASETS, "ring", Ring())
    config = load_config("tiny", ["data.name=ring", f"data.root={tmp_path}"])
    assert graph_size(config) == GraphSize(5, 10, 2, 2, (1, 1, 3))
    assert load_graph(config.data).num_nodes == config.data.num_nodes  # Synthetic's loader, inherited
    assert unprepared(config.data).startswith(f"dataset 'ring' is not prepared in '{tmp_path}' (data.root): ")
    (tmp_path / "ring.ok").touch()
    assert unprepared(config.data) == "" and probe_dataset(config.data, None)["name"] == "ring"


# ---- the plan's sizes, without loading, against what loading gives -----------------------------------

def test_synthetic_plan_size_is_what_the_generator_makes():
    config = load_config("tiny")
    size, loaded = graph_size(config), loaded_size(load_graph(config.data))
    assert (size.nodes, size.features, size.classes, size.split) == \
        (loaded.nodes, loaded.features, loaded.classes, loaded.split)
    assert loaded.edges <= size.edges <= 1.05 * loaded.edges  # an upper bound: self-loops and repeats dropped


def test_own_files_plan_size_is_what_loading_gives(tmp_path):
    folder = write_folder(tmp_path / "graph", good_arrays())
    config = load_config("tiny", ["data.name=files", f"data.path={folder}"])
    assert graph_size(config) == loaded_size(load_graph(config.data))


@needs_cora
def test_cora_published_size_is_what_loading_the_real_files_gives(tmp_path):
    shutil.copytree(SHARED_CORA, tmp_path / "Planetoid" / "Cora" / "raw")
    config = load_config("cora", [f"data.root={tmp_path}"])
    assert graph_size(config) == loaded_size(load_graph(config.data))


@pytest.mark.parametrize("name", ON_DISK)
def test_published_sizes_are_consistent(name):
    size = DATASETS[name].plan_size(DataConfig(name=name))
    assert size.edges > size.nodes and size.features > 0
    if "node" in DATASETS[name].tasks:  # a split of labelled nodes
        assert sum(size.split) <= size.nodes and size.classes > 1
    else:  # no labels and no node split; its own split's ids: the training edges' (each in the graph both ways:
        # as many ids as the graph's edges) and the held-out ones'
        assert size.classes == 0 and size.split == (0, 0, 0) and size.link_ids > size.edges


# ---- prepared or not: what the submit checks before sbatch -----------------------------------------

@pytest.mark.parametrize("name", ON_DISK)
def test_an_empty_data_root_holds_no_dataset_prepared(tmp_path, name):
    kind = DATASETS[name]
    assert not kind.is_prepared(DataConfig(name=name), tmp_path)
    said = unprepared(DataConfig(name=name), str(tmp_path))
    folder = kind.folder(None, tmp_path)
    assert said.startswith(f"dataset '{name}' is not prepared in '{tmp_path}' (DATA_DIR): {folder}/")
    assert said.endswith(f"prepare it on a login node (with internet): make data DATASET={name} DATA_DIR={tmp_path}")
    assert not any(tmp_path.iterdir())  # checking creates nothing


def test_ogb_is_prepared_once_processed_and_complete(tmp_path):
    config = DataConfig(name="ogbn-arxiv", root=str(tmp_path))
    write_ogb(tmp_path, "ogbn-arxiv")
    assert unprepared(config) == ""  # every file processing reads, and OGB's release mark: the job processes them
    prepare_dataset(config)
    assert DATASETS["ogbn-arxiv"].is_processed(tmp_path) and unprepared(config) == ""
    release = tmp_path / "ogbn_arxiv" / "RELEASE_v1.txt"
    release.unlink()  # processed, but not a complete download: ogb would refuse the folder
    assert unprepared(config).startswith(f"dataset 'ogbn-arxiv' is not prepared in '{tmp_path}' (data.root): "
                                         f"{release} is missing; ")
    release.touch()
    found = probe_dataset(config, None)
    assert found["state"] == "present" and found["detail"] == "processed"


def test_reddit_raw_files_are_prepared_and_processing_keeps_them_so(tmp_path):
    config = DataConfig(name="Reddit", root=str(tmp_path))
    assert unprepared(config)
    write_reddit_raw(tmp_path)
    assert unprepared(config) == ""
    assert probe_dataset(config, None)["detail"] == "raw only (processed on first load)"
    data = load_graph(config)
    assert DATASETS["Reddit"].is_processed(tmp_path) and unprepared(config) == ""
    assert data.num_nodes == 60 and data.train_idx.numel() > 0


def test_own_files_are_prepared_where_data_path_is(tmp_path):
    config = DataConfig(name="files", path=str(tmp_path / "graph"))
    assert unprepared(config, "anything") == (f"data.path='{tmp_path / 'graph'}' does not exist here: {Files.fix}")
    write_folder(tmp_path / "graph", good_arrays())
    assert unprepared(config, "anything") == ""
    with pytest.raises(UserError, match="data.name=files needs data.path"):
        unprepared(DataConfig(name="files"))


def test_synthetic_is_always_prepared_and_probed_without_files(tmp_path):
    assert unprepared(DataConfig(), str(tmp_path / "absent")) == ""
    found = probe_dataset(DataConfig(), None)
    assert found["state"] == "generated" and found["bytes"] > 0 and "counted" not in found


def test_every_kind_is_a_dataset_kind_and_loads_a_homogeneous_graph(tmp_path):
    assert all(isinstance(kind, DatasetKind) for kind in DATASETS.values())
    write_ogb(tmp_path, "ogbn-products")
    graph = kinds.dataset_kind("ogbn-products").load(DataConfig(name="ogbn-products"), tmp_path)
    assert graph.x.dtype == torch.float32 and graph.y.dtype == torch.long and graph.edge_index.size(0) == 2
    assert isinstance(DATASETS["files"].folder(DataConfig(name="files", path="p"), Path("r")), Path)
