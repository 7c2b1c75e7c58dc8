"""Edge features and weights (edge_attr, edge_weight) from the user's graph, through the node-shared graph, the plan
and the sampler, to each batch with its e_id: the rows PyG's NeighborLoader gives for the same edges.

The test graphs' values mean something: each edge's edge_attr row is (source, target, its column in edge_index)
and its weight source * 1000 + target, so a batch's rows are checked against the edges they belong to."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph

from tests.harness.localjob import run_local_job
from tests.test_data_files import N, good_arrays, write_folder
from train.cli.plan_run import format_plan
from train.config import DataConfig, SamplerConfig, load_config
from train.errors import UserError
from train.graph.datasets.kinds import dataset_kind
from train.graph.datasets.loading import load_graph
from train.graph.edge_rows import EdgeRows
from train.graph.form import HOMOGENEOUS, graph_csc
from train.graph.sampling.device_plan import GPU_HEADROOM, batch_source, gpu_structure_bytes, plan_sampling
from train.graph.sampling.samplers import FusedNeighborSampler, TorchNeighborSampler, make_node_loader
from train.graph.sharing.shared_graph import graph_from_tensors, graph_tensors
from train.graph.sizes import GraphSize
from train.plan.terms import (
    gpu_feature_bytes_of,
    graph_size_of,
    host_batch_bytes,
    make_plan,
    private_graph_bytes,
    sampled_hops,
    shared_graph_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLERS = pytest.mark.parametrize("sampler_class", [TorchNeighborSampler, FusedNeighborSampler],
                                   ids=["cpu", "gpu-code"])


def meaningful(arrays: dict) -> dict:
    """`arrays` with edge_attr (source, target, column) and edge_weight (source * 1000 + target) per edge."""
    src, dst = arrays["edge_index"]
    column = np.arange(src.size)
    return dict(arrays, edge_attr=np.stack([src, dst, column], axis=1).astype(np.float32),
                edge_weight=(src * 1000 + dst).astype(np.float32))


def graph_data(seed: int = 0) -> Data:
    return Data(**{k: torch.from_numpy(v) for k, v in meaningful(good_arrays(seed)).items()})


def shared_copy(data: Data) -> Data:
    """The graph as every rank of a node maps it (the tensors a node shares, written in order, read back)."""
    tensors, size = graph_tensors(data.clone())
    written = {name: value() if callable(value) else value for name, value in tensors.items()}
    assert size == sum(t.nbytes for t in written.values())
    return graph_from_tensors(written)


def check_meaning(batch: Data) -> None:
    """Each sampled edge's rows are that (source, target) edge's, and e_id its column in the user's edge_index."""
    src, dst = batch.n_id[batch.edge_index]
    assert batch.edge_attr.shape == (batch.edge_index.size(1), 3) and batch.edge_weight.dim() == 1
    assert torch.equal(batch.edge_attr[:, 0].long(), src) and torch.equal(batch.edge_attr[:, 1].long(), dst)
    assert torch.equal(batch.edge_attr[:, 2].long(), batch.e_id) and batch.e_id.dtype == torch.long
    assert torch.equal(batch.edge_weight, (src * 1000 + dst).float())


# ---- the files format -------------------------------------------------------------------------------

def test_a_folder_with_edge_values_loads_them_memory_mapped(tmp_path):
    arrays = meaningful(good_arrays())
    folder = write_folder(tmp_path / "graph", dict(arrays, edge_weight=arrays["edge_weight"][:, None]))
    data = load_graph(DataConfig(name="files", path=str(folder)))
    assert torch.equal(data.edge_attr, torch.from_numpy(arrays["edge_attr"]))
    assert torch.equal(data.edge_weight, torch.from_numpy(arrays["edge_weight"]))  # [E, 1] read as [E]
    assert str(folder / "edge_attr.npy") in Path("/proc/self/maps").read_text()
    size = dataset_kind("files").plan_size(DataConfig(name="files", path=str(folder)))
    assert (size.edge_features, size.edge_weight, size.edge_floats) == (3, True, 4)
    config = load_config("tiny", ["data.name=files", f"data.path={folder}"])
    header = format_plan(make_plan(config, size, nodes=1, ranks=2, gpus=False), config).splitlines()[0]
    assert f"({N} nodes, 600 edges (3 features and a weight each), 6 features)" in header, header


