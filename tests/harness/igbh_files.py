"""A tiny IGBH in IGBH's own folder layout (IllinoisGraphBenchmark/IGB-Datasets: processed/<type>/node_feat.npy,
processed/paper/node_label_19.npy, processed/<src>__<rel>__<dst>/edge_index.npy as E x 2), for data.name=igbh."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from train.graph.datasets.igbh import IGBH_RELATIONS, igbh_full


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


# IGBH-full's published sizes (train/graph/datasets/igbh.py igbh_full), each relation's edges before its reverse
IGBH_EDGES = {"cites": 3_996_442_004, "written_by": 716_761_549, "affiliated_to": 48_521_486, "topic": 1_050_280_600}
IGBH_WIDTH = 1024
CHUNK_ROWS = 16_384  # rows generated and written at once: 64 MiB of 1024-wide features


def scaled_counts(fraction: float) -> tuple[dict[str, int], dict[str, int]]:
    """(nodes per type, edges per relation) of IGBH-full times `fraction`, at least one of each: the four types and
    the relations' degree ratios (edges per node of either end) of the published graph."""
    full = igbh_full()
    counts = {t: max(1, round(c * fraction)) for t, c in zip(full.meta.node_types, full.meta.counts)}
    edges = {rel: max(1, round(e * fraction)) for rel, e in IGBH_EDGES.items()}
    return counts, edges


def write_igbh_scaled(folder: Path, fraction: float, seed: int = 0, signal: float = 1.0) -> dict[str, int]:
    """IGBH in its own layout at `fraction` of IGBH-full (scaled_counts): 1024-wide float32 node_feat.npy per type,
    the papers' 19-class labels (node_label_19.npy, float as IGB's; the label's column of a paper's features raised
    by `signal`, so that the graph can be learned), each relation's edges (E x 2, ends drawn uniformly within their
    types). Written a chunk at a time into the .npy files: at 1/1000 the features are 2.2 GB, never all in memory.
    Returns the nodes per type."""
    rng = np.random.default_rng(seed)
    counts, edges = scaled_counts(fraction)
    processed = folder / "processed"
    labels = rng.integers(0, 19, counts["paper"])
    for node_type, count in counts.items():
        (processed / node_type).mkdir(parents=True)
        x = np.lib.format.open_memmap(processed / node_type / "node_feat.npy", mode="w+", dtype=np.float32,
                                      shape=(count, IGBH_WIDTH))
        for start in range(0, count, CHUNK_ROWS):
            stop = min(start + CHUNK_ROWS, count)
            chunk = rng.standard_normal((stop - start, IGBH_WIDTH), dtype=np.float32)
            if node_type == "paper":
                chunk[np.arange(stop - start), labels[start:stop]] += signal
            x[start:stop] = chunk
        x.flush()
        del x
    np.save(processed / "paper" / "node_label_19.npy", labels.astype(np.float32))
    for src, rel, dst in IGBH_RELATIONS:
        (processed / f"{src}__{rel}__{dst}").mkdir()
        pairs = np.stack([rng.integers(0, counts[src], edges[rel]), rng.integers(0, counts[dst], edges[rel])], 1)
        np.save(processed / f"{src}__{rel}__{dst}" / "edge_index.npy", pairs)
    return counts
