"""IGBH's layout and published sizes (IllinoisGraphBenchmark/IGB-Datasets, MLPerf's GNN benchmark graph): its node
types, relations, label files and split, without torch, so that the login node's config check
(login/config_check.py) and the plan of IGBH-full read them with PyYAML alone. Reading a folder in this layout is
train/graph/datasets/hetero_files.py's `read_igbh`.
"""

from __future__ import annotations

from train.errors import UserError
from train.graph.sizes import GraphSize
from train.graph.typed_meta import HeteroMeta

IGBH_TYPES = ("paper", "author", "institute", "fos")
IGBH_RELATIONS = (("paper", "cites", "paper"), ("paper", "written_by", "author"),
                  ("author", "affiliated_to", "institute"), ("paper", "topic", "fos"))
IGBH_LABELS = {19: "node_label_19", 2983: "node_label_2K"}  # data.num_classes -> the label file
IGBH_SPLIT = (0.6, 0.2)  # IGB's: train and val fractions of the papers, in id order


def igbh_label_name(num_classes: int) -> str:
    """The label file (without .npy) of IGBH's label set of `num_classes` classes; another count is refused."""
    if num_classes not in IGBH_LABELS:
        files = ", ".join(f"{name}.npy" for name in IGBH_LABELS.values())
        raise UserError(f"data.num_classes={num_classes} is not one of IGBH's label sets; expected "
                        f"{' or '.join(str(c) for c in IGBH_LABELS)} ({files}).")
    return IGBH_LABELS[num_classes]


def igbh_full_unprepared(name: str) -> str:
    """Why data.name=igbh-full (the published size alone) cannot train, and what would."""
    return (f"data.name={name} is IGBH-full's published size, for the memory plan only (make plan): to train on it, "
            "download it (IllinoisGraphBenchmark/IGB-Datasets' download scripts) and give data.name=igbh "
            "data.path=FOLDER (its full/ folder).")


def igbh_full() -> GraphSize:
    """IGBH-full as MLPerf trains it (IGB-Datasets' dataloader and MLPerf's GNN reference): 269,346,174 papers,
    277,220,883 authors, 26,918 institutes and 712,960 fields of study (547,306,935 nodes), 1024 float32 features
    each (2.24 TB), 19 classes; 5,812,005,639 edges in four relations (cites 3,996,442,004; written_by 716,761,549;
    affiliated_to 48,521,486; topic 1,050,280,600), each but cites with its reverse: 7,627,569,274 directed edges.
    IGB's split: 60% / 20% / 20% of the 227,130,858 labelled papers."""
    counts = (269_346_174, 277_220_883, 26_918, 712_960)
    edges = {"cites": 3_996_442_004, "written_by": 716_761_549, "affiliated_to": 48_521_486, "topic": 1_050_280_600}
    types = tuple(t for src, rel, dst in IGBH_RELATIONS
                  for t in ((src, rel, dst),) + (((dst, f"rev_{rel}", src),) if src != dst else ()))
    directed = sum(edges[rel.removeprefix("rev_")] for _, rel, _ in types)
    labelled = 227_130_858
    train, val = int(labelled * IGBH_SPLIT[0]), int(labelled * IGBH_SPLIT[1])
    meta = HeteroMeta(IGBH_TYPES, types, counts, (1024,) * 4, "paper")
    return GraphSize(sum(counts), directed, 1024, 19, (train, val, labelled - train - val), form="heterogeneous",
                     meta=meta)
