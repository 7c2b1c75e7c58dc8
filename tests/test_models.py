"""The model plug-in: PyG's models by name with checked model.kwargs, the user's own module by
`package.module:ClassName`, each bad model refused with one message that names it, the exact
per-layer evaluation API, the real parameter count, and the checkpoint's record of the model."""

from __future__ import annotations

import sys
import textwrap
import types
import uuid

import pytest
import torch
import torch_geometric.nn.models as pyg_models
from torch_geometric.data import Data

from train.builtin_models import BUILTINS
from train.config import BUILTIN_MODELS, ModelConfig, load_config
from train.errors import UserError
from train.graph.datasets.loading import synthetic_graph
from train.graph.sampling.samplers import make_node_loader
from train.graph.sharing.shared_graph import attach_csc, csc_targets
from train.graph.typed_csc import build_csc
from train.loop.checkpoint import model_differences
from train.loop.evaluate import in_degree
from train.models import ModelStep, build_model, layerwise, parameter_count, resolve
from train.models.contract import CLASSES, check_model
from train.models.gine import GINE

PYG_CLASS = {"sage": "GraphSAGE", "gcn": "GCN", "gat": "GAT", "gin": "GIN", "mlp": "MLP"}
OWN_CLASS = {"gine": GINE}  # PyG's GIN with GINEConv layers: PyG has the layer, not the model
KWARGS = {"gat": {"heads": 4}, "gine": {"edge_dim": 3}}


@pytest.mark.parametrize("name", [name for name in BUILTIN_MODELS if not BUILTINS[name].hetero_only])
def test_builtin_models_are_pygs_own_classes_and_pass_the_contract(name):
    config = ModelConfig(name=name, hidden=16, kwargs=KWARGS.get(name, {}))
    model = build_model(config, 12, 5, seed=0)
    assert type(model) is OWN_CLASS.get(name) or type(model) is getattr(pyg_models, PYG_CLASS[name])
    assert (model.in_channels, model.out_channels) == (12, 5)
    # step.reads_graph decides; the table holds its answer for PyG's class, for the config check without torch
    reads = check_model(config).uses_graph
    assert reads == resolve(config).reads_graph == BUILTINS[name].reads_graph == (name != "mlp")


def test_model_kwargs_reach_the_model_and_its_layers():
    model = build_model(ModelConfig(name="gat", hidden=16, kwargs={"heads": 4, "v2": True, "jk": "cat",
                                                                   "negative_slope": 0.1}), 12, 5, seed=0)
    assert type(model.convs[0]).__name__ == "GATv2Conv" and model.convs[0].heads == 4
    assert model.convs[0].negative_slope == 0.1 and model.jk_mode == "cat"
    gin = build_model(ModelConfig(name="gin", kwargs={"train_eps": True, "norm": "batch_norm"}), 12, 5, seed=0)
    assert isinstance(gin.convs[0].eps, torch.nn.Parameter) and type(gin.norms[0]).__name__ == "BatchNorm"
    assert build_model(ModelConfig(name="mlp"), 12, 5, seed=0).norms[0].__class__ is torch.nn.Identity
    # GAT's paper on Cora: 8 heads, then 1 output head (PyG's GAT alone repeats `heads`)
    paper = build_model(ModelConfig(name="gat", hidden=16, kwargs={"heads": 8, "out_heads": 1}), 12, 5, seed=0)
    assert isinstance(paper, pyg_models.GAT) and [c.heads for c in paper.convs] == [8, 1]
    assert paper.convs[1].out_channels == 5 and not paper.convs[1].concat


@pytest.mark.parametrize("name,bad,valid", [("gat", "head", "heads"), ("gin", "eps_train", "train_eps"),
                                            ("sage", "aggregation", "aggr"), ("gcn", "improve", "improved"),
                                            ("mlp", "plainlast", "plain_last")])
