"""Heterogeneous graphs' models (issue 27 §2): rgcn, rgat, hetero-sage, hetero-gat, the built-ins through PyG's
to_hetero and a user's forward(x_dict, edge_index_dict), on typed batches (train/models/hetero.py); their
contract's refusals; trim and the exact evaluation's fallback; DDP on 2 gloo ranks with a relation absent from one
rank's batch and a lazy model."""

from __future__ import annotations

import functools
import json
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from tests.harness.gloo_ranks import join_gloo
from train.cluster.distenv import free_port
from train.config import ModelConfig
from train.errors import UserError
from train.graph.typed_meta import HeteroMeta
from train.models import ModelStep, build_model, edge_inputs, layerwise, parameter_count, resolve
from train.models.contract import check_model
from train.models.hetero import STAND_IN, TypeInputs, tiny_typed_batch, type_rows, typed_dicts, typed_hop_counts

CLASSES = 3
MODELS = {"rgcn": {}, "rgat": {"heads": 2}, "hetero-sage": {}, "hetero-gat": {"heads": 2},
          "sage": {}, "gat": {"heads": 2}, "gin": {}}  # the last three through PyG's to_hetero


def _model(name: str, meta: HeteroMeta = STAND_IN, layers: int = 2, **overrides) -> nn.Module:
    config = ModelConfig(name=name, hidden=8, num_layers=layers, kwargs=MODELS.get(name, {}), **overrides)
    return build_model(config, max(meta.widths), CLASSES, seed=0, meta=meta)


def _without_relation(batch, relation: int):
    """`batch` with none of relation `relation`'s edges (the per-hop edge counts kept true)."""
    keep = batch.edge_type != relation
    hops = torch.repeat_interleave(torch.arange(len(batch.num_sampled_edges)), torch.tensor(batch.num_sampled_edges))
    batch = batch.clone()
    batch.edge_index, batch.edge_type, batch.e_id = batch.edge_index[:, keep], batch.edge_type[keep], batch.e_id[keep]
    batch.num_sampled_edges = torch.bincount(hops[keep], minlength=len(batch.num_sampled_edges)).tolist()
    return batch


