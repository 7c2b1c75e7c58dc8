"""Every file the package reads, fed odd inputs (train/files.py, then each reader): a config file, the data root and
a dataset's files, a checkpoint and trainer.resume, a run directory's job.json, the report's files. Each odd input is
named for what it is, with the file; a refusal is a UserError (exit 2, no traceback), a tolerant reader warns and
goes on, and nothing blocks on a FIFO. A user's own graph: tests/test_graph_files_odd.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.harness.localjob import ROOT
from tests.harness.oddfiles import NOT_TEXT, ODD, make_odd, no_hang, words
from tests.harness.users import VICTIM, call_as, ensure_user, sticky_dir
from tests.test_report import write_run
from train.cli.preflight import check_fit
from train.cluster.distenv import resolve
from train.config import DataConfig, load_config, load_yaml
from train.errors import UserError
from train.files import dir_problem, file_problem, read_text
from train.graph.datasets.loading import load_graph, prepare_dataset
from train.graph.datasets.raw_files import file_problem as dataset_file_problem
from train.loop.checkpoint import CHECKPOINT_DIR, Checkpointer, CorruptCheckpoint, find_latest_valid, load_checkpoint
from train.loop.report import load_run, summarize
from train.loop.rundir import choose, read_identity

KINDS = list(ODD)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


# ---- the checks themselves -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_each_odd_path_is_named_for_what_it_is(tmp_path, kind):
    path = make_odd(tmp_path / "input.txt", kind)
    with no_hang():
        assert words(kind) in file_problem(path)
        with pytest.raises(UserError, match=f"^the input {path} .*{words(kind).split('(')[0]}"):
            read_text(path, f"the input {path}")


def test_text_that_is_not_utf8_is_named_with_its_offset(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"model:\n  hidden: \xff\n")
    with pytest.raises(UserError, match=r"is not UTF-8 text \(byte 0xff at offset 17"):
        read_text(path, str(path))


def test_a_directory_that_can_or_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("x")
    assert dir_problem(tmp_path / "new" / "deeper", create=True) is None
    assert dir_problem(tmp_path / "new", create=False) == "does not exist"
    assert dir_problem(tmp_path / "file") == "is a regular file, not a directory"
    assert "cannot exist: " in dir_problem(tmp_path / "file" / "sub", create=True)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert dir_problem(tmp_path / "loop" / "sub", create=True).startswith("is a symbolic link loop")


def test_what_another_user_may_not_read_is_named_as_such():
    alice = ensure_user(VICTIM)
    shared = sticky_dir("pyg-input-files-")
    try:
        secret = shared / "config.yaml"
        secret.write_text("trainer:\n  epochs: 2\n")
        secret.chmod(0o600)
        closed = shared / "closed"
        closed.mkdir(mode=0o700)
        (closed / "config.yaml").write_text("trainer:\n  epochs: 2\n")
        assert "cannot be read by this user (permission denied" in call_as(alice, file_problem, secret)
        assert "a directory on its path is not searchable" in call_as(alice, file_problem, closed / "config.yaml")
        with pytest.raises(UserError, match=f"config file '{secret}' cannot be read by this user"):
            call_as(alice, load_config, str(secret))
    finally:
        shutil.rmtree(shared)


# ---- config files --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_an_odd_config_file_is_named(tmp_path, kind):
    path = make_odd(tmp_path / "mine.yaml", kind)
    with pytest.raises(UserError) as info, no_hang():
        load_config(str(path))
    assert f"config file '{path}'" in str(info.value) and words(kind).split(" (")[0] in str(info.value)


@pytest.mark.parametrize("text,needle", [
    ("# nothing yet\n\n", "holds no settings (only blanks or comments)"),
    (NOT_TEXT.decode("latin-1"), "is not UTF-8 text"),
    ("- trainer\n- model\n", "must be a mapping of sections"),
    ("model: [\n", "is not valid YAML"),
])
def test_a_config_file_that_holds_no_config_is_named(tmp_path, text, needle):
    path = tmp_path / "mine.yaml"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(UserError, match=re.escape(needle)):
        load_config(str(path))


@pytest.mark.parametrize("text,key,lines", [
    ("model:\n  hidden: 32\n  dropout: 0.1\n  hidden: 64\n", "hidden", (2, 4)),  # the case
    ("model:\n  hidden: 32\ntrainer:\n  epochs: 2\nmodel:\n  dropout: 0.2\n", "model", (1, 5)),  # a section twice
    ("trainer: {epochs: 2, epochs: 3}\n", "epochs", (1, 1)),  # flow style
    ("sampler:\n  num_neighbors: [5, 5]\n  'num_neighbors': [3, 3]\n", "num_neighbors", (2, 3)),  # quoted
])
def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path, text, key, lines):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_config(str(path))
    assert f"the key '{key}' is given twice, on line {lines[0]} and line {lines[1]}" in str(info.value)


def test_merge_keys_may_still_be_overridden():
    """YAML's `<<` merge is not a duplicate: a key given beside it wins, as the spec says."""
    assert load_yaml("a: &x {k: 1, j: 2}\nb:\n  <<: *x\n  k: 3\n")["b"] == {"k": 3, "j": 2}