def test_an_unknown_keyword_is_refused_naming_the_valid_ones(name, bad, valid):
    with pytest.raises(UserError) as info:
        check_model(ModelConfig(name=name, kwargs={bad: 1}))
    message = str(info.value)
    assert f"model.kwargs.{bad} is not an argument of model.name={name}" in message
    assert valid in message.split("valid model.kwargs:")[1] and ("jk" in message or name == "mlp")


@pytest.mark.parametrize("kwargs,needle", [
    ({"hidden_channels": 8}, "model.kwargs.hidden_channels is passed by the workflow itself (from model.hidden)"),
    ({"dropout": 0.1}, "from model.dropout"),
])
def test_the_common_knobs_stay_where_they_are(kwargs, needle):
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        resolve(ModelConfig(name="sage", kwargs=kwargs))


def test_a_gcn_that_caches_one_graphs_normalisation_is_refused():
    with pytest.raises(UserError, match="model.kwargs.cached=True cannot train model.name=gcn"):
        resolve(ModelConfig(name="gcn", kwargs={"cached": True}))


def test_a_constructor_error_of_pygs_names_the_model_and_its_arguments():
    with pytest.raises(UserError) as info:
        check_model(ModelConfig(name="gat", hidden=30, kwargs={"heads": 8}))
    assert "model.name=gat: GAT(" in str(info.value) and "hidden_channels=30" in str(info.value)
    assert "divisible by the number of heads" in str(info.value)


# ---- the user's own model --------------------------------------------------------------------------------

@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """write(source) -> an importable module name holding `source` (a fresh name each time)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def write(source: str) -> str:
        name = f"usermodels_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        names.append(name)
        return name

    yield write
    for name in names:
        sys.modules.pop(name, None)


SUBCLASS = """
    from torch_geometric.nn.models import GraphSAGE

    class MySAGE(GraphSAGE):
        pass
"""
PLAIN = """
    import torch
    from torch_geometric.nn import SAGEConv

    class Plain(torch.nn.Module):
        def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout=0.0, aggr="mean"):
            super().__init__()
            sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
            self.convs = torch.nn.ModuleList(SAGEConv(i, o, aggr=aggr) for i, o in zip(sizes, sizes[1:]))
            self.dropout = dropout

        def forward(self, x, edge_index):
            for i, conv in enumerate(self.convs):
                x = conv(x, edge_index)
                if i < len(self.convs) - 1:
                    x = torch.nn.functional.dropout(x.relu(), self.dropout, self.training)
            return x
"""

FEATURES_ONLY = """
    import torch
    class Features(torch.nn.Module):
        def __init__(self, in_channels, hidden_channels, num_layers, out_channels, dropout):
            super().__init__()
            self.lin = torch.nn.Linear(in_channels, out_channels)
        def forward(self, x):
            return self.lin(x)
