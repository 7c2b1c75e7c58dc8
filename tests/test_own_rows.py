"""data.features=sharded while loading: a node reads, draws or keeps only its own feature rows, the very rows of the
whole graph's x, and never holds the whole matrix (train/graph/datasets/own_rows.py, loading.load_graph(owned=...))."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.harness.igbh_files import write_igbh
from tests.harness.localjob import ROOT
from train.config import DataConfig
from train.errors import UserError
from train.graph.datasets import own_rows
from train.graph.datasets.loading import load_graph
from train.graph.datasets.own_rows import keep_own_rows, normal_rows
from train.graph.typed_meta import graph_meta


def striped(parts: int, part: int, counts: dict[str, int]) -> dict:
    """Node `part`'s rows as train/graph/sharing/ownership.py's Ownership.type_slices(part) gives them: id % parts
    owns id, the types' ids contiguous in type order; per type (its rows, their place in the shard)."""
    owned, offset = {}, 0
    for node_type, count in counts.items():
        first = (part - offset) % parts
        begin = max(offset - part + parts - 1, 0) // parts
        end = max(offset + count - part + parts - 1, 0) // parts
        owned[node_type] = (slice(first, max(count, first), parts), slice(begin, max(end, begin)))
        offset += count
    return owned


def ids_of(owned: dict, counts: dict[str, int]) -> torch.Tensor:
    """The whole graph's ids of a node's shard rows, in shard order."""
    offsets = dict(zip(counts, np.cumsum([0, *counts.values()])[:-1]))
    shard = torch.full((own_rows.shard_length(owned),), -1, dtype=torch.long)
    for node_type, (rows, place) in owned.items():
        shard[place] = torch.arange(counts[node_type])[rows] + int(offsets[node_type])
    return shard


def counts_of(graph) -> dict[str, int]:
    meta = graph_meta(graph)
    return dict(zip(meta.node_types, meta.counts)) if meta is not None else {"": int(graph.num_nodes)}


def assert_shards_are_the_whole(config: DataConfig, parts: int, root=None) -> None:
    """Each node's graph is the whole graph's but for x, which is the whole x's rows it owns, in shard order; the
    shards together hold every row once."""
    whole = load_graph(config, str(root) if root else None)
    counts = counts_of(whole)
    seen = torch.zeros(int(whole.num_nodes), dtype=torch.long)
    for part in range(parts):
        owned = striped(parts, part, counts)
        mine = load_graph(config, str(root) if root else None, owned=owned)
        ids = ids_of(owned, counts)
        assert torch.equal(mine.x, whole.x[ids]), part
        assert mine.num_nodes == whole.num_nodes
        for key in whole.keys():
            if key != "x":
                assert torch.equal(mine[key], whole[key]), key
        assert graph_meta(mine) == graph_meta(whole)
        seen[ids] += 1
    assert bool((seen == 1).all())


def test_normal_rows_are_the_whole_draw_s_rows_and_leave_the_generator_where_it_does(monkeypatch):
    monkeypatch.setattr(own_rows, "DRAW_BYTES", 4 * 3 * 48)  # pieces of 48 rows: many pieces, a joined tail
    for count, width in [(1000, 32), (1001, 3), (999, 5), (7, 2), (100, 1)]:
        for rows in [slice(0, count, 4), slice(3, count, 4), slice(0, count, 1), slice(count - 1, count, 5)]:
            whole_gen, own_gen = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
            whole = torch.randn(count, width, generator=whole_gen)[rows]
            assert torch.equal(normal_rows(own_gen, count, width, rows), whole), (count, width, rows)
            assert torch.equal(torch.rand(3, generator=own_gen), torch.rand(3, generator=whole_gen))


@pytest.mark.parametrize("parts", [1, 3])
def test_the_synthetic_graph_s_shards_are_its_rows(parts):
    assert_shards_are_the_whole(DataConfig(num_nodes=900, num_features=24, edge_features=2), parts)


def test_the_hetero_synthetic_graph_s_shards_are_its_rows_per_type():
    assert_shards_are_the_whole(DataConfig(name="hetero-synthetic", num_nodes=400), 3)
    assert_shards_are_the_whole(DataConfig(name="hetero-synthetic", num_nodes=400, featureless="degree"), 2)


