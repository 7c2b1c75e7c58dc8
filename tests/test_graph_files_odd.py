"""A user's own graph (data.name=files) fed odd files, through `fit`'s loader and `plan`'s header reader: an empty,
cut-short, mis-typed or zero-row array, a graph.pt that is empty or not torch's, a directory or a link where a file
should be, a file nobody may read. Each is a UserError naming the file and what is wrong; never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from tests.harness.localjob import ROOT
from tests.harness.oddfiles import ODD, make_odd, no_hang, words
from tests.harness.users import VICTIM, call_as, ensure_user, sticky_dir
from tests.test_data_files import N, good_arrays, write_folder
from train.cli.plan_run import graph_size
from train.config import DataConfig, load_config
from train.errors import UserError
from train.graph.datasets.loading import load_graph


def both_readers(path: Path) -> list[str]:
    """The UserError messages of fit's loader and of plan's header reader for data.path=`path`."""
    messages = []
    for read in (lambda: load_graph(DataConfig(name="files", path=str(path))),
                 lambda: graph_size(load_config("tiny", ["data.name=files", f"data.path={path}"]))):
        with pytest.raises(UserError) as info, no_hang():
            read()
        messages.append(str(info.value))
    return messages


def plan_cli(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "train", "plan", "--config", "tiny", "data.name=files",
                           f"data.path={path}", "--cpu", "--node-memory", "64"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


# ---- one array file of a folder, made odd ------------------------------------------------------------------
@pytest.mark.parametrize("array", ["x", "y", "edge_index", "train_idx"])
@pytest.mark.parametrize("kind", [k for k in ODD if k != "under-a-file"])
def test_an_odd_array_file_is_named(tmp_path, array, kind):
    folder = write_folder(tmp_path / "graph", good_arrays())
    (folder / f"{array}.npy").unlink()
    path = make_odd(folder / f"{array}.npy", kind)
    for message in both_readers(folder):
        assert str(path) in message and words(kind) in message, message


def _cut(data: bytes) -> bytes:
    return data[: len(data) // 3]


@pytest.mark.parametrize("content,expected", [
    (_cut, "is cut short: its header promises"),
    (lambda a: b"x,y\n1,2\n", "is not a .npy file (it starts with b'x,y\\n1,'"),
    (lambda a: b"\x93NUMPY\x01\x00\x10\x00garbage-header..", "has a damaged .npy header"),
])
def test_a_damaged_npy_file_is_named_for_what_it_is(tmp_path, content, expected):
    folder = write_folder(tmp_path / "graph", good_arrays())
    x = folder / "x.npy"
    x.write_bytes(content(x.read_bytes()))
    for message in both_readers(folder):
        assert f"{x} {expected}" in message, message


@pytest.mark.parametrize("name,value,expected", [
    ("x", np.array([["a", "b"]] * N), "x holds <U1 values, not real numbers"),
    ("y", np.array([object()] * N, dtype=object), "holds pickled Python objects"),
    ("x", np.zeros((N, 0), dtype=np.float32), "x has no columns (shape (120, 0))"),
    ("y", np.zeros(0, dtype=np.int64), "y has shape (0,)"),
    ("edge_index", np.zeros((2, 5), dtype=np.complex64), "edge_index holds complex64 values, not real numbers"),
])
def test_wrong_dtype_or_shape_is_named(tmp_path, name, value, expected):
    arrays = good_arrays()
    arrays[name] = value
    folder = tmp_path / "graph"
    folder.mkdir()
    for key, array in arrays.items():
        np.save(folder / f"{key}.npy", array, allow_pickle=array.dtype == object)
    for message in both_readers(folder):
        assert expected in message, message


def test_zero_rows_everywhere_is_named_by_fit_and_plan(tmp_path):
    """The issue's case: plan ended in `max()` of an empty tensor (RuntimeError traceback)."""
    empty = {"x": np.zeros((0, 4), np.float32), "y": np.zeros(0, np.int64), "edge_index": np.zeros((2, 0), np.int64),
             **{f"{s}_idx": np.zeros(0, np.int64) for s in ("train", "val", "test")}}
    folder = write_folder(tmp_path / "graph", empty)
    for message in both_readers(folder):
        assert "x has no rows (shape (0, 4)); the graph needs at least one node" in message, message
    done = plan_cli(folder)
    assert done.returncode == 2 and "x has no rows" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_narrow_unsigned_and_big_endian_arrays_load_and_plan(tmp_path):
    """uint32 edges, uint16 labels and split, big-endian features: torch has no min/max for the first two and no
    byte swapping for the last; all are read as what they hold."""
    arrays = good_arrays()
    typed = dict(arrays, edge_index=arrays["edge_index"].astype(np.uint32), y=arrays["y"].astype(np.uint16),
                 x=arrays["x"].astype(">f4"), **{f"{s}_idx": arrays[f"{s}_idx"].astype(np.uint16)
                                                 for s in ("train", "val", "test")})
    folder = write_folder(tmp_path / "graph", typed)
    data = load_graph(DataConfig(name="files", path=str(folder)))
    assert torch.equal(data.x, torch.from_numpy(arrays["x"])) and torch.equal(data.y, torch.from_numpy(arrays["y"]))
    assert torch.equal(data.edge_index, torch.from_numpy(arrays["edge_index"]))
    size = graph_size(load_config("tiny", ["data.name=files", f"data.path={folder}"]))
    assert (size.nodes, size.edges, size.classes, size.split) == (N, 600, 3, (60, 30, 30))