@pytest.mark.parametrize("name", MODELS)
def test_each_model_gives_the_target_types_logits_with_seeds_first_and_a_gradient_for_every_parameter(name):
    batch = tiny_typed_batch(STAND_IN, 2)
    assert batch.node_type[: batch.batch_size].eq(STAND_IN.target_index).all()  # the stand-in's seeds: the target's
    step = ModelStep(_model(name))
    out = step(batch.x, batch.edge_index, **edge_inputs(batch))
    targets = int((batch.node_type == STAND_IN.target_index).sum())
    # rgcn, rgat: every row; the dict models: the target type's rows, seeds first
    assert out.shape == (batch.num_nodes if name in ("rgcn", "rgat") else targets, CLASSES)
    out[: batch.batch_size].sum().backward()
    assert [n for n, p in step.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize("name", MODELS)
def test_a_relation_absent_from_the_batch_still_gives_its_weights_a_gradient(name):
    batch = _without_relation(tiny_typed_batch(STAND_IN, 2), STAND_IN.edge_types.index(("paper", "cites", "paper")))
    step = ModelStep(_model(name))
    step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
         **edge_inputs(batch))[: batch.batch_size].sum().backward()
    assert [n for n, p in step.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize("name", MODELS)
def test_a_one_node_batch_without_types_reads_as_the_target_types_and_reaches_every_parameter(name):
    """train/loop/run.py settles DDP's gradient buckets with a one-node dummy of no edges and no types."""
    step = ModelStep(_model(name))
    step(torch.zeros(1, max(STAND_IN.widths)), torch.empty(2, 0, dtype=torch.long)).sum().backward()
    assert [n for n, p in step.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hetero-sage", "hetero-gat"])
def test_trimmed_layers_give_the_seeds_the_untrimmed_outputs(name):
    batch = tiny_typed_batch(STAND_IN, 3)
    step = ModelStep(_model(name, layers=3)).eval()
    every_row = step(batch.x, batch.edge_index, **edge_inputs(batch))
    trimmed = step(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges, **edge_inputs(batch))
    targets = int((batch.node_type == STAND_IN.target_index).sum())
    # rgcn, rgat: the seeds' rows alone; the dict models: the target type's rows within one hop of the seeds
    if name in ("rgcn", "rgat"):
        assert trimmed.size(0) == batch.batch_size
    else:
        assert batch.batch_size < trimmed.size(0) < targets
    torch.testing.assert_close(trimmed[: batch.batch_size], every_row[: batch.batch_size])
    assert step.trim_mode.startswith("target trimming" if name in ("rgcn", "rgat") else "PyG's trim_to_layer per node")


def test_typed_hop_counts_split_each_hop_by_type_and_relation():
    batch = tiny_typed_batch(STAND_IN, 2)
    rows = type_rows(batch.node_type, len(STAND_IN.node_types))
    nodes, edges = typed_hop_counts(STAND_IN, rows, batch.edge_type, batch.num_sampled_nodes, batch.num_sampled_edges)
    assert nodes["paper"][0] == batch.batch_size and nodes["author"][0] == nodes["field"][0] == 0  # seeds: papers
    assert [sum(hop) for hop in zip(*nodes.values())] == batch.num_sampled_nodes
    assert [sum(hop) for hop in zip(*edges.values())] == batch.num_sampled_edges
    assert edges[("paper", "about", "field")][0] == 0  # the seeds' in-edges come from papers, authors, fields


def test_to_hetero_models_are_not_trimmed_and_only_the_relational_ones_have_the_exact_evaluations_api():
    for name in MODELS:
        step = ModelStep(_model(name))
        api, note = layerwise(step)
        if name in ("rgcn", "rgat"):  # their layers take one node set and the edges' relations
            assert api is not None and api.typed and note == ""
            continue
        assert api is None and "evaluating on sampled neighbourhoods (eval.mode=sampled)" in note
        shown = {"sage": "to_hetero(GraphSAGE)", "gat": "to_hetero(GAT)", "gin": "to_hetero(GIN)",
                 "hetero-sage": "HeteroSAGE", "hetero-gat": "HeteroGAT"}[name]
        assert f"and {shown} on a heterogeneous graph is a dict model, called on whole batches" in note
        if name in ("sage", "gat", "gin"):
            assert step.trim_mode.startswith("none (its forward takes no num_sampled_nodes_dict")


def test_typed_dicts_number_each_types_nodes_in_batch_order():
    meta = HeteroMeta(("a", "b"), (("a", "to", "b"), ("b", "to", "a"), ("b", "self", "b")), (5, 5), (2, 0), "b")
    node_type = torch.tensor([1, 0, 1, 0, 1])  # b0 a0 b1 a1 b2
    edge_index = torch.tensor([[1, 3, 0, 2], [0, 4, 3, 4]])  # a0->b0, a1->b2, b0->a1, b1->b2
    edge_type = torch.tensor([0, 0, 1, 2])
    rows = type_rows(node_type, 2)
    x_dict, edge_index_dict = typed_dicts(meta, rows, [torch.zeros(2, 1), torch.zeros(3, 1)], edge_index, edge_type)
    assert edge_index_dict[("a", "to", "b")].tolist() == [[0, 1], [0, 2]]
    assert edge_index_dict[("b", "to", "a")].tolist() == [[0], [1]]
    assert edge_index_dict[("b", "self", "b")].tolist() == [[1], [2]]
    assert [x.size(0) for x in x_dict.values()] == [2, 3]


def test_each_type_reads_its_own_columns_and_a_featureless_type_its_embedding_by_its_own_ids():
    meta = HeteroMeta(("a", "b", "c"), (("a", "to", "b"),), (4, 3, 6), (3, 1, 0), "a")
    inputs = TypeInputs.common(meta, 5)
    assert set(inputs.project) == {"0", "1"} and inputs.embed["2"].num_embeddings == 6
    x = torch.randn(4, 3)
    node_type, n_id = torch.tensor([0, 1, 2, 2]), torch.tensor([1, 5, 9, 7])  # c's nodes 9, 7: its ids 2, 0
    out = inputs(x, node_type, n_id)
    torch.testing.assert_close(out[1], inputs.project["1"](x[1, :1]))  # b: its one column, not the padding
    torch.testing.assert_close(out[2:], inputs.embed["2"].weight[[2, 0]])
    # one feature width: the features as they are (as MLPerf's R-GAT takes IGBH's), the embedding of that width
    same = TypeInputs.common(HeteroMeta(("a", "b"), (), (2, 2), (4, 0), "a"), 5)
    assert len(same.project) == 0 and same.width == 4 and same.embed["1"].embedding_dim == 4


def test_rgat_and_hetero_gat_keep_mlperfs_shapes():
    meta = HeteroMeta(("paper", "author"), (("author", "writes", "paper"), ("paper", "rev", "author")), (9, 9),
                      (16, 16), "paper")
    gat = build_model(ModelConfig(name="hetero-gat", hidden=32, num_layers=3, kwargs={"heads": 4}), 16, 5, seed=0,
                      meta=meta).model
    conv = gat.convs[0].convs[("author", "writes", "paper")]
    assert (conv.heads, conv.out_channels, conv.concat, conv.add_self_loops) == (4, 8, True, False)
    assert len(gat.convs) == 3 and gat.lin.out_features == 5
    rgat = build_model(ModelConfig(name="rgat", hidden=32, num_layers=3, kwargs={"heads": 4}), 16, 5, seed=0,
                       meta=meta)
    assert [c.heads for c in rgat.convs] == [4, 4, 4] and rgat.convs[-1].concat is False


def test_the_igbh_rgat_config_builds_mlperfs_r_gat_on_igbhs_types():
    from train.config import load_config
    from train.graph.datasets.igbh import IGBH_RELATIONS, IGBH_TYPES

    config = load_config("igbh-rgat", ["data.path=/nowhere"])
    assert (config.sampler.num_neighbors, config.sampler.batch_size) == ([15, 10, 5], 1024)
    relations = IGBH_RELATIONS + tuple((d, f"rev_{r}", s) for s, r, d in IGBH_RELATIONS if s != d)
    meta = HeteroMeta(IGBH_TYPES, relations, (5, 5, 5, 5), (1024,) * 4, "paper")
    step = ModelStep(build_model(config.model, 1024, 19, seed=0, meta=meta))
    assert len(step.model.inputs.project) == 0 and step.model.inputs.width == 1024  # IGBH's features as they are
    convs = step.model.model.convs
    assert len(convs) == 3 and set(convs[0].convs.keys()) == set(relations)
    assert {(c.heads, c.out_channels, c.concat) for layer in convs for c in layer.convs.values()} == {(4, 128, True)}
    assert step.model.model.lin.out_features == 19
    # the reference's count: per relation one Linear shared by source and destination, attention and bias
    per_relation = [width * 512 + 3 * 512 for width in (1024, 512, 512)]
    assert sum(p.numel() for p in step.parameters()) == 7 * sum(per_relation) + 512 * 19 + 19


def test_parameter_count_and_the_checkpoints_description_of_a_hetero_model():
    config = ModelConfig(name="rgcn", hidden=8, kwargs={})
    assert parameter_count(config, 6, CLASSES, meta=STAND_IN) == sum(p.numel() for p in _model("rgcn").parameters())
    described = resolve(config).describe(6, CLASSES, meta=STAND_IN)
    assert HeteroMeta.from_dict(described["meta"]) == STAND_IN


@pytest.mark.parametrize("name,needle", [
    ("gcn", "model.name=gcn cannot train on a heterogeneous graph through PyG's to_hetero: GCNConv takes one node"),
    ("gine", "model.name=gine cannot train on a heterogeneous graph through PyG's to_hetero: every layer adds edge "
             "features .*; choose one of sage, gat, gin, mlp, rgcn, rgat, hetero-sage, hetero-gat\\.$"),
])
def test_a_builtin_that_to_hetero_cannot_take_is_refused_naming_why(name, needle):
    kwargs = {"edge_dim": 2} if name == "gine" else {}
    with pytest.raises(UserError, match=needle):
        build_model(ModelConfig(name=name, kwargs=kwargs), 6, CLASSES, seed=0, meta=STAND_IN)


def test_a_feature_only_model_on_a_typed_graph_reads_the_seeds_own_features():
    step = ModelStep(_model("mlp"))
    batch = tiny_typed_batch(STAND_IN, 2)
    assert not step.uses_graph and type(step.model).__name__ == "MLP"
    assert step(batch.x[: batch.batch_size]).shape == (batch.batch_size, CLASSES)


@pytest.mark.parametrize("name", ["rgcn", "rgat", "hetero-sage", "hetero-gat"])
def test_a_heterogeneous_model_on_a_homogeneous_graph_is_refused(name):
    with pytest.raises(UserError, match=f"model.name={name} trains on a heterogeneous graph .* has one node type; "
                                        r"choose a model of homogeneous graphs \(sage, gcn, gat, gin, gine, mlp\)"):
        build_model(ModelConfig(name=name, kwargs=MODELS[name]), 6, CLASSES, seed=0)


def test_heads_that_do_not_divide_hidden_are_refused():
    for name in ("rgat", "hetero-gat"):
        with pytest.raises(UserError, match=f"model.name={name}: model.hidden=8 is not a multiple of "
                                            "model.kwargs.heads=3"):
            check_model(ModelConfig(name=name, hidden=8, kwargs={"heads": 3}))


def test_an_unknown_keyword_names_the_relational_layers_own_and_edge_features_are_refused():
    with pytest.raises(UserError, match="model.kwargs.bases is not an argument of model.name=rgcn .*num_bases"):
        resolve(ModelConfig(name="rgcn", kwargs={"bases": 2}))
    with pytest.raises(UserError, match=r"model.kwargs.edge_dim cannot be given to model.name=hetero-gat \(HeteroGAT\)"
                                        ": a heterogeneous graph's model reads each edge's type"):
        resolve(ModelConfig(name="hetero-gat", kwargs={"edge_dim": 2}))


# ---- the user's own forward(x_dict, edge_index_dict) -------------------------------------------------------------
DICT_MODEL = """
    import torch
    from torch_geometric.nn import HeteroConv, SAGEConv

    class Net(torch.nn.Module):
        def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout, metadata):
            super().__init__()
            self.widths = in_channels
            self.conv = HeteroConv({relation: SAGEConv((-1, -1), hidden_channels) for relation in metadata[1]})
            self.lin = torch.nn.LazyLinear(out_channels)  # lazy: shaped by the dry forward before DDP
            self.unused = torch.nn.Linear(2, 2)  # never called: still given a gradient

        def forward(self, x_dict, edge_index_dict):
            h = self.conv(x_dict, edge_index_dict)
            return {"paper": self.lin(h["paper"])}
"""


TO_HETERO_MODEL = """
    import torch
    from torch_geometric.nn import to_hetero
    from torch_geometric.nn.models import GraphSAGE

    class Net(torch.nn.Module):
        def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout, metadata):
            super().__init__()  # in_channels=-1: PyG's lazy layers, one per relation after to_hetero
            self.gnn = to_hetero(GraphSAGE(-1, hidden_channels, num_layers, out_channels, dropout=dropout), metadata)

        def forward(self, x_dict, edge_index_dict):
            return self.gnn(x_dict, edge_index_dict)
"""


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """write(source) -> an importable module name holding `source`."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def write(source: str) -> str:
        names.append(f"heteromodels_{uuid.uuid4().hex[:8]}")
        (tmp_path / f"{names[-1]}.py").write_text(textwrap.dedent(source))
        return names[-1]

    yield write
    for name in names:
        sys.modules.pop(name, None)


def test_a_users_dict_model_gets_each_types_width_the_metadata_and_its_lazy_layers_shaped(user_code):
    module = user_code(DICT_MODEL)
    step = check_model(ModelConfig(name=f"{module}:Net", hidden=8))
    assert step.model.model.widths == {"paper": 6, "author": 4, "field": 8}  # field: its embedding of model.hidden
    assert not any(isinstance(p, nn.parameter.UninitializedParameter) for p in step.parameters())
    lazy = build_model(ModelConfig(name=f"{user_code(TO_HETERO_MODEL)}:Net", hidden=8), 6, CLASSES, seed=0,
                       meta=STAND_IN)  # PyG's to_hetero of in_channels=-1: shaped by each type's own width
    weights = {name: tuple(p.shape) for name, p in lazy.named_parameters()}
    assert weights["model.gnn.convs.0.author__writes__paper.lin_l.weight"] == (8, 4)  # author: 4 columns
    assert weights["model.gnn.convs.0.field__has__paper.lin_l.weight"] == (8, 8)  # field: its embedding


BAD_DICT_MODELS = {  # case -> (the change to DICT_MODEL, what the message must say)
    "returns-a-tensor": (('return {"paper": self.lin(h["paper"])}', 'return self.lin(h["paper"])'),
                         "forward(x_dict, edge_index_dict) returned a Tensor; expected a dict of logits by node "
                         "type, with the target type 'paper'"),
    "no-target": (('return {"paper": self.lin(h["paper"])}', 'return {"author": self.lin(h["author"])}'),
                  "returned a dict of 'author'; expected a dict of logits by node type, with the target type 'paper'"),
    "raises": (("h = self.conv(x_dict, edge_index_dict)", "h = x_dict['venue']"),
               "failed: KeyError: 'venue'"),
    "lazy-never-called": (("self.unused = torch.nn.Linear(2, 2)", "self.unused = torch.nn.LazyLinear(2)"),
                          "parameter model.unused.weight is still uninitialised after a first forward"),
    "wrong-columns": (('self.lin(h["paper"])}', 'self.lin(h["paper"])[:, :2]}'),
                      "expected float logits of shape [nodes, out_channels]"),
}


@pytest.mark.parametrize("case", BAD_DICT_MODELS)
def test_each_broken_dict_model_is_one_clear_message_naming_it(case, user_code):
    (old, new), needle = BAD_DICT_MODELS[case]
    assert old in DICT_MODEL
    module = user_code(DICT_MODEL.replace(old, new))
    with pytest.raises(UserError) as info:
        check_model(ModelConfig(name=f"{module}:Net", hidden=8))
    message = str(info.value)
    assert message.startswith(f"model.name={module}:Net") and needle in message, message
    assert "Traceback" not in message


# ---- DDP on 2 gloo ranks ------------------------------------------------------------------------------------------
DDP_MODELS = ["rgcn", "rgat", "hetero-gat", "sage", "user", "user-to-hetero"]


def _train_two_steps(rank: int, name: str) -> dict:
    """Two steps under DDP; rank 1's batches lack the relation paper-cites-paper (its weights' gradients come from
    rank 0 alone). The user's model is lazy: shaped before DDP wraps it, which refuses uninitialised parameters."""
    meta = STAND_IN
    config = ModelConfig(name=name, hidden=8, num_layers=2, kwargs=MODELS.get(name, {}))
    model = build_model(config, max(meta.widths), CLASSES, seed=0, meta=meta)
    ddp = nn.parallel.DistributedDataParallel(ModelStep(model))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    without_grad = []
    for _ in range(2):
        batch = tiny_typed_batch(meta, 2)
        if rank == 1:
            batch = _without_relation(batch, meta.edge_types.index(("paper", "cites", "paper")))
        optimizer.zero_grad(set_to_none=True)
        out = ddp(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
                  **edge_inputs(batch))[: batch.batch_size]
        torch.nn.functional.cross_entropy(out, torch.arange(batch.batch_size) % CLASSES).backward()
        without_grad += [n for n, p in model.named_parameters() if p.grad is None]
        optimizer.step()
    return {"without_grad": without_grad, "checksum": float(sum(p.double().sum() for p in model.parameters()))}


def _train_on_hetero_synthetic(rank: int, world: int, name: str) -> dict:
    """The data side's typed graph and batches (hetero-synthetic, its sampler's typed CSC), trained 4 epochs under
    DDP and evaluated as a run evaluates (eval.mode=full: exact for rgcn, sampled for a dict model, said in the
    note)."""
    from train.config import load_config
    from train.graph.datasets.loading import load_graph
    from train.graph.form import form_of, graph_meta
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.evaluate import evaluate
    from train.models import hop_counts

    config = load_config("hetero-synthetic", [f"model.name={name}", "data.num_nodes=1500", "sampler.batch_size=32",
                                              "data.share=process", "model.hidden=32"])
    data, cpu = load_graph(config.data), torch.device("cpu")
    form = form_of(data)
    step = ModelStep(build_model(config.model, form.feature_width(data), form.num_classes(data), seed=0,
                                 meta=graph_meta(data)))
    ddp = nn.parallel.DistributedDataParallel(step)
    optimizer = torch.optim.Adam(step.parameters(), lr=0.01)
    sampling = plan_sampling(data, config.sampler, cpu)
    train = form.split_nodes(data, "train")
    for epoch in range(4):
        seeds = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(epoch))]
        shard = seeds[: seeds.numel() // world * world][rank::world]  # as many batches on each rank
        for batch in sampling.loader(shard, config.sampler.num_neighbors, 32, seed=1, epoch=epoch):
            batch = sampling.complete(batch, cpu)
            optimizer.zero_grad(set_to_none=True)
            out = ddp(batch.x, batch.edge_index, *hop_counts(batch, config.model), **edge_inputs(batch))
            torch.nn.functional.cross_entropy(out[: batch.batch_size], batch.y[: batch.batch_size]).backward()
            optimizer.step()
    env = type("Env", (), {"rank": rank, "world_size": world})()
    return {"note": layerwise(step)[1], **evaluate(step, data, config, env, cpu, sampling)}


def _worker(rank, world, port, out_dir, user_dir, user_module):
    sys.path.insert(0, user_dir)
    join_gloo(rank, world, port)
    try:
        users = {"user": f"{user_module}:Net", "user-to-hetero": f"{user_module}_to_hetero:Net"}
        names = {name: users.get(name, name) for name in DDP_MODELS}
        result = {name: _train_two_steps(rank, model) for name, model in names.items()}
        result["hetero-synthetic"] = {name: _train_on_hetero_synthetic(rank, world, name)
                                      for name in ("rgcn", "hetero-sage")}
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@functools.cache
def _two_ranks(out_dir: str) -> list[dict]:
    user_module = f"heteromodels_ddp_{uuid.uuid4().hex[:8]}"
    (Path(out_dir) / f"{user_module}.py").write_text(textwrap.dedent(DICT_MODEL))
    (Path(out_dir) / f"{user_module}_to_hetero.py").write_text(textwrap.dedent(TO_HETERO_MODEL))
    mp.start_processes(_worker, args=(2, free_port(), out_dir, out_dir, user_module), nprocs=2, start_method="spawn")
    return [json.loads((Path(out_dir) / f"{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return _two_ranks(str(tmp_path_factory.mktemp("hetero-2-ranks")))


@pytest.mark.long  # its fixture: every DDP model, and the typed batches trained 4 epochs, on 2 spawned ranks
@pytest.mark.parametrize("name", DDP_MODELS)
def test_ddp_trains_with_a_relation_absent_from_one_ranks_batch_and_lazy_layers(two_ranks, name):
    first, second = (ranks[name] for ranks in two_ranks)
    assert first["without_grad"] == second["without_grad"] == []
    assert first["checksum"] == second["checksum"]  # the same weights on both ranks after two steps



def test_the_model_check_names_a_broken_dict_model_with_exit_status_2_and_passes_a_good_one(tmp_path):
    """`python -m train model` (make model-check) on the typed stand-in: a user's mistake is one line, exit 2."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    broken = DICT_MODEL.replace('return {"paper": self.lin(h["paper"])}', 'return self.lin(h["paper"])')
    (tmp_path / "broken_hetero.py").write_text(textwrap.dedent(broken))
    (tmp_path / "good_hetero.py").write_text(textwrap.dedent(DICT_MODEL))
    env = {"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}

    def check(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "train", "model", "--config", "hetero-synthetic",
                               f"model.name={name}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)

    bad = check("broken_hetero:Net")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
    assert "model.name=broken_hetero:Net: forward(x_dict, edge_index_dict) returned a Tensor; expected a dict" in \
        bad.stderr
    good = check("good_hetero:Net")
    assert good.returncode == 0, good.stderr
    assert "model.trim: none (its forward takes no num_sampled_nodes_dict" in good.stdout
    assert "on a heterogeneous graph is a dict model" in good.stdout  # eval.mode=full: sampled instead


@pytest.mark.long  # reads the `long` test's fixture above: in the rest's session it would run the 2 ranks again
@pytest.mark.parametrize("name", ["rgcn", "hetero-sage"])
def test_trained_on_the_data_sides_typed_batches_a_model_reads_the_papers_class_through_their_authors(two_ranks, name):
    """hetero-synthetic's papers show their class through their authors (a feature-only model stays under 0.55)."""
    first, second = (ranks["hetero-synthetic"][name] for ranks in two_ranks)
    assert first == second  # evaluation: the same figures on every rank
    assert first["test_acc"] > 0.85 and first["val_acc"] > 0.85, first
    if name == "rgcn":  # the exact layer-wise pass; a dict model samples, and says so
        assert first["note"] == "", first["note"]
    else:
        assert "evaluating on sampled neighbourhoods (eval.mode=sampled)" in first["note"]
