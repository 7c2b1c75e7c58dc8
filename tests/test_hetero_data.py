"""Heterogeneous graphs, the data side (issue 27): a HeteroData as the typed homogeneous graph, the typed CSC and
its sampler (k per destination and edge type), the node-shared copy, the inputs (HeteroData .pt, folder, IGBH's
layout, hetero-synthetic), bad input refused through the CLI, the plan's figures, and 2-rank runs."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import HeteroData

from tests.harness.igbh_files import write_igbh
from tests.harness.localjob import final_summary, run_local_job
from train.config import DataConfig, SamplerConfig
from train.errors import UserError
from train.graph.datasets.hetero_files import read_hetero
from train.graph.datasets.igbh import IGBH_TYPES, igbh_full
from train.graph.datasets.kinds import DATASETS
from train.graph.datasets.loading import load_graph
from train.graph.form import HETEROGENEOUS, form_of, graph_csc, graph_meta
from train.graph.sampling.device_plan import plan_sampling
from train.graph.sampling.samplers import FusedNeighborSampler, TorchNeighborSampler
from train.graph.sharing.shared_graph import graph_from_tensors, graph_tensors
from train.graph.sizes import FLOAT, INDEX
from train.graph.typed_graph import typed_graph
from train.plan.terms import graph_size_of, private_graph_bytes, shared_graph_bytes

ROOT = Path(__file__).resolve().parents[1]
SAMPLERS = pytest.mark.parametrize("sampler_class", [TorchNeighborSampler, FusedNeighborSampler])


def small_hetero(seed: int = 0) -> HeteroData:
    """paper (target, 5 features), author (3 features), topic (none); three relations."""
    gen = torch.Generator().manual_seed(seed)
    hetero = HeteroData()
    hetero["paper"].x = torch.randn(30, 5, generator=gen)
    hetero["paper"].y = torch.randint(0, 3, (30,), generator=gen)
    hetero["paper"].train_mask = torch.arange(30) < 20
    hetero["paper"].val_idx = torch.arange(20, 25)
    hetero["paper"].test_idx = torch.arange(25, 30)
    hetero["author"].x = torch.randn(12, 3, generator=gen)
    hetero["topic"].num_nodes = 4
    hetero["author", "writes", "paper"].edge_index = torch.stack(
        [torch.randint(0, 12, (80,), generator=gen), torch.randint(0, 30, (80,), generator=gen)])
    hetero["paper", "cites", "paper"].edge_index = torch.randint(0, 30, (2, 90), generator=gen)
    hetero["topic", "about", "paper"].edge_index = torch.stack(
        [torch.randint(0, 4, (40,), generator=gen), torch.randint(0, 30, (40,), generator=gen)])
    return hetero


def shared_copy(data):
    tensors, size = graph_tensors(data.clone() if graph_meta(data) is None else _clone(data))
    written = {name: value() if callable(value) else value for name, value in tensors.items()}
    assert size == sum(t.nbytes for t in written.values())
    return graph_from_tensors(written)


def _clone(data):
    from train.graph.form import attach_meta

    return attach_meta(data.clone(), graph_meta(data))


# ---- the typed homogeneous graph ----------------------------------------------------------------------

def test_a_heterodata_becomes_one_typed_graph_numbered_in_type_order():
    hetero = small_hetero()
    data = typed_graph(hetero, "paper")
    meta = graph_meta(data)
    assert meta.node_types == ("paper", "author", "topic") and meta.counts == (30, 12, 4)
    assert meta.widths == (5, 3, 0) and meta.offsets == (0, 30, 42) and meta.target == "paper"
    assert form_of(data) is HETEROGENEOUS and data.node_type.dtype == torch.long
    assert torch.equal(data.node_type, torch.tensor([0] * 30 + [1] * 12 + [2] * 4))
    assert data.x.shape == (46, 5)  # as wide as the widest type
    assert torch.equal(data.x[:30], hetero["paper"].x)
    assert torch.equal(data.x[30:42, :3], hetero["author"].x) and not data.x[30:42, 3:].any()  # zero-padded
    assert not data.x[42:].any()  # featureless: zeros (the model's learned embedding)
    assert torch.equal(data.y[:30], hetero["paper"].y) and bool((data.y[30:] == -1).all())
    assert torch.equal(data.train_idx, torch.arange(20)) and torch.equal(data.test_idx, torch.arange(25, 30))
    for number, edge_type in enumerate(meta.edge_types):  # each edge keeps its type, ids offset by its types
        src, _rel, dst = edge_type
        mine = data.edge_index[:, data.edge_type == number]
        offsets = torch.tensor([[meta.offsets[meta.node_types.index(src)]], [meta.offsets[meta.node_types.index(dst)]]])
        assert torch.equal(mine - offsets, hetero[edge_type].edge_index)


def test_featureless_degree_gives_a_type_one_column_of_its_log_in_degree():
    hetero = small_hetero()
    hetero["paper", "about", "topic"].edge_index = hetero["topic", "about", "paper"].edge_index.flip(0)
    data = typed_graph(hetero, "paper", featureless="degree")
    meta = graph_meta(data)
    assert meta.widths == (5, 3, 1)
    degree = torch.bincount(hetero["paper", "about", "topic"].edge_index[1], minlength=4).float()
    assert torch.allclose(data.x[42:, 0], torch.log1p(degree)) and not data.x[42:, 1:].any()


def test_the_typed_csc_groups_each_nodes_in_edges_by_edge_type():
    data = typed_graph(small_hetero(), "paper")
    colptr, row, perm = HETEROGENEOUS.structure(data)
    segments = HETEROGENEOUS.segments(data)
    meta = graph_meta(data)
    src, dst = data.edge_index
    for node in range(46):
        owned, _owner = segments.of(torch.tensor([node]))
        into = [n for n, e in enumerate(meta.edge_types) if e[2] == meta.node_types[int(data.node_type[node])]]
        assert owned.numel() == len(into)
        assert int(segments.ptr[owned[0]]) == int(colptr[node]) if into else True
        for segment, edge_type in zip(owned.tolist(), into):
            start, stop = int(segments.ptr[segment]), int(segments.ptr[segment + 1])
            wanted = ((dst == node) & (data.edge_type == edge_type)).nonzero().view(-1)
            assert sorted(perm[start:stop].tolist()) == wanted.tolist()
            assert torch.equal(row[start:stop], src[perm[start:stop]])


# ---- sampling per edge type ----------------------------------------------------------------------------

def star() -> HeteroData:
    """One paper with 10 in-edges from authors, 2 from topics and 50 from other papers."""
    hetero = HeteroData()
    hetero["paper"].x = torch.randn(51, 2)
    hetero["paper"].y = torch.zeros(51, dtype=torch.long)
    for split in ("train", "val", "test"):
        hetero["paper"][f"{split}_idx"] = torch.tensor([0])
    hetero["author"].x = torch.randn(10, 2)
    hetero["topic"].num_nodes = 2
    hetero["author", "writes", "paper"].edge_index = torch.stack([torch.arange(10), torch.zeros(10, dtype=torch.long)])
    hetero["topic", "about", "paper"].edge_index = torch.tensor([[0, 1], [0, 0]])
    hetero["paper", "cites", "paper"].edge_index = torch.stack([torch.arange(1, 51), torch.zeros(50, dtype=torch.long)])
    return hetero


@SAMPLERS
def test_the_sampler_draws_k_per_edge_type_uniformly_without_replacement(sampler_class):
    data = typed_graph(star(), "paper")
    sampler = sampler_class(data, [4], csc=HETEROGENEOUS.structure(data), segments=HETEROGENEOUS.segments(data))
    draws = 4000  # the star's one paper, as many times: each copy is sampled on its own
    _node, _row, col, edge, _, _ = sampler._sample(torch.zeros(draws, dtype=torch.long),
                                                   torch.Generator().manual_seed(5))
    assert torch.equal(col, torch.arange(draws).repeat_interleave(10))  # 4 + 2 + 4 edges each, grouped by copy
    ids = graph_csc(data)[2][edge].view(draws, 10)
    for drawn in ids[:50]:
        assert Counter(data.edge_type[drawn].tolist()) == {0: 4, 1: 2, 2: 4}  # min(k, degree) of each type
        assert drawn.unique().numel() == 10  # without replacement
    counts = Counter(ids.view(-1).tolist())
    for edge_type, degree in ((0, 10), (1, 2), (2, 50)):
        ids = (data.edge_type == edge_type).nonzero().view(-1).tolist()
        expected = draws * min(4, degree) / degree
        spread = 5 * math.sqrt(expected * (1 - min(4, degree) / degree)) + 1e-9
        assert all(abs(counts[e] - expected) <= spread for e in ids), (edge_type, [counts[e] for e in ids])


def test_typed_batches_are_reproducible_and_follow_the_graph():
    data = typed_graph(small_hetero(1), "paper")
    plan = plan_sampling(data, SamplerConfig(device="cpu"), torch.device("cpu"))
    first = list(plan.loader(data.train_idx, [3, 2], 8, seed=7, epoch=2))
    again = list(plan.loader(data.train_idx, [3, 2], 8, seed=7, epoch=2))
    other = list(plan.loader(data.train_idx, [3, 2], 8, seed=7, epoch=3))
    assert all(torch.equal(a.e_id, b.e_id) and torch.equal(a.n_id, b.n_id) for a, b in zip(first, again))
    assert any(not torch.equal(a.e_id, b.e_id) for a, b in zip(first, other))
    for batch in first:
        assert torch.equal(batch.edge_type, data.edge_type[batch.e_id])
        assert torch.equal(batch.n_id[batch.edge_index], data.edge_index[:, batch.e_id])
        assert torch.equal(batch.node_type, data.node_type[batch.n_id])
        assert bool((batch.node_type[: batch.batch_size] == 0).all())


def test_the_node_shared_typed_graph_gives_the_same_batches_as_a_ranks_own():
    data = typed_graph(small_hetero(2), "paper")
    shared = shared_copy(data)
    assert graph_meta(shared) == graph_meta(data) and form_of(shared) is HETEROGENEOUS
    assert "edge_index" not in shared and "edge_type" not in shared  # the structure lives beside the Data
    own = plan_sampling(data, SamplerConfig(device="cpu"), torch.device("cpu"))
    node = plan_sampling(shared, SamplerConfig(device="cpu"), torch.device("cpu"))
    seeds = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    for a, b in zip(own.loader(seeds, [4, 3], 7, seed=3), node.loader(seeds, [4, 3], 7, seed=3), strict=True):
        for name in ("n_id", "e_id", "edge_index", "edge_type", "node_type", "x", "y"):
            assert torch.equal(a[name], b[name]), name
    assert graph_size_of(shared) == graph_size_of(data)


# ---- inputs -------------------------------------------------------------------------------------------

def write_typed_folder(folder: Path, hetero: HeteroData, target: str) -> Path:
    for node_type in hetero.node_types:
        (folder / node_type).mkdir(parents=True)
        store = hetero[node_type]
        for name in ("x", "y", "train_idx", "val_idx", "test_idx", "train_mask"):
            if store.get(name) is not None:
                np.save(folder / node_type / f"{name}.npy", store[name].numpy())
    for edge_type in hetero.edge_types:
        (folder / "__".join(edge_type)).mkdir()
        np.save(folder / "__".join(edge_type) / "edge_index.npy", hetero[edge_type].edge_index.numpy())
    return folder


def test_files_take_a_saved_heterodata_and_a_typed_folder_alike(tmp_path):
    hetero = small_hetero()
    torch.save(hetero, tmp_path / "graph.pt")
    folder = write_typed_folder(tmp_path / "graph", hetero, "paper")
    wanted = typed_graph(hetero, "paper")
    for path in (tmp_path / "graph.pt", folder):
        data = load_graph(DataConfig(name="files", path=str(path), target_node_type="paper"))
        got = graph_meta(data)  # a folder's types come in name order
        assert dict(zip(got.node_types, got.counts)) == {"paper": 30, "author": 12, "topic": 4}
        assert set(got.edge_types) == set(graph_meta(wanted).edge_types)
        start = got.offsets[got.node_types.index("paper")]
        assert torch.equal(data.x[start:start + 30], hetero["paper"].x)
        assert torch.equal(data.train_idx, torch.arange(20) + start)
        size = DATASETS["files"].plan_size(DataConfig(name="files", path=str(path), target_node_type="paper"))
        assert size.nodes == 46 and size.edges == 210 and size.split == (20, 5, 5) and size.meta.target == "paper"
    read = read_hetero(str(folder))  # memory-mapped, as a homogeneous folder (the typed graph then pads a copy)
    assert str(folder / "paper" / "x.npy") in Path("/proc/self/maps").read_text() and read["paper"].x.shape == (30, 5)


def test_igbh_reads_igbs_layout_with_reverse_relations_and_igbs_split(tmp_path):
    folder = write_igbh(tmp_path / "igbh")
    data = load_graph(DataConfig(name="igbh", path=str(folder), num_classes=19))
    meta = graph_meta(data)
    assert meta.node_types == IGBH_TYPES and meta.target == "paper" and len(meta.edge_types) == 7
    assert ("author", "rev_written_by", "paper") in meta.edge_types
    labels = np.load(folder / "processed" / "paper" / "node_label_19.npy")
    assert torch.equal(data.y[:300], torch.from_numpy(labels).long())
    assert data.train_idx.numel() == 180 and data.val_idx.numel() == 60 and data.test_idx.numel() == 60
    cites = np.load(folder / "processed" / "paper__cites__paper" / "edge_index.npy")
    assert torch.equal(data.edge_index[:, data.edge_type == 0], torch.from_numpy(cites).t())  # E x 2 read


# ---- bad input, through the CLI -----------------------------------------------------------------------

def refused(tmp_path: Path, *args: str) -> str:
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "DATA_DIR"))
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny", "trainer.epochs=1",
                           f"output.dir={run}", *args], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not run.exists()
    return done.stderr


def test_a_target_type_that_does_not_exist_is_refused_naming_the_types(tmp_path):
    torch.save(small_hetero(), tmp_path / "graph.pt")
    message = refused(tmp_path, "data.name=files", f"data.path={tmp_path / 'graph.pt'}", "data.target_node_type=venue")
    assert "data.target_node_type='venue'" in message and "paper, author, topic" in message
    message = refused(tmp_path, "data.name=hetero-synthetic", "data.target_node_type=book")
    assert "data.target_node_type='book'" in message and "paper, author, venue" in message


def test_a_relation_naming_ids_beyond_its_node_type_is_refused(tmp_path):
    hetero = small_hetero()
    hetero["author", "writes", "paper"].edge_index[0, 17] = 12  # 12 authors: ids 0 to 11
    torch.save(hetero, tmp_path / "graph.pt")
    message = refused(tmp_path, "data.name=files", f"data.path={tmp_path / 'graph.pt'}", "data.target_node_type=paper")
    assert "relation author__writes__paper" in message and "author id 12 (edge 17)" in message
    assert "has 12 nodes" in message


def test_a_heterodata_without_labels_on_the_target_type_is_refused(tmp_path):
    hetero = small_hetero()
    del hetero["paper"].y
    torch.save(hetero, tmp_path / "graph.pt")
    message = refused(tmp_path, "data.name=files", f"data.path={tmp_path / 'graph.pt'}", "data.target_node_type=paper")
    assert "target node type 'paper' has no y" in message


def test_unit_checks_name_what_is_wrong():
    with pytest.raises(UserError, match="data.target_node_type='nope'.*paper, author, topic"):
        typed_graph(small_hetero(), "nope")


# ---- the plan -----------------------------------------------------------------------------------------

def test_the_plan_of_igbh_full_follows_from_its_sizes():
    size = igbh_full()
    nodes, edges = 547_306_935, 269_346_174 + 277_220_883 + 26_918 + 712_960
    assert size.nodes == nodes == edges and size.features == 1024
    assert size.edges == 3_996_442_004 + 2 * (716_761_549 + 48_521_486 + 1_050_280_600)
    segments = 269_346_174 * 3 + 277_220_883 * 2 + 26_918 + 712_960  # relations that end at each type
    assert size.segments == segments
    ids = 8  # int64 CSC: the edges do not fit in int32
    meta_json = len(HETEROGENEOUS.shared_tensors(HETEROGENEOUS.planned(size))[0]["hetero_meta"].numpy())
    features = size.nodes * 1024 * FLOAT
    wanted = (features + size.nodes * INDEX * 2 + sum(size.split) * INDEX + meta_json  # x, y, node_type, splits
              + (size.nodes + 1) * ids + (segments + 1) * ids  # colptr, the segment pointer
              + size.edges * (ids + ids + INDEX))  # row, perm, edge_type
    assert shared_graph_bytes(size) == wanted
    assert features > 2.2e12 and wanted / 2**30 > 2048  # more than a 2 TiB node holds, in the plan's figures
    assert private_graph_bytes(size) > shared_graph_bytes(size)


def test_make_plan_says_what_one_node_holds_of_igbh_full():
    done = subprocess.run([sys.executable, "-m", "train", "plan", "--config", "igbh-rgat", "data.name=igbh-full",
                           "--nodes", "1", "--gpus", "8", "--node-memory", "2048", "--gpu-memory", "141"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert "igbh-full (547,306,935 nodes, 7,627,569,274 edges, 1024 features)" in out
    shared = shared_graph_bytes(igbh_full()) / 2**30
    line = next(line for line in out.splitlines() if "graph, shared once" in line)
    assert line.endswith(f"{shared:,.1f} GiB") and shared > 2048  # the graph alone: more than the node has
    assert "this plan does not fit" in out and done.returncode == 2


# ---- runs ---------------------------------------------------------------------------------------------

def test_hetero_synthetic_has_its_signal_in_the_relations(tmp_path):
    """A feature-only model reads little of a paper's class; a model that reads its authors reads it."""
    scores = {}
    for model in ("mlp", "sage"):
        done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "hetero-synthetic",
                               f"model.name={model}", f"output.dir={tmp_path / model}"], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        scores[model] = final_summary(tmp_path / model)["final_test_acc"]
    assert scores["mlp"] < 0.55 and scores["sage"] > 0.9, scores


