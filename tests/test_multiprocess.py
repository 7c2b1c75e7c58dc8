"""Integration: 1, 2 and 4 real processes with srun's variables rendezvous, train and agree."""

from __future__ import annotations

import json

import pytest

from tests.harness.localjob import final_summary, run_local_job
from train.heap import MMAP_THRESHOLD

TINY = ["fit", "--config", "tiny"]


def summary_of(out_dir):
    return json.loads((out_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """(job, its output folder): TINY on 2 ranks of one node, run once for the tests that only read it."""
    out = tmp_path_factory.mktemp("tiny-two-ranks")
    return run_local_job([*TINY, f"output.dir={out}"], 2), out


@pytest.mark.parametrize("world_size,nodes", [(2, 1), (4, 2)])
def test_ranks_rendezvous_train_and_agree(tmp_path, world_size, nodes, request):
    if (world_size, nodes) == (2, 1):
        result, tmp_path = request.getfixturevalue("two_ranks")
    else:
        result = run_local_job([*TINY, f"output.dir={tmp_path}"], world_size, nodes)
    assert result.returncodes == [0] * world_size, "\n".join(result.outputs)
    summary = summary_of(tmp_path)
    assert summary["world_size"] == world_size and summary["device"] == "cpu"
    assert len(final_summary(tmp_path)["weights_sha256"]) == 64  # every rank ended with the same weights
    # the log is for users: one line on rank 0 says where the weights are; no rank prints a line of JSON
    assert f"final weights {tmp_path / 'model.pt'} (sha256 {summary['weights_sha256'][:16]}, the same on all " \
           f"{world_size} ranks)" in result.outputs[0]
    assert not any(" final {" in out or "final weights" in out for out in result.outputs[1:]), result.outputs[1]
    # each epoch's checkpoint in one line, its epoch numbered as the progress lines number it
    assert f"\nsaved checkpoint after epoch 0: {tmp_path / 'checkpoints' / 'ckpt-e000001-s00000000.pt'}\n" in \
           result.outputs[0]
    assert "\nepoch   1 mean loss " in result.outputs[0] and "(epoch 1 step 0, end of epoch 0)" not in result.outputs[0]
    assert summary["heap"] == {"mmap_threshold": MMAP_THRESHOLD, "huge_pages": True}  # python -m train tuned it
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1]
    assert list(rows[0]) == ["epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_seconds", "seeds_per_second",
                             "world_size", "phase_seconds", "wall_seconds"]  # as metrics.jsonl has always had them
    assert rows[1]["world_size"] == world_size and rows[1]["val_acc"] is not None
    assert (tmp_path / "config.yaml").is_file()


def test_same_config_same_result(tmp_path, two_ranks):
    """A second run of the same config (another process group, another output folder) ends with the same weights."""
    (first, first_dir), second_dir = two_ranks, tmp_path / "b"
    second = run_local_job([*TINY, f"output.dir={second_dir}"], 2)
    assert first.returncodes == second.returncodes == [0, 0]
    assert final_summary(first_dir)["weights_sha256"] == final_summary(second_dir)["weights_sha256"]
    assert summary_of(first_dir)["final_test_acc"] == summary_of(second_dir)["final_test_acc"]


def test_sharded_evaluation_equals_single_process(tmp_path):
    """With no training step, evaluation alone: 1 process and 3 processes must count the same."""
    # lr 0 is refused: a step too small to change any prediction
    args = [*TINY, "trainer.epochs=1", "trainer.max_steps_per_epoch=1", "optim.lr=1e-30"]
    single = run_local_job([*args, f"output.dir={tmp_path / 'one'}"], 1)
    three = run_local_job([*args, f"output.dir={tmp_path / 'three'}"], 3)
    assert single.returncodes == [0] and three.returncodes == [0, 0, 0], three.outputs
    one, many = summary_of(tmp_path / "one"), summary_of(tmp_path / "three")
    assert one["final_test_acc"] == many["final_test_acc"]
    assert one["final_val_acc"] == many["final_val_acc"]
    # a negligible step: the same weights
    assert final_summary(tmp_path / "one")["weights_sha256"] == final_summary(tmp_path / "three")["weights_sha256"]


@pytest.mark.long  # two 2-rank runs of the default config (about 37 s of CPU on CI's 2 cores): the cluster's session
def test_graph_model_beats_feature_only_model(tmp_path):
    """The default synthetic graph needs the neighbours: GraphSAGE >= 0.85, the MLP >= 0.15 lower."""
    sage = run_local_job(["fit", f"output.dir={tmp_path / 'sage'}"], 2, timeout=400)
    mlp = run_local_job(["fit", "model.name=mlp", f"output.dir={tmp_path / 'mlp'}"], 2, timeout=400)
    assert sage.returncodes == mlp.returncodes == [0, 0]
    sage_acc = summary_of(tmp_path / "sage")["final_test_acc"]
    mlp_acc = summary_of(tmp_path / "mlp")["final_test_acc"]
    assert sage_acc >= 0.85
    assert sage_acc - mlp_acc >= 0.15, (sage_acc, mlp_acc)


def test_bad_rendezvous_is_a_message_not_a_hang(tmp_path):
    """Rank 1 of 2 alone: nobody listens at the master port; it ends within the init timeout."""
    import os
    import subprocess
    import sys

    from tests.harness.localjob import ROOT, free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(PYTHONPATH=str(ROOT), WORLD_SIZE="2", RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny", "dist.init_timeout_seconds=3",
                           f"output.dir={tmp_path}"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"127.0.0.1:{env['MASTER_PORT']}" in done.stderr and "Traceback" not in done.stderr


def test_a_node_that_loads_late_keeps_the_others_waiting_not_failing(tmp_path):
    """Node 1 loads its graph well past dist.collective_timeout_seconds (testing aid data.load_delay_seconds):
    the others wait under data.load_timeout_seconds on a gloo barrier, and the job trains to the end."""
    import time

    timeout, delay = 3, 10
    started = time.monotonic()
    result = run_local_job([*TINY, "trainer.epochs=1", f"dist.collective_timeout_seconds={timeout}",
                            f"data.load_delay_seconds={delay}", "data.load_delay_node=1", f"output.dir={tmp_path}"],
                           world_size=4, nodes=2)
    assert result.returncodes == [0] * 4, "\n".join(result.outputs)[-6000:]
    assert time.monotonic() - started > delay  # the delay happened, and outlasted the collective timeout
    final_summary(tmp_path)  # checks that every rank ended with the same weights
