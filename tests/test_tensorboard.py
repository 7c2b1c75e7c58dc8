"""TensorBoard (output.tensorboard): the event files rank 0's sink writes, read back as TensorBoard reads them, a
resume that shows no epoch twice, the knob off or the package missing, and `make tensorboard`."""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.test_outputs import record
from train.cluster.distenv import free_port
from train.config import load_config
from train.errors import UserError
from train.loop import tensorboard_events
from train.loop.tensorboard_events import TENSORBOARD, TensorBoardEvents, scalars, switched_on
from train.loop.timing import PHASES

ROOT = Path(__file__).resolve().parents[1]
FIT = ["fit", "--config", "tiny", "trainer.epochs=3", "trainer.max_steps_per_epoch=2", "trainer.eval_every=2"]
PER_EPOCH = {"loss/train": "loss", "accuracy/train": "train_acc", "throughput/seeds_per_second": "seeds_per_second",
             "time/epoch_seconds": "epoch_seconds", "time/wall_seconds": "wall_seconds"}


def clean_env() -> dict[str, str]:
    """One process, no launcher: `python -m train fit` as a single rank."""
    return {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}.items()
            if not k.startswith(("SLURM_", "WORLD_SIZE", "RANK", "MASTER_", "TORCHELASTIC_"))}


def train(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"import sys\n{prelude}\nfrom train.__main__ import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=clean_env(), capture_output=True,
                          text=True, timeout=240)


def read_events(folder: Path) -> EventAccumulator:
    events = EventAccumulator(str(folder))
    events.Reload()
    return events


