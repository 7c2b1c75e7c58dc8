"""Evaluation: full mode, each hidden layer sharded over the ranks, equals a single-process pass (on a typed graph
too, for the relational models); sampled mode with full fanouts equals it too; the rows a rank fetches are exactly
the ones it asks for."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.harness.gloo_ranks import GlooRanks
from train.cluster.distenv import free_port
from train.config import DataConfig, load_config
from train.errors import UserError
from train.graph.datasets.loading import synthetic_graph
from train.graph.sharing.shared_graph import attach_csc
from train.graph.typed_csc import build_csc
from train.models import ModelStep, build_model


class _Env:
    def __init__(self, rank, world):
        self.rank, self.world_size = rank, world


def _graph():
    data = synthetic_graph(DataConfig(num_nodes=701, num_features=12, num_classes=5, avg_degree=6))
    return attach_csc(data, build_csc(data.edge_index, data.num_nodes))


SAGE = ["model.num_layers=3", "sampler.num_neighbors=[5,5,5]"]
CASES = {  # name -> config overrides, all evaluated in the same processes
    "sage": SAGE,
    "gcn": [*SAGE, "model.name=gcn"],  # its sources' degrees come from the whole graph
    "gat": [*SAGE, "model.name=gat", "model.kwargs.heads=4"],
    "gin": [*SAGE, "model.name=gin", "model.kwargs.jk=last"],
    "mlp": ["model.name=mlp", "model.num_layers=3"],
    # no per-layer API (jk=cat combines every layer): evaluated on sampled neighbourhoods, here full ones
    "sage-jk-cat": [*SAGE, "model.kwargs.jk=cat", "eval.fanouts=[-1,-1,-1]"],
    "sampled-full-fanouts": [*SAGE, "eval.mode=sampled", "eval.fanouts=[-1,-1,-1]"],
    "sampled": [*SAGE, "eval.mode=sampled", "eval.fanouts=[2,2,2]"],
}


# The relational models on a typed graph (hetero-synthetic: papers classified through their authors, a featureless
# type among them), whose exact pass reads each chunk's edge types and its nodes' types and ids.
TYPED = {"rgcn": [], "rgat": ["model.kwargs.heads=2"]}


def _typed_config(name: str, *overrides: str):
    return load_config("hetero-synthetic", [f"model.name={name}", "data.num_nodes=600", "data.share=process",
                                            "model.hidden=16", "sampler.eval_batch_size=50", *TYPED[name], *overrides])


def _typed_logits(config, data) -> torch.Tensor:
    """The reference: the whole typed graph through the model at once, one process, on the CPU."""
    with torch.no_grad():
        return _typed_step(config, data).eval()(data.x, data.edge_index, edge_type=data.edge_type,
                                                node_type=data.node_type, n_id=torch.arange(data.num_nodes))


def _typed_step(config, data) -> ModelStep:
    from train.graph.form import form_of, graph_meta

    form = form_of(data)
    return ModelStep(build_model(config.model, form.feature_width(data), form.num_classes(data), seed=3,
                                 meta=graph_meta(data)))


def _typed_work(rank: int, world: int) -> dict:
    """Each relational model's exact evaluation on the typed graph, and its logits of this rank's test nodes, from
    the rank's own graph and from the node-shared one (its edge types stored in the CSC's order)."""
    from tests.test_hetero_data import shared_copy
    from train.graph.datasets.loading import load_graph
    from train.graph.form import form_of
    from train.graph.sampling.device_plan import plan_sampling
    from train.graph.seeds import rank_shard
    from train.loop.evaluate import LayerWisePass, evaluate
    from train.models import layerwise

    data, cpu, env, result = load_graph(_typed_config("rgcn").data), torch.device("cpu"), _Env(rank, world), {}
    graphs = {"process": data, "node": shared_copy(data)}
    nodes = rank_shard(form_of(data).split_nodes(data, "test"), rank, world)
    for name in TYPED:
        config = _typed_config(name)
        step = _typed_step(config, data).eval()
        api, note = layerwise(step)
        samplings = {share: plan_sampling(graph, config.sampler, cpu) for share, graph in graphs.items()}
        rows = {}
        for share, graph in graphs.items():
            with torch.no_grad():
                rows[share] = LayerWisePass(api, graph, config, env, cpu, samplings[share]).last_rows(nodes).tolist()
        result[f"typed {name}"] = {"note": note, "nodes": nodes.tolist(), "rows": rows,
                                   **evaluate(step, data, config, env, cpu, samplings["process"])}
        # types of several feature widths (each projected by its own Linear) and a featureless one, in chunks of 7
        small, config = _several_widths(), _typed_config(name, "sampler.eval_batch_size=7")
        small_nodes = rank_shard(torch.arange(small.num_nodes), rank, world)
        with torch.no_grad():
            rows = LayerWisePass(layerwise(_typed_step(config, small).eval())[0], small, config, env, cpu,
                                 plan_sampling(small, config.sampler, cpu)).last_rows(small_nodes)
        result[f"typed {name} several widths"] = {"nodes": small_nodes.tolist(), "rows": rows.tolist()}
    return result


def _several_widths():
    """tests/test_hetero_data.py's small typed graph: papers of 5 features, authors of 3, featureless topics."""
    from tests.test_hetero_data import small_hetero
    from train.graph.typed_graph import typed_graph

    return typed_graph(small_hetero(), "paper")