def test_a_folder_without_arrays_says_what_it_holds(tmp_path):
    folder = tmp_path / "graph"
    folder.mkdir()
    (folder / "x.csv").write_text("1,2\n")
    for message in both_readers(folder):
        assert "holds none of the arrays" in message and "x.csv" in message, message


# ---- a saved PyG Data (graph.pt), made odd -----------------------------------------------------------------
def _saved(tmp_path: Path) -> bytes:
    a = {k: torch.from_numpy(v) for k, v in good_arrays().items()}
    torch.save(Data(**a), tmp_path / "good.pt")
    return (tmp_path / "good.pt").read_bytes()


@pytest.mark.parametrize("damage,expected", [
    (lambda good: b"", "is empty (0 bytes)"),
    (lambda good: good[: len(good) // 2], "is cut short or damaged: a torch.save zip archive"),
    (lambda good: b"\x80\x02legacy pickle", "was saved in torch's legacy format"),
    (lambda good: b"hello world", "is not a torch.save file (it starts with b'hell'"),
])
def test_an_odd_graph_pt_is_named(tmp_path, damage, expected):
    path = tmp_path / "graph.pt"
    path.write_bytes(damage(_saved(tmp_path)))
    for message in both_readers(path):
        assert f"data.path: {path} {expected}" in message or f"data.path='{path}' {expected}" in message, message


def test_a_zero_byte_graph_pt_is_empty_not_a_zip_error_from_the_cli(tmp_path):
    """The issue's case: torch.load's "failed finding central directory" instead of "the file is empty"."""
    path = tmp_path / "graph.pt"
    path.write_bytes(b"")
    done = plan_cli(path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"data.path='{path}' is empty (0 bytes)" in done.stderr and "central directory" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "dangling-link", "link-loop", "under-a-file"])
def test_an_odd_data_path_is_named(tmp_path, kind):
    path = make_odd(tmp_path / "graph.pt", kind)
    for message in both_readers(path):
        assert f"data.path='{path}' " in message and words(kind) in message, message


# ---- nobody else's to read ---------------------------------------------------------------------------------
def test_files_another_user_cannot_read_are_named(tmp_path):
    alice = ensure_user(VICTIM)
    shared = sticky_dir("pyg-graph-odd-")
    try:
        folder = write_folder(shared / "graph", good_arrays())
        folder.chmod(0o755)
        (folder / "y.npy").chmod(0o600)  # root's, unreadable to alice
        both_readers(write_folder(tmp_path / "warm", good_arrays()) / "missing")  # import every reader first

        def read_as_alice():
            try:
                load_graph(DataConfig(name="files", path=str(folder)))
            except UserError as exc:
                return str(exc)
            return "read"

        assert "y.npy cannot be read by this user (permission denied" in call_as(alice, read_as_alice)
        folder.chmod(0o700)  # the folder itself closed to her
        assert f"data.path='{folder}' cannot be listed by this user" in call_as(alice, read_as_alice)
    finally:
        shutil.rmtree(shared)
