"""sampler.prefetch (train/loop/prefetch.py): batches come out in the serial order, the thread ends with the loop
however it ends, and training with prefetch gives bit for bit the weights of training without."""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest
import torch

from tests.harness.localjob import ROOT
from train.cluster.distenv import free_port
from train.loop.prefetch import Prefetcher

RESULT = "prefetch-result "


class _Pipeline:
    """A batch pipeline that records on which thread each batch was made and whether it was closed."""

    def __init__(self, count: int, fail_at: int | None = None):
        self.count, self.fail_at = count, fail_at
        self.threads: list[int] = []
        self.closed = False

    def __iter__(self):
        try:
            for index in range(self.count):
                if index == self.fail_at:
                    raise RuntimeError(f"pipeline failed at batch {index}")
                self.threads.append(threading.get_ident())
                yield torch.full((2,), index)
        finally:
            self.closed = True


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_batches_come_out_in_order_and_the_first_on_the_calling_thread(depth):
    pipeline = _Pipeline(7)
    with Prefetcher(iter(pipeline), depth, torch.device("cpu")) as batches:
        got = [int(batch[0]) for batch in batches]
        assert next(batches, None) is None  # stays exhausted
    assert got == list(range(7)) and pipeline.closed
    assert pipeline.threads[0] == threading.get_ident()  # the serial order's first draw (module docstring)
    others = set(pipeline.threads[1:])
    assert others == ({threading.get_ident()} if depth == 0 else others - {threading.get_ident()})


def test_leaving_early_stops_the_thread_and_closes_the_pipeline():
    pipeline = _Pipeline(1000)
    before = threading.active_count()
    with Prefetcher(iter(pipeline), 2, torch.device("cpu")) as batches:
        assert int(next(batches)[0]) == 0 and int(next(batches)[0]) == 1
    assert pipeline.closed and threading.active_count() == before
    assert len(pipeline.threads) <= 2 + 2 + 1  # taken, queued, and the one in hand: no more


def test_an_error_in_the_pipeline_reaches_the_loop_after_the_batches_before_it():
    pipeline = _Pipeline(10, fail_at=4)
    got = []
    with pytest.raises(RuntimeError, match="pipeline failed at batch 4"):
        with Prefetcher(iter(pipeline), 2, torch.device("cpu")) as batches:
            got.extend(int(batch[0]) for batch in batches)
    assert got == [0, 1, 2, 3] and pipeline.closed


def test_an_empty_pipeline_gives_no_batch():
    pipeline = _Pipeline(0)
    with Prefetcher(iter(pipeline), 1, torch.device("cpu")) as batches:
        assert list(batches) == [] and next(batches, None) is None
    assert pipeline.closed


# ---- the weights of a real training run, with and without prefetch -------------------------------------------

def _worker(on_gpu: bool) -> None:
    """One rank (world size 1) trains the tiny config for each setting; prints a digest of its weights."""
    import hashlib
    import tempfile
    from pathlib import Path

    from train.cluster.distenv import resolve
    from train.cluster.procgroup import process_group
    from train.config import load_config
    from train.graph.sharing.shared_graph import shared_graphs
    from train.loop.fit import Trainer
    from train.loop.numerics import set_gpu_numerics
    from train.loop.run import obtain_graph

    if on_gpu:  # bit for bit on a GPU needs trainer.deterministic=true's switches, set as `fit` sets them
        set_gpu_numerics(True)
    settings = {"serial": ["sampler.prefetch=0"], "prefetch 1": ["sampler.prefetch=1"],
                "prefetch 3": ["sampler.prefetch=3"], "mlp prefetch 2": ["model.name=mlp", "sampler.prefetch=2"],
                "mlp serial": ["model.name=mlp", "sampler.prefetch=0"]}
    if on_gpu:  # both ways of sampling for a GPU: on the GPU (a side stream) and on the host (pinned copies)
        settings = {f"{where} {name}": [f"sampler.device={where}", *overrides]
                    for where in ("cuda", "cpu") for name, overrides in settings.items()
                    if name in ("serial", "prefetch 3")}  # gpu-check's time is short
    rows = {}
    env = resolve(os.environ)
    base = ["trainer.epochs=2", "trainer.deterministic=true", f"dist.backend={'nccl' if on_gpu else 'gloo'}",
            "output.progress=lines", "model.dropout=0.5", "data.share=process"]
    with process_group(env, load_config("tiny", base).dist) as (_backend, device), shared_graphs():
        data = obtain_graph(load_config("tiny", base), env)
        for name, overrides in settings.items():
            config = load_config("tiny", [*base, *overrides])
            with tempfile.TemporaryDirectory() as out:
                trainer = Trainer(config, env, device, data, Path(out))
                result = trainer.fit()
                digest = hashlib.sha256()
                for key, tensor in sorted(trainer.model.state_dict().items()):
                    digest.update(key.encode() + tensor.cpu().numpy().tobytes())
                rows[name] = {"weights": digest.hexdigest(), "depth": trainer.prefetch_depth(),
                              "steps": [r["epoch"] for r in trainer.state.history], "stopped": result.stopped,
                              "val_acc": trainer.state.history[-1]["val_acc"],
                              "threads": threading.active_count()}
    print(RESULT + json.dumps(rows), flush=True)


