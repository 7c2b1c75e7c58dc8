"""data.name=files: the user's own graph, as a saved PyG Data or a folder of arrays, checked before training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from tests.harness.localjob import final_summary, run_local_job
from train.config import DataConfig, load_config
from train.errors import UserError
from train.graph.datasets.graph_files import validate_graph
from train.graph.datasets.loading import load_graph

N, F, C = 120, 6, 3


def good_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """A small graph whose labels follow the features and the edges, with an index split."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, C, N)
    x = rng.normal(size=(N, F)).astype(np.float32)
    x[np.arange(N), y] += 2.0
    src = rng.integers(0, N, 600)
    dst = np.array([rng.choice(np.flatnonzero(y == y[s])) for s in src])
    perm = rng.permutation(N)
    return {"edge_index": np.stack([src, dst]).astype(np.int64), "x": x, "y": y.astype(np.int64),
            "train_idx": np.sort(perm[:60]), "val_idx": np.sort(perm[60:90]), "test_idx": np.sort(perm[90:])}


def write_folder(folder: Path, arrays: dict, suffix: str = ".npy") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        if suffix == ".npy":
            np.save(folder / f"{name}.npy", value)
        else:
            torch.save(torch.as_tensor(value), folder / f"{name}.pt")
    return folder


def test_folder_of_npy_arrays_loads_memory_mapped(tmp_path):
    arrays = good_arrays()
    folder = write_folder(tmp_path / "graph", arrays)
    data = load_graph(DataConfig(name="files", path=str(folder)))
    assert torch.equal(data.x, torch.from_numpy(arrays["x"])) and torch.equal(data.y, torch.from_numpy(arrays["y"]))
    assert torch.equal(data.edge_index, torch.from_numpy(arrays["edge_index"]))
    assert torch.equal(data.test_idx, torch.from_numpy(arrays["test_idx"]))
    maps = Path("/proc/self/maps").read_text()
    assert str(folder / "x.npy") in maps and str(folder / "edge_index.npy") in maps  # paged in, not copied


def test_folder_of_pt_tensors_with_masks_loads(tmp_path):
    arrays = good_arrays()
    for split in ("train", "val", "test"):
        mask = np.zeros(N, dtype=bool)
        mask[arrays.pop(f"{split}_idx")] = True
        arrays[f"{split}_mask"] = mask
    data = load_graph(DataConfig(name="files", path=str(write_folder(tmp_path / "g", arrays, ".pt"))))
    assert torch.equal(data.train_idx, torch.from_numpy(np.flatnonzero(arrays["train_mask"])))