def test_a_saved_data_with_one_edge_feature_and_float64_gets_float32_columns(tmp_path):
    arrays = good_arrays()
    edges = arrays["edge_index"].shape[1]
    attr = np.linspace(0, 1, edges)  # float64, one feature per edge as a vector
    torch.save(Data(**{k: torch.from_numpy(v) for k, v in arrays.items()}, edge_attr=torch.from_numpy(attr)),
               tmp_path / "graph.pt")
    data = load_graph(DataConfig(name="files", path=str(tmp_path / "graph.pt")))
    assert data.edge_attr.dtype == torch.float32 and data.edge_attr.shape == (edges, 1)
    assert "edge_weight" not in data


@pytest.mark.parametrize("name,value,expected", [
    ("edge_attr", lambda e: np.zeros((e - 1, 3), np.float32),
     "edge_attr has shape (599, 3) (599 rows) and dtype torch.float32; expected floats of shape (num_edges, "
     "num_edge_features), or (num_edges) for one feature: one row per edge, and edge_index has 600 edges"),
    ("edge_weight", lambda e: np.ones(e + 5, np.float32), "edge_weight has shape (605,) (605 rows)"),
    ("edge_attr", lambda e: np.zeros((e, 2), np.int64), "edge_attr has shape (600, 2) (600 rows) and dtype "
     "torch.int64; expected floats"),
    ("edge_attr", lambda e: np.zeros((e, 0), np.float32), "edge_attr has no columns (shape (600, 0))"),
    ("edge_weight", lambda e: np.zeros((e, 2), np.float32), "edge_weight has shape (600, 2)"),
])
def test_edge_values_of_the_wrong_shape_or_dtype_are_named_by_fit_and_plan(tmp_path, name, value, expected):
    arrays = good_arrays()
    folder = write_folder(tmp_path / "graph", dict(arrays, **{name: value(arrays["edge_index"].shape[1])}))
    for read in (lambda: load_graph(DataConfig(name="files", path=str(folder))),
                 lambda: dataset_kind("files").plan_size(DataConfig(name="files", path=str(folder)))):
        with pytest.raises(UserError) as info:
            read()
        assert expected in str(info.value), str(info.value)


@pytest.mark.parametrize("name,bad", [("edge_attr", np.nan), ("edge_weight", np.inf)])
def test_nan_or_infinite_edge_values_are_named_with_their_edge(tmp_path, name, bad):
    arrays = meaningful(good_arrays())
    arrays[name][7] = bad
    folder = write_folder(tmp_path / "graph", arrays)
    with pytest.raises(UserError, match=rf"{name} holds NaN or infinite values in 1 rows \(first: row 7, the edge in "
                                        r"column 7 of edge_index\)"):
        load_graph(DataConfig(name="files", path=str(folder)))


def test_fit_refuses_an_edge_attr_of_another_row_count_in_words_and_writes_nothing(tmp_path):
    arrays = good_arrays()
    folder = write_folder(tmp_path / "graph", dict(arrays, edge_attr=np.zeros((10, 2), np.float32)))
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny", "data.name=files",
                           f"data.path={folder}", f"output.dir={run}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "edge_attr has shape (10, 2) (10 rows)" in done.stderr and "edge_index has 600 edges" in done.stderr
    assert not run.exists()


# ---- the node-shared graph and the plan ---------------------------------------------------------------

def test_the_node_shared_graph_keeps_edge_values_once_in_csc_order_with_the_perm():
    data = graph_data()
    shared = shared_copy(data)
    colptr, row, perm = graph_csc(shared)
    rows = HOMOGENEOUS.edge_rows(shared)
    assert perm is None and rows.csc_order and set(rows.values) == {"edge_attr", "edge_weight"}
    assert "edge_attr" not in shared and shared.edge_index is None  # beside the CSC, not in the Data's store
    targets = torch.repeat_interleave(torch.arange(N), colptr.diff().long())
    attr = rows.values["edge_attr"]
    assert torch.equal(attr[:, 0].long(), row.long()) and torch.equal(attr[:, 1].long(), targets)  # CSC order
    assert torch.equal(attr[:, 2].long(), rows.perm.long())
    assert torch.equal(rows.values["edge_weight"], data.edge_weight[rows.perm.long()])


