"""Which node (the machine, not the rank) owns each feature row under `data.features=sharded` (issue 40).

Striped: node ``id % parts`` owns row ``id``, at row ``id // parts`` of its shard. Chosen over a seeded hash or
permutation and over contiguous blocks because it is
  * table-free: owner and local row are one integer operation each, on any device, for billions of ids (a
    seeded permutation needs an N-long table on every rank, or a bijective hash that still needs a table for
    the local row);
  * balanced without METIS: every node owns ``ceil`` or ``floor`` of ``num_nodes / parts`` rows, and so does
    every id range, hence every node type of a typed graph (its ids are one contiguous range in type order,
    train/graph/typed_graph.py): each type's rows are balanced on their own, to within one row per node;
  * even in traffic: a batch's ids, whatever their order (OGB's are by time, a typed graph's by type), spread
    over all owners, where contiguous blocks would send a batch's neighbourhood mostly to one owner;
  * readable from files in place: a node's rows of any id range are one strided slice (`file_rows`), so a loader
    reads its own rows of a memory-mapped ``.npy`` (one per node type, or one for all) and never the whole matrix.

API (pure, torch only):
    own = Ownership(parts=2, num_nodes=10)                    # or Ownership.of_types(parts, {"paper": 6, ...})
    own.owner(ids) -> Tensor          # the node owning each id (int64)
    own.local_row(ids) -> Tensor      # its row in that node's shard
    own.rows_of(part) -> int          # how many rows node `part` holds (its shard's length)
    own.owned_ids(part) -> Tensor     # the global ids of node `part`'s rows, in shard order
    own.file_rows(part, start, stop) -> slice   # of the id range [start, stop) (a type's rows, a file's rows):
                                      # the positions within that range node `part` owns, as a slice to read
    own.local_rows(part, start, stop) -> slice  # where those rows land in node `part`'s shard
    own.type_slices(part) -> dict[type, (file slice, shard slice)]  # per node type of a typed graph
    own.state_dict() / Ownership.from_state_dict(d) / own.describe()  # what the checkpoint's fingerprint keeps
    check_same_layout(saved, current) # raises UserError naming both layouts when they differ
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from train.errors import UserError

SCHEME = "striped"  # the one scheme: its name travels in state_dict, so a later scheme is told apart on resume


@dataclass(frozen=True)
class Ownership:
    """Rows striped over `parts` nodes. `types`: a typed graph's (name, count) in type order (ids contiguous per
    type, as train/graph/typed_graph.py numbers them); empty for a homogeneous graph."""

    parts: int
    num_nodes: int
    types: tuple[tuple[str, int], ...] = ()
    scheme: str = SCHEME

    def __post_init__(self):
        if self.parts < 1:
            raise ValueError(f"Ownership needs at least one part, got parts={self.parts}")
        if self.num_nodes < 0:
            raise ValueError(f"Ownership needs num_nodes >= 0, got {self.num_nodes}")
        if self.types and sum(count for _, count in self.types) != self.num_nodes:
            raise ValueError(f"the node types' counts {dict(self.types)} do not add up to num_nodes={self.num_nodes}")
        if self.scheme != SCHEME:
            raise ValueError(f"ownership scheme {self.scheme!r} is not known; the one scheme is {SCHEME!r}")

    @classmethod
    def of_types(cls, parts: int, counts: Mapping[str, int]) -> "Ownership":
        """A typed graph's ownership: `counts` in type order (HeteroMeta's)."""
        types = tuple((name, int(count)) for name, count in counts.items())
        return cls(parts, sum(count for _, count in types), types)

    # ---- ids -> owners --------------------------------------------------------------------------------
    def owner(self, ids: Tensor) -> Tensor:
        """The node owning each id, where `ids` are (int64)."""
        return torch.remainder(ids.long(), self.parts)

    def local_row(self, ids: Tensor) -> Tensor:
        """Each id's row in its owner's shard."""
        return torch.div(ids.long(), self.parts, rounding_mode="floor")

    # ---- one node's rows ------------------------------------------------------------------------------
    def rows_of(self, part: int) -> int:
        """How many rows node `part` holds: ceil((num_nodes - part) / parts), none past the last id."""
        self._check_part(part)
        return max(self.num_nodes - part + self.parts - 1, 0) // self.parts

    def owned_ids(self, part: int) -> Tensor:
        """The global ids of node `part`'s rows, in the order its shard holds them."""
        self._check_part(part)
        return torch.arange(part, max(self.num_nodes, part), self.parts, dtype=torch.long)

    def file_rows(self, part: int, start: int, stop: int) -> slice:
        """The positions within the id range [start, stop) (0 = id `start`) that node `part` owns: what a loader
        reads of a file holding those ids' rows (a strided slice of a memory map reads no other row)."""
        self._check_part(part)
        first = (part - start) % self.parts
        return slice(first, max(stop - start, first), self.parts)

    def local_rows(self, part: int, start: int, stop: int) -> slice:
        """Where node `part`'s rows of the id range [start, stop) sit in its shard (contiguous, in id order)."""
        self._check_part(part)
        begin = max(start - part + self.parts - 1, 0) // self.parts
        end = max(stop - part + self.parts - 1, 0) // self.parts
        return slice(begin, max(end, begin))

    def type_slices(self, part: int) -> dict[str, tuple[slice, slice]]:
        """Per node type of a typed graph: (the type's own rows that node `part` owns, where they go in its
        shard). A homogeneous graph is one range, named ''."""
        out, offset = {}, 0
        for name, count in self.types or (("", self.num_nodes),):
            out[name] = (self.file_rows(part, offset, offset + count), self.local_rows(part, offset, offset + count))
            offset += count
        return out

    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.parts:
            raise ValueError(f"node {part} is not one of the {self.parts} parts (0 to {self.parts - 1})")

    # ---- identity -------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What identifies the layout (the checkpoint's fingerprint keeps it: train/loop/checkpoint.py)."""
        return {"scheme": self.scheme, "parts": self.parts, "num_nodes": self.num_nodes,
                "types": [list(pair) for pair in self.types]}

    @classmethod
    def from_state_dict(cls, state: Mapping) -> "Ownership":
        return cls(int(state["parts"]), int(state["num_nodes"]),
                   tuple((str(name), int(count)) for name, count in state.get("types", ())),
                   str(state.get("scheme", SCHEME)))

    def describe(self) -> str:
        """One line: 'features striped over 2 nodes (row id on node id % 2), 10 rows, at most 5 per node'."""
        typed = f" ({len(self.types)} node types, each balanced on its own)" if self.types else ""
        return (f"features {self.scheme} over {self.parts} node(s) (row id on node id % {self.parts}), "
                f"{self.num_nodes} rows{typed}, at most {self.rows_of(0)} per node")


def describe_layout(state: Mapping | None) -> str:
    """A fingerprint's layout in words: a copy per node (None), or the sharded ownership."""
    if not state:
        return "a copy of the features per node (data.features=node)"
    return f"data.features=sharded: {Ownership.from_state_dict(state).describe()}"


def check_same_layout(saved: Mapping | None, current: Mapping | None, source: str = "the checkpoint") -> None:
    """Refuse to resume rows laid out otherwise than they were saved: a requeue must see the same owners.

    Args:
        saved: the layout `source` was written with (an Ownership's state_dict, or None: a copy per node).
        current: this run's.
    """
    if (dict(saved) if saved else None) != (dict(current) if current else None):
        raise UserError(f"{source} was written with {describe_layout(saved)}, but this run has "
                        f"{describe_layout(current)}; resume with the same data.features and number of nodes, "
                        "or start afresh (trainer.resume=never).")
