"""`python -m train plan`: memory per node, rank and GPU before the job, without loading the graph."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.harness import standin_bin
from tests.harness.graph_folder import write_graph_folder
from tests.harness.localjob import ROOT
from train.cli.plan_run import GraphSize, graph_size, make_plan, shared_graph_bytes
from train.config import DataConfig, load_config
from train.graph.datasets.loading import synthetic_graph
from train.graph.sharing.shared_graph import graph_tensors


def plan_cli(tmp_path: Path, *args: str, standins: dict[str, str] | None = None, sinfo_gpu: str = "",
             ) -> subprocess.CompletedProcess:
    """Run the CLI with a PATH holding only the given stand-ins (sinfo, nvidia-smi print fixed text), or with
    `sinfo_gpu` the stand-in cluster's sinfo (tests/harness/standins/sinfo.sh) whose GPU nodes have that GRES type."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, output in (standins or {}).items():
        standin_bin.install(bin_dir, name, "fixed-output")
        (tmp_path / f"{name}.out").write_text(output)
    if sinfo_gpu:
        standin_bin.install(bin_dir, "sinfo")
    env = {"PATH": f"{bin_dir}:/bin", "PYTHONPATH": str(ROOT), "DATA_DIR": str(tmp_path / "no-data-here"),
           "STANDIN_DIR": str(tmp_path), "SINFO_GPU_TYPE": sinfo_gpu}
    return subprocess.run([sys.executable, "-m", "train", "plan", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_papers100m_on_two_nodes_of_four_gpus_without_loading_it(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-papers100M", "--nodes", "2", "--gpus", "8")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "ogbn-papers100M (111,059,956 nodes, 1,615,685,872 edges, 128 features), 2 node(s) x 4 rank(s)" in out
    assert "per node" in out and "per rank" in out and "per GPU" in out
    assert "graph, shared once" in out and "60.2 GiB" in out  # x 53 GiB + the CSC in int32: row 6 GiB, colptr; labels
    assert "unknown" in out and "fits what is known" in out
    assert not (tmp_path / "no-data-here").exists()  # nothing loaded, nothing downloaded


def test_a_plan_that_cannot_fit_is_refused_naming_the_numbers(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-papers100M", "--nodes", "2", "--gpus", "8", "--node-memory", "128")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "does not fit: a node needs" in done.stderr
    assert "at its peak but has 128.0 GiB (--node-memory)" in done.stderr
    assert "per node" in done.stdout  # the plan is printed before the verdict


def test_node_memory_from_sinfo_for_the_partition(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-products", "--nodes", "2", "--gpus", "4", "--partition", "gpu",
                    "--gpu-memory", "80", standins={"sinfo": "515000\n257000+\n"})
    assert done.returncode == 0, done.stderr
    assert "251.0 GiB  (sinfo -p gpu: smallest node)" in done.stdout
    assert "--partition=gpu" in (tmp_path / "sinfo.argv").read_text()
    assert done.stdout.rstrip().endswith("fits")


def test_gpu_memory_from_the_partitions_gpu_type_never_from_the_login_nodes_gpu(tmp_path):
    """A login node with a small visualisation GPU (nvidia-smi: 15 GiB) submitting to a partition of H100 nodes
    (gpu:h100:4): the plan is the H100's, and the login node's nvidia-smi is never asked."""
    done = plan_cli(tmp_path, "--config", "ogbn-products", "--nodes", "2", "--gpus", "8", "--partition", "gpu",
                    standins={"nvidia-smi": "15360\n"}, sinfo_gpu="h100")
    assert done.returncode == 0, done.stderr
    assert ("79.6 GiB  (sinfo -p gpu: gpu:h100, H100 comes with 80 GB or 94 GB and the type names none: planned at "
            "the smallest)") in done.stdout
    assert "sampler.device=auto: sampling on the GPU" in done.stdout
    assert done.stdout.rstrip().endswith("\nfits")
    assert not (tmp_path / "nvidia-smi.argv").exists()
    alone = plan_cli(tmp_path / "alone", "--config", "ogbn-products", "--gpus", "2", "--node-memory", "64",
                     standins={"nvidia-smi": "15360\n"})  # no sinfo, a GPU here: still unknown
    assert "GPU memory unknown" in alone.stdout
    assert "give --gpu-memory GiB (make plan, make submit: GPU_MEMORY=80G)" in alone.stdout


def test_a_gpu_that_is_too_small_is_refused(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-products", "--gpus", "1", "sampler.device=cuda", "--gpu-memory", "1.5")
    assert done.returncode == 2, done.stdout
    assert "1.5 GiB  (--gpu-memory)" in done.stdout
    assert "a GPU needs" in done.stderr and "but has 1.5 GiB (--gpu-memory)" in done.stderr
    # the run would not sample where it was asked to: said, and refused, not planned as if it would
    assert "sampler.device=cuda falls back to sampling on the CPU: the graph structure" in done.stderr
    assert ("but 0.00 GiB of the 0.50 GiB of free GPU memory is left beside the training and evaluation working "
            "sets (2.90 GiB) and a 10% headroom") in done.stderr


@pytest.mark.parametrize("gres, gib, how", [
    (["gpu:h100:4(S:0-1)"], 79.6, "gpu:h100, H100 comes with 80 GB or 94 GB"),
    (["gpu:nvidia_h100_80gb_hbm3:8"], 79.6, "H100 80 GB"),
    (["gpu:a100-sxm4-80gb:4", "gpu:a100_40g:4"], 40.0, "gpu:a100_40g, A100 40 GB"),  # the smallest node's
    (["gpu:h200:4(S:0-1),tmpdisk:100"], 140.4, "H200 141 GB"),
    (["gpu:l40s:2"], 45.0, "L40S 48 GB"),
    (["gpu:v100:4", "(null)"], 16.0, "V100 comes with 16 GB or 32 GB"),
    (["gpu:nvidia_a100_3g.40gb:2"], 40.0, "A100 40 GB"),  # a MIG slice: its own memory
    (["gpu:rtx_24gb:2"], 24.0, "24 GB as its name states"),
    (["gpu:4"], None, "names no type"),
    (["gpu:tesla:4"], None, "gpu:tesla: not a GPU model the plan knows"),
    (["(null)"], None, "no GPU GRES"),
])
def test_a_partitions_gpu_memory_from_its_gres_types(gres, gib, how):
    from train.plan.gpu_models import partition_gpu_memory

    size, said = partition_gpu_memory(gres)
    assert (None if size is None else round(size / 2**30, 1)) == gib and how in said


def test_fits_only_when_the_gpu_memory_is_known_too(tmp_path):
    unknown = plan_cli(tmp_path, "--config", "tiny", "--gpus", "2", "--node-memory", "64", "sampler.device=cuda")
    assert unknown.returncode == 0, unknown.stderr
    assert "where the graph goes is decided on the node" in unknown.stdout
    assert unknown.stdout.rstrip().endswith("fits what is known (GPU memory unknown)")
    known = plan_cli(tmp_path, "--config", "tiny", "--gpus", "2", "--node-memory", "64", "--gpu-memory", "80",
                     "sampler.device=cuda")
    assert known.returncode == 0, known.stderr
    assert "sampler.device=cuda: graph structure and features on the GPU." in known.stdout
    assert known.stdout.rstrip().endswith("\nfits")


@pytest.mark.parametrize("args,needle", [
    (["--nodes", "0"], "must be positive"),
    (["--node-memory", "-4"], "--node-memory=-4.0 must be a positive number of GiB"),
    (["data.name=Pubmed"], "data.name='Pubmed' is not known"),
])
def test_bad_arguments_are_named(tmp_path, args, needle):
    done = plan_cli(tmp_path, "--config", "tiny", *args)
    assert done.returncode == 2 and needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_shared_graph_bytes_are_what_node_sharing_writes():
    data = synthetic_graph(DataConfig(num_nodes=3000, num_features=20))
    size = GraphSize(data.num_nodes, data.edge_index.size(1), 20, 8,
                     (data.train_idx.numel(), data.val_idx.numel(), data.test_idx.numel()))
    assert shared_graph_bytes(size) == graph_tensors(data)[1]


def test_evaluation_memory_per_rank_falls_as_ranks_are_added():
    config = load_config("ogbn-papers100M")
    size = graph_size(config)
    evals = []
    for ranks in (1, 2, 4, 8):
        rank_rows = make_plan(config, size, 1, ranks, gpus=True).rows["rank"]
        evals.append(next(v for k, v in rank_rows.items() if k.startswith("evaluation")))
    assert evals == sorted(evals, reverse=True) and evals[0] > 7 * evals[-1]


def test_sampled_evaluation_is_planned_by_its_batch():
    config = load_config("ogbn-papers100M", ["eval.mode=sampled"])
    rows = make_plan(config, graph_size(config), 2, 8, gpus=True).rows["rank"]
    assert "evaluation: one sampled batch" in rows


def test_own_files_are_sized_from_their_headers(tmp_path):
    folder = write_graph_folder(tmp_path / "graph", nodes=500, edges=3000, features=9, classes=4)
    done = plan_cli(tmp_path, "--config", "tiny", "data.name=files", f"data.path={folder}", "--cpu")
    assert done.returncode == 0, done.stderr
    assert "files (500 nodes, 3,000 edges, 9 features), 1 node(s) x 1 rank(s)" in done.stdout
    assert "per GPU" not in done.stdout


@pytest.mark.parametrize("sinfo, scontrol, known", [
    ("1\n", "", False),  # RealMemory never configured: SLURM's default of 1 MB is not the node's
    ("600\n", "SlurmdParameters = config_overrides\n", False),  # declared, never checked against the node
    ("600\n", "SlurmdParameters = (null)\n", True),  # a real declaration: 600 MB holds
])
def test_sinfo_memory_counts_only_where_it_is_the_nodes(tmp_path, sinfo, scontrol, known):
    done = plan_cli(tmp_path, "--config", "tiny", "--nodes", "1", "--gpus", "2", "--cpu",
                    standins={"sinfo": sinfo, "scontrol": scontrol})
    if known:
        assert done.returncode == 2 and "but has 600.0 MiB (sinfo: smallest node)" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert "give --node-memory GiB" in done.stdout and "fits what is known" in done.stdout


# ---- where node memory cannot be known, the plan says why and what is not checked ----------------------------
@pytest.mark.parametrize("standin,partition,why", [
    (None, "gpu", "sinfo is not on PATH here"),
    ("failing", "gpu", "sinfo failed (exit status 1: sinfo: error: Invalid partition name specified)"),
    ("fixed-output", "nosuch", "sinfo -p nosuch lists no node (is 'nosuch' a partition of this cluster?)"),
    ("sinfo", "", None),  # the stand-in's default partition answers
])
def test_unknown_node_memory_names_the_partition_and_what_is_not_checked(tmp_path, monkeypatch, standin, partition,
                                                                         why):
    from train.cli.plan_run import node_memory

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("basename", "cat"):  # what the stand-ins call; PATH holds nothing else (no real sinfo)
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if standin:
        standin_bin.install(bin_dir, "sinfo", standin)
    (tmp_path / "sinfo.err").write_text("sinfo: error: Invalid partition name specified\n")
    (tmp_path / "sinfo.out").write_text("")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("STANDIN_DIR", str(tmp_path))
    size, source = node_memory(partition, None)
    if why is None:
        assert size == 16000 * 2**20 and source == "sinfo: smallest node"
        return
    assert size is None
    assert source == (f"unknown: {why}; the node peak is not checked against the memory of a node of partition "
                      f"{partition!r}: give --node-memory GiB, or run where sinfo answers")


def test_the_plan_prints_why_node_memory_is_unknown(tmp_path):
    done = plan_cli(tmp_path, "--config", "tiny", "--cpu", "--partition", "batch", standins={"sinfo": ""})
    assert done.returncode == 0, done.stderr
    assert "(unknown: sinfo -p batch lists no node (is 'batch' a partition of this cluster?); the node peak is not " \
           "checked against the memory of a node of partition 'batch'" in done.stdout


# ---- the GPU: where sampler.device=cuda puts the graph, decided as the run decides --------------------

def _real_graph(share: str):
    """A synthetic graph as a run holds it, its CSC, and its exact size."""
    from train.graph.sharing.shared_graph import graph_csc, private_graph

    data = private_graph(DataConfig(num_nodes=3000, num_features=20))
    if share == "node":  # the node-shared copy: the CSC alone, without a permutation
        _tensors, _ = graph_tensors(data)
        csc = (_tensors["colptr"](), _tensors["row"](), None)
    else:
        csc = graph_csc(data)
    size = GraphSize(data.num_nodes, csc[1].numel(), 20, 8,
                     (data.train_idx.numel(), data.val_idx.numel(), data.test_idx.numel()))
    return data, csc, size


@pytest.mark.parametrize("share", ["node", "process"])
def test_the_plan_places_the_graph_with_the_runs_own_decision(share):
    """Same bytes (CSC with perm where the run keeps one, the sampler's node map), same decision, same words."""
    from train.graph.sampling.device_plan import gpu_placement, gpu_structure_bytes
    from train.plan.terms import free_at_placement, gpu_working_bytes, graph_size_of

    data, (colptr, row, perm), size = _real_graph(share)
    config = load_config("tiny", [f"data.share={share}", "sampler.device=cuda"])
    run_structure = sum(t.nbytes for t in (colptr, row, perm) if t is not None) + data.num_nodes * 8
    assert gpu_structure_bytes(colptr.numel() - 1, row.numel(), perm is not None, row.element_size()) == run_structure
    assert row.dtype == (torch.int32 if share == "node" else torch.long)  # the node's copy: int32 ids
    working = gpu_working_bytes(config, size, 2)
    assert working == gpu_working_bytes(config, graph_size_of(data), 2) > 0  # the run's figures are the plan's
    with_features = gpu_working_bytes(config, size, 2, rows_on_gpu=True)  # the evaluation's rows with the features
    # room for the structure beside the working sets, not for the features too
    structure_only = int((run_structure + working + 1) / 0.9) + (2**40 - free_at_placement(2**40, config, size, 2, 2))
    for gpu_bytes in (2**40, structure_only, run_structure):
        free = free_at_placement(gpu_bytes, config, size, 2, 2)
        run = gpu_placement(run_structure, data.x.nbytes + data.y.nbytes, free, working, with_features=with_features)
        plan = make_plan(config, size, 1, 2, gpus=True, gpu_bytes=gpu_bytes)
        assert plan.placement == run, gpu_bytes
        gpu_rows = plan.rows["GPU"]
        assert (gpu_rows.get("graph structure: CSC and the sampler's node map") == run_structure) == run.structure
        assert ("features (float32) and labels (they fit)" in gpu_rows) == run.features
        assert plan.sampling == ("cuda" if run.structure else "cpu")
        assert plan.fallback == ("" if run.structure else run.describe("the GPU"))
    assert [make_plan(config, size, 1, 2, gpus=True, gpu_bytes=b).placement.features for b in (2**40, structure_only)
            ] == [True, False]


def test_full_evaluation_working_set_is_on_the_gpu_when_the_model_is():
    """With the features on the host (sampler.device=cpu) the layers' rows are too; the working set is the GPU's
    (tests/test_gpu_job.py: with the features on the GPU, the rows are there too)."""
    config = load_config("ogbn-products", ["sampler.device=cpu"])
    size = graph_size(config)
    on_cpu = make_plan(config, size, 1, 4, gpus=False).rows
    on_gpu = make_plan(config, size, 1, 4, gpus=True, gpu_bytes=80 * 2**30).rows
    label = next(k for k in on_cpu["rank"] if k.startswith("evaluation"))
    work = on_gpu["GPU"]["evaluation working set"]
    assert work > 0 and on_cpu["rank"][label] - on_gpu["rank"][label] == work


def test_perm_and_the_node_map_are_planned_on_the_gpu_for_a_process_copy():
    """data.share=process keeps the CSC's perm (E ids) and sampler.device=cuda moves it to the GPU: 13 GB for
    ogbn-papers100M, which the node-shared copy (edges sorted by target, int32 ids) does not need."""
    size = graph_size(load_config("ogbn-papers100M"))
    structure = {}
    for share in ("node", "process"):
        config = load_config("ogbn-papers100M", [f"data.share={share}", "sampler.device=cuda"])
        rows = make_plan(config, size, 1, 4, gpus=True).rows["GPU"]
        structure[share] = rows["graph structure: CSC and the sampler's node map"]
    assert structure["node"] == (size.nodes + 1 + size.edges) * 4 + size.nodes * 8  # the node map is int64
    assert structure["process"] == (2 * size.nodes + 1 + 2 * size.edges) * 8
    assert structure["process"] - structure["node"] > 12.9e9 + size.edges * 4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (sampler.device=cuda)")
def test_the_run_says_why_it_samples_on_the_cpu_in_the_plans_words():
    from train.config import SamplerConfig
    from train.graph.sampling.device_plan import gpu_placement, plan_sampling

    data, csc, size = _real_graph("process")
    device = torch.device("cuda", torch.cuda.current_device())
    run_structure = sum(t.nbytes for t in csc if t is not None) + data.num_nodes * 8
    sampling = plan_sampling(data, SamplerConfig(device="cuda"), device, free_gpu_bytes=run_structure)
    assert sampling.fell_back and sampling.device.type == "cpu"
    assert sampling.note == gpu_placement(run_structure, data.x.nbytes + data.y.nbytes, run_structure).describe(
        str(device))
    assert "falls back to sampling on the CPU" in sampling.note


@pytest.mark.parametrize("overrides", [[], ["model.name=gat", "model.kwargs.heads=8", "model.kwargs.jk=cat"],
                                       ["model.name=gin", "model.num_layers=3", "sampler.num_neighbors=[5,5,5]"]])
def test_the_model_row_counts_the_real_models_parameters_and_adam_state(overrides):
    from train.models import build_model

    config = load_config("ogbn-products", overrides)
    size = graph_size(config)
    model = build_model(config.model, size.features, size.classes, seed=0)
    params = sum(p.numel() for p in model.parameters())
    gpu = make_plan(config, size, 1, 1, gpus=True).rows["GPU"]
    assert gpu["model, gradients, Adam state"] == 4 * 4 * params  # weight, gradient, two moments; float32


def test_the_evaluation_s_chunks_are_planned_as_the_evaluation_cuts_them():
    """The exact evaluation cuts its chunks by sampler.eval_batch_size and by CHUNK_BYTES
    (train/graph/sampling/in_edges.py);
    the plan sizes a chunk the same way, so a larger eval_batch_size than the bytes allow plans no larger chunk."""
    from train.graph.sampling.in_edges import CHUNK_BYTES, ChunkCost, chunk_bounds
    from train.plan.terms import eval_chunk_targets, full_eval_bytes

    config = load_config("ogbn-products", ["sampler.eval_batch_size=1000000"])
    size = GraphSize(2_449_029, 2_449_029 * 50, 100, 47, (196_615, 39_323, 2_213_091))
    widths = (100, config.model.hidden)
    degree = torch.full((200_000,), 50, dtype=torch.long)  # every node at the graph's mean in-degree
    bounds = chunk_bounds(degree, 1_000_000, ChunkCost.for_layer(*widths), CHUNK_BYTES)
    assert bounds[1] - bounds[0] == eval_chunk_targets(config, size, *widths) < 1_000_000
    small = load_config("ogbn-products", ["sampler.eval_batch_size=64"])
    assert eval_chunk_targets(small, size, *widths) == 64  # eval_batch_size stops it first
    bounded = full_eval_bytes(config, size, 1)
    assert bounded == full_eval_bytes(load_config("ogbn-products", ["sampler.eval_batch_size=20000"]), size, 1)
    assert full_eval_bytes(small, size, 1)[2] < bounded[2]


@pytest.mark.parametrize("labels", ["classes", "tasks"])
def test_the_plan_counts_a_graph_s_labels_as_they_are_held(labels):
    """y is [N] int64 classes, or [N, T] float32 tasks (ogbn-proteins' 112): the plan's bytes of x and y are the
    loaded graph's, and ogbn-proteins' planned size holds 112 floats a node."""
    from torch_geometric.data import Data

    from train.graph.datasets.kinds import DATASETS
    from train.plan.terms import graph_size_of

    n = 50
    y = torch.randint(0, 3, (n,)) if labels == "classes" else torch.randint(0, 2, (n, 5)).float()
    data = Data(x=torch.randn(n, 6), y=y, edge_index=torch.randint(0, n, (2, 200)), train_idx=torch.arange(20),
                val_idx=torch.arange(20, 30), test_idx=torch.arange(30, 50))
    size = graph_size_of(data)
    assert size.multilabel is (labels == "tasks")
    assert size.feature_bytes == data.x.nbytes + data.y.nbytes
    proteins = DATASETS["ogbn-proteins"].size
    assert proteins.multilabel and proteins.label_bytes == 112 * 4


def test_a_typed_graph_s_plan_trims_only_what_its_model_trims():
    """On a heterogeneous graph the relational built-ins trim, a built-in through to_hetero does not (every row of
    every layer): the plan's step is larger for the latter, on the same graph and hops."""
    from train.graph.datasets.kinds import DATASETS
    from train.plan.terms import forward_bytes, model_trims, sampled_hops

    relational, through = load_config("hetero-synthetic", ["model.name=rgcn"]), load_config("hetero-synthetic")
    size = DATASETS["hetero-synthetic"].plan_size(relational.data)
    assert model_trims(relational, size) and not model_trims(through, size)
    hops = sampled_hops(256, [10, 5], size)
    untrimmed = forward_bytes(through, size, hops, backward=True)
    assert untrimmed > forward_bytes(load_config("hetero-synthetic", ["model.name=hetero-sage"]), size, hops, True)


@pytest.mark.parametrize("config, overrides, exact", [
    ("hetero-synthetic", ["model.name=rgcn"], True),  # the relational models have the per-layer API
    ("hetero-synthetic", ["model.name=rgat", "model.kwargs.heads=2"], True),
    ("hetero-synthetic", ["model.name=hetero-sage"], False),  # dict models: called on whole batches
    ("hetero-synthetic", [], False),  # sage through to_hetero
    ("tiny", [], True),
    ("tiny", ["model.kwargs.jk=cat"], False),  # combines every layer's outputs
    ("tiny", ["model.name=mlp"], True),  # a feature-only model: its own features, exactly
])
def test_the_plan_counts_the_evaluation_the_run_makes(config, overrides, exact):
    """eval.mode=full with a model the exact pass cannot take is planned as the run evaluates it: a sampled batch,
    the same row as eval.mode=sampled's, and the plan says why (train/models/layerwise.py decides for both)."""
    from train.graph.datasets.kinds import DATASETS
    from train.models import ModelStep, build_model, layerwise
    from train.plan.terms import evaluation_sampled

    full = load_config(config, overrides)
    size = DATASETS[full.data.name].plan_size(full.data)
    assert evaluation_sampled(full, size) is not exact
    step = ModelStep(build_model(full.model, size.features, size.classes, seed=0, meta=size.meta))
    assert (not step.uses_graph or layerwise(step)[0] is not None) is exact  # the run's own decision
    rows = make_plan(full, size, 1, 2, gpus=False).rows["rank"]
    sampled = make_plan(load_config(config, [*overrides, "eval.mode=sampled"]), size, 1, 2, gpus=False).rows["rank"]
    label = next(name for name in rows if name.startswith("evaluation"))
    assert (label == "evaluation: one sampled batch (no per-layer API)") is not exact, label
    if not exact:
        assert rows[label] == sampled["evaluation: one sampled batch"]


def test_gine_s_step_holds_each_layer_s_projection_of_the_edges_features():
    """GINEConv turns every edge's edge_attr into a row of the layer's input width (its `lin`), adds it to the
    source's row and applies ReLU, and autograd keeps the three for the backward pass (train/plan/model_terms.py):
    a training step holds 3 x E x width floats of every layer (E the edges that layer computes), an evaluation's
    step one layer's at a time; without edge features GINE holds none of it (nor the edges' values)."""
    from train.plan.terms import forward_bytes, layer_widths, sampled_hops

    gine = load_config("synthetic-edges")
    size = GraphSize(6000, 72_000, 16, 8, (3600, 1200, 1200), edge_features=8)
    plain = GraphSize(6000, 72_000, 16, 8, (3600, 1200, 1200))
    hops = sampled_hops(256, [10, 10], size)
    widths = layer_widths(gine, size)  # (16, 64), (64, 64): a Linear head after the last conv (gine's jk=last)
    assert widths == [(16, 64), (64, 64)]
    layer_edges = (sum(hops.edges[:2]), sum(hops.edges[:1]))  # trimmed: layer 0 both hops' edges, layer 1 one
    kept = [3 * edges * width_in * 4 for edges, (width_in, _out) in zip(layer_edges, widths)]
    values = hops.total_edges * 8 * 4
    assert forward_bytes(gine, size, hops, backward=True) - forward_bytes(gine, plain, hops, backward=True) \
        == sum(kept) + values > values
    messages = [edges * width_in * 4 for edges, (width_in, _out) in zip(layer_edges, widths)]  # one row per edge
    assert forward_bytes(gine, size, hops, backward=False) - forward_bytes(gine, plain, hops, backward=False) \
        == max(m + k for m, k in zip(messages, kept)) - max(messages) + values


@pytest.mark.parametrize("model", ["sage", "gine"])
def test_the_evaluation_s_chunk_holds_its_in_edges_values(model):
    """The exact evaluation gathers each chunk's in-edges' values (e_id and the values the graph keeps:
    train/loop/evaluate.py GraphAt.chunk_edges), and GINE projects them to the layer's input width: the plan's
    chunk counts them per in-edge of the chunk, on the same chunks as a graph without them."""
    from train.plan.terms import eval_chunk_targets, full_eval_bytes, full_neighbourhood

    config = load_config("synthetic-edges", [f"model.name={model}", "eval.mode=full"]
                         + (["model.kwargs={}"] if model == "sage" else []))
    with_values = GraphSize(6000, 72_000, 16, 8, (3600, 1200, 1200), edge_features=8)
    without = GraphSize(6000, 72_000, 16, 8, (3600, 1200, 1200))
    hidden = config.model.hidden
    first = full_neighbourhood(eval_chunk_targets(config, with_values, 16, hidden), with_values).total_edges
    later = full_neighbourhood(eval_chunk_targets(config, with_values, hidden, hidden), with_values).total_edges
    extra = {"sage": (first * (8 + 8 * 4), later * (8 + 8 * 4)),
             "gine": (first * (8 + 8 * 4 + 16 * 4), later * (8 + 8 * 4 + hidden * 4))}[model]
    kept, gathered, work = full_eval_bytes(config, with_values, 1)
    kept_without, gathered_without, work_without = full_eval_bytes(config, without, 1)
    assert (kept, gathered) == (kept_without, gathered_without)
    assert min(extra) <= work - work_without <= max(extra) and work > work_without


def test_an_uneven_layout_is_planned_at_its_busiest_node():
    """GPUS a multiple of NODES is make submit's rule, in its one home (jobs/submit.sh; tests/test_jobs.py); the plan
    trusts it, and a layout given directly is planned where it is heaviest: 3 ranks on 2 nodes hold 2 on one."""
    config = load_config("tiny")
    size = graph_size(config)
    uneven, even = make_plan(config, size, 2, 3, gpus=False), make_plan(config, size, 2, 4, gpus=False)
    assert uneven.ranks_per_node == even.ranks_per_node == 2
    assert make_plan(config, size, 2, 2, gpus=False).node_peak < uneven.node_peak
