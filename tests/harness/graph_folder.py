"""A user's own graph as a folder of arrays (docs/data.md: one `.npy` per array), random but seeded, for the tests
that need a real file at data.path."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_graph_folder(folder: Path, nodes: int, edges: int, features: int, classes: int) -> Path:
    """`folder` (made) holding x, y, edge_index and a 60/20/20 split of `nodes` nodes."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(folder / "x.npy", rng.normal(size=(nodes, features)).astype(np.float32))
    np.save(folder / "y.npy", rng.integers(0, classes, nodes))
    np.save(folder / "edge_index.npy", rng.integers(0, nodes, (2, edges)))
    train, val = nodes * 6 // 10, nodes * 8 // 10
    for name, part in (("train_idx", range(0, train)), ("val_idx", range(train, val)), ("test_idx", range(val, nodes))):
        np.save(folder / f"{name}.npy", np.array(part))
    return folder
