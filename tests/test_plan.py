"""`python -m train plan`: memory per node, rank and GPU before the job, without loading the graph."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.harness import standin_bin
from tests.harness.localjob import ROOT
from train.cli.plan import GraphSize, graph_size, make_plan, shared_graph_bytes
from train.config import DataConfig, load_config
from train.graph.data import synthetic_graph
from train.graph.shared_graph import graph_tensors


def plan_cli(tmp_path: Path, *args: str, standins: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the CLI with a PATH holding only the given stand-ins (sinfo, nvidia-smi print fixed text)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, output in (standins or {}).items():
        standin_bin.install(bin_dir, name, "fixed-output")
        (tmp_path / f"{name}.out").write_text(output)
    env = {"PATH": f"{bin_dir}:/bin", "PYTHONPATH": str(ROOT), "DATA_DIR": str(tmp_path / "no-data-here"),
           "STANDIN_DIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "train", "plan", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_papers100m_on_two_nodes_of_four_gpus_without_loading_it(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-papers100M", "--nodes", "2", "--gpus", "8")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "ogbn-papers100M (111,059,956 nodes, 1,615,685,872 edges, 128 features), 2 node(s) x 4 rank(s)" in out
    assert "per node" in out and "per rank" in out and "per GPU" in out
    assert "graph, shared once" in out and "78.7 GiB" in out  # x 53 GiB + edges 24 GiB + CSC pointers + labels
    assert "unknown" in out and "fits what is known" in out
    assert not (tmp_path / "no-data-here").exists()  # nothing loaded, nothing downloaded


def test_a_plan_that_cannot_fit_is_refused_naming_the_numbers(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-papers100M", "--nodes", "2", "--gpus", "8", "--node-memory", "128")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "does not fit: a node needs 193.5 GiB at its peak but has 128.0 GiB (--node-memory)" in done.stderr
    assert "per node" in done.stdout  # the plan is printed before the verdict


def test_node_memory_from_sinfo_for_the_partition(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-products", "--nodes", "2", "--gpus", "4", "--partition", "gpu",
                    standins={"sinfo": "515000\n257000+\n"})
    assert done.returncode == 0, done.stderr
    assert "251.0 GiB  (sinfo -p gpu: smallest node)" in done.stdout
    assert "--partition=gpu" in (tmp_path / "sinfo.argv").read_text()
    assert done.stdout.rstrip().endswith("fits")


def test_gpu_memory_from_nvidia_smi_and_a_gpu_that_is_too_small(tmp_path):
    done = plan_cli(tmp_path, "--config", "ogbn-products", "--gpus", "2", "sampler.device=cuda",
                    standins={"nvidia-smi": "2048\n"})
    assert done.returncode == 2, done.stdout
    assert "2.0 GiB  (nvidia-smi here)" in done.stdout
    assert "a GPU needs" in done.stderr and "but has 2.0 GiB (nvidia-smi here)" in done.stderr


@pytest.mark.parametrize("args,needle", [
    (["--nodes", "2", "--gpus", "3"], "--gpus=3 is not a multiple of --nodes=2"),
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
    folder = tmp_path / "graph"
    folder.mkdir()
    rng = np.random.default_rng(0)
    np.save(folder / "x.npy", rng.normal(size=(500, 9)).astype(np.float32))
    np.save(folder / "y.npy", rng.integers(0, 4, 500))
    np.save(folder / "edge_index.npy", rng.integers(0, 500, (2, 3000)))
    for name, part in (("train_idx", range(0, 300)), ("val_idx", range(300, 400)), ("test_idx", range(400, 500))):
        np.save(folder / f"{name}.npy", np.array(part))
    done = plan_cli(tmp_path, "--config", "tiny", "data.name=files", f"data.path={folder}", "--cpu")
    assert done.returncode == 0, done.stderr
    assert "files (500 nodes, 3,000 edges, 9 features), 1 node(s) x 1 rank(s)" in done.stdout
    assert "per GPU" not in done.stdout


@pytest.mark.parametrize("sinfo, scontrol, known", [
    ("1\n", "", False),  # RealMemory never configured: SLURM's default of 1 MB is not the node's
    ("1000\n", "SlurmdParameters = config_overrides\n", False),  # declared, never checked against the node
    ("1000\n", "SlurmdParameters = (null)\n", True),  # a real declaration: 1000 MB holds
])
def test_sinfo_memory_counts_only_where_it_is_the_nodes(tmp_path, sinfo, scontrol, known):
    done = plan_cli(tmp_path, "--config", "tiny", "--nodes", "1", "--gpus", "2", "--cpu",
                    standins={"sinfo": sinfo, "scontrol": scontrol})
    if known:
        assert done.returncode == 2 and "but has 1,000.0 MiB (sinfo: smallest node)" in done.stderr, done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert "give --node-memory GiB" in done.stdout and "fits what is known" in done.stdout


@pytest.mark.parametrize("overrides", [[], ["model.name=gat", "model.kwargs.heads=8", "model.kwargs.jk=cat"],
                                       ["model.name=gin", "model.num_layers=3", "sampler.num_neighbors=[5,5,5]"]])
def test_the_model_row_counts_the_real_models_parameters_and_adam_state(overrides):
    from train.loop.model import build_model

    config = load_config("ogbn-products", overrides)
    size = graph_size(config)
    model = build_model(config.model, size.features, size.classes, seed=0)
    params = sum(p.numel() for p in model.parameters())
    gpu = make_plan(config, size, 1, 1, gpus=True).rows["GPU"]
    assert gpu["model, gradients, Adam state"] == 4 * 4 * params  # weight, gradient, two moments; float32