def _work(rank: int, world: int) -> dict:
    """Every case evaluated by this rank, and a fetch of rows from their owners."""
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.evaluate import RowOwners, evaluate, fetch_rows

    result = _typed_work(rank, world)
    data = _graph()
    for name, overrides in CASES.items():
        config = load_config("tiny", ["sampler.eval_batch_size=64", *overrides])
        model = ModelStep(build_model(config.model, data.num_features, 5, seed=3))
        sampling = plan_sampling(data, config.sampler, torch.device("cpu"))
        result[name] = evaluate(model, data, config, _Env(rank, world), torch.device("cpu"), sampling)
        if name == "sampled":
            result["sampled-again"] = evaluate(model, data, config, _Env(rank, world), torch.device("cpu"),
                                               sampling)
    # data.feature_dtype=bfloat16: the features kept in 16 bits where the graph is; the layer-wise pass widens
    # them as the training step does (on an H200 its first layer met bf16 rows and float32 weights)
    half = data.clone()
    half.x = data.x.bfloat16()
    config = load_config("tiny", ["sampler.eval_batch_size=64", *SAGE])
    model = ModelStep(build_model(config.model, data.num_features, 5, seed=3))
    result["sage bf16 features"] = evaluate(model, half, config, _Env(rank, world), torch.device("cpu"),
                                            plan_sampling(half, config.sampler, torch.device("cpu")))
    full = torch.arange(data.num_nodes * 3, dtype=torch.float32).view(-1, 3)
    owners = RowOwners(data.num_nodes, world)
    mine = full[owners.rows(rank)]
    ids = torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(rank))[: 50 + 40 * rank]
    got = fetch_rows(ids, mine, int(owners.starts[rank]), owners, torch.device("cpu"))
    result["fetch"] = {"ok": bool(torch.equal(got, full[ids])), "shard_rows": mine.size(0)}
    return result


ranks = GlooRanks(_work, "eval")  # every case evaluated by real processes over gloo, once per world size