"""


def test_a_subclass_of_a_pyg_model_works_with_no_glue_and_keeps_target_trimming(user_code):
    module = user_code(SUBCLASS)
    config = ModelConfig(name=f"{module}:MySAGE", hidden=16)
    step = check_model(config)
    assert type(step.model).__name__ == "MySAGE" and step.not_target_trimmed is None
    assert layerwise(step)[0] is not None  # the exact evaluation's per-layer API: BasicGNN's
    spec = resolve(config)
    assert spec.describe(12, 5) == {"name": f"{module}:MySAGE", "class": f"{module}.MySAGE", "arguments": {
        "in_channels": 12, "hidden_channels": 16, "num_layers": 2, "out_channels": 5, "dropout": 0.5}}
    with pytest.raises(UserError, match=r"model.kwargs.aggregation is not an argument of .*MySAGE.*aggr"):
        resolve(ModelConfig(name=f"{module}:MySAGE", kwargs={"aggregation": "max"}))


def test_a_plain_module_with_the_same_constructor_and_forward_works(user_code):
    module = user_code(PLAIN)
    step = check_model(ModelConfig(name=f"{module}:Plain", hidden=16, kwargs={"aggr": "max"}))
    assert step.model.convs[0].aggr == "max"
    assert step.trim_mode.startswith("none (its forward takes no num_sampled_nodes_per_hop")
    api, note = layerwise(step)
    assert api is None and "falls back" not in note and "evaluating on sampled neighbourhoods" in note
    with pytest.raises(UserError, match="model.kwargs.heads is not an argument of .*Plain.*valid model.kwargs: aggr"):
        resolve(ModelConfig(name=f"{module}:Plain", kwargs={"heads": 2}))


@pytest.mark.parametrize("source,cls", [(None, "sage"), (SUBCLASS, "MySAGE"), (PLAIN, "Plain")])
def test_a_common_knob_in_kwargs_is_refused_alike_for_every_kind_of_model(source, cls, user_code):
    """One refusal (builtin.refuse_common) for a built-in, a PyG subclass and the user's own module."""
    name = cls if source is None else f"{user_code(source)}:{cls}"
    with pytest.raises(UserError) as info:
        resolve(ModelConfig(name=name, kwargs={"num_layers": 3}))
    assert str(info.value) == ("model.kwargs.num_layers is passed by the workflow itself (from model.num_layers); "
                               "remove it from model.kwargs.")


BAD_MODELS = {  # case -> (source or None, ClassName, what the message must say)
    "module-missing": (None, "Net", "no module named"),
    "import-raises": ("import torch\nraise RuntimeError('no GPU here')\n", "Net",
                      "failed: RuntimeError: no GPU here"),
    "syntax-error": ("def broken(:\n", "Net", "SyntaxError"),
    "class-missing": (PLAIN, "Plane", "has no 'Plane'; torch.nn.Module classes there: Plain"),
    "not-a-module": ("class Net:\n    pass\n", "Net", "is a class but not a torch.nn.Module subclass"),
    "not-a-class": ("def Net(**kwargs):\n    return None\n", "Net", "is a function but not a torch.nn.Module"),
    "lacks-arguments": ("import torch\nclass Net(torch.nn.Module):\n    def __init__(self, in_channels, out_channels):"
                        "\n        super().__init__()\n", "Net",
                        "Net.__init__ does not take hidden_channels, num_layers, dropout"),
    "constructor-refuses": ("import torch\nclass Net(torch.nn.Module):\n    def __init__(self, **kw):\n"
                            "        raise ValueError('hidden_channels must be a power of two')\n", "Net",
                            "Net(in_channels=6, hidden_channels=16, num_layers=2, out_channels=3, dropout=0.5) "
                            "failed (on a stand-in graph of 6 features and 3 classes): ValueError: hidden_channels"),
    "wrong-columns": (PLAIN.replace("return x\n", "return x[:, :2]\n"), "Plain",
                      ", 2); expected float logits of shape [nodes, out_channels]"),
    "not-a-tensor": (PLAIN.replace("return x\n", "return {'logits': x}\n"), "Plain", "returned a dict"),
    "forward-raises": (PLAIN.replace("def forward(self, x, edge_index):", "def forward(self, x, edge_index):\n"
                                     "            raise KeyError('edge_attr')"), "Plain",
                       "forward(x, edge_index) on a sampled batch failed: KeyError: 'edge_attr'"),
    "no-gradient": (PLAIN.replace("return x\n", "return x.detach()\n"), "Plain", "no gradient flows back"),
}


@pytest.mark.parametrize("case", BAD_MODELS)
def test_each_bad_model_is_one_clear_message_naming_it(case, user_code):
    source, cls, needle = BAD_MODELS[case]
    module = user_code(source) if source is not None else f"nosuch_{uuid.uuid4().hex[:6]}"
    with pytest.raises(UserError) as info:
        check_model(ModelConfig(name=f"{module}:{cls}", hidden=16))
    message = str(info.value)
    assert message.startswith(f"model.name={module}:{cls}") and needle in message, message
    assert "Traceback" not in message
    if case == "module-missing":
        assert "PYTHONPATH" in message and "CODE_DIR" in message


