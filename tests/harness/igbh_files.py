"""A tiny IGBH in IGBH's own folder layout (IllinoisGraphBenchmark/IGB-Datasets: processed/<type>/node_feat.npy,
processed/paper/node_label_19.npy, processed/<src>__<rel>__<dst>/edge_index.npy as E x 2), for data.name=igbh."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from train.graph.datasets.igbh import IGBH_RELATIONS


def write_igbh(folder: Path, papers: int = 300, seed: int = 0) -> Path:
    """A tiny IGBH in its own layout: node_feat.npy per type, paper/node_label_19.npy, E x 2 edge files."""
    rng = np.random.default_rng(seed)
    counts = {"paper": papers, "author": papers // 2, "institute": 7, "fos": 11}
    processed = folder / "processed"
    for node_type, count in counts.items():
        (processed / node_type).mkdir(parents=True)
        np.save(processed / node_type / "node_feat.npy", rng.normal(size=(count, 8)).astype(np.float32))
    np.save(processed / "paper" / "node_label_19.npy", rng.integers(0, 19, papers).astype(np.float32))
    for src, rel, dst in IGBH_RELATIONS:
        (processed / f"{src}__{rel}__{dst}").mkdir()
        edges = np.stack([rng.integers(0, counts[src], 4 * papers), rng.integers(0, counts[dst], 4 * papers)], 1)
        np.save(processed / f"{src}__{rel}__{dst}" / "edge_index.npy", edges)
    return folder