@pytest.mark.parametrize("model,share", [("mlp", "node"), ("sage", "node"), ("sage", "process")])
def test_two_ranks_train_on_hetero_synthetic_with_typed_batches(tmp_path, model, share):
    job = run_local_job(["fit", "--config", "hetero-synthetic", f"model.name={model}", f"data.share={share}",
                         "data.num_nodes=1500", "trainer.epochs=2", f"output.dir={tmp_path / 'run'}"], world_size=2,
                        module="tests.harness.workers.hetero_batches")
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    for output in job.outputs:
        checked = [int(line.split()[-1]) for line in output.splitlines() if line.startswith("hetero batches checked")]
        assert checked and checked[0] >= 2, output[-2000:]
    final_summary(tmp_path / "run")


def test_ogbn_mag_is_read_from_ogbs_raw_files_as_ogbs_rgcn_example_reads_it(tmp_path):
    from tests.harness.ogb_files import write_ogbn_mag

    written = write_ogbn_mag(tmp_path)
    config = DataConfig(name="ogbn-mag", root=str(tmp_path))
    assert DATASETS["ogbn-mag"].is_prepared(config, tmp_path)
    data = load_graph(config)
    meta = graph_meta(data)
    assert meta.target == "paper" and set(meta.node_types) == {"author", "field_of_study", "institution", "paper"}
    assert ("paper", "rev_writes", "author") in meta.edge_types and ("paper", "cites", "paper") in meta.edge_types
    paper = meta.offsets[meta.node_types.index("paper")]
    assert meta.widths[meta.node_types.index("paper")] == 8 and meta.widths[meta.node_types.index("author")] == 0
    assert torch.allclose(data.x[paper:paper + 200], torch.from_numpy(written["x"]), atol=1e-5)  # CSV: 6 digits
    assert torch.equal(data.y[paper:paper + 200], torch.from_numpy(written["y"]))
    assert torch.equal(data.train_idx, torch.from_numpy(written["train"]) + paper)
    cites = data.edge_index[:, data.edge_type == meta.edge_types.index(("paper", "cites", "paper"))] - paper
    pairs = set(map(tuple, cites.t().tolist()))
    assert all((s, d) in pairs and (d, s) in pairs for s, d in written["edges"][("paper", "cites", "paper")])
    size = DATASETS["ogbn-mag"].plan_size(config)
    assert size.meta.widths[size.meta.node_types.index("paper")] == 128 and size.classes == 349


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sampler.device=cuda)")
@pytest.mark.parametrize("features_fit", [True, False], ids=["on-the-gpu", "host-features"])
def test_cuda_sampling_of_a_typed_graph_draws_per_edge_type_and_carries_its_types(features_fit):
    from train.graph.sampling.device_plan import GPU_HEADROOM, gpu_structure_bytes

    shared = shared_copy(typed_graph(small_hetero(3), "paper"))
    device = torch.device("cuda", torch.cuda.current_device())
    colptr, row, _perm = graph_csc(shared)
    structure = gpu_structure_bytes(46, row.numel(), with_perm=False, csc_index_bytes=row.element_size())
    structure += HETEROGENEOUS.segments(shared).nbytes
    free = None if features_fit else int((structure + 64) / (1 - GPU_HEADROOM)) + 1
    plan = plan_sampling(shared, SamplerConfig(device="cuda"), device, free_gpu_bytes=free)
    assert plan.device.type == "cuda" and (plan.host_features is None) == features_fit
    assert plan.segments.ptr.is_cuda
    rows = HETEROGENEOUS.edge_rows(shared)
    edge_type = rows.in_csc_order("edge_type")
    for batch in plan.loader(torch.arange(30), [2, 2], 10, seed=1):
        batch = plan.complete(batch, device).to("cpu")
        positions = torch.cat([(rows.perm.long() == e).nonzero().view(-1) for e in batch.e_id])
        assert torch.equal(batch.edge_type, edge_type[positions].long())
        assert torch.equal(batch.node_type, shared.node_type[batch.n_id])
        dst = batch.n_id[batch.edge_index[1]]
        per = Counter(zip(dst.tolist(), batch.edge_type.tolist(), batch.edge_index[1].tolist()))
        assert max(per.values()) <= 2  # at most k per (destination slot, edge type)