def test_a_graph_without_edge_values_shares_and_plans_what_it_did():
    arrays = good_arrays()
    data = Data(**{k: torch.from_numpy(v) for k, v in arrays.items()})
    shared = shared_copy(data)
    assert HOMOGENEOUS.edge_rows(shared) is None and HOMOGENEOUS.edge_rows(data) is None
    size = graph_size_of(data)
    assert size.edge_floats == 0
    ids = 4  # int32 CSC
    assert shared_graph_bytes(size) == data.x.nbytes + data.y.nbytes + 120 * 8 + (N + 1 + 600) * ids
    plan = plan_sampling(shared, SamplerConfig(device="cpu"), torch.device("cpu"))
    batch = next(iter(plan.loader(torch.arange(8), [3, 2], 8, seed=0)))
    assert "edge_attr" not in batch and "e_id" not in batch  # CSC positions are not the user's edge ids


def test_the_plan_counts_the_edge_values_and_the_perm_a_node_shares():
    plain = GraphSize(1000, 20_000, 16, 4, (500, 200, 300))
    with_values = GraphSize(1000, 20_000, 16, 4, (500, 200, 300), edge_features=8, edge_weight=True)
    assert shared_graph_bytes(with_values) - shared_graph_bytes(plain) == 20_000 * (9 * 4 + 4)
    hops = sampled_hops(64, [5, 5], plain)
    assert host_batch_bytes(with_values, hops, pinned=False) - host_batch_bytes(plain, hops, pinned=False) == (
        hops.total_edges * 9 * 4)  # a batch's rows of them
    # a rank's own graph keeps them once too, in the user's order, and the perm it always had
    assert private_graph_bytes(with_values) - private_graph_bytes(plain) == 20_000 * 9 * 4
    config = load_config("tiny")
    for sharing in (True, False):
        assert gpu_feature_bytes_of(config, with_values, sharing) - gpu_feature_bytes_of(config, plain, sharing) == (
            20_000 * (9 * 4 + (4 if sharing else 8)))
    data = graph_data()
    assert shared_graph_bytes(graph_size_of(data)) == graph_tensors(data.clone())[1]
    assert graph_size_of(shared_copy(data)) == graph_size_of(data)


# ---- through sampling ---------------------------------------------------------------------------------

@SAMPLERS
@pytest.mark.parametrize("share", ["process", "node"])
def test_each_sampled_edge_carries_its_own_rows_and_id(sampler_class, share):
    data = graph_data()
    graph = data if share == "process" else shared_copy(data)
    HOMOGENEOUS.structure(graph)
    edges = HOMOGENEOUS.edge_rows(graph)
    sampler = sampler_class(graph, [4, 3], csc=graph_csc(graph))
    source = batch_source(torch.device("cpu"), x=graph.x, y=graph.y)
    seeds = torch.randperm(N, generator=torch.Generator().manual_seed(3))
    loader = make_node_loader(source, seeds, [4, 3], 32, sampler=sampler, seed=5, edges=edges, num_workers=0)
    sampled = 0
    for batch in loader:
        check_meaning(batch)
        assert torch.equal(data.edge_index[:, batch.e_id], batch.n_id[batch.edge_index])
        sampled += batch.e_id.numel()
    assert sampled > 600  # the hops reached many edges, some more than once


def test_the_run_sampling_plan_carries_edge_values_with_loader_workers():
    shared = shared_copy(graph_data(1))
    plan = plan_sampling(shared, SamplerConfig(device="cpu", num_workers=2), torch.device("cpu"))
    assert plan.edges is HOMOGENEOUS.edge_rows(shared)
    batches = list(plan.loader(torch.arange(N), [5, 5], 40, seed=2))
    assert len(batches) == 3
    for batch in batches:
        check_meaning(batch)


@pytest.mark.parametrize("share", ["process", "node"])
def test_full_fanouts_give_pyg_own_edge_rows_per_edge(share):
    """With fanouts -1 the sampled edges are every edge into the seeds and into the nodes they reach: PyG's
    k_hop_subgraph (directed) selects the same edges, and PyG's own indexing gives their rows."""
    data = graph_data(2)
    graph = data if share == "process" else shared_copy(data)
    plan = plan_sampling(graph, SamplerConfig(device="cpu"), torch.device("cpu"))
    seeds = torch.tensor([3, 17, 40, 41, 99])
    batch = next(iter(plan.loader(seeds, [-1, -1], seeds.numel(), seed=0)))
    _subset, _edges, _mapping, mask = k_hop_subgraph(seeds, 2, data.edge_index, directed=True, num_nodes=N)
    wanted = mask.nonzero().view(-1)
    assert torch.equal(batch.e_id.sort().values, wanted)

    def per_edge(edge_index, attr, weight):
        rows = torch.cat([edge_index.t().float(), attr, weight[:, None]], dim=1).tolist()
        return sorted(map(tuple, rows))

    assert per_edge(batch.n_id[batch.edge_index], batch.edge_attr, batch.edge_weight) == per_edge(
        data.edge_index[:, wanted], data.edge_attr[wanted], data.edge_weight[wanted])