def test_a_feature_only_forward_gets_the_features_alone(user_code):
    module = user_code(FEATURES_ONLY)
    step = check_model(ModelConfig(name=f"{module}:Features"))
    assert not step.uses_graph and step.trim_mode.startswith("none (a feature-only model)")


def check_with_preflight(config, overrides):
    from train.cli.preflight import check_fit
    from train.cluster.distenv import resolve as resolve_env

    check_fit(config, resolve_env({}, pick_free_port=lambda: 29500))


def check_with_model_command(config, overrides):
    from train.cli.model import main
    from train.config import CONFIG_OPTION

    main(types.SimpleNamespace(config="tiny", overrides=overrides, config_knob=CONFIG_OPTION))  # as the parser gives


@pytest.mark.parametrize("check", [check_with_preflight, check_with_model_command])
@pytest.mark.parametrize("source,cls,reads", [(FEATURES_ONLY, "Features", False), (PLAIN, "Plain", True)])
def test_whether_a_users_model_reads_the_graph_is_its_forwards_answer_everywhere(tmp_path, user_code, source, cls,
                                                                              reads, check):
    """One fanout per layer only for a model whose forward reads the graph: the config check (which once took every
    model but mlp for a graph model), `fit`'s preflight, `python -m train model` and the memory plan agree."""
    from train.plan.terms import reads_graph

    overrides = [f"model.name={user_code(source)}:{cls}", "model.num_layers=2", "sampler.num_neighbors=[5]",
                 f"output.dir={tmp_path / 'run'}"]
    config = load_config("tiny", overrides)  # the config alone cannot tell: it is not refused here
    assert reads_graph(config) == resolve(config.model).reads_graph == reads
    if reads:
        with pytest.raises(UserError, match=r"sampler.num_neighbors=\[5\] has 1 hops but model.num_layers=2"):
            check(config, overrides)
    else:
        check(config, overrides)


# ---- the exact evaluation's per-layer API ------------------------------------------------------------------

@pytest.mark.parametrize("name,kwargs", [("sage", {}), ("gcn", {}), ("gat", {"heads": 2, "out_heads": 1}),
                                         ("gin", {"jk": "last"}),
                                         ("gcn", {"norm": "batch_norm", "add_self_loops": False})])
def test_layer_by_layer_over_one_hop_batches_is_the_model_on_the_whole_graph(name, kwargs):
    data = synthetic_graph(load_config("tiny", ["data.num_nodes=400"]).data)
    loop = torch.stack([torch.arange(0, 400, 7), torch.arange(0, 400, 7)])  # self-loops: not in GCN's degrees
    data.edge_index = torch.cat([data.edge_index, loop], dim=1)
    model = build_model(ModelConfig(name=name, hidden=16, num_layers=3, kwargs=kwargs), 16, 4, seed=1).eval()
    api, _ = layerwise(ModelStep(model))
    csc = build_csc(data.edge_index, data.num_nodes)
    h = data.x
    with torch.no_grad():
        for index in range(api.num_layers):
            rows = []
            for batch in make_node_loader(data, torch.arange(400), [-1], 64, csc=csc):
                n, seeds = batch.n_id, batch.batch_size
                kind = api.source_degree_kind(index)
                degree = in_degree(data, self_loops=kind == "with self-loops", chunk=500)
                sources = (torch.arange(seeds, n.numel()), degree[n[seeds:]]) if kind else None
                rows.append(api.rows(index, h[n], batch.edge_index, seeds, sources))
            h = torch.cat(rows)
            assert h.size(1) == api.widths[index]
        torch.testing.assert_close(h, model(data.x, data.edge_index), rtol=1e-4, atol=1e-5)