def test_saved_pyg_data_trains_on_two_ranks(tmp_path):
    a = {k: torch.from_numpy(v) for k, v in good_arrays().items()}
    # What the README tells a user to write:
    torch.save(Data(x=a["x"], y=a["y"], edge_index=a["edge_index"], train_idx=a["train_idx"],
                    val_idx=a["val_idx"], test_idx=a["test_idx"]), tmp_path / "graph.pt")
    job = run_local_job(["fit", "--config", "tiny", "data.name=files", f"data.path={tmp_path / 'graph.pt'}",
                         "trainer.epochs=3", f"output.dir={tmp_path / 'run'}"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    assert final_summary(tmp_path / "run")["final_test_acc"] > 0.6  # 3 classes: chance is 1/3


def test_folder_trains_on_two_ranks_sharing_one_copy(tmp_path):
    folder = write_folder(tmp_path / "graph", good_arrays(1))
    job = run_local_job(["fit", "--config", "tiny", "data.name=files", f"data.path={folder}", "data.share=node",
                         "trainer.epochs=3", f"output.dir={tmp_path / 'run'}"], world_size=2)
    assert job.returncodes == [0, 0], job.outputs[0][-3000:]
    assert final_summary(tmp_path / "run")["final_test_acc"] > 0.6  # and both ranks ended with the same weights


def _drop(name):
    return lambda a: a.pop(name)


def _set(name, value):
    return lambda a: a.__setitem__(name, value(a) if callable(value) else value)


def _nan(a):
    a["x"] = a["x"].copy()
    a["x"][7, 2] = np.nan


MALFORMED = [  # (id, how to damage the good arrays, words the message must hold)
    ("no-edge-index", _drop("edge_index"), ["edge_index missing"]),
    ("no-x", _drop("x"), ["x missing"]),
    ("no-y", _drop("y"), ["y missing"]),
    ("no-test-split", _drop("test_idx"), ["test split is missing", "test_idx", "test_mask"]),
    ("edge-index-3-rows", _set("edge_index", lambda a: np.concatenate([a["edge_index"], a["edge_index"][:1]])),
     ["edge_index has shape (3, 600)", "(2, num_edges)"]),
    ("edge-index-transposed", _set("edge_index", lambda a: a["edge_index"].T.copy()),
     ["edge_index has shape (600, 2)"]),
    ("edge-index-floats", _set("edge_index", lambda a: a["edge_index"].astype(np.float32)), ["edge_index", "float32"]),
    ("node-id-too-large", _set("edge_index", lambda a: np.where(a["edge_index"] == 5, N + 3, a["edge_index"])),
     ["edge_index holds node ids", str(N + 3), f"0..{N - 1}"]),
    ("negative-node-id", _set("edge_index", lambda a: np.where(a["edge_index"] == 5, -2, a["edge_index"])),
     ["edge_index holds node ids from -2"]),
    ("x-1d", _set("x", lambda a: a["x"][:, 0].copy()), ["x has shape (120,)", "2-D"]),
    ("x-integers", _set("x", lambda a: a["x"].astype(np.int64)), ["x has shape", "int64"]),
    ("nan-features", _nan, ["x holds NaN", "row 7"]),
    ("y-too-short", _set("y", lambda a: a["y"][:-1].copy()), ["y has shape (119,)", f"expected {N}"]),
    ("y-floats", _set("y", lambda a: a["y"].astype(np.float32)), ["y has shape", "float32"]),
    ("label-below-range", _set("y", lambda a: np.where(np.arange(N) == 3, -5, a["y"])), ["y holds the label -5"]),
    ("unlabeled-train-node", _set("y", lambda a: np.where(np.arange(N) == a["train_idx"][0], -1, a["y"])),
     ["1 nodes of the train split", "-1"]),
    ("split-id-out-of-range", _set("val_idx", lambda a: np.append(a["val_idx"], N)),
     ["val_idx holds node ids", f"0..{N - 1}"]),
    ("split-2d", _set("val_idx", lambda a: a["val_idx"].reshape(2, -1)), ["val_idx has shape (2, 15)"]),
    ("splits-overlap", _set("test_idx", lambda a: np.append(a["test_idx"], a["train_idx"][0])),
     ["train and test splits share nodes"]),
    ("duplicate-split-ids", _set("train_idx", lambda a: np.append(a["train_idx"], a["train_idx"][0])),
     ["train_idx lists some nodes more than once"]),
    ("empty-train", _set("train_idx", np.zeros(0, dtype=np.int64)), ["train split is empty"]),
    ("mask-wrong-length", lambda a: (a.pop("val_idx"), a.__setitem__("val_mask", np.zeros(N - 1, dtype=bool))),
     ["val_mask has shape (119,)", f"{N} entries"]),
    ("idx-and-mask", _set("train_mask", np.ones(N, dtype=bool)), ["both train_idx and train_mask"]),
]


@pytest.mark.parametrize("damage,needles", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_folder_is_refused_naming_the_array(tmp_path, damage, needles):
    arrays = good_arrays()
    damage(arrays)
    folder = write_folder(tmp_path / "graph", arrays)
    with pytest.raises(UserError) as info:
        load_graph(DataConfig(name="files", path=str(folder)))
    message = str(info.value)
    assert message.startswith(f"data.path={folder}: ") or "data.path" in message
    for needle in needles:
        assert needle in message, message


def test_truncated_npy_file_is_named(tmp_path):
    folder = write_folder(tmp_path / "graph", good_arrays())
    path = folder / "x.npy"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(UserError, match=r"x\.npy is cut short: its header promises 2,880 bytes of data "
                                        r"\(\(120, 6\) of float32\), the file holds 172"):
        load_graph(DataConfig(name="files", path=str(folder)))


def test_array_given_twice_is_refused(tmp_path):
    folder = write_folder(tmp_path / "graph", good_arrays())
    torch.save(torch.zeros(3), folder / "y.pt")
    with pytest.raises(UserError, match=r"holds y twice \(y\.npy, y\.pt\)"):
        load_graph(DataConfig(name="files", path=str(folder)))


def test_pt_file_that_is_no_graph_is_refused(tmp_path):
    path = tmp_path / "graph.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(UserError, match="holds a list, expected a PyG Data"):
        load_graph(DataConfig(name="files", path=str(path)))
    path.write_bytes(b"not a torch file")
    with pytest.raises(UserError, match=r"graph\.pt is not a torch\.save file \(it starts with b'not '"):
        load_graph(DataConfig(name="files", path=str(path)))


def test_missing_path_is_refused_by_the_dataset_kind_and_the_loader(tmp_path):
    """The files kind needs data.path: every door that asks the kind (fit's checks, the plan, the loader) says so."""
    from train.cli.plan_run import graph_size
    from train.graph.datasets.loading import dataset_kind

    config = load_config("tiny", ["data.name=files"])
    for refused in (lambda: dataset_kind(config.data), lambda: graph_size(config), lambda: load_graph(config.data)):
        with pytest.raises(UserError, match="data.name=files needs data.path"):
            refused()
    with pytest.raises(UserError, match="does not exist"):
        load_graph(DataConfig(name="files", path=str(tmp_path / "absent")))


def test_validate_graph_converts_narrow_types():
    a = {k: torch.from_numpy(v) for k, v in good_arrays().items()}
    a.update(x=a["x"].double(), y=a["y"].int(), edge_index=a["edge_index"].int())
    data = validate_graph(a, "test")
    assert (data.x.dtype, data.y.dtype, data.edge_index.dtype) == (torch.float32, torch.long, torch.long)