def test_a_target_type_on_a_graph_of_one_node_type_is_refused(tmp_path):
    message = refused(tmp_path, "data.target_node_type=paper")
    assert "data.target_node_type='paper' is set, but data.name=synthetic is a graph of one node type" in message


def test_the_planned_hetero_synthetic_is_the_generated_one():
    config = DataConfig(name="hetero-synthetic", num_nodes=1200)
    data = load_graph(config)
    planned, loaded = DATASETS["hetero-synthetic"].plan_size(config), graph_size_of(data)
    assert planned.meta == loaded.meta and planned.nodes == loaded.nodes and planned.split == loaded.split
    assert loaded.edges <= planned.edges <= loaded.edges * 1.01  # an upper bound: self-citations are dropped
    tensors, size = graph_tensors(_clone(data))
    assert size == shared_graph_bytes(loaded) == sum(
        (t() if callable(t) else t).nbytes for t in tensors.values())


def test_two_ranks_train_on_a_tiny_igbh_folder_shared_once_per_node(tmp_path):
    folder = write_igbh(tmp_path / "igbh", papers=400)
    job = run_local_job(["fit", "--config", "hetero-synthetic", "data.name=igbh", f"data.path={folder}",
                         "data.num_classes=19", "trainer.epochs=1", "data.share=node",
                         f"output.dir={tmp_path / 'run'}"], world_size=2, module="tests.harness.workers.hetero_batches")
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    assert all("hetero batches checked" in output for output in job.outputs)
    assert final_summary(tmp_path / "run")["dataset"] == "igbh"


def test_mlperfs_r_gat_config_trains_on_a_tiny_igbh_on_two_ranks(tmp_path):
    """Issue 27 §3: configs/igbh-rgat.yaml as shipped (R-GAT: 3 layers of 512, 4 heads, fanouts [15, 10, 5], batch
    1024) over a tiny IGBH in IGBH's layout, on 2 ranks: it trains and evaluates, the same weights on both."""
    folder = write_igbh(tmp_path / "igbh", papers=400)
    job = run_local_job(["fit", "--config", "igbh-rgat", f"data.path={folder}", "trainer.epochs=1",
                         f"output.dir={tmp_path / 'run'}"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    summary = final_summary(tmp_path / "run")
    assert summary["dataset"] == "igbh" and summary["model"] == "hetero-gat" and summary["epochs"] == 1
    assert 0.0 <= summary["final_val_acc"] <= 1.0, summary
    assert "model train.models.heteroconv." in job.outputs[0], job.outputs[0][-3000:]