def test_in_degree_counts_in_edges_with_or_without_self_loops():
    data = synthetic_graph(load_config("tiny", ["data.num_nodes=50"]).data)
    data.edge_index = torch.tensor([[1, 2, 3, 3, 0], [0, 0, 0, 3, 1]])
    data.num_nodes = 4
    assert in_degree(data, chunk=2).tolist() == [3, 1, 0, 0]
    assert in_degree(data, self_loops=True, chunk=2).tolist() == [3, 1, 0, 1]


@pytest.mark.parametrize("ids", [torch.int32, torch.long])
@pytest.mark.parametrize("chunk", [1, 7, 1 << 24])
def test_in_degree_of_the_node_shared_graph_reads_its_csc_alone(chunk, ids):
    """The node-shared graph has no edge_index: the degrees, self-loops left out or not, come from its CSC
    (each edge's target from colptr, in chunks; int32 ids as the node shares them) and equal those of the
    graph's own edge_index, in int64."""
    data = synthetic_graph(load_config("tiny", ["data.num_nodes=300"]).data)
    loop = torch.stack([torch.arange(0, 300, 5), torch.arange(0, 300, 5)])
    data.edge_index = torch.cat([data.edge_index, loop], dim=1)
    colptr, row, _perm = build_csc(data.edge_index, data.num_nodes)
    colptr, row = colptr.to(ids), row.to(ids)
    shared = attach_csc(Data(x=data.x, y=data.y), (colptr, row, None))
    assert shared.edge_index is None
    for self_loops in (False, True):
        degree = in_degree(shared, self_loops=self_loops, chunk=chunk)
        assert degree.dtype == torch.long and torch.equal(degree, in_degree(data, self_loops=self_loops, chunk=chunk))
    assert torch.equal(csc_targets(colptr), data.edge_index[1].sort(stable=True).values)
    assert torch.equal(csc_targets(colptr, 10, 40), csc_targets(colptr)[10:40])


def test_csc_targets_of_every_range_are_the_expanded_colptrs():
    """Every range of positions, empty nodes first, between and last included, against colptr expanded."""
    colptr = torch.tensor([0, 0, 2, 2, 2, 5, 6, 6])  # nodes 0, 2, 3 and 6 have no in-edges
    targets = torch.repeat_interleave(torch.arange(7), colptr.diff())
    for start in range(7):
        for stop in range(start, 7):
            assert torch.equal(csc_targets(colptr, start, stop), targets[start:stop]), (start, stop)
    assert torch.equal(csc_targets(colptr), targets)


@pytest.mark.parametrize("name,kwargs", [("sage", {}), ("gat", {"heads": 4, "jk": "cat"}), ("gin", {}), ("mlp", {}),
                                         ("gcn", {})])
def test_parameter_count_is_the_models_own(name, kwargs):
    config = ModelConfig(name=name, hidden=64, num_layers=3, kwargs=kwargs)
    model = build_model(config, 100, 7, seed=0)
    assert parameter_count(config, 100, 7) == sum(p.numel() for p in model.parameters())


def test_the_checkpoint_names_the_model_fields_that_differ():
    saved = resolve(ModelConfig(name="gat", kwargs={"heads": 8})).describe(12, 5)
    now = resolve(ModelConfig(name="gat", kwargs={"heads": 4}, hidden=64)).describe(12, 5)
    assert model_differences(saved, now) == [("model argument heads", 8, 4),
                                             ("model argument hidden_channels", 256, 64)]
    other = resolve(ModelConfig(name="sage")).describe(12, 5)
    assert ("model class", "torch_geometric.nn.models.basic_gnn.GAT",
            "torch_geometric.nn.models.basic_gnn.GraphSAGE") in model_differences(saved, other)
    assert model_differences(None, now) == [] and model_differences(saved, saved) == []
    assert CLASSES == 3
