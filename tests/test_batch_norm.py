"""A model with batch norm (model.kwargs.norm=batch_norm) trains: batch statistics refuse a batch of one row in
training mode, so the loop never gives it one. The dummy pass that settles DDP's buckets runs the norms in eval
mode (train/loop/run.py), and a rank whose share of an epoch would end on a batch of one node leaves that node out
of the epoch, saying so in the log (train/loop/fit.py, train/graph/seeds.py)."""

from __future__ import annotations

import pytest
import torch

from tests.harness.localjob import final_summary, run_local_job
from train.cli.preflight import check_model_input
from train.config import ModelConfig, load_config
from train.errors import UserError
from train.graph.seeds import lone_seed_ranks, rank_shard, shard_sizes, without_lone_seed
from train.loop.run import settle_gradient_buckets
from train.models import ModelStep, batch_norms, build_model
from train.models.step import one_row_norm


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("batch", [2, 3, 7, 10])  # 1: refused (below)
def test_the_ranks_with_a_lone_last_seed_are_those_whose_batches_end_on_one(world, batch):
    for total in range(0, 40):
        order = torch.arange(total)
        lone = []
        for rank in range(world):
            shard = rank_shard(order, rank, world)
            batches = shard.split(batch)
            if batches and batches[-1].numel() == 1:
                lone.append(rank)
                assert torch.equal(without_lone_seed(shard, batch), shard[:-1])
            else:
                assert torch.equal(without_lone_seed(shard, batch), shard)
            assert all(b.numel() != 1 for b in without_lone_seed(shard, batch).split(batch))
        assert lone_seed_ranks(total, world, batch) == lone, (total, world, batch)
        assert sum(shard_sizes(total, world)) == total


@pytest.mark.parametrize(("name", "kwargs", "refuses"), [
    ("gin", {"norm": "batch_norm"}, True),  # the norms between layers, and each layer's MLP
    ("sage", {"norm": "batch_norm"}, True),
    ("mlp", {"norm": "batch_norm"}, True),
    ("gin", {}, False),
    ("mlp", {}, False),  # the built-in MLP has no norm (train/builtin_models.py)
    ("sage", {"norm": "layer_norm"}, False),
    ("gin", {"norm": "batch_norm", "norm_kwargs": {"allow_single_element": True}}, False),  # PyG's way for one row
])
def test_a_norm_that_cannot_train_on_one_row_is_found(name, kwargs, refuses):
    model = build_model(ModelConfig(name=name, hidden=8, num_layers=2, kwargs=kwargs), 4, 3, seed=0)
    found = one_row_norm(model)
    assert bool(found) is refuses
    if refuses:
        norm = dict(model.named_modules())[found]
        assert isinstance(norm, torch.nn.BatchNorm1d)
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
            norm.train()(torch.ones(1, norm.num_features))  # what the loop keeps from it
    assert ModelStep(model).one_row_norm == found


def test_batches_of_one_node_for_a_batch_norm_model_are_refused_before_the_rendezvous():
    config = load_config("tiny", ["model.name=gin", "model.kwargs.norm=batch_norm", "sampler.batch_size=1"])
    with pytest.raises(UserError, match=r"^sampler.batch_size=1 makes every batch one node, and the model's batch "
                                        r"norm \(convs.0.nn.norms.0.module\) cannot train on one row"):
        check_model_input(config)
    check_model_input(load_config("tiny", ["model.name=gin", "sampler.batch_size=1"]))  # no batch norm: fine
    check_model_input(load_config("tiny", ["model.name=gin", "model.kwargs.norm=batch_norm", "sampler.batch_size=2"]))


def test_settling_ddp_s_buckets_runs_a_batch_norm_model_on_one_row_and_leaves_its_statistics():
    """On the step DDP would wrap, in this process: no process group here, as a DDP freed in the pytest process can
    leave gloo's destructor waiting forever (seen once in a full run); the 2-rank runs below settle a real DDP."""
    model = build_model(ModelConfig(name="gin", hidden=8, num_layers=2, kwargs={"norm": "batch_norm"}), 4, 3, seed=0)
    step = ModelStep(model)
    before = {name: buffer.clone() for name, buffer in model.named_buffers()}
    settle_gradient_buckets(step, torch.optim.Adam(model.parameters()), 4, torch.device("cpu"))
    assert before and all(torch.equal(buffer, before[name]) for name, buffer in model.named_buffers())
    assert step.training and all(norm.training for _name, norm in batch_norms(step))  # back in training mode
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("model", ["gin", "mlp"])
def test_a_batch_norm_model_trains_where_a_rank_s_last_batch_is_one_node(tmp_path, model):
    """2,002 nodes: 1,201 training nodes, 601 and 600 on the two ranks; batches of 100 leave rank 0 one node over."""
    args = ["fit", "--config", "tiny", f"model.name={model}", "model.kwargs.norm=batch_norm", "data.num_nodes=2002",
            "sampler.batch_size=100", "trainer.epochs=2", f"output.dir={tmp_path}"]
    result = run_local_job(args, 2)
    assert result.returncodes == [0, 0], "\n".join(result.outputs)
    assert "Traceback" not in "\n".join(result.outputs)
    assert len(final_summary(tmp_path)["weights_sha256"]) == 64  # both ranks ended with the same weights
    note = ("cannot train on a batch of one node, and 1201 training nodes over 2 rank(s) in batches of 100 "
            "(sampler.batch_size) end each epoch on one on rank(s) 0: that node sits the epoch out")
    assert note in result.outputs[0]
