"""OGB's link-property dataset ogbl-citation2 through `ogb`'s PyG loader, with its own split, for the link task: its
facts, without torch (opened with torch in train/graph/datasets/ogb_graphs.py).

ogb processes the raw files into `<root>/ogbl_citation2/processed/` as for the ogbn datasets
(train/graph/datasets/ogb_nodes.py:
the same loader without its prompts): raw/edge.csv.gz (the training citations, source cites target),
node-feat.csv.gz (128 features per paper), node_year.csv.gz, num-node-list.csv.gz and num-edge-list.csv.gz. The
split is OGB's by time, split/time/{train,valid,test}.pt: each a dict of `source_node` and `target_node` [M], and
in valid and test `target_node_neg` [M, 1000], each held-out citation's own 1,000 negative targets. OGB pickled
them as NumPy arrays, which torch's weights-only load refuses by default; ogb_graphs reads them itself,
allowing NumPy's arrays (under NumPy 1's and 2's names) and nothing more, and names a file that is missing,
damaged or holds the wrong arrays.

The graph as the link task reads it (the fields' names: train/graph/link_fields.py):
- `x` [N, 128];
- `edge_index`: the training citations in both directions. A new paper cites but is not yet cited, so over the
  directed graph no message would reach the source of a held-out citation; OGB's citation2 examples and its
  leaderboard's neighbour-sampled GraphSAGE pass messages over this same undirected graph (`to_undirected`);
- `train_pos_edge_index`: the training citations as OGB gives them (directed), the positives to train on;
- `val_pos_edge_index`, `test_pos_edge_index` and `val_neg_dst`, `test_neg_dst` (1,000 per positive).
"""

from __future__ import annotations

from dataclasses import dataclass

SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}  # our split: OGB's file
SOURCE, TARGET, NEGATIVES = "source_node", "target_node", "target_node_neg"  # the arrays in OGB's split files


@dataclass(frozen=True)
class OgbLinkInfo:
    folder: str  # under the data root, as ogb names it
    split: str  # the official split's folder under <folder>/split/
    raw: tuple[str, ...]  # the raw files its processing reads

    def split_file(self, split: str) -> str:
        """The file of our `split` (train, val, test), relative to the folder."""
        return f"split/{self.split}/{SPLIT_FILES[split]}.pt"

    @property
    def split_files(self) -> tuple[str, ...]:
        return tuple(self.split_file(split) for split in SPLIT_FILES)

    @property
    def needed(self) -> tuple[str, ...]:
        return tuple(f"raw/{f}" for f in self.raw) + self.split_files

    @property
    def processed(self) -> tuple[str, ...]:
        return ("processed/geometric_data_processed.pt",)


OGB_LINK_DATASETS: dict[str, OgbLinkInfo] = {
    "ogbl-citation2": OgbLinkInfo("ogbl_citation2", "time", ("edge.csv.gz", "node-feat.csv.gz", "node_year.csv.gz",
                                                             "num-node-list.csv.gz", "num-edge-list.csv.gz")),
}
