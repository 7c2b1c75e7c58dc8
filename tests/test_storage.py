"""Storage faults lose nothing and say so: every file a run writes, on a real small file system (a 64 KiB tmpfs,
mounted for the test), plus an injected quota (EDQUOT) and a read-only remount (EROFS).

The pure parts (train/storage/faults.py) are checked in words; the writers (train/storage/writes.py and their
callers) in this process; the agreement of the ranks, the one message and the exit status with real ranks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.harness.checkpoints import payload
from tests.harness.localjob import ROOT, JobResult, run_local_job
from train.__main__ import main as train_main
from train.config import dump_config, load_config
from train.errors import EXIT_STORAGE
from train.graph.sharing import shared_graph
from train.loop import checkpoint as ck
from train.loop.metrics_file import MetricsFile
from train.loop.records import EpochRecord
from train.loop.report import write_report
from train.loop.run import raise_first, write_results
from train.loop.rundir import job_identity, write_identity
from train.storage import writes
from train.storage.faults import (
    MEANINGS,
    REMEDIES,
    StorageError,
    StorageFault,
    fault_of,
    shared_graph_advice,
    storage_message,
)

SIZE = 64 << 10  # the small file system's size


# ---- the pure parts: an OSError in words, and the one message ------------------------------------
@pytest.mark.parametrize("code, words", [
    (errno.ENOSPC, "the file system is full"), (errno.EDQUOT, "over your quota"), (errno.EROFS, "read-only"),
    (errno.EIO, "input/output error"), (errno.ESTALE, "stale file handle"),
])
def test_each_error_of_a_file_system_is_said_in_words(code, words):
    fault = fault_of(OSError(code, os.strerror(code)), "runs/7/metrics.jsonl", (1024, SIZE))
    assert fault == StorageFault("runs/7/metrics.jsonl", code, 1024, SIZE)
    said = str(StorageError(fault))
    assert said.startswith("could not write metrics.jsonl in runs/7: ") and words in said
    assert f"({errno.errorcode[code]}); 1 KiB free of 64 KiB there" in said


def test_every_error_of_a_file_system_has_its_remedy():
    assert set(MEANINGS) == set(REMEDIES) == {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.ESTALE}


@pytest.mark.parametrize("code", [errno.EACCES, errno.ENOENT, errno.EISDIR])
def test_an_error_of_one_file_or_the_program_is_no_storage_fault(code):
    assert fault_of(OSError(code, os.strerror(code)), "runs/7/x", None) is None


def test_the_message_names_the_checkpoint_to_continue_from_and_what_to_do():
    fault = StorageFault("runs/7/checkpoints/ckpt-e000003-s00000000.pt", errno.EDQUOT, None, None)
    said = storage_message(fault, "runs/7", "runs/7/checkpoints/ckpt-e000002-s00000000.pt")
    assert said.startswith("storage fault: could not write ckpt-e000003-s00000000.pt in runs/7/checkpoints: you are "
                           "over your quota on this file system (EDQUOT); its free space could not be read. ")
    assert "The last good checkpoint is runs/7/checkpoints/ckpt-e000002-s00000000.pt." in said
    assert "What to do: free space within your quota" in said
    assert ("then resubmit with output.dir=runs/7: trainer.resume=auto (the default) continues from that "
            "checkpoint") in said
    assert f"Exit status {EXIT_STORAGE} (EXIT_STORAGE): not requeued" in said
    first = storage_message(fault, "runs/7", None)
    assert "No checkpoint was saved yet, so a resubmitted run starts from the beginning" in first


def test_a_full_shared_graph_directory_says_its_size_the_need_and_the_way_around():
    fault = StorageFault("/dev/shm/pyg-train-u0/seg/x.bin", errno.ENOSPC, 0, SIZE,
                         advice=shared_graph_advice(SIZE, 3 << 20))
    said = storage_message(fault, "runs/7", None)
    assert ("What to do: the shared graph needs 3 MiB on each node and this file system holds 64 KiB in all: use "
            "data.share=process") in said
    assert "point output.dir" not in said  # output.dir is not where the graph goes


def test_the_docs_show_the_message_as_a_run_says_it():
    fault = StorageFault("runs/7/checkpoints/ckpt-e000002-s00000000.pt", errno.ENOSPC, 0, SIZE)
    said = storage_message(fault, "runs/7", "runs/7/checkpoints/ckpt-e000001-s00000000.pt")
    assert f"\nerror: {said}\n" in (ROOT / "docs" / "preemption.md").read_text()


def test_the_ranks_raise_the_first_fault_any_of_them_met():
    raise_first(None, None)  # none: nothing to raise
    fault = StorageFault("/dev/shm/x.bin", errno.ENOSPC)
    with pytest.raises(StorageError) as raised:
        raise_first(None, fault, StorageFault("/dev/shm/y.bin", errno.EIO))
    assert raised.value.fault == fault


# ---- every file of a run, on a real full file system ---------------------------------------------
def mount_tmpfs(where: Path, request, options: str = f"size={SIZE}") -> Path:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the suite runs as root: make test)")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    request.addfinalizer(lambda: subprocess.run(["umount", "-l", str(where)], check=True))
    return where


@pytest.fixture
def small_fs(tmp_path, request) -> Path:
    """A real 64 KiB tmpfs, unmounted when the test ends."""
    return mount_tmpfs(tmp_path / "fs", request)


def fill(fs: Path) -> None:
    """Take every byte left on `fs`."""
    with open(fs / "filler", "wb", buffering=0) as fh, pytest.raises(OSError) as full:
        while True:
            fh.write(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC


def record(epoch: int) -> EpochRecord:
    return EpochRecord(epoch=epoch, loss=0.5, train_acc=0.75, val_acc=0.8, test_acc=0.79, epoch_seconds=1.5,
                       seeds_per_second=4000.0, world_size=2, phase_seconds={"sample": 1.0}, wall_seconds=1.0)


def start_metrics(run: Path) -> None:
    """metrics.jsonl with as many lines as leave less than one more in its last page (a file on tmpfs takes whole
    pages: a line that fits in the rest of one would need no room), as a run after some epochs."""
    line = len(json.dumps(record(0).row())) + 1
    epochs = next(n for n in range(1, 100) if 4096 - line < (n * line) % 4096)
    MetricsFile(None, None, run).start([record(0)] * epochs)


def write_checkpoint(run: Path) -> None:
    ck.save_checkpoint(run / ck.CHECKPOINT_DIR, payload(2), keep=3)


def write_metrics_line(run: Path) -> None:
    MetricsFile(None, None, run).epoch(record(1))


def write_summary(run: Path) -> None:
    writes.atomic_write_text(run / "summary.json", json.dumps({"epochs": 2}))  # as run.write_results does


def write_model(run: Path) -> None:
    write_results(run, torch.nn.Linear(64, 64), {}, ["0" * 64])  # model.pt first, then summary.json


def write_curves(run: Path) -> None:
    write_report(run)


def write_config(run: Path) -> None:
    dump_config(load_config("tiny"), run / "config.yaml")


def write_job_identity(run: Path) -> None:
    write_identity(run, job_identity("7", "alpha", "s1"))


def write_segment(run: Path) -> None:
    if not (run / "segment").is_dir():
        (run / "segment").mkdir()
    shared_graph.write_tensors(run / "segment", {"x": torch.zeros(SIZE // 4)}, {})


WRITERS = {  # the writer of each file of a run, and the file it fails on
    "checkpoint": (write_checkpoint, "ckpt-e000002-s00000000.pt"),
    "metrics.jsonl": (write_metrics_line, "metrics.jsonl"),
    "summary.json": (write_summary, "summary.json"), "model.pt": (write_model, "model.pt"),
    "curves.png": (write_curves, "curves.png"), "config.yaml": (write_config, "config.yaml"),
    "job.json": (write_job_identity, "job.json"), "shared graph": (write_segment, "x.bin"),
}


def files_of(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and
            p.name != "filler"}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_each_file_on_a_full_file_system_is_a_storage_error_that_keeps_what_was_there(small_fs, kind):
    write, name = WRITERS[kind]
    start_metrics(small_fs)  # what a run holds before: its lines, a checkpoint
    ck.save_checkpoint(small_fs / ck.CHECKPOINT_DIR, payload(1), keep=3)
    fill(small_fs)
    before = files_of(small_fs)
    with pytest.raises(StorageError) as raised:
        write(small_fs)
    fault = raised.value.fault
    assert Path(fault.path).name == name and fault.errno == errno.ENOSPC
    assert fault.total_bytes == SIZE and fault.free_bytes is not None and fault.free_bytes < 4096
    assert str(raised.value).startswith(f"could not write {name} in {Path(fault.path).parent}: the file system "
                                        "is full (ENOSPC)")
    after = {path: data for path, data in files_of(small_fs).items() if not path.startswith("segment")}
    assert after == before  # nothing half-written, no temporary file left, the last checkpoint intact
    assert ck.find_latest_valid(small_fs / ck.CHECKPOINT_DIR, on_invalid=pytest.fail)[1]["epoch"] == 1


def test_a_quota_met_at_fsync_leaves_the_old_file_and_no_partial_line(tmp_path, monkeypatch):
    """A network file system may report the quota only when the data leaves the client: at fsync."""
    writes.atomic_write_text(tmp_path / "summary.json", "old")
    MetricsFile(None, None, tmp_path).start([record(0)])
    lines = (tmp_path / "metrics.jsonl").read_bytes()

    def over_quota(fd):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(writes.os, "fsync", over_quota)
    with pytest.raises(StorageError, match=r"could not write summary.json in .*: you are over your quota .*\(EDQUOT\)"):
        writes.atomic_write_text(tmp_path / "summary.json", "new")
    with pytest.raises(StorageError, match=r"could not write metrics.jsonl .*\(EDQUOT\)"):
        MetricsFile(None, None, tmp_path).epoch(record(1))
    assert (tmp_path / "summary.json").read_text() == "old" and (tmp_path / "metrics.jsonl").read_bytes() == lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "summary.json"]


def test_a_read_only_file_system_is_named_for_every_writer(small_fs):
    start_metrics(small_fs)  # for curves.png
    (small_fs / "segment").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    for write, name in WRITERS.values():
        with pytest.raises(StorageError, match=rf"could not write {re.escape(name)} in .*: the file system is "
                                               r"read-only \(EROFS\)"):
            write(small_fs)


@pytest.fixture
def one_rank():
    """A process group of this process alone (gloo), for the collective writers."""
    import torch.distributed as dist

    from train.cluster.distenv import resolve

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield resolve({}, pick_free_port=lambda: 1)
    dist.destroy_process_group()


def test_the_checkpointer_says_a_storage_fault_when_saving_and_when_setting_a_damaged_one_aside(small_fs, one_rank):
    class Part:
        def __init__(self, **state):
            self.state = state

        def state_dict(self) -> dict:
            return dict(self.state)

    folder = small_fs / ck.CHECKPOINT_DIR
    ck.save_checkpoint(folder, payload(1), keep=3)
    newest = ck.save_checkpoint(folder, payload(2), keep=3)
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated: resume=auto renames it *.corrupt
    fill(small_fs)
    checkpointer = ck.Checkpointer(small_fs, one_rank, Part(epoch=3, model={"w": torch.ones(4096)}), Part(step=0),
                                   config=load_config("tiny").to_dict(), fingerprint={}, keep=3, resume="auto")
    with pytest.raises(StorageError, match=r"could not write ckpt-e000003-s00000000.pt .*\(ENOSPC\)"):
        checkpointer.save("test")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    with pytest.raises(StorageError, match=rf"could not write checkpoints in {small_fs}: the file system is read-only"):
        checkpointer.resume()
    assert newest.exists()


def test_a_full_shared_graph_directory_names_the_graphs_need_and_data_share_process(small_fs, monkeypatch):
    monkeypatch.setattr(shared_graph, "choose_dir", lambda required, candidates: (candidates[0], ""))
    config = dataclasses.replace(load_config("tiny").data, share_dir=str(small_fs))
    env = SimpleNamespace(node_tmpdirs=(), job_id="7", master_port=29500, node_rank=0)
    with pytest.raises(StorageError) as raised:
        shared_graph._write_segment(config, env, shared_graph.private_graph)
    said = storage_message(raised.value.fault, "runs/7", None)
    assert re.search(r"could not write \w+\.bin in .*: the file system is full \(ENOSPC\)", said), said
    assert re.search(r"the shared graph needs [\d.]+ KiB on each node and this file system holds 64 KiB in all: use "
                     r"data.share=process", said), said
    leftovers = [p for p in small_fs.rglob("*") if p.is_file()]
    assert not leftovers, leftovers  # the segment and its lock are gone


def test_a_storage_error_outside_fit_is_one_line_and_its_status(small_fs, capsys):
    MetricsFile(None, None, small_fs).start([record(0), record(1)])
    fill(small_fs)
    assert train_main(["report", str(small_fs)]) == EXIT_STORAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: could not write curves.png in {small_fs}: the file system is full") and \
        "Traceback" not in err


# ---- real ranks: one message, every rank's status, and the run continues once there is room ------------
TINY = ["fit", "--config", "tiny", "trainer.epochs=4"]


def assert_one_storage_message(job: JobResult) -> str:
    """The fault ended every rank in order (rank 0 last, with EXIT_STORAGE), said once by rank 0, no traceback."""
    assert job.returncodes == [EXIT_STORAGE, 0], "\n".join(job.outputs)
    assert not any("Traceback" in out for out in job.outputs), "\n".join(job.outputs)
    (message,) = [line for line in job.outputs[0].splitlines() if "storage fault" in line]
    assert "storage fault" not in job.outputs[1]
    return message


def test_a_full_output_dir_ends_all_ranks_with_one_message_and_resume_continues(tmp_path, request):
    fs = mount_tmpfs(tmp_path / "fs", request)
    run = fs / "run"
    # output.tensorboard=false: the 64 KiB hold the config, metrics and the first checkpoint, and fail the second
    message = assert_one_storage_message(run_local_job([*TINY, "output.tensorboard=false", f"output.dir={run}"], 2,
                                                       job_id="28001"))
    found = re.search(r"error: storage fault: could not write (\S+) in (\S+): the file system is full \(ENOSPC\); "
                      r"\d+ B free of 64 KiB there\. The last good checkpoint is (\S+)\. What to do: free space there",
                      message)
    assert found, message
    assert f"resubmit with output.dir={run}: trainer.resume=auto (the default) continues from that checkpoint" \
        in message
    checkpoint = Path(found.group(3))
    assert ck.load_checkpoint(checkpoint)["epoch"] >= 1  # whole, and what resume=auto takes
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]  # whole lines only
    assert [r["epoch"] for r in rows] == list(range(len(rows)))

    subprocess.run(["mount", "-o", "remount,size=1m", str(fs)], check=True)  # room again: the same command
    again = run_local_job([*TINY, "output.tensorboard=false", f"output.dir={run}"], 2, job_id="28001")
    assert again.returncodes == [0, 0], "\n".join(again.outputs)
    assert f"resuming from {checkpoint} " in again.outputs[0]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3] and (run / "summary.json").is_file()


def test_a_quota_met_by_rank_0s_metrics_jsonl_ends_all_ranks_with_one_message(tmp_path):
    run = tmp_path / "run"
    job = run_local_job(["2", *TINY, f"output.dir={run}"], 2, job_id="28003", module="tests.harness.workers.over_quota")
    message = assert_one_storage_message(job)
    assert f"could not write metrics.jsonl in {run}: you are over your quota on this file system (EDQUOT)" in message
    assert f"The last good checkpoint is {run}/checkpoints/ckpt-e000001-s00000000.pt." in message
    assert [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [0]


def test_a_full_shared_graph_directory_ends_all_ranks_with_one_message(tmp_path, request):
    fs = mount_tmpfs(tmp_path / "shm", request, options=f"size={SIZE},mode=1777")
    job = run_local_job([*TINY, f"data.share_dir={fs}", f"output.dir={tmp_path / 'run'}"], 2, job_id="28002",
                        module="tests.harness.workers.roomless_share")
    message = assert_one_storage_message(job)
    assert re.search(rf"could not write \w+\.bin in {fs}/\S+: the file system is full \(ENOSPC\)", message), message
    assert "No checkpoint was saved yet" in message and "use data.share=process" in message
    assert not [p for p in fs.rglob("*") if p.is_file()]  # nothing left in the node's directory


def test_tensorboard_events_on_a_full_file_system_are_a_storage_error(small_fs):
    """The event files are one more file of the run: a full disk ends it as the others do (train/storage)."""
    from train.loop.tensorboard_events import TensorBoardEvents

    sink = TensorBoardEvents(load_config("tiny", ["output.tensorboard=true"]), None, small_fs)
    sink.start([])
    fill(small_fs)
    with pytest.raises(StorageError, match=r"could not write events in .*/tensorboard: the file system is full"):
        for epoch in range(200):  # the event file's last page may hold a few epochs more
            sink.epoch(record(epoch))
    with contextlib.suppress(Exception):  # its writer thread has failed already
        sink.close()