def single_process_accuracy(overrides, feature_dtype=torch.float32):
    """The reference: the whole graph through the model at once (full neighbourhoods), one process, from the
    features as `feature_dtype` keeps them (widened back to float32)."""
    config = load_config("tiny", list(overrides))
    data = _graph()
    model = ModelStep(build_model(config.model, data.num_features, 5, seed=3)).eval()
    with torch.no_grad():
        pred = model(data.x.to(feature_dtype).float(), data.edge_index).argmax(-1)  # PyG's forward, whole graph
    return {f"{s}_acc": int((pred[data[f"{s}_idx"]] == data.y[data[f"{s}_idx"]]).sum()) / data[f"{s}_idx"].numel()
            for s in ("val", "test")}


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "gin", "mlp", "sage-jk-cat"])
def test_full_evaluation_equals_a_single_process_pass(tmp_path_factory, world, model):
    expected = single_process_accuracy(CASES[model])
    assert [r[model] for r in ranks(tmp_path_factory, world)] == [expected] * world


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", TYPED)
def test_a_relational_models_exact_evaluation_on_a_typed_graph_is_its_whole_graph_forward(tmp_path_factory, world,
                                                                                           name):
    """rgcn and rgat evaluate exactly (no note of sampling): each rank's logits are the whole typed graph's forward
    in one process (every node type's inputs, every relation), and so are the figures."""
    from train.graph.datasets.loading import load_graph
    from train.graph.form import form_of

    config = _typed_config(name)
    data = load_graph(config.data)
    form = form_of(data)
    logits = _typed_logits(config, data)
    pred = logits.argmax(-1)
    expected = {f"{s}_acc": float((pred[form.split_nodes(data, s)] == form.labels(data, form.split_nodes(data, s)))
                                  .double().mean()) for s in ("val", "test")}
    results = [r[f"typed {name}"] for r in ranks(tmp_path_factory, world)]
    assert sum(len(r["nodes"]) for r in results) == form.split_nodes(data, "test").numel() > 50
    for result in results:
        assert result["note"] == ""
        for share in ("process", "node"):  # data.share: the rank's own graph, the node's shared one
            assert torch.allclose(torch.tensor(result["rows"][share]), logits[result["nodes"]], atol=1e-5), share
        assert result["val_acc"] == pytest.approx(expected["val_acc"]), (result, expected)
        assert result["test_acc"] == pytest.approx(expected["test_acc"]), (result, expected)
    small = _several_widths()
    logits = _typed_logits(_typed_config(name), small)
    for result in (r[f"typed {name} several widths"] for r in ranks(tmp_path_factory, world)):
        assert torch.allclose(torch.tensor(result["rows"]), logits[result["nodes"]], atol=1e-5)


@pytest.mark.parametrize("world", [1, 3])
def test_16_bit_features_are_evaluated_as_their_widened_float32(tmp_path_factory, world):
    expected = single_process_accuracy(SAGE, torch.bfloat16)
    assert [r["sage bf16 features"] for r in ranks(tmp_path_factory, world)] == [expected] * world


@pytest.mark.parametrize("world", [1, 3])
def test_sampled_evaluation_with_full_fanouts_equals_full_mode(tmp_path_factory, world):
    for result in ranks(tmp_path_factory, world):
        assert result["sampled-full-fanouts"] == result["sage"]


@pytest.mark.parametrize("world", [2, 3])
def test_sampled_evaluation_is_seeded_and_agreed_by_all_ranks(tmp_path_factory, world):
    results = ranks(tmp_path_factory, world)
    assert all(r["sampled"] == r["sampled-again"] == results[0]["sampled"] for r in results)
    assert 0.0 <= results[0]["sampled"]["test_acc"] <= 1.0


@pytest.mark.parametrize("world", [2, 3])
def test_fetch_rows_returns_exactly_the_asked_rows_from_their_owners(tmp_path_factory, world):
    fetched = [r["fetch"] for r in ranks(tmp_path_factory, world)]
    assert all(f["ok"] for f in fetched)
    shard = [f["shard_rows"] for f in fetched]
    assert sum(shard) == 701 and max(shard) - min(shard) <= 1  # each rank holds 1/world of a layer


@pytest.mark.parametrize("overrides,needle", [
    (["eval.mode=exact"], "eval.mode='exact' is not valid; expected one of: full, sampled"),
    (["eval.fanouts=[5]"], "eval.fanouts=[5] has 1 hops but model.num_layers=2"),
    (["eval.fanouts=[5,0]"], "eval.fanouts=[5, 0] must be positive fanouts"),
    (["eval.every=3"], "unknown config key 'eval.every'; valid eval keys: mode, fanouts"),
])
def test_eval_config_mistakes_are_named(overrides, needle):
    with pytest.raises(UserError) as info:
        load_config("tiny", overrides)
    assert needle in str(info.value)


