"""Link prediction (task.name=link, train/loop/tasks/link.py): its batches (the seed edges out of their batch's
message-passing graph, negatives reproducible per batch, PyG's LinkNeighborLoader contract), its split, its
config, its refusal of a graph without edges, and real runs on 2 ranks over gloo, resumed in the middle of an
epoch to the same weights as an uninterrupted run."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from torch_geometric.data import Data

from tests.harness.localjob import final_summary, run_local_job
from tests.test_refused_fit import fit, snapshot
from tests.test_resume import Job, assert_same_weights, run
from train.config import SamplerConfig, load_config
from train.errors import UserError
from train.graph.datasets.synthetic import synthetic_graph
from train.graph.link_split import split_of, split_on_loading
from train.graph.sampling.device_plan import plan_sampling
from train.loop.tasks.link_batches import LinkBatches, Negatives, pairs_and_labels

LINK = ["fit", "--config", "tiny", "task.name=link", "trainer.log_every=1"]


def graph() -> Data:
    return synthetic_graph(load_config("tiny", ["data.num_nodes=300"]).data)


def batches(mode: str = "binary", ratio: int = 1, undirected: bool | None = None) -> tuple[LinkBatches, Data]:
    config = load_config("tiny", ["data.num_nodes=300", "task.name=link"])
    data = split_on_loading(graph(), config)
    split = split_of(data)
    sampling = plan_sampling(data, SamplerConfig(device="cpu"), torch.device("cpu"))
    made = LinkBatches(sampling, split.train, Negatives(mode, ratio, 300),
                       split.undirected if undirected is None else undirected, seed=7)
    return made, data


def global_pairs(batch: Data) -> set[tuple[int, int]]:
    src, dst = batch.n_id[batch.edge_index]
    return set(zip(src.tolist(), dst.tolist()))


def test_the_seed_edges_are_not_in_their_batchs_message_passing_graph():
    made, full = batches()
    assert made.undirected  # the synthetic graph is undirected: each edge leaves in both directions
    edges = set(zip(*full.edge_index.tolist()))
    ids = torch.arange(40)
    batch = made.batch(ids, [-1, -1], epoch=0)
    seeds = {tuple(p) for p in made.positives[:, ids].t().tolist()}
    kept = global_pairs(batch)
    assert not kept & (seeds | {(b, a) for a, b in seeds})  # neither direction of any seed edge
    assert kept <= edges and len(kept) == batch.edge_index.size(1)
    # everything else of the endpoints' full 1-hop in-neighbourhood is still there
    targets = set(batch.n_id[: batch.batch_size].tolist())
    expected = {(a, b) for a, b in edges if b in targets} - seeds - {(b, a) for a, b in seeds}
    assert expected <= kept
    assert sum(batch.num_sampled_edges) == batch.edge_index.size(1)  # the per-hop counts recounted


def test_binary_batches_follow_link_neighbor_loaders_contract_and_reproduce():
    made, _ = batches("binary", ratio=2)
    ids = torch.arange(10, 30)
    batch = made.batch(ids, [5, 5], epoch=3)
    assert batch.edge_label_index.shape == (2, 60) and batch.edge_label.tolist() == [1.0] * 20 + [0.0] * 40
    assert torch.equal(batch.n_id[batch.edge_label_index[:, :20]], made.positives[:, ids])  # local ids, positives first
    assert int(batch.edge_label_index.max()) < batch.batch_size  # every endpoint is a seed of the node sample
    again = made.batch(ids, [5, 5], epoch=3)
    for name in ("edge_label_index", "n_id", "edge_index"):
        assert torch.equal(batch[name], again[name]), name  # the same batch, negatives and sample alike
    other = made.batch(ids, [5, 5], epoch=4)
    assert not torch.equal(batch.n_id[batch.edge_label_index[:, 20:]], other.n_id[other.edge_label_index[:, 20:]])


def test_triplet_batches_give_each_positive_its_negative_targets():
    made, _ = batches("triplet", ratio=3)
    ids = torch.arange(16)
    batch = made.batch(ids, [5, 5], epoch=0)
    assert batch.src_index.shape == batch.dst_pos_index.shape == (16,) and batch.dst_neg_index.shape == (16, 3)
    assert torch.equal(batch.n_id[torch.stack([batch.src_index, batch.dst_pos_index])], made.positives[:, ids])
    pairs, labels = pairs_and_labels(batch)
    assert pairs.shape == (2, 64) and labels.sum() == 16
    assert torch.equal(pairs[0, 16:], batch.src_index.repeat_interleave(3))  # each negative from its positive's source


def test_the_split_is_the_same_on_every_call_and_keeps_val_and_test_out_of_the_graph():
    config = load_config("tiny", ["data.num_nodes=300", "task.name=link"])
    loaded = split_on_loading(graph(), config)
    first, second = split_of(loaded), split_of(split_on_loading(graph(), config))
    assert torch.equal(first.train, second.train) and torch.equal(first.test.pairs, second.test.pairs)
    message_passing = set(zip(*loaded.edge_index.tolist()))
    for split in (first.val, first.test):
        positives = set(zip(*split.positives.tolist()))
        assert positives and not positives & message_passing
        assert int((split.labels == 0).sum()) == len(positives)  # as many negatives as positives
    total = graph().edge_index.size(1) // 2
    assert first.train.size(1) == total - first.val.positives.size(1) - first.test.positives.size(1)


@pytest.mark.parametrize("override, named", [("task.name=edges", "node, link"), ("task.head=cosine", "dot, mlp"),
                                             ("task.neg_sampling=hard", "binary, triplet"),
                                             ("task.neg_ratio=0", "must be > 0")])
def test_a_bad_task_value_is_refused_naming_it_and_the_valid_ones(override, named):
    with pytest.raises(UserError) as caught:
        load_config("tiny", [override])
    assert override.split("=")[0] in str(caught.value) and named in str(caught.value)


def test_a_link_config_on_a_graph_without_edges_is_one_message_exit_2_nothing_written(tmp_path):
    done = fit(f"output.dir={tmp_path / 'run'}", "task.name=link", "data.avg_degree=0", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "task.name=link needs edges to predict, but data.name='synthetic' has no edges" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "run").exists() and snapshot(tmp_path) == {}


def test_link_prediction_on_two_ranks_learns_and_reports_auc_and_ap(tmp_path):
    out = tmp_path / "run"
    job = run_local_job([*LINK, "task.neg_sampling=triplet", "task.neg_ratio=2", f"output.dir={out}",
                         "trainer.epochs=3"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:] + job.outputs[1][-3000:]
    summary = final_summary(out)  # both ranks ended with the same weights
    assert summary["task"] == "link" and summary["metric"] == "auc" and summary["world_size"] == 2
    assert summary["eval_mode"] == "full" and "eval_note" not in summary  # evaluated exactly (tests/test_link_eval.py)
    for name in ("auc", "ap"):
        assert summary[f"test_{name}_at_best_val"] is not None and summary[f"final_test_{name}"] is not None
    assert summary["best_val_auc"] > 0.75, summary  # the synthetic graph's communities: edges are predictable
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    best = max(rows, key=lambda r: r["val_auc"])
    assert (summary["best_val_epoch"], summary["test_ap_at_best_val"]) == (best["epoch"], best["test_ap"])
    state = torch.load(out / "model.pt")
    assert any(k.startswith("head.") for k in state) and any(k.startswith("encoder.") for k in state)  # mlp head


def test_a_link_run_of_an_edge_feature_model_trains_on_two_ranks(tmp_path):
    """GINE reads the edges' features: the split keeps each training edge's (train/graph/link_split.py), the batches
    and the exact evaluation read them (a link run of it was refused: the split dropped them)."""
    out = tmp_path / "run"
    job = run_local_job(["fit", "--config", "synthetic-edges", "task.name=link", "data.num_nodes=1500",
                         "trainer.epochs=2", f"output.dir={out}"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:] + job.outputs[1][-3000:]
    summary = final_summary(out)
    assert summary["task"] == "link" and summary["model"] == "gine" and summary["eval_mode"] == "full"
    assert summary["test_auc_at_best_val"] is not None and summary["final_test_ap"] is not None


@pytest.mark.long  # about 20 s of CPU: beside the cluster's tests (tests/harness/streams.py)
def test_a_resumed_link_run_equals_an_uninterrupted_one(tmp_path):
    args = [*LINK, "sampler.batch_size=256", "trainer.epochs=2"]
    baseline = run([*args, f"output.dir={tmp_path / 'baseline'}"], 2, tmp_path / "logs-0")
    assert baseline.codes == [0, 0], baseline.outputs()
    out = tmp_path / "run"
    job = Job([*args, "trainer.step_delay_seconds=0.3", f"output.dir={out}", "trainer.checkpoint_every_minutes=0.005"],
              2, tmp_path / "logs-1")
    job.wait_for(r"^epoch 1 step 3/")
    job.signal(1, signal.SIGUSR1)
    assert job.wait()[0] != 0 and not (out / "summary.json").exists()  # stopped in epoch 1
    resumed = run([*args, f"output.dir={out}"], 2, tmp_path / "logs-2")
    assert resumed.codes == [0, 0], resumed.outputs()
    assert "resuming from" in resumed.output(0) and "epoch 1 step" in resumed.output(0)
    assert_same_weights(tmp_path / "baseline", out)
    drop = ("_seconds", "seeds_per_second")
    rows = [[{k: v for k, v in json.loads(line).items() if not k.endswith(drop)}
             for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (tmp_path / "baseline", out)]
    assert rows[0] == rows[1]


def test_the_shipped_link_configs_load():
    for name in ("cora-link", "citeseer-link", "ogbl-citation2"):
        assert load_config(name).task.name == "link"



def test_ogbl_citation2_trains_on_its_own_split_from_the_node_shared_graph_and_ranks_by_mrr(tmp_path):
    """A small ogbl-citation2 in OGB's layout (tests/harness/ogb_files.py): each held-out citation ranked against its
    own negatives on 2 ranks; the best epoch is the best validation MRR (OGB's protocol)."""
    from tests.harness.ogb_files import write_ogbl_citation2

    write_ogbl_citation2(tmp_path / "data")
    out = tmp_path / "run"
    job = run_local_job([*LINK, "data.name=ogbl-citation2", f"output.dir={out}", "trainer.epochs=2"], world_size=2,
                        extra_env={"DATA_DIR": str(tmp_path / "data")})
    assert job.returncodes == [0, 0], job.outputs[0][-3000:] + job.outputs[1][-3000:]
    summary = final_summary(out)
    assert summary["metric"] == "mrr" and summary["dataset"] == "ogbl-citation2"
    for name in ("mrr", "hits@1", "hits@10", "auc", "ap"):
        assert 0 <= summary[f"test_{name}_at_best_val"] <= 1 and summary[f"final_test_{name}"] is not None, name
    assert summary["test_mrr_at_best_val"] > 1 / 21  # better than chance among 1 positive and 20 negatives
    assert "test MRR, best val" in job.outputs[0]


def test_a_node_config_on_a_graph_for_link_prediction_only_is_refused(tmp_path):
    done = fit(f"output.dir={tmp_path / 'run'}", "data.name=ogbl-citation2", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "task.name='node' does not fit data.name='ogbl-citation2': it can be trained for link only" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr and not (tmp_path / "run").exists()


def test_the_memory_plan_counts_a_link_batchs_endpoints_and_its_evaluation_exact_or_sampled():
    from train.graph.datasets.kinds import dataset_kind
    from train.plan.terms import batch_seeds, evaluation_sampled, forward_bytes, gpu_working_bytes, sampled_hops

    size = dataset_kind("Cora").plan_size(load_config("cora-gcn").data)
    node = load_config("cora-gcn")
    link = load_config("cora-gcn", ["task.name=link", "task.neg_sampling=triplet", "task.neg_ratio=3"])
    sampled = load_config("cora-gcn", ["task.name=link", "eval.mode=sampled"])
    assert batch_seeds(node) == 140 and batch_seeds(link) == 140 * (2 + 3)  # 2 endpoints and 3 negative targets
    assert batch_seeds(sampled, evaluation=True) == 2 * sampled.sampler.eval_batch_size  # 2 endpoints per pair
    assert evaluation_sampled(sampled, size) and not evaluation_sampled(link, size)
    assert not evaluation_sampled(node, size)
    def training_step(config):  # the training batch's term of the GPU's working set
        hops = sampled_hops(batch_seeds(config), config.sampler.num_neighbors, size)
        return forward_bytes(config, size, hops, backward=True)

    assert training_step(link) > training_step(node)  # the link batch's endpoints and negatives
    assert gpu_working_bytes(link, size) >= gpu_working_bytes(node, size)  # the larger of training and evaluation


def test_an_epoch_record_keeps_a_tasks_further_figures_through_its_row():
    """metrics.jsonl and the checkpoint's history hold a link run's figures beside the accuracies; a resumed run's
    sinks get them back (EpochRecord.from_row)."""
    from train.loop.records import EpochRecord, split_figures

    figures = {"val_acc": 0.7, "test_acc": 0.6, "val_auc": 0.9, "test_hits@10": 0.5}
    record = EpochRecord(epoch=3, loss=0.5, train_acc=0.8, epoch_seconds=1.0, seeds_per_second=None, world_size=2,
                         **split_figures(figures))
    row = record.row()
    assert row["val_auc"] == 0.9 and row["test_hits@10"] == 0.5 and "more" not in row
    assert EpochRecord.from_row(json.loads(json.dumps(row))) == record
    node = EpochRecord(3, 0.5, 0.8, 0.7, 0.6, 1.0, None, 2)
    assert "more" not in node.row() and "val_rocauc" not in node.row()  # a node run's rows as they always were
