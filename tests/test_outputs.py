"""The loop's output hook: records to the sinks (metrics.jsonl, the progress display, any added one) and the
user's log lines they and the run print."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.harness.localjob import ROOT
from train.cluster.distenv import free_port
from train.config import load_config
from train.loop import outputs
from train.loop.checkpoint import saved_line
from train.loop.metrics_file import MetricsFile
from train.loop.progress import ProgressDisplay, epoch_line, step_line
from train.loop.records import EpochRecord, Sink, StepRecord
from train.loop.run import weights_line
from train.loop.tensorboard_events import TensorBoardEvents
from train.storage import writes
from train.storage.faults import StorageError

ROW_KEYS = ["epoch", "loss", "train_acc", "val_acc", "test_acc", "epoch_seconds", "seeds_per_second", "world_size",
            "phase_seconds", "wall_seconds"]  # metrics.jsonl's keys, in this order, since the phase times came


def record(epoch: int, loss: float = 0.5, val: float | None = 0.8) -> EpochRecord:
    return EpochRecord(epoch=epoch, loss=loss, train_acc=0.75, val_acc=val, test_acc=None if val is None else 0.79,
                       epoch_seconds=1.5, seeds_per_second=4000.0, world_size=2,
                       phase_seconds={"sample": 1.0, "other": 0.75}, wall_seconds=1.75)


# ---- a real run: what the sinks and the callbacks receive -------------------------------------------
@pytest.fixture(scope="module")
def one_rank_run(tmp_path_factory):
    """The tiny config on one rank for 2 epochs, with a recording third sink (tests/harness/workers/record_sink.py)."""
    out = tmp_path_factory.mktemp("run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", WORLD_SIZE="1", RANK="0", LOCAL_RANK="0",
               LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-m", "tests.harness.workers.record_sink", str(out), "trainer.epochs=2",
                           "trainer.log_every=2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("records "))
    return out, json.loads(line[len("records "):]), proc.stdout


def test_an_added_sink_gets_every_record_in_order(one_rank_run):
    out, got, _ = one_rank_run
    calls = got["sink"]
    assert calls[0] == {"call": "init", "out_dir": str(out)}
    assert calls[1] == {"call": "start", "epochs": []}  # a fresh run: no epoch before
    assert calls[-1] == {"call": "close"}
    steps = [c for c in calls if c["call"] == "step"]
    per_epoch = steps[0]["steps_in_epoch"]
    assert per_epoch > 1
    expected = [("step", e, s) for e in (0, 1) for s in range(1, per_epoch + 1)]
    expected[per_epoch:per_epoch] = [("epoch", 0, None)]
    expected.append(("epoch", 1, None))
    assert [(c["call"], c["epoch"], c.get("step")) for c in calls[2:-1]] == expected


def test_the_step_loss_reaches_the_callbacks_and_the_epoch_loss_is_its_mean(one_rank_run):
    _, got, _ = one_rank_run
    steps = [{k: v for k, v in c.items() if k != "call"} for c in got["sink"] if c["call"] == "step"]
    assert got["callback"] == steps  # the same records, the per-step loss included
    assert len({s["loss"] for s in steps}) == len(steps) and all(0 < s["loss"] < 10 for s in steps)
    for epoch in (c for c in got["sink"] if c["call"] == "epoch"):
        mine = [s for s in steps if s["epoch"] == epoch["epoch"]]
        seeds = sum(s["seeds"] for s in mine)  # one rank: the epoch's mean is over these steps' seeds
        assert epoch["loss"] == pytest.approx(sum(s["loss"] * s["seeds"] for s in mine) / seeds, rel=1e-12)


def test_metrics_jsonl_holds_the_epoch_records_line_by_line(one_rank_run):
    out, got, _ = one_rank_run
    text = (out / "metrics.jsonl").read_text()
    assert text.endswith("\n")
    rows = [json.loads(line) for line in text.splitlines()]
    assert rows == [{k: v for k, v in c.items() if k != "call"} for c in got["sink"] if c["call"] == "epoch"]
    assert [list(r) for r in rows] == [ROW_KEYS, ROW_KEYS] and [r["epoch"] for r in rows] == [0, 1]


def test_the_progress_lines_say_which_loss_is_which(one_rank_run):
    _, got, stdout = one_rank_run
    steps = [c for c in got["sink"] if c["call"] == "step"]
    last = steps[-1]
    assert f"epoch 1 step {last['step']}/{last['steps_in_epoch']} batch loss {last['loss']:.4f}\n" in stdout
    assert "epoch 0 step 2/" in stdout and "epoch 0 step 1/" not in stdout  # trainer.log_every=2
    epochs = [c for c in got["sink"] if c["call"] == "epoch"]
    assert f"epoch   1 mean loss {epochs[1]['loss']:.4f} train_acc {epochs[1]['train_acc']:.4f} val_acc " in stdout
    assert " loss " not in stdout.replace(" batch loss ", "").replace(" mean loss ", "")  # no unnamed loss


# ---- the parts on their own ---------------------------------------------------------------------------
def test_a_sink_is_one_class_in_the_list_and_only_rank_0_has_sinks(monkeypatch, tmp_path):
    seen = []

    class Third(Sink):
        def __init__(self, config, env, out_dir):
            pass

        def epoch(self, rec):
            seen.append(rec)

    monkeypatch.setattr(outputs, "SINKS", [*outputs.SINKS, Third])
    config = load_config("tiny", ["output.progress=lines", "output.tensorboard=false"])
    main = outputs.Outputs(config, SimpleNamespace(is_main=True), tmp_path)
    assert [type(s) for s in main.sinks] == [MetricsFile, ProgressDisplay, TensorBoardEvents, Third]
    main.start([])
    main.epoch(record(0))
    assert seen == [record(0)] and (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
    assert outputs.Outputs(config, SimpleNamespace(is_main=False), tmp_path / "other").sinks == []


def test_a_record_is_the_metrics_row_it_always_was():
    row = record(3).row()
    assert list(row) == ROW_KEYS
    assert EpochRecord.from_row(row) == record(3)
    old = {k: v for k, v in row.items() if k not in ("phase_seconds", "wall_seconds")}  # a run before phase times
    assert EpochRecord.from_row(old).phase_seconds is None


def test_metrics_file_starts_with_the_run_so_far_and_appends_whole_lines(tmp_path):
    sink = MetricsFile(None, None, tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 0}\n{"epoch": 1}\n{"epoch": 2, "lo')  # an earlier attempt
    sink.start([record(0, loss=0.9)])  # resumed after epoch 0: exactly the restored epochs
    sink.epoch(record(1, loss=0.7, val=None))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines(keepends=True)
    assert [json.loads(line) for line in lines] == [record(0, loss=0.9).row(), record(1, loss=0.7, val=None).row()]
    sink.start([])
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_a_short_write_leaves_no_partial_line(tmp_path, monkeypatch):
    sink = MetricsFile(None, None, tmp_path)
    sink.start([record(0)])
    before = (tmp_path / "metrics.jsonl").read_bytes()
    real_write = os.write
    monkeypatch.setattr(writes.os, "write", lambda fd, data: real_write(fd, data[: len(data) // 2]))
    with pytest.raises(StorageError, match="could not write metrics.jsonl in .*: the file system is full"):
        sink.epoch(record(1))
    assert (tmp_path / "metrics.jsonl").read_bytes() == before

    def full(fd, data):
        real_write(fd, data[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writes.os, "write", full)
    with pytest.raises(StorageError, match=r"the file system is full \(ENOSPC\)"):
        sink.epoch(record(1))
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_progress_lines_every_log_every_steps_and_one_per_epoch(capsys):
    config = load_config("tiny", ["output.progress=lines", "trainer.log_every=3"])
    display = ProgressDisplay(config, None, None)
    for step in range(1, 8):
        display.step(StepRecord(epoch=2, step=step, steps_in_epoch=7, loss=1.0 / step, seeds=64))
    display.epoch(record(2, loss=0.4321))
    display.close()
    assert capsys.readouterr().out.splitlines() == [
        "epoch 2 step 3/7 batch loss 0.3333", "epoch 2 step 6/7 batch loss 0.1667",
        "epoch 2 step 7/7 batch loss 0.1429",
        "epoch   2 mean loss 0.4321 train_acc 0.7500 val_acc 0.8000 test_acc 0.7900 (1.5 s, 4000 seeds/s)"]


def test_line_wording():
    assert step_line(StepRecord(0, 6, 6, 1.33244, 32)) == "epoch 0 step 6/6 batch loss 1.3324"
    assert epoch_line(record(0, val=None)) == "epoch   0 mean loss 0.5000 train_acc 0.7500 (1.5 s, 4000 seeds/s)"


@pytest.mark.parametrize("epoch, steps, reason, line", [
    (1, [0], "end of epoch 0", "saved checkpoint after epoch 0: runs/7/checkpoints/c.pt"),
    (3, [0], "end of training", "saved checkpoint after epoch 2: runs/7/checkpoints/c.pt"),
    (1, [3], "stop signal SIGUSR1", "saved checkpoint in epoch 1 after step 3 (stop signal SIGUSR1): "
                                    "runs/7/checkpoints/c.pt"),
    (0, [4, 5], "time interval, trainer.checkpoint_every_minutes", "saved checkpoint in epoch 0 after step 4-5 "
     "(time interval, trainer.checkpoint_every_minutes): runs/7/checkpoints/c.pt"),
])
def test_checkpoint_line_numbers_epochs_as_the_progress_display(epoch, steps, reason, line):
    assert saved_line(Path("runs/7/checkpoints/c.pt"), epoch, steps, reason) == line


def test_weights_line():
    same, other = "a" * 64, "b" * 64
    assert weights_line(Path("runs/7/model.pt"), [same, same, same]) == \
        f"final weights runs/7/model.pt (sha256 {'a' * 16}, the same on all 3 ranks)"
    differ = weights_line(Path("runs/7/model.pt"), [same, other, same])
    assert differ.startswith("warning: the ranks ended with different weights: ") and f"rank 1 {'b' * 16}" in differ
    assert "rank 2" not in differ


def test_a_multi_label_record_adds_its_rocauc_to_the_row_and_reads_back():
    scored = dataclasses.replace(record(3), val_rocauc=0.71, test_rocauc=0.69)
    row = scored.row()
    assert list(row) == [*ROW_KEYS, "val_rocauc", "test_rocauc"] and EpochRecord.from_row(row) == scored
