"""Link prediction's exact evaluation (eval.mode=full, train/loop/tasks/link.py over train/loop/evaluate.py's
LayerWisePass): its AUC, AP, MRR and Hits@K equal those of one process that runs the encoder on the whole
message-passing graph (PyG's forward, GCNConv's own normalisation by true degrees) and scores the pairs with the
head, on 1 and 2 gloo ranks and whatever sampler.eval_batch_size; a sampled evaluation does not."""

from __future__ import annotations

import math

import pytest
import torch
from torch_geometric.data import Data

from tests.harness.gloo_ranks import GlooRanks
from train.config import DataConfig, load_config
from train.graph.datasets.loading import synthetic_graph
from train.graph.form import form_of
from train.graph.link_fields import neg_dst_key, pos_edges_key
from train.loop.tasks import TaskParts, prepared_graph
from train.loop.tasks.link import LinkTask
from train.models import ModelStep, resolve

NUM_NODES, RANKED = 400, 20  # the own split's graph: nodes, and each held-out positive's own negatives

CASES = {  # name -> (config overrides, whether the graph brings its own split with ranked negatives)
    "gcn": (["model.name=gcn", "task.head=dot"], False),  # its sources' degrees: the whole graph's
    "sage": (["model.name=sage", "model.num_layers=3", "sampler.num_neighbors=[3,3,3]", "task.head=mlp"], False),
    "gcn-ranked": (["model.name=gcn", "task.head=mlp"], True),  # OGB's protocol, as ogbl-citation2
    "sage-ranked": (["model.name=sage", "task.head=dot"], True),
    # the same model evaluated on samples of 2 neighbours: not the whole graph's figures
    "gcn-sampled": (["model.name=gcn", "task.head=dot", "eval.mode=sampled", "eval.fanouts=[2,2]"], False),
}
BATCH_SIZES = (64, 100_000)  # many chunks (of uneven count over 2 ranks), or one


class _Env:
    def __init__(self, rank: int, world: int):
        self.rank, self.world_size, self.is_main = rank, world, rank == 0


def _graph(ranked: bool) -> Data:
    """A synthetic graph; with `ranked`, one with its own split (train/graph/link_fields.py's fields): 31 validation
    and 40 test positives held out of its edges, each with RANKED negatives of its own (uneven shards on 2 ranks)."""
    data = synthetic_graph(DataConfig(num_nodes=NUM_NODES, num_features=12, num_classes=4, avg_degree=6))
    if not ranked:
        return data
    gen = torch.Generator().manual_seed(5)
    order = torch.randperm(data.edge_index.size(1), generator=gen)
    val, test, train = order[:31], order[31:71], order[71:]
    graph = Data(x=data.x, edge_index=data.edge_index[:, train], num_nodes=NUM_NODES)
    for name, held in (("train", train), ("val", val), ("test", test)):
        graph[pos_edges_key(name)] = data.edge_index[:, held]
    for name, held in (("val", val), ("test", test)):
        graph[neg_dst_key(name)] = torch.randint(NUM_NODES, (held.numel(), RANKED), generator=gen)
    return graph


def _task(name: str, env: _Env, batch_size: int = 64) -> tuple[LinkTask, torch.nn.Module]:
    overrides, ranked = CASES[name]
    config = load_config("tiny", ["task.name=link", f"sampler.eval_batch_size={batch_size}", *overrides])
    data = prepared_graph(config, _graph(ranked))  # the split made where the graph loads
    task = LinkTask(TaskParts(config, env, torch.device("cpu"), data, form_of(data)))
    torch.manual_seed(11)  # the MLP head's initial weights
    return task, task.build_model(resolve(config.model), data.num_features)


def _work(rank: int, world: int) -> dict:
    """Every case evaluated by this rank, at each chunk size, and its eval_note."""
    from train.graph.sampling.device_plan import plan_sampling

    result = {}
    for name in CASES:
        for batch_size in BATCH_SIZES:
            task, model = _task(name, _Env(rank, world), batch_size)
            step = ModelStep(task.encoder(model))
            sampling = plan_sampling(task.graph, task.config.sampler, torch.device("cpu"))
            result[f"{name} {batch_size}"] = task.evaluate(step, model, sampling)
        result[f"{name} note"] = task.eval_note(step)
    return result


ranks = GlooRanks(_work, "link-eval")  # every case evaluated by real processes over gloo, once per world size