def near_ties(overrides, tolerance: float = 1e-4) -> dict[str, int]:
    """Per split, the nodes whose top two logits in the CPU reference lie within `tolerance` of each other:
    the only predictions a GPU (other kernels, another summation order) may flip."""
    config = load_config("tiny", list(overrides))
    data = _graph()
    model = build_model(config.model, data.num_features, 5, seed=3).eval()
    with torch.no_grad():
        top2 = model(data.x, data.edge_index).topk(2, dim=-1).values
    close = (top2[:, 0] - top2[:, 1]) <= tolerance * top2[:, 0].abs().clamp(min=1)
    return {s: int(close[data[f"{s}_idx"]].sum()) for s in ("val", "test")}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (evaluation on cuda with nccl)")
def test_evaluation_on_cuda_repeats_exactly_and_matches_the_cpu_up_to_near_ties(torch_switches):
    """Exact on a GPU: the same evaluation twice (deterministic switches on, as `fit` sets them). Within a
    tolerance: the GPU against the float32 CPU reference, which may differ only on nodes whose two best
    classes tie within the last bits (near_ties); a GPU sums in another order (train/loop/numerics.py)."""
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.evaluate import evaluate
    from train.loop.numerics import set_gpu_numerics

    set_gpu_numerics(True)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        device = torch.device("cuda", 0)
        data = _graph()
        # (the model's case, the evaluated case, where the graph is): sampler.device=cuda (and auto, the default,
        # with room on the GPU) puts it on the GPU, and the exact evaluation runs there (its chunks read from the
        # GPU's CSC, its layers kept there); cpu keeps it on the host
        runs = [("sage", "sage", "cpu"), ("sage", "sampled-full-fanouts", "cpu"), ("sage", "sage", "cuda"),
                ("gcn", "gcn", "cuda"), ("gat", "gat", "auto")]
        for model_case, case, where in runs:
            reference, ties = single_process_accuracy(CASES[model_case]), near_ties(CASES[model_case])
            overrides = [*CASES[case], f"sampler.device={where}"]
            config = load_config("tiny", ["sampler.eval_batch_size=64", *overrides])
            model = ModelStep(build_model(config.model, data.num_features, 5, seed=3)).to(device)
            sampling = plan_sampling(data, config.sampler, device)
            assert sampling.csc[0].is_cuda == (where != "cpu") and sampling.host_features is None, where
            first = evaluate(model, data, config, _Env(0, 1), device, sampling)
            assert evaluate(model, data, config, _Env(0, 1), device, sampling) == first  # bit for bit
            for split in ("val", "test"):
                allowed = ties[split] / data[f"{split}_idx"].numel()
                assert abs(first[f"{split}_acc"] - reference[f"{split}_acc"]) <= allowed + 1e-12, (case, split, first)
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (a typed graph's exact pass on cuda)")
def test_a_relational_models_exact_evaluation_runs_on_the_gpu_that_holds_the_typed_graph(torch_switches):
    """sampler.device=cuda: the typed CSC, its edge types, the features and the node types on the GPU; the pass
    reads its chunks there and gives the CPU's whole-graph logits, to float32's rounding."""
    from train.graph.datasets.loading import load_graph
    from train.graph.form import form_of
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.evaluate import LayerWisePass
    from train.loop.numerics import set_gpu_numerics
    from train.models import layerwise

    set_gpu_numerics(True)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        device = torch.device("cuda", 0)
        for name in TYPED:
            config = _typed_config(name, "sampler.device=cuda")
            data = load_graph(config.data)
            step = _typed_step(config, data).to(device).eval()
            sampling = plan_sampling(data, config.sampler, device)
            assert sampling.csc[0].is_cuda, name
            nodes = form_of(data).split_nodes(data, "test")
            with torch.no_grad():
                rows = LayerWisePass(layerwise(step)[0], data, config, _Env(0, 1), device, sampling).last_rows(nodes)
            assert torch.allclose(rows.cpu(), _typed_logits(config, data)[nodes], atol=1e-4), name
    finally:
        dist.destroy_process_group()
