"""sampler.device=auto (the default) and data.feature_dtype (issue 30 §1): where the graph goes, decided from a given
GPU capacity as the run and the plan decide it; on a machine without a GPU auto is the CPU path, and `make run`'s
weights stay what sampler.device=cpu gives."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from tests.harness.localjob import final_summary, run_local_job
from train.cli.plan_run import graph_size
from train.config import SamplerConfig, load_config
from train.errors import UserError
from train.graph.sampling.device_plan import gpu_placement, plan_sampling, samples_on_gpu
from train.models import ModelStep
from train.plan.terms import GIB, Setting, gpu_working_bytes, make_plan

H200 = 141 * 10**9  # bytes of one H200 (nvidia-smi: 143,771 MiB; 141 GB as NVIDIA states it)
A100_40GB = 40 * 10**9
STRUCTURE_ROW = "graph structure: CSC and the sampler's node map"


def papers100m(*overrides: str):
    config = load_config("ogbn-papers100M", list(overrides))
    return config, graph_size(config)


@pytest.mark.parametrize("ranks", [4, 8])
def test_one_h200_holds_ogbn_papers100m_with_the_default_auto(ranks):
    """57 GB of float32 features and 6.4 GB of int32 CSC (one id per edge, shared by the node's ranks): on the GPU,
    beside the exact evaluation's rows of a rank's shard. One rank alone would keep all 111M rows of the hidden layer
    there (53 GiB): tests/test_gpu_job.py."""
    config, size = papers100m()
    assert config.sampler.device == "auto" and config.data.feature_dtype == "float32"
    plan = make_plan(config, size, 1, ranks, gpus=True, gpu_bytes=H200)
    assert plan.sampling == "cuda" and plan.placement.features and plan.fallback == ""
    features = plan.rows["GPU"]["features (float32) and labels (they fit)"]
    assert features == size.nodes * (128 * 4 + 8) and 56.8e9 < size.nodes * 128 * 4 < 57e9
    if ranks == 8:  # the node-shared CSC in int32: colptr, row (6.46 GB), and the int64 node map
        assert plan.rows["GPU"][STRUCTURE_ROW] == (size.nodes + 1 + size.edges) * 4 + size.nodes * 8
        assert 6.4e9 < size.edges * 4 < 6.5e9
    assert plan.rows["GPU"]["in all"] < H200
    assert "sampler.device=auto: sampling on the GPU" in plan.notes[0]


def test_where_each_gpu_cannot_hold_a_copy_auto_takes_the_cpu_path_and_says_why():
    config, size = papers100m()
    plan = make_plan(config, size, 1, 8, gpus=True, gpu_bytes=A100_40GB)
    assert plan.sampling == "cpu" and not plan.placement.features and plan.fallback == ""  # a choice, not refused
    assert STRUCTURE_ROW not in plan.rows["GPU"] and plan.rows["rank"]["sampler's node map"] == size.nodes * 8
    note = plan.notes[0]
    assert note.startswith("sampler.device=auto: sampling on the CPU: the graph structure (")
    assert "Each GPU would hold a copy of its own, so every rank of the node samples from the node's copy in host " \
           "memory" in note and "data.feature_dtype=bfloat16" in note


def test_feature_dtype_halves_the_features_the_plan_counts_on_the_gpu():
    float32 = make_plan(*papers100m(), 1, 8, gpus=True, gpu_bytes=H200)
    bf16 = make_plan(*papers100m("data.feature_dtype=bfloat16"), 1, 8, gpus=True, gpu_bytes=H200)
    size = float32.size
    assert bf16.rows["GPU"]["features (bfloat16) and labels (they fit)"] == size.nodes * (128 * 2 + 8)
    assert bf16.placement.feature_bytes - size.nodes * 8 == (float32.placement.feature_bytes - size.nodes * 8) // 2
    # 80 GB of GPU: float32 fits, and so does bfloat16 on a GPU where float32 does not
    between = 72 * 10**9
    assert not make_plan(*papers100m(), 1, 8, gpus=True, gpu_bytes=between).placement.features
    assert make_plan(*papers100m("data.feature_dtype=float16"), 1, 8, gpus=True, gpu_bytes=between).placement.features


def test_without_gpus_auto_plans_the_cpu_path():
    plan = make_plan(*papers100m(), 2, 8, gpus=False)
    assert plan.sampling == "cpu" and plan.rows["GPU"] == {} and plan.placement is None


def test_the_working_sets_are_left_free_beside_the_graph():
    """What fits in free memory alone does not fit once the training and evaluation working sets are left free."""
    config, size = papers100m()
    working = gpu_working_bytes(config, size)
    assert working > 0.5 * GIB
    graph = 10 * GIB
    free = int((graph + working // 2) / 0.9)
    assert gpu_placement(graph, 0, free).structure and not gpu_placement(graph, 0, free, working).structure
    assert gpu_placement(graph, 0, int((graph + working) / 0.9) + 1, working).structure


def _tiny_graph():
    from train.config import DataConfig
    from train.graph.sharing.shared_graph import private_graph

    return private_graph(DataConfig(num_nodes=600, num_features=8))


def test_auto_on_a_cpu_rank_is_the_cpu_path_said_by_every_rank():
    plan = plan_sampling(_tiny_graph(), SamplerConfig(), torch.device("cpu"))
    assert plan.device.type == "cpu" and plan.each_rank and not plan.fell_back
    assert plan.note == ("sampler.device=auto: sampling on the CPU: this rank trains on cpu (no GPU visible, or "
                         "dist.backend=gloo).")
    assert not plan_sampling(_tiny_graph(), SamplerConfig(device="cpu"), torch.device("cpu")).each_rank
    with pytest.raises(UserError, match="use sampler.device=auto or cpu"):
        plan_sampling(_tiny_graph(), SamplerConfig(device="cuda"), torch.device("cpu"))


def test_auto_on_a_gpu_too_small_for_the_features_samples_on_the_cpu_where_cuda_keeps_the_structure():
    """Decided before any CUDA call: a given free capacity that holds the structure but not the features."""
    data = _tiny_graph()
    gpu = torch.device("cuda", 0)
    structure_only = int((600 + 1 + data.edge_index.size(1) * 2) * 8 / 0.9) + 600 * 8 * 2
    plan = plan_sampling(data, SamplerConfig(), gpu, free_gpu_bytes=structure_only)
    assert plan.device.type == "cpu" and plan.each_rank and not plan.fell_back and plan.pin_memory
    assert plan.note.startswith("sampler.device=auto: sampling on the CPU")
    nothing = plan_sampling(data, SamplerConfig(device="cuda"), gpu, free_gpu_bytes=1000)
    assert nothing.fell_back and nothing.note.startswith("sampler.device=cuda falls back to sampling on the CPU")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_auto_on_a_gpu_puts_bfloat16_features_there():
    data = _tiny_graph()
    plan = plan_sampling(data, SamplerConfig(), torch.device("cuda", 0), feature_dtype="bfloat16")
    assert plan.device.type == "cuda" and plan.data.x.dtype == torch.bfloat16 and plan.data.x.is_cuda
    assert torch.equal(plan.data.x.cpu(), data.x.bfloat16())


def test_sixteen_bit_features_reach_the_model_in_float32():
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    step = ModelStep(GraphSAGE(8, 16, 2, out_channels=3)).eval()
    x, edge_index = torch.randn(20, 8), torch.randint(20, (2, 60))
    for half in (torch.bfloat16, torch.float16):
        stored = x.to(half)
        assert torch.equal(step(stored, edge_index), step(stored.float(), edge_index))


def test_make_runs_weights_are_unchanged_on_a_machine_without_a_gpu(tmp_path):
    """The default auto samples where sampler.device=cpu does: the same weights, and each rank says so."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU machine's default; a GPU is here")
    args = ["fit", "--config", "tiny", "trainer.epochs=1", "output.progress=lines"]
    auto = run_local_job([*args, f"output.dir={tmp_path / 'auto'}"], 2)
    cpu = run_local_job([*args, "sampler.device=cpu", f"output.dir={tmp_path / 'cpu'}"], 2)
    assert auto.returncodes == cpu.returncodes == [0, 0], auto.outputs
    assert final_summary(tmp_path / "auto")["weights_sha256"] == final_summary(tmp_path / "cpu")["weights_sha256"]
    for rank, out in enumerate(auto.outputs):
        assert len(re.findall(rf"^rank {rank}: sampler.device=auto: sampling on the CPU", out, re.M)) == 1, out


