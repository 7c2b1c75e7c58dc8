"""A tiny Reddit written in PyG's raw format, so the real loader processes it (no download)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def write_reddit_raw(root, num_nodes=60, num_features=7, seed=0):
    """A tiny Reddit in PyG's raw format: reddit_data.npz and reddit_graph.npz."""
    rng = np.random.default_rng(seed)
    raw = root / "Reddit" / "raw"
    raw.mkdir(parents=True)
    node_types = rng.choice([1, 2, 3], size=num_nodes).astype(np.int64)
    np.savez(raw / "reddit_data.npz", feature=rng.normal(size=(num_nodes, num_features)).astype(np.float32),
             label=rng.integers(0, 5, size=num_nodes), node_types=node_types)
    row, col = rng.integers(0, num_nodes, size=300), rng.integers(0, num_nodes, size=300)
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((np.ones(300), (row, col)), shape=(num_nodes, num_nodes)))
    return node_types