def test_a_duplicate_key_is_refused_by_the_cli_before_anything_runs(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("model:\n  hidden: 32\n  hidden: 64\n")
    done = cli("fit", "--config", str(path), f"output.dir={tmp_path / 'run'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "the key 'hidden' is given twice, on line 2 and line 3" in done.stderr
    assert not (tmp_path / "run").exists()


# ---- the data root and a dataset's files ---------------------------------------------------------------------
# what a path that should be a directory is named, by kind ("empty": a regular file)
AS_A_DIRECTORY = {"empty": "is a regular file, not a directory", "fifo": "is a FIFO (named pipe), not a directory",
                  "dangling-link": "is a dangling symbolic link", "link-loop": "is a symbolic link loop",
                  "under-a-file": "on its path is a regular file, not a directory"}


@pytest.mark.parametrize("kind", list(AS_A_DIRECTORY))
def test_an_odd_data_root_is_named_with_its_source(tmp_path, kind):
    root = make_odd(tmp_path / "data", kind)
    for call, source in ((lambda: prepare_dataset(DataConfig(name="Cora", root=str(root))), "data.root"),
                         (lambda: load_graph(DataConfig(name="Cora"), data_dir=str(root)), "DATA_DIR")):
        with pytest.raises(UserError) as info, no_hang():
            call()
        message = str(info.value)
        assert f"{source}='{root}'" in message and AS_A_DIRECTORY[kind] in message, message


def test_data_root_a_regular_file_from_the_cli_is_refused(tmp_path):
    """The issue's case: `python -m train data ... data.root=<a regular file>` ended in FileExistsError."""
    (tmp_path / "afile").write_text("x")
    done = cli("data", "--config", "tiny", "data.name=Cora", f"data.root={tmp_path / 'afile'}")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"data.root='{tmp_path / 'afile'}' is a regular file, not a directory" in done.stderr


def test_a_dataset_folder_under_a_file_is_named(tmp_path):
    (tmp_path / "Planetoid").write_text("x")
    with pytest.raises(UserError, match="dataset 'Cora': its folder .* cannot exist: .*Planetoid' on its path"):
        prepare_dataset(DataConfig(name="Cora", root=str(tmp_path)))


@pytest.mark.parametrize("kind", KINDS)
def test_a_raw_file_of_a_dataset_is_named_never_raised(tmp_path, kind):
    path = make_odd(tmp_path / "ind.cora.x", kind)
    with no_hang():
        problem = dataset_file_problem(path)
    assert problem is not None and words(kind).removeprefix("is ").split(" (")[0] in problem


# ---- checkpoints and trainer.resume --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_an_odd_checkpoint_file_is_not_usable_and_says_why(tmp_path, kind):
    path = make_odd(tmp_path / "ckpt-e000001-s00000000.pt", kind)
    with pytest.raises(CorruptCheckpoint, match=words(kind).removeprefix("is ").split(" (")[0]), no_hang():
        load_checkpoint(path)


def test_a_fifo_among_the_checkpoints_is_skipped_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "ckpt-e000002-s00000000.pt")
    notes = []
    with no_hang():
        assert find_latest_valid(tmp_path, notes.append) is None
    assert "FIFO" in notes[0] and (tmp_path / "ckpt-e000002-s00000000.pt.corrupt").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_an_odd_trainer_resume_path_is_refused_before_the_run(tmp_path, kind):
    path = make_odd(tmp_path / "ckpt.pt", kind)
    config = load_config("tiny", [f"trainer.resume={path}", f"output.dir={tmp_path / 'run'}"])
    with pytest.raises(UserError) as info, no_hang():
        check_fit(config, resolve({}))
    assert f"trainer.resume='{path}'" in str(info.value) and words(kind).split(" (")[0] in str(info.value)


def test_a_file_where_the_checkpoints_go_is_refused_before_training(tmp_path):
    (tmp_path / CHECKPOINT_DIR).write_text("x")
    checkpointer = Checkpointer(tmp_path, resolve({}), None, None, config={}, fingerprint={}, keep=1, resume="auto")
    with pytest.raises(UserError, match="checkpoints is a regular file, not a directory: checkpoints cannot be"):
        checkpointer._find()


# ---- the run directory's job.json ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS + ["not-text"])
def test_an_odd_job_json_is_no_identity(tmp_path, kind):
    if kind == "not-text":
        (tmp_path / "job.json").write_bytes(NOT_TEXT)
    else:
        make_odd(tmp_path / "job.json", kind)
    with no_hang():
        assert read_identity(tmp_path) is None


@pytest.mark.parametrize("kind", ["empty", "fifo", "dangling-link", "link-loop"])
def test_a_run_directory_name_taken_by_something_else_gets_its_own(tmp_path, kind):
    runs = tmp_path / "runs"
    runs.mkdir()
    make_odd(runs / "4242", kind)
    identity = {"cluster": "c", "job_id": "4242", "submission": ""}
    with no_hang():
        chosen, note = choose(runs, identity, requeued=False)
    assert chosen == runs / "4242-c-1" and f"{runs / '4242'} " in note and "this job writes" in note


# ---- the report's files --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("empty", "under-a-file")] + ["not-text"])
def test_an_odd_metrics_file_is_named(tmp_path, kind):
    run = write_run(tmp_path / "run")
    (run / "metrics.jsonl").unlink()
    if kind == "not-text":
        (run / "metrics.jsonl").write_bytes(NOT_TEXT)
    else:
        make_odd(run / "metrics.jsonl", kind)
    with pytest.raises(UserError) as info, no_hang():
        load_run(run)
    expected = "is not UTF-8 text" if kind == "not-text" else words(kind).split(" (")[0]
    assert "metrics.jsonl" in str(info.value) and expected in str(info.value), str(info.value)


@pytest.mark.parametrize("name", ["summary.json", "config.yaml"])
@pytest.mark.parametrize("kind", ["directory", "fifo", "link-loop", "not-text", "a-list"])
def test_an_odd_summary_or_config_is_ignored_with_a_warning(tmp_path, capsys, name, kind):
    run = write_run(tmp_path / "run")
    (run / name).unlink()
    if kind == "not-text":
        (run / name).write_bytes(NOT_TEXT)
    elif kind == "a-list":
        (run / name).write_text(json.dumps([1, 2]))
    else:
        make_odd(run / name, kind)
    with no_hang():
        rows, summary, config = load_run(run)
    assert (summary if name == "summary.json" else config) is None
    assert summarize(rows, summary, config)["epochs_done"] == 6
    assert f"warning: {run / name} " in capsys.readouterr().err


def test_a_run_directory_that_is_a_file_is_named(tmp_path):
    (tmp_path / "run").write_text("x")
    with pytest.raises(UserError, match="run directory '.*run' is a regular file, not a directory"):
        load_run(tmp_path / "run")