def steps(events: EventAccumulator, tag: str) -> list[int]:
    return [e.step for e in events.Scalars(tag)]


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    """The tiny config for 3 epochs with event files; then its last checkpoint is deleted and the run resumes
    from epoch 2, which it trains (and writes) again."""
    out = tmp_path_factory.mktemp("tb") / "run"
    first = train(*FIT, f"output.dir={out}", "output.tensorboard=true")
    assert first.returncode == 0, first.stderr[-3000:]
    first_files = sorted((out / TENSORBOARD).iterdir())
    for path in (out / "checkpoints").glob("ckpt-e000003-*"):
        path.unlink()
    again = train(*FIT, f"output.dir={out}", "output.tensorboard=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stdout and "ckpt-e000002-s00000000.pt" in again.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return out, first_files, rows, first.stdout + again.stdout


def test_the_event_files_hold_each_epochs_scalars(resumed_run):
    out, _, rows, stdout = resumed_run
    events = read_events(out / TENSORBOARD)
    tags = set(events.Tags()["scalars"])
    assert tags == {*PER_EPOCH, "accuracy/val", "accuracy/test", "optim/lr", *(f"time/phase/{p}" for p in PHASES)}
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    for tag, key in PER_EPOCH.items():
        assert [(e.step, e.value) for e in events.Scalars(tag)] == \
            [(r["epoch"], pytest.approx(r[key], rel=1e-6)) for r in rows], tag
    for tag, key in (("accuracy/val", "val_acc"), ("accuracy/test", "test_acc")):  # evaluated at epochs 1 and 2
        assert [(e.step, e.value) for e in events.Scalars(tag)] == \
            [(r["epoch"], pytest.approx(r[key], rel=1e-6)) for r in rows if r[key] is not None], tag
    assert steps(events, "accuracy/val") == [1, 2]
    assert [e.value for e in events.Scalars("optim/lr")] == [pytest.approx(0.01)] * 3  # tiny.yaml's optim.lr
    for phase in PHASES:
        assert [e.value for e in events.Scalars(f"time/phase/{phase}")] == \
            [pytest.approx(r["phase_seconds"][phase], rel=1e-6, abs=1e-9) for r in rows]
    assert not any(tag.startswith("memory/") for tag in tags)  # on the CPU: no GPU memory
    assert f"tensorboard events {out / TENSORBOARD} (from epoch 0;" in stdout


def test_a_resume_continues_the_event_files_without_an_epoch_twice(resumed_run):
    out, first_files, _, stdout = resumed_run
    files = sorted((out / TENSORBOARD).iterdir())
    assert len(first_files) == 1 and files[0] == first_files[0] and len(files) == 2  # the same folder, one more file
    assert f"tensorboard events {out / TENSORBOARD} (from epoch 2;" in stdout
    # Epoch 2 is in both files: the second one's purge (SummaryWriter's purge_step) hides the first one's.
    written = [e.step for f in files for e in EventAccumulator(str(f)).Reload().Scalars("loss/train")]
    assert sorted(written) == [0, 1, 2, 2]
    events = read_events(out / TENSORBOARD)
    for tag in events.Tags()["scalars"]:
        shown = steps(events, tag)
        assert shown == sorted(set(shown)) and shown[-1] == 2, (tag, shown)
    assert events.Scalars("loss/train")[2].wall_time > events.Scalars("loss/train")[1].wall_time


def test_knob_off_writes_no_event_files(tmp_path, capsys):
    sink = TensorBoardEvents(load_config("tiny", ["output.tensorboard=false"]), None, tmp_path)
    sink.start([])
    sink.epoch(record(0))
    sink.close()
    assert not (tmp_path / TENSORBOARD).exists() and capsys.readouterr().out == ""  # off as asked: nothing said


def test_without_the_package_auto_is_off_and_says_why_once(tmp_path):
    """A stand-in for a Python without tensorboard: its import is blocked. auto trains without event files and
    says so once; true is refused before anything is written."""
    blocked = "sys.modules['tensorboard'] = None"
    auto = train(*FIT, "trainer.epochs=1", f"output.dir={tmp_path / 'auto'}", prelude=blocked)
    assert auto.returncode == 0, auto.stderr[-3000:]
    said = [line for line in auto.stdout.splitlines() if line.startswith("TensorBoard:")]
    assert said == ["TensorBoard: no event files, as the tensorboard package cannot be imported (import of "
                    "tensorboard halted; None in sys.modules); pip install tensorboard (output.tensorboard=false: "
                    "off without this line)"]
    assert (tmp_path / "auto" / "metrics.jsonl").is_file() and not (tmp_path / "auto" / TENSORBOARD).exists()
    forced = train(*FIT, f"output.dir={tmp_path / 'true'}", "output.tensorboard=true", prelude=blocked)
    assert forced.returncode == 2 and "Traceback" not in forced.stderr
    assert "error: output.tensorboard=true, but the tensorboard package cannot be imported" in forced.stderr
    assert "or output.tensorboard=auto to train without event files" in forced.stderr
    assert not (tmp_path / "true").exists()


def test_make_runs_check_refuses_true_without_the_package_before_any_rank(monkeypatch):
    from login.launch import check_input

    monkeypatch.setattr(tensorboard_events, "unavailable", lambda: "the tensorboard package cannot be imported")
    with pytest.raises(UserError, match="output.tensorboard=true, but the tensorboard package cannot be imported"):
        check_input("fit", ["--config", "tiny", "output.tensorboard=true"])
    check_input("fit", ["--config", "tiny"])  # auto: trains without, and says so


def test_the_switch_and_the_scalars_of_an_epoch():
    assert switched_on("false", None) == (False, None)
    assert switched_on("auto", None) == switched_on("true", None) == (True, None)
    assert switched_on("auto", "no package")[0] is False and "no package" in switched_on("auto", "no package")[1]
    values = scalars(record(4, loss=0.25, val=None), lr=0.003)
    assert values == {"loss/train": 0.25, "accuracy/train": 0.75, "throughput/seeds_per_second": 4000.0,
                      "time/epoch_seconds": 1.5, "time/wall_seconds": 1.75, "optim/lr": 0.003,
                      "time/phase/sample": 1.0, "time/phase/other": 0.75}  # no val/test: not evaluated
    assert {"accuracy/val", "accuracy/test"} <= set(scalars(record(4), lr=0.003))
    assert load_config("tiny").output.tensorboard == "auto"
    with pytest.raises(UserError, match=r"output.tensorboard='sometimes' is not valid; expected one of: auto, "):
        load_config("tiny", ["output.tensorboard=sometimes"])


def test_make_tensorboard_prints_the_ssh_line_and_refuses_a_taken_port():
    from login.tensorboard import node_name

    with socket.socket() as holder:
        holder.bind(("localhost", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("TB_PORT", "MAKEFLAGS", "MAKELEVEL")}
        p = subprocess.run(["make", "--no-print-directory", "tensorboard", f"TB_PORT={port}"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stdout.splitlines()[0] == \
        f"on your own machine: ssh -N -L {port}:localhost:{port} {getpass.getuser()}@{node_name()}"
    assert f"then open http://localhost:{port}/" in p.stdout
    assert f"error: TB_PORT={port} cannot be used on this node" in p.stderr and f"TB_PORT={port + 1}" in p.stderr


@pytest.mark.parametrize("full, host, named", [("login1.cluster.org", "login1", "login1.cluster.org"),
                                               ("localhost", "login1", "login1"),
                                               ("localhost.localdomain", "login1", "login1")])
def test_the_ssh_line_names_the_node_as_another_machine_reaches_it(monkeypatch, full, host, named):
    from login import tensorboard

    monkeypatch.setattr(tensorboard.socket, "getfqdn", lambda: full)
    monkeypatch.setattr(tensorboard.socket, "gethostname", lambda: host)
    assert tensorboard.ssh_line(6006, "ada", tensorboard.node_name()) == f"ssh -N -L 6006:localhost:6006 ada@{named}"


# localhost, past any proxy: urlopen's shared opener keeps the proxies of the environment it first met, and tests
# before this one point them at a closed port ("no route out")
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def test_tensorboard_serves_the_runs_event_files(tmp_path):
    """`make tensorboard`'s program from a project folder: TensorBoard on localhost over runs/, its scalars
    served (read by TensorBoard's own loader)."""
    sink = TensorBoardEvents(load_config("tiny", ["output.tensorboard=true"]), None, tmp_path / "runs" / "7")
    sink.start([])
    sink.epoch(record(0))
    sink.close()
    written = read_events(tmp_path / "runs" / "7" / TENSORBOARD)  # on disk whole: what the server must serve
    assert [(e.step, e.value) for e in written.Scalars("loss/train")] == [(0, 0.5)]
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "login.tensorboard", "--port", str(port)], cwd=tmp_path,
                              env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        url = f"http://localhost:{port}/data/plugin/scalars/scalars?run=7/{TENSORBOARD}&tag=loss/train"
        served, deadline = None, time.monotonic() + 60
        while served is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with LOCAL.open(url, timeout=5) as answer:
                    served = json.loads(answer.read()) or None
            except OSError:
                time.sleep(0.5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        output = server.communicate(timeout=30)[0]
    assert served is not None and [(step, value) for _, step, value in served] == [(0, 0.5)], output
    assert f"ssh -N -L {port}:localhost:{port} " in output and " --logdir runs --host localhost" in output


def test_on_cuda_rank_0s_gpu_memory_goes_with_each_epoch(tmp_path, monkeypatch):
    """No GPU here: torch.cuda's answers stand in for one this process uses (2 GiB allocated, 3 at the peak, 4 held)."""
    import torch

    for name, value in (("is_initialized", True), ("memory_allocated", 2 * 2**30),
                        ("max_memory_allocated", 3 * 2**30), ("memory_reserved", 4 * 2**30)):
        monkeypatch.setattr(torch.cuda, name, lambda value=value: value)
    sink = TensorBoardEvents(load_config("tiny", ["output.tensorboard=true"]), None, tmp_path)
    sink.start([])
    sink.epoch(record(0))
    sink.close()
    events = read_events(tmp_path / TENSORBOARD)
    assert {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
            if tag.startswith("memory/")} == {"memory/gpu_allocated_gib": [(0, 2.0)],
                                               "memory/gpu_peak_allocated_gib": [(0, 3.0)],
                                               "memory/gpu_reserved_gib": [(0, 4.0)]}


def test_a_new_event_file_sorts_after_the_ones_there(tmp_path):
    """Readers replay a folder's event files in name order, whose first field is the second the file was made: a
    resume within the same second as the last file waits for the next one, so its purge comes after."""
    now = int(time.time())
    (tmp_path / f"events.out.tfevents.{now:010d}.node.99999.0").write_bytes(b"")
    tensorboard_events.after_existing_files(tmp_path)
    assert int(time.time()) > now


def test_multi_label_epochs_add_their_rocauc_and_others_do_not():
    """Multi-label nodes (train/loop/targets.py): the ROC-AUCs as rocauc/val and rocauc/test, where evaluated."""
    scored = dataclasses.replace(record(1), val_rocauc=0.71, test_rocauc=0.69)
    assert {k: v for k, v in scalars(scored, 0.01).items() if k.startswith("rocauc/")} == \
        {"rocauc/val": pytest.approx(0.71), "rocauc/test": pytest.approx(0.69)}
    assert not any(tag.startswith("rocauc/") for tag in scalars(record(1), 0.01))
