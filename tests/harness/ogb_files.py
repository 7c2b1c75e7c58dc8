"""Small OGB node and link datasets written in OGB's own on-disk format, so the real `ogb` loader reads them."""

from __future__ import annotations

import gzip
import io
import zipfile
from pathlib import Path

import numpy as np
import torch

from train.graph.datasets.ogb_links import OGB_LINK_DATASETS
from train.graph.datasets.ogb_nodes import OGB_NODE_DATASETS


def _csv_gz(path: Path, rows: np.ndarray) -> None:
    rows = rows.reshape(len(rows), -1)
    fmt = "%d" if np.issubdtype(rows.dtype, np.integer) else "%.6f"
    with gzip.open(path, "wt") as fh:
        np.savetxt(fh, rows, fmt=fmt, delimiter=",")


def write_ogb(root: Path, name: str, num_nodes: int = 300, num_features: int = 8, num_classes: int = 5,
              num_edges: int = 1500, seed: int = 0, unlabeled_fraction: float = 0.0) -> dict[str, np.ndarray]:
    """`root/<ogbn_folder>/` as OGB's zip unpacks: raw files, split/<kind>/*.csv.gz and RELEASE_v1.txt.

    Labels follow the features (class = argmax of the first `num_classes` features, edges mostly
    inside a class), so a model can learn them. Returns the arrays written, for comparison.
    """
    info = OGB_NODE_DATASETS[name]
    rng = np.random.default_rng(seed)
    folder = root / info.folder
    raw, split = folder / "raw", folder / "split" / info.split
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    y = rng.integers(0, num_classes, num_nodes)
    x = rng.normal(size=(num_nodes, num_features)).astype(np.float32)
    x[np.arange(num_nodes), y % num_features] += 2.0
    src = rng.integers(0, num_nodes, num_edges)
    by_class = [np.flatnonzero(y == c) for c in range(num_classes)]
    dst = np.array([rng.choice(by_class[y[s]]) if rng.random() < 0.8 else rng.integers(0, num_nodes) for s in src])
    edge = np.stack([src, dst], axis=1).astype(np.int64)
    perm = rng.permutation(num_nodes)
    labeled = perm[: int(num_nodes * (1 - unlabeled_fraction))]
    n_train, n_val = len(labeled) // 2, len(labeled) // 4
    parts = {"train": np.sort(labeled[:n_train]), "valid": np.sort(labeled[n_train:n_train + n_val]),
             "test": np.sort(labeled[n_train + n_val:])}
    labels = y.astype(np.float64)
    labels[perm[len(labeled):]] = np.nan
    if "data.npz" in info.raw:  # the binary format (ogbn-papers100M)
        np.savez_compressed(raw / "data.npz", edge_index=edge.T, node_feat=x,
                            num_nodes_list=np.array([num_nodes]), num_edges_list=np.array([num_edges]),
                            node_year=rng.integers(1990, 2020, (num_nodes, 1)))
        np.savez_compressed(raw / "node-label.npz", node_label=labels.reshape(-1, 1).astype(np.float32))
    else:
        _csv_gz(raw / "edge.csv.gz", edge)
        _csv_gz(raw / "node-feat.csv.gz", x)
        _csv_gz(raw / "node-label.csv.gz", y.astype(np.int64))
        _csv_gz(raw / "num-node-list.csv.gz", np.array([num_nodes]))
        _csv_gz(raw / "num-edge-list.csv.gz", np.array([num_edges]))
        if "node_year.csv.gz" in info.raw:
            _csv_gz(raw / "node_year.csv.gz", rng.integers(1990, 2020, num_nodes))
    for part, idx in parts.items():
        _csv_gz(split / f"{part}.csv.gz", idx)
    (folder / "RELEASE_v1.txt").write_text("# Release note for OGB dataset v1\n")
    return {"x": x, "y": y, "edge": edge, "labels": labels, **parts}