def write_folder(folder: Path, nodes: int = 150, width: int = 6, x_rows: int | None = None) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    np.save(folder / "x.npy", rng.normal(size=(x_rows or nodes, width)).astype(np.float32))
    np.save(folder / "y.npy", rng.integers(0, 3, nodes))
    np.save(folder / "edge_index.npy", rng.integers(0, nodes, (2, 4 * nodes)))
    np.save(folder / "train_idx.npy", np.arange(0, nodes // 2))
    np.save(folder / "val_idx.npy", np.arange(nodes // 2, 3 * nodes // 4))
    np.save(folder / "test_idx.npy", np.arange(3 * nodes // 4, nodes))
    return folder


def test_own_files_shards_are_their_rows(tmp_path):
    folder = write_folder(tmp_path / "graph")
    assert_shards_are_the_whole(DataConfig(name="files", path=str(folder)), 4)
    whole = load_graph(DataConfig(name="files", path=str(folder)))
    torch.save(whole, tmp_path / "graph.pt")  # a saved Data: x memory-mapped from the .pt
    assert_shards_are_the_whole(DataConfig(name="files", path=str(tmp_path / "graph.pt")), 2)


def test_igbh_s_shards_are_its_rows_per_type(tmp_path):
    folder = write_igbh(tmp_path / "igbh", papers=120)
    assert_shards_are_the_whole(DataConfig(name="igbh", path=str(folder), num_classes=19), 3)


def test_a_saved_hetero_data_s_shards_are_its_rows_per_type(tmp_path):
    from train.graph.datasets.synthetic import hetero_synthetic_graph as hetero_synthetic

    torch.save(hetero_synthetic(DataConfig(num_nodes=200)), tmp_path / "hetero.pt")
    config = DataConfig(name="files", path=str(tmp_path / "hetero.pt"), target_node_type="paper")
    assert_shards_are_the_whole(config, 2)
    assert_shards_are_the_whole(replace(config, featureless="degree"), 3)  # venues: log(1 + in-degree)


def test_a_downloaded_graph_loaded_whole_keeps_its_own_rows():
    whole = load_graph(DataConfig(name="hetero-synthetic", num_nodes=300))
    counts = counts_of(whole)
    owned = striped(4, 1, counts)
    x = whole.x.clone()
    assert torch.equal(keep_own_rows(whole, owned).x, x[ids_of(owned, counts)])


# ---- bad input: a feature file shorter than the graph ------------------------------------------------------

def test_a_feature_file_of_fewer_rows_than_nodes_is_refused_naming_it(tmp_path):
    folder = write_folder(tmp_path / "short", nodes=150, x_rows=140)
    config = DataConfig(name="files", path=str(folder))
    wanted = (f"data.path={folder}: x holds 140 feature rows, but the graph has 150 nodes (y holds 150 labels, one "
              "per node); give one row of features per node.")
    for owned in (None, striped(2, 1, {"": 150})):
        with pytest.raises(UserError) as refused:
            load_graph(config, owned=owned)
        assert str(refused.value) == wanted


def test_a_typed_graph_s_target_features_shorter_than_its_labels_are_refused(tmp_path):
    folder = write_igbh(tmp_path / "igbh", papers=120)
    feats = folder / "processed" / "paper" / "node_feat.npy"
    np.save(feats, np.load(feats)[:100])
    counts = {"paper": 120, "author": 60, "institute": 7, "fos": 11}
    with pytest.raises(UserError, match=r"paper's x holds 100 feature rows, but the graph has 120 nodes \(paper.y "
                                        r"holds 120 labels\)"):
        load_graph(DataConfig(name="igbh", path=str(folder), num_classes=19), owned=striped(2, 0, counts))


def test_a_node_s_own_rows_are_checked_for_nans(tmp_path):
    folder = write_folder(tmp_path / "nan", nodes=150)
    x = np.load(folder / "x.npy")
    x[7, 2] = np.nan
    np.save(folder / "x.npy", x)
    config = DataConfig(name="files", path=str(folder))
    load_graph(config, owned=striped(2, 0, {"": 150}))  # row 7 is node 1's
    with pytest.raises(UserError, match=r"x holds NaN or infinite values \(first: row 7\)"):
        load_graph(config, owned=striped(2, 1, {"": 150}))


# ---- the peak: a node's rows and the structure, not the whole matrix -----------------------------------------

WIDE = ["data.num_nodes=100000", "data.num_features=512", "data.avg_degree=2"]


def loading_peak(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "tests.harness.workers.own_rows_peak", *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_node_loading_its_rows_peaks_at_its_rows_and_the_structure():
    """Measured in a fresh process each (tests/harness/workers/own_rows_peak.py: VmHWM less the file pages, as
    bench/plan.py's probe measures a loading step): generating a quarter of the synthetic graph's rows peaks at about
    that quarter and the structure, far below the whole matrix, which loading it whole holds more than once."""
    x_bytes = 100000 * 512 * 4
    whole, own = loading_peak("whole", *WIDE), loading_peak("4", *WIDE)
    assert own["shard"] == x_bytes // 4
    assert whole["peak"] > x_bytes  # the whole matrix, and more while it is drawn
    # its rows twice (the noise and the sum, as the whole draw makes them), a draw's piece, the edges' generation
    assert own["shard"] <= own["peak"] < 2 * own["shard"] + 0.4 * x_bytes, own
    assert own["peak"] < whole["peak"] / 2, (own, whole)