def _train(on_gpu: bool = False) -> dict:
    import subprocess

    from train.loop.numerics import numerics_env

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WORLD_SIZE": "1", "RANK": "0",
           "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    if on_gpu:  # what `fit` exports for trainer.deterministic=true before CUDA starts
        env.update(numerics_env(True, env))
    proc = subprocess.run([sys.executable, "-m", "tests.test_prefetch", "worker", *(["cuda"] if on_gpu else [])],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith(RESULT))
    return json.loads(line[len(RESULT):])


@pytest.fixture(scope="module")
def trained():
    return _train()


def test_training_with_prefetch_gives_the_serial_weights_bit_for_bit(trained):
    assert trained["serial"]["depth"] == 0 and trained["prefetch 3"]["depth"] == 3
    assert trained["serial"]["weights"] == trained["prefetch 1"]["weights"] == trained["prefetch 3"]["weights"]
    assert trained["serial"]["val_acc"] == trained["prefetch 3"]["val_acc"]
    assert trained["mlp serial"]["weights"] == trained["mlp prefetch 2"]["weights"]
    assert trained["serial"]["weights"] != trained["mlp serial"]["weights"]  # the digest tells models apart
    # every epoch's prefetch thread ended with its epoch
    assert len({row["threads"] for row in trained.values()}) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (a side stream, pinned copies)")
def test_training_on_a_gpu_with_prefetch_gives_the_serial_weights_bit_for_bit():
    from train.graph.sampling.samplers import have_native_sampler

    trained = _train(on_gpu=True)
    for where in ("cuda", "cpu"):
        weights = {trained[f"{where} {name}"]["weights"] for name in ("serial", "prefetch 3")}
        assert len(weights) == 1, (where, trained)
        # PyG's native sampler (where pyg-lib is) samples on the CPU serially: it draws from the global generator
        expected = 0 if where == "cpu" and have_native_sampler() else 3
        assert trained[f"{where} prefetch 3"]["depth"] == expected


def test_prefetch_is_off_where_the_sampler_draws_from_the_steps_generator(monkeypatch):
    from torch_geometric.data import Data

    from train.graph.sampling.samplers import TorchNeighborSampler, _SeededNeighborSampler, prefetch_safe

    data = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    assert prefetch_safe(TorchNeighborSampler(data, [2]), num_workers=0)
    native = object.__new__(_SeededNeighborSampler)  # PyG's native sampler needs pyg-lib to run, not to be told
    assert not prefetch_safe(native, num_workers=0)
    assert prefetch_safe(native, num_workers=2)  # sampled in the workers' processes


def test_a_negative_prefetch_is_refused_naming_it():
    from train.config import load_config
    from train.errors import UserError

    assert load_config("tiny", []).sampler.prefetch == 1  # on by default: the same weights, sooner
    with pytest.raises(UserError, match=r"sampler.prefetch=-1 must be >= 0"):
        load_config("tiny", ["sampler.prefetch=-1"])


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker(on_gpu=sys.argv[2:] == ["cuda"])