def write_ogbn_proteins(root: Path, num_nodes: int = 300, num_edges: int = 3000, num_tasks: int = 6,
                        seed: int = 0) -> dict[str, np.ndarray]:
    """`root/ogbn_proteins/` as OGB's zip unpacks: no node features, 8 edge features, `num_tasks` binary labels.

    Each node has one of four kinds; an edge's features hold its ends' kinds (plus noise), so the mean of a
    node's in-edges' features (its node features) tells its kind, and each task is positive for a random set of
    kinds, flipped for 10% of the nodes: learnable from the features, not perfectly. Returns the arrays written.
    """
    info = OGB_NODE_DATASETS["ogbn-proteins"]
    rng = np.random.default_rng(seed)
    folder = root / info.folder
    raw, split = folder / "raw", folder / "split" / info.split
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    kind = rng.integers(0, 4, num_nodes)
    src, dst = rng.integers(0, num_nodes, num_edges), rng.integers(0, num_nodes, num_edges)
    edge = np.stack([src, dst], axis=1).astype(np.int64)  # OGB adds the inverse edges (add_inverse_edge)
    edge_feat = rng.uniform(0.0, 0.2, size=(num_edges, 8))
    edge_feat[np.arange(num_edges), kind[src]] += 0.5
    edge_feat[np.arange(num_edges), kind[dst]] += 0.5
    tasks = rng.integers(0, 2, size=(4, num_tasks))
    tasks[0], tasks[1] = 1, 0  # every task has both classes
    labels = tasks[kind] ^ (rng.random((num_nodes, num_tasks)) < 0.1)
    perm = rng.permutation(num_nodes)
    n_train, n_val = num_nodes // 2, num_nodes // 4
    parts = {"train": np.sort(perm[:n_train]), "valid": np.sort(perm[n_train:n_train + n_val]),
             "test": np.sort(perm[n_train + n_val:])}
    _csv_gz(raw / "edge.csv.gz", edge)
    _csv_gz(raw / "edge-feat.csv.gz", edge_feat.astype(np.float32))
    _csv_gz(raw / "node-label.csv.gz", labels.astype(np.int64))
    _csv_gz(raw / "node_species.csv.gz", rng.integers(3702, 3710, num_nodes))
    _csv_gz(raw / "num-node-list.csv.gz", np.array([num_nodes]))
    _csv_gz(raw / "num-edge-list.csv.gz", np.array([num_edges]))
    for part, idx in parts.items():
        _csv_gz(split / f"{part}.csv.gz", idx)
    (folder / "RELEASE_v1.txt").write_text("# Release note for OGB dataset v1\n")
    return {"edge": edge, "edge_feat": edge_feat, "labels": labels, **parts}