def test_edge_rows_gather_by_csc_position_in_either_order():
    data = graph_data()
    private = HOMOGENEOUS.edge_rows(data)
    shared = HOMOGENEOUS.edge_rows(shared_copy(data))
    positions = torch.tensor([0, 5, 5, 599, 42])
    for rows in (private, shared):
        got = rows.at(positions)
        assert set(got) == {"e_id", "edge_attr", "edge_weight"}
        assert torch.equal(got["edge_attr"], data.edge_attr[got["e_id"]])
        assert torch.equal(got["edge_weight"], data.edge_weight[got["e_id"]])
    assert torch.equal(private.at(positions)["e_id"], shared.at(positions)["e_id"])
    moved = shared.to(torch.device("cpu"))
    assert isinstance(moved, EdgeRows) and moved.nbytes == shared.nbytes == 600 * (4 + 3 * 4 + 4)


# ---- a run ------------------------------------------------------------------------------------------

def test_two_ranks_train_on_a_folder_with_edge_values_and_every_batch_carries_them(tmp_path):
    folder = write_folder(tmp_path / "graph", meaningful(good_arrays()))
    job = run_local_job(["fit", "--config", "tiny", "data.name=files", f"data.path={folder}", "data.share=node",
                         "trainer.epochs=2", f"output.dir={tmp_path / 'run'}"], world_size=2,
                        module="tests.harness.workers.edge_batches")
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    for output in job.outputs:
        checked = [int(line.split()[-1]) for line in output.splitlines() if line.startswith("edge batches checked")]
        assert checked and checked[0] >= 2, output[-2000:]
    assert (tmp_path / "run" / "model.pt").exists()


def test_the_batch_rows_follow_the_hops_as_the_edge_index_does():
    """A batch's edges are listed hop by hop (num_sampled_edges): its rows are in the same order, so slicing the
    first k edges (as model.trim does) slices their rows alike."""
    data = graph_data()
    plan = plan_sampling(data, SamplerConfig(device="cpu"), torch.device("cpu"))
    batch = next(iter(plan.loader(torch.arange(10), [3, 2], 10, seed=1)))
    bounds = [0, *itertools.accumulate(batch.num_sampled_edges)]
    for start, stop in itertools.pairwise(bounds):
        src, dst = batch.n_id[batch.edge_index[:, start:stop]]
        assert torch.equal(batch.edge_attr[start:stop, :2].long(), torch.stack([src, dst], dim=1))


def test_the_batches_are_pyg_neighbor_loaders_own_with_pyg_lib(anchor_venv):
    """In NVIDIA's container pyg-lib samples: run in the anchor's Python, which has it, PyG's own NeighborLoader
    and the run's loaders (a rank's own graph, and the node-shared one sampled by pyg-lib in place) must give the
    same edges with the same rows and ids on fanouts -1, and pyg-lib's partial samples each edge's own rows."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(anchor_venv / "bin" / "python"), "-m", "tests.harness.workers.native_edges"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["compared"] == 6 and result["sampled"] > 300 and result["python"].startswith(str(anchor_venv))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sampler.device=cuda)")
@pytest.mark.parametrize("features_fit", [True, False], ids=["on-the-gpu", "host-features"])
def test_cuda_sampling_puts_the_edge_values_where_the_features_go(features_fit):
    shared = shared_copy(graph_data())
    device = torch.device("cuda", torch.cuda.current_device())
    structure = gpu_structure_bytes(N, 600, with_perm=False, csc_index_bytes=4)
    free = None if features_fit else int((structure + 64) / (1 - GPU_HEADROOM)) + 1
    plan = plan_sampling(shared, SamplerConfig(device="cuda"), device, free_gpu_bytes=free)
    assert plan.device.type == "cuda" and (plan.host_features is None) == features_fit
    assert plan.edges.device.type == ("cuda" if features_fit else "cpu")
    for batch in plan.loader(torch.arange(N), [4, 3], 40, seed=1):
        batch = plan.complete(batch, device)
        assert batch.edge_attr.is_cuda and batch.edge_weight.is_cuda and batch.e_id.is_cuda
        check_meaning(batch.to("cpu"))
