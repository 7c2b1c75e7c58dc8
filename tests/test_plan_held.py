"""The memory plan of the graph a run holds and of the process that loads it (train/plan/held.py), against the real
arrays and measured loading peaks: a dataset's own link split with its ranked negatives (ogbl-citation2's form,
tests/harness/ogb_files.py), and the synthetic generator's edge values."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.harness.ogb_files import write_ogbl_citation2
from train.cli.plan_run import graph_size
from train.config import load_config
from train.graph.datasets.loading import dataset_kind, load_graph
from train.graph.link_fields import LINK_FIELDS, ranked_split_ids
from train.graph.sharing.shared_graph import graph_tensors
from train.plan.terms import graph_size_of, make_plan

SHARED = "graph, shared once (/dev/shm or node-local disk)"
LOADING = "while loading"


def loading_peak(config: str, overrides: list[str], data_dir, warm: bool = False) -> int:
    """The measured private peak growth of one process obtaining the graph (tests/harness/workers/loading_peak.py;
    `warm`: its arrays only, not what the loading imports)."""
    done = subprocess.run([sys.executable, "-m", "tests.harness.workers.loading_peak", *(["--warm"] if warm else []),
                           config, *overrides],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "DATA_DIR": str(data_dir)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["loading"]


def row(rows: dict[str, int], prefix: str) -> int:
    return next(value for name, value in rows.items() if name.startswith(prefix))


@pytest.fixture(scope="module")
def own_split(tmp_path_factory):
    """A small ogbl-citation2 whose held-out files' negatives (2,500 per citation: 15 MiB each) are above the C
    heap's mmap threshold (8 MiB, train/heap.py), so a measured peak sees each of their copies come and go."""
    root = tmp_path_factory.mktemp("ogbl")
    written = write_ogbl_citation2(root, num_nodes=8000, negatives=2500)
    return root, written


def test_a_graph_with_its_own_split_is_planned_with_its_ranked_negatives(own_split):
    """The held graph's bytes cover its real arrays, the split's ranked negatives among them; the sizes' count of
    the split's ids is the dataset's, and its published size holds ogbl-citation2's 2 x 86,596 x 1,000 negatives."""
    root, written = own_split
    config = load_config("ogbl-citation2", [f"data.root={root}"])
    data = load_graph(config.data)
    size = graph_size_of(data)
    real_ids = sum(data[key].numel() for key in LINK_FIELDS if key in data)
    counted = ranked_split_ids(written["train"].shape[1], (written["valid"].shape[1], written["test"].shape[1]),
                               written["valid_neg"].shape[1])
    assert size.link_ids == real_ids == counted and data.val_neg_dst.numel() > size.edges
    real = graph_tensors(data)[1]
    planned = make_plan(config, size, 1, 2, gpus=False).rows["node"][SHARED]
    assert real <= planned <= 1.05 * real, (planned, real)  # the plan's y, a link graph has none
    published = dataset_kind(config.data).plan_size(config.data)
    negatives, train = 2 * 86_596 * 1_000 * 8, 2 * 30_387_995 * 8  # OGB's split (docs/data.md)
    x = published.nodes * published.features * 4
    assert make_plan(config, published, 1, 2, gpus=False).rows["node"][SHARED] > x + negatives + train


def test_the_loading_peak_of_a_graph_with_its_own_split_covers_the_measured_one(own_split):
    """Its split files are read before the graph is made undirected, each held three times while it is read
    (plan.held OWN_SPLIT_READ_COPIES): the plan's loading peak covers the measured one, within 1.5 times it."""
    root, _written = own_split
    overrides = [f"data.root={root}", "data.share=process"]
    config = load_config("ogbl-citation2", overrides)
    measured = loading_peak("ogbl-citation2", overrides, root, warm=True)  # not ogb's and pandas' imports
    planned = row(make_plan(config, graph_size_of(load_graph(config.data)), 1, 1, gpus=False).rows["rank"], LOADING)
    assert measured <= planned <= 1.5 * measured, (planned / 2**20, measured / 2**20)


@pytest.mark.parametrize("features", [8, 16])
def test_the_loading_peak_of_a_synthetic_graph_with_edge_features_covers_the_measured_one(tmp_path, features):
    """The generator draws its edge values while it holds its edges and the arrays it drew them from, three [E, F]
    arrays at once (plan.held SYNTHETIC_VALUES_*): measured from a fresh process, as a run's loading step, the
    plan's loading peak covers it (counting no edge values it planned 267 MiB of the 278 measured with 8 features,
    382 of 452 with 16)."""
    overrides = ["data.num_nodes=100000", "data.avg_degree=20", f"data.edge_features={features}",
                 f"model.kwargs.edge_dim={features}", "data.share=process"]
    config = load_config("synthetic-edges", overrides)
    measured = loading_peak("synthetic-edges", overrides, tmp_path)
    planned = row(make_plan(config, graph_size(config), 1, 1, gpus=False).rows["rank"], LOADING)
    assert measured <= planned <= 1.5 * measured, (planned / 2**20, measured / 2**20)