def _save_as_ogb_did(obj: dict, path: Path, numpy1: bool) -> None:
    """torch.save of a dict of NumPy arrays, as OGB saved its split files; `numpy1`: under NumPy 1's name of the
    arrays' rebuilder (numpy.core.multiarray._reconstruct), which OGB's files carry, where NumPy 2 writes
    numpy._core (only the pickle's text of that name differs)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    if not numpy1:
        path.write_bytes(buffer.getvalue())
        return
    with zipfile.ZipFile(buffer) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as target:
        for entry in source.infolist():
            content = source.read(entry)
            if entry.filename.endswith("/data.pkl"):
                content = content.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
            target.writestr(entry.filename, content)


def write_ogbl_citation2(root: Path, num_nodes: int = 300, num_features: int = 8, references: int = 6,
                         negatives: int = 20, seed: int = 0, numpy1: bool = True) -> dict[str, np.ndarray]:
    """`root/ogbl_citation2/` as OGB's zip unpacks: raw files, split/time/{train,valid,test}.pt and RELEASE_v1.txt.

    Papers in 4 topics (a feature marks each one's); each cites `references` older papers, mostly of its topic. As
    in OGB's split by time, each of the newest fifth of the papers has one citation held out, for valid or test by
    turns, with `negatives` random targets of its own; the graph (edge.csv.gz) holds the rest, the training edges.
    Returns the arrays written.
    """
    info = OGB_LINK_DATASETS["ogbl-citation2"]
    rng = np.random.default_rng(seed)
    folder = root / info.folder
    raw, split = folder / "raw", folder / info.split_file("train").rsplit("/", 1)[0]
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    topic = rng.integers(0, 4, num_nodes)
    x = rng.normal(size=(num_nodes, num_features)).astype(np.float32)
    x[np.arange(num_nodes), topic] += 2.0
    cites = []
    for paper in range(references + 1, num_nodes):
        older = np.arange(paper)
        same = older[topic[older] == topic[paper]]
        pool = same if len(same) >= references and rng.random() < 0.8 else older
        cites += [(paper, int(cited)) for cited in rng.choice(pool, references, replace=False)]
    edge = np.array(cites, dtype=np.int64)
    held = np.flatnonzero((edge[:, 0] >= int(num_nodes * 0.8)) & (np.arange(len(edge)) % references == 0))
    kept = np.setdiff1d(np.arange(len(edge)), held)
    parts = {"valid": held[0::2], "test": held[1::2]}
    _csv_gz(raw / "edge.csv.gz", edge[kept])
    _csv_gz(raw / "node-feat.csv.gz", x)
    _csv_gz(raw / "node_year.csv.gz", 1990 + np.arange(num_nodes) * 30 // num_nodes)
    _csv_gz(raw / "num-node-list.csv.gz", np.array([num_nodes]))
    _csv_gz(raw / "num-edge-list.csv.gz", np.array([len(kept)]))
    written = {"x": x, "train": edge[kept].T}
    _save_as_ogb_did({"source_node": edge[kept, 0], "target_node": edge[kept, 1]}, split / "train.pt", numpy1)
    for part, rows in parts.items():
        neg = rng.integers(0, num_nodes, (len(rows), negatives))
        _save_as_ogb_did({"source_node": edge[rows, 0], "target_node": edge[rows, 1], "target_node_neg": neg},
                         split / f"{part}.pt", numpy1)
        written[part], written[f"{part}_neg"] = edge[rows].T, neg
    (folder / "RELEASE_v1.txt").write_text("# Release note for OGB dataset v1\n")
    return written


def _csv_gz_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def write_ogbn_mag(root: Path, papers: int = 200, seed: int = 0) -> dict[str, np.ndarray]:
    """`root/ogbn_mag/` as OGB's zip unpacks (its heterogeneous CSV format, read by the real `ogb` loader): papers
    with 8 features and 5 classes, featureless authors, institutions and fields, the four relations, the paper time
    split and RELEASE_v2.txt. Returns the arrays written."""
    from train.graph.datasets.ogb_nodes import MAG_RELATIONS

    info = OGB_NODE_DATASETS["ogbn-mag"]
    rng = np.random.default_rng(seed)
    folder, counts = root / info.folder, {"author": papers, "field_of_study": 9, "institution": 5, "paper": papers}
    raw, split = folder / "raw", folder / "split" / info.split
    _csv_gz_text(raw / "num-node-dict.csv.gz", ",".join(counts) + "\n" + ",".join(map(str, counts.values())) + "\n")
    _csv_gz_text(raw / "triplet-type-list.csv.gz", "".join(",".join(r) + "\n" for r in MAG_RELATIONS))
    has = ",".join(counts) + "\n" + ",".join("True" if t == "paper" else "False" for t in counts) + "\n"
    _csv_gz_text(raw / "nodetype-has-label.csv.gz", has)
    _csv_gz_text(split / "nodetype-has-split.csv.gz", has)
    x = rng.normal(size=(papers, 8)).astype(np.float32)
    y = rng.integers(0, 5, papers)
    for path, rows in ((raw / "node-feat" / "paper" / "node-feat.csv.gz", x),
                       (raw / "node-label" / "paper" / "node-label.csv.gz", y)):
        path.parent.mkdir(parents=True)
        _csv_gz(path, rows)
    edges = {}
    for relation in MAG_RELATIONS:
        sub = raw / "relations" / "___".join(relation)
        sub.mkdir(parents=True)
        edge = np.stack([rng.integers(0, counts[relation[0]], 3 * papers),
                         rng.integers(0, counts[relation[2]], 3 * papers)], axis=1).astype(np.int64)
        _csv_gz(sub / "edge.csv.gz", edge)
        _csv_gz(sub / "num-edge-list.csv.gz", np.array([len(edge)]))
        edges[relation] = edge
    perm = rng.permutation(papers)
    parts = {"train": np.sort(perm[: papers // 2]), "valid": np.sort(perm[papers // 2: 3 * papers // 4]),
             "test": np.sort(perm[3 * papers // 4:])}
    (split / "paper").mkdir(parents=True)
    for part, idx in parts.items():
        _csv_gz(split / "paper" / f"{part}.csv.gz", idx)
    (folder / info.release).write_text("# Release note for OGB dataset v2\n")
    return {"x": x, "y": y, "edges": edges, **parts}
