"""Targets: one class per node (cross-entropy, accuracy) or several binary tasks (BCE over the labelled tasks,
the mean ROC-AUC over tasks as OGB's evaluator computes it), the ROC-AUC exact over 2 and 3 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from tests.harness.gloo_ranks import join_gloo
from train.cluster.distenv import free_port
from train.config import DataConfig, load_config
from train.graph.datasets.loading import synthetic_graph
from train.graph.form import form_of
from train.graph.seeds import rank_shard
from train.graph.sharing.shared_graph import attach_csc
from train.graph.typed_csc import build_csc
from train.loop.targets import MultiLabel, SingleLabel, Tally, mean_rocauc, targets_for
from train.models import ModelStep, build_model

TASKS = 7


def ogb_rocauc(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """OGB's Evaluator('ogbn-proteins')._eval_rocauc, as ogb 1.3.6 writes it, on sklearn's roc_auc_score."""
    from sklearn.metrics import roc_auc_score  # here: the ranks this module spawns need none of it
    aucs = []
    for i in range(y_true.shape[1]):
        if np.sum(y_true[:, i] == 1) > 0 and np.sum(y_true[:, i] == 0) > 0:
            labelled = y_true[:, i] == y_true[:, i]
            aucs.append(roc_auc_score(y_true[labelled, i], y_pred[labelled, i]))
    return sum(aucs) / len(aucs)


def scored_split(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and labels of a split: scores rounded to tenths (many ties), a quarter of the labels NaN, the last
    task of one class only (left out by OGB's evaluator)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (rows, TASKS), generator=g).float()
    logits = torch.round((labels * 0.8 + torch.randn(rows, TASKS, generator=g)) * 10) / 10
    labels[torch.rand(rows, TASKS, generator=g) < 0.25] = float("nan")
    labels[:, -1] = torch.where(torch.isnan(labels[:, -1]), labels[:, -1], torch.ones(rows))
    return logits, labels


def test_mean_rocauc_is_ogbs_evaluator_with_ties_and_unlabelled_tasks():
    logits, labels = scored_split(301, seed=0)
    ours = mean_rocauc(logits, labels)
    assert ours == pytest.approx(ogb_rocauc(labels.numpy(), logits.numpy()), abs=1e-12)
    assert 0.6 < ours < 0.9  # a signal, not perfect
    shuffled = torch.randperm(301, generator=torch.Generator().manual_seed(1))
    assert mean_rocauc(logits[shuffled], labels[shuffled]) == ours  # the order of the nodes changes nothing


def test_a_split_without_two_classes_in_any_task_has_no_rocauc():
    assert np.isnan(mean_rocauc(torch.randn(4, 2), torch.tensor([[1.0, float("nan")]] * 4)))


def test_the_loss_counts_the_labelled_tasks_only():
    logits = torch.randn(6, 3, requires_grad=True)
    labels = torch.tensor([[1, 0, float("nan")], [0, float("nan"), 1]] * 3)
    loss = MultiLabel().loss(logits, labels)
    labelled = ~torch.isnan(labels)
    assert torch.allclose(loss, F.binary_cross_entropy_with_logits(logits[labelled], labels[labelled]))
    loss.backward()
    assert bool((logits.grad[~labelled] == 0).all()) and bool((logits.grad[labelled] != 0).all())
    none = torch.randn(2, 3, requires_grad=True)
    empty = MultiLabel().loss(none, torch.full((2, 3), float("nan")))  # a batch without a labelled task
    empty.backward()
    assert float(empty.detach()) == 0.0 and bool((none.grad == 0).all())
    assert MultiLabel().counts(torch.tensor([[2.0, -1.0, 5.0]]), torch.tensor([[1.0, 1.0, float("nan")]])) == (1, 2)


def test_one_class_per_node_is_cross_entropy_and_the_argmax():
    logits, labels = torch.randn(5, 4), torch.tensor([0, 1, 2, 3, 0])
    assert torch.equal(SingleLabel().loss(logits, labels), F.cross_entropy(logits, labels))
    assert SingleLabel().counts(logits, labels) == (int((logits.argmax(-1) == labels).sum()), 5)


def multilabel_graph():
    """The synthetic community graph with TASKS tasks per node: each positive for some communities, NaN for a
    fifth of the entries."""
    data = synthetic_graph(DataConfig(num_nodes=401, num_features=12, num_classes=4, avg_degree=6))
    g = torch.Generator().manual_seed(5)
    tasks = torch.randint(0, 2, (4, TASKS), generator=g).float()
    tasks[0], tasks[1] = 1.0, 0.0
    data.y = tasks[data.y]
    data.y[torch.rand(data.y.shape, generator=g) < 0.2] = float("nan")
    return attach_csc(data, build_csc(data.edge_index, data.num_nodes))


CASES = {"full": ["model.num_layers=2", "sampler.num_neighbors=[5,5]"],
         "sampled-full-fanouts": ["model.num_layers=2", "eval.mode=sampled", "eval.fanouts=[-1,-1]"],
         "mlp": ["model.name=mlp", "model.num_layers=2"]}


class _Env:
    def __init__(self, rank, world):
        self.rank, self.world_size = rank, world


def _cases(rank, world):
    from train.graph.sampling.device_plan import plan_sampling
    from train.loop.evaluate import evaluate

    result = {}
    # a split of 257 nodes and one of 2 (a rank of 3 holds none of it), each rank its share of the rows
    splits = {"val": scored_split(257, seed=2), "test": scored_split(2, seed=3)}
    tallies = {split: Tally() for split in splits}
    targets = MultiLabel()
    for split, (logits, labels) in splits.items():
        mine = rank_shard(torch.arange(logits.size(0)), rank, world)
        for part in mine.split(50):
            targets.add(tallies[split], logits[part], labels[part])
    result["figures"] = targets.figures(tallies, torch.device("cpu"))
    data = multilabel_graph()
    for name, overrides in CASES.items():
        config = load_config("tiny", ["sampler.eval_batch_size=64", *overrides])
        model = ModelStep(build_model(config.model, data.num_features, TASKS, seed=3))
        sampling = plan_sampling(data, config.sampler, torch.device("cpu"))
        result[name] = evaluate(model, data, config, _Env(rank, world), torch.device("cpu"), sampling)
    return result


def _worker(rank, ports, out_dir):
    """3 ranks, then the first 2 of them again as a world of 2 (one start-up of the processes for both)."""
    for world, port in zip((3, 2), ports):
        if rank >= world:
            return
        join_gloo(rank, world, port)
        try:
            (Path(out_dir) / f"{world}-{rank}.json").write_text(json.dumps(_cases(rank, world)))
        finally:
            dist.destroy_process_group()


_RESULTS: dict[int, list[dict]] = {}


def ranks(tmp_path_factory, world: int) -> list[dict]:
    """What each of `world` ranks computed (both world sizes run once per session)."""
    if not _RESULTS:
        out = tmp_path_factory.mktemp("targets")
        mp.start_processes(_worker, args=((free_port(), free_port()), str(out)), nprocs=3, start_method="spawn")
        _RESULTS.update({w: [json.loads((out / f"{w}-{r}.json").read_text()) for r in range(w)] for w in (2, 3)})
    return _RESULTS[world]


@pytest.mark.parametrize("world", [2, 3])
def test_rocauc_over_ranks_is_exactly_one_process_figure(tmp_path_factory, world):
    results = ranks(tmp_path_factory, world)
    for split, seed, rows in (("val", 2, 257), ("test", 3, 2)):
        logits, labels = scored_split(rows, seed)
        expected = mean_rocauc(logits, labels)  # one process, every row
        assert [r["figures"][f"{split}_rocauc"] for r in results] == [expected] * world
    logits, labels = scored_split(257, 2)
    assert results[0]["figures"]["val_rocauc"] == pytest.approx(ogb_rocauc(labels.numpy(), logits.numpy()), abs=1e-12)
    labelled = ~torch.isnan(labels)
    assert results[0]["figures"]["val_acc"] == pytest.approx(
        int(((logits > 0) == (labels > 0.5))[labelled].sum()) / int(labelled.sum()), abs=1e-12)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_evaluation_mode_scores_the_logits_one_whole_graph_pass_gives(tmp_path_factory, world, case):
    data = multilabel_graph()
    config = load_config("tiny", CASES[case])
    model = ModelStep(build_model(config.model, data.num_features, TASKS, seed=3)).eval()
    with torch.no_grad():
        logits = model(data.x, data.edge_index) if model.uses_graph else model(data.x)  # the whole graph at once
    results = ranks(tmp_path_factory, world)
    for split in ("val", "test"):
        nodes = data[f"{split}_idx"]
        expected = ogb_rocauc(data.y[nodes].numpy(), logits[nodes].numpy())
        assert [r[case][f"{split}_rocauc"] for r in results] == [pytest.approx(expected, abs=1e-6)] * world


def test_the_graph_picks_its_targets_by_the_shape_of_y():
    data = multilabel_graph()
    assert isinstance(targets_for(form_of(data), data), MultiLabel)
    assert form_of(data).num_classes(data) == TASKS
    data.y = torch.tensor([0, 2, 1])
    assert isinstance(targets_for(form_of(data), data), SingleLabel) and form_of(data).num_classes(data) == 3