def test_the_sampler_device_rule_has_one_home_that_the_run_and_the_plan_read():
    """samples_on_gpu is the rule; the plan's Setting and the run's plan_sampling both decide by it."""
    fits = {"nothing": gpu_placement(10, 10, 0), "structure": gpu_placement(10, 10**6, 10**4),
            "both": gpu_placement(10, 10, 10**4), "unknown": None}
    expected = {("cpu", place): False for place in fits}
    expected |= {("auto", "nothing"): False, ("auto", "structure"): False, ("auto", "both"): True,
                 ("auto", "unknown"): False}
    expected |= {("cuda", "nothing"): False, ("cuda", "structure"): True, ("cuda", "both"): True,
                 ("cuda", "unknown"): True}
    config = load_config("tiny")
    for (asked, place), on_gpu in expected.items():
        assert samples_on_gpu(asked, fits[place]) is on_gpu, (asked, place)
        chosen = dataclasses.replace(config, sampler=dataclasses.replace(config.sampler, device=asked))
        setting = Setting(chosen, 2, 2, True, True, fits[place])
        assert setting.gpu_sampling is on_gpu and not dataclasses.replace(setting, gpus=False).gpu_sampling
    data = _tiny_graph()
    for asked in ("auto", "cuda"):  # where the rule says the host, the run samples there (no CUDA call is made)
        plan = plan_sampling(data, SamplerConfig(device=asked), torch.device("cuda", 0), free_gpu_bytes=1000)
        assert plan.device.type == "cpu" and not samples_on_gpu(asked, gpu_placement(1, 1, 1000, 10**6))