def _auc_ap(scores: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    """ROC-AUC (every positive against every negative, a tie counting half) and average precision (the precision
    at each distinct score, descending, weighted by the positives it adds: a pair drawn twice ties with itself)."""
    positive, negative = scores[labels > 0.5], scores[labels < 0.5]
    auc = ((positive[:, None] > negative[None]).double() + 0.5 * (positive[:, None] == negative[None]).double()).mean()
    thresholds = torch.unique(scores).flip(0)
    at_or_above = scores[None] >= thresholds[:, None]  # [thresholds, pairs]
    found = (at_or_above & (labels[None] > 0.5)).sum(1).double()
    precision = found / at_or_above.sum(1)
    added = torch.diff(found, prepend=torch.zeros(1, dtype=found.dtype))
    return float(auc), float((precision * added).sum() / found[-1])


def whole_graph_figures(name: str) -> dict[str, float]:
    """The reference: the encoder on the whole message-passing graph at once, one process, the head on each split's
    pairs; AUC and AP over them, and where the split ranks each positive against its own negatives, OGB's rank
    (the mean of the optimistic and the pessimistic rank, plus 1) for MRR and Hits@K."""
    task, model = _task(name, _Env(0, 1))
    model.eval()
    with torch.no_grad():
        z = model.encoder(task.graph.x, task.graph.edge_index)  # PyG's forward, full batch
        expected = {}
        for split in ("val", "test"):
            edges = getattr(task.split, split)
            scores = model.head(z[edges.pairs[0]], z[edges.pairs[1]])
            labels = edges.labels
            if edges.ranked_negatives is not None:
                negatives = edges.ranked_negatives
                sources = edges.pairs[0].repeat_interleave(negatives.size(1))
                negative = model.head(z[sources], z[negatives.reshape(-1)]).view(negatives.shape)
                rank = 0.5 * ((negative > scores[:, None]).sum(1) + (negative >= scores[:, None]).sum(1)) + 1
                expected[f"{split}_mrr"] = float((1 / rank.double()).mean())
                expected.update({f"{split}_hits@{k}": float((rank <= k).double().mean()) for k in (1, 3, 10)})
                scores = torch.cat([scores, negative.reshape(-1)])
                labels = torch.cat([labels, torch.zeros(negative.numel())])
            expected[f"{split}_auc"], expected[f"{split}_ap"] = _auc_ap(scores, labels)
            expected[f"{split}_acc"] = float(((scores > 0) == (labels > 0.5)).double().mean())
    return expected


def _close(got: dict[str, float], expected: dict[str, float]) -> bool:
    return all(math.isclose(got[key], value, rel_tol=1e-6, abs_tol=1e-9) for key, value in expected.items())


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("name", ["gcn", "sage", "gcn-ranked", "sage-ranked"])
def test_exact_link_evaluation_equals_the_encoder_on_the_whole_graph(tmp_path_factory, world, name):
    expected = whole_graph_figures(name)
    assert ("val_mrr" in expected) == CASES[name][1]  # the ranked cases rank, the others do not
    for result in ranks(tmp_path_factory, world):
        assert result[f"{name} note"] == ""  # evaluated as asked: exactly
        for batch_size in BATCH_SIZES:
            got = result[f"{name} {batch_size}"]
            assert _close(got, expected), (batch_size, got, expected)


@pytest.mark.parametrize("world", [1, 2])
def test_a_sampled_link_evaluation_is_not_the_whole_graphs(tmp_path_factory, world):
    """The comparison above tells the two apart: 2 neighbours per hop give other embeddings, other figures."""
    expected = whole_graph_figures("gcn-sampled")
    for result in ranks(tmp_path_factory, world):
        assert not _close(result["gcn-sampled 64"], expected)
        assert 0.5 < result["gcn-sampled 64"]["val_auc"] <= 1  # still figures of the right kind


def test_a_link_encoder_without_the_per_layer_api_is_evaluated_on_samples_and_says_so():
    from train.models import build_model

    config = load_config("tiny", ["task.name=link", "model.kwargs.jk=cat"])
    task, _model = _task("sage", _Env(0, 1))
    step = ModelStep(build_model(config.model, 12, config.task.embedding, seed=3))
    note = task.eval_note(step)
    assert "jumping-knowledge mode 'cat'" in note and "evaluating on sampled neighbourhoods" in note
    assert task._exact_pass(step, sampling=None) is None
