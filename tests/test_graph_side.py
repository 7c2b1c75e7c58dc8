"""train/graph/side.py: what the project keeps beside a PyG Data lives in one frozen GraphSide, outside the
Data's store, and a copy of a graph that keeps something new leaves the original's side as it was."""

from __future__ import annotations

import copy

import torch
from torch_geometric.data import Data

from train.graph.edge_rows import EdgeRows
from train.graph.form import (
    attach_csc,
    attach_edge_rows,
    edge_rows_attached,
    form_of,
    graph_csc,
    graph_edge_rows,
    graph_segments,
)
from train.graph.side import EMPTY, GraphSide, side_of
from train.graph.typed_meta import HeteroMeta, attach_meta, graph_meta


def csc_of(nodes: int) -> tuple:
    return torch.zeros(nodes + 1, dtype=torch.long), torch.zeros(0, dtype=torch.long), None


def test_every_accessor_keeps_its_field_in_the_one_side_and_nothing_in_the_store():
    data = Data(x=torch.zeros(3, 2))
    assert side_of(data) is EMPTY and graph_csc(data) is None and not edge_rows_attached(data)
    meta = HeteroMeta(("a",), (("a", "to", "a"),), (3,), (2,), "a")
    rows = EdgeRows({"edge_weight": torch.ones(0)}, torch.arange(0), csc_order=True)
    attach_meta(attach_edge_rows(attach_csc(data, csc_of(3)), rows), meta)
    side = side_of(data)
    assert isinstance(side, GraphSide) and side.csc is graph_csc(data) and graph_edge_rows(data) is rows
    assert graph_meta(data) is meta and graph_segments(data) is None
    assert set(data.keys()) == {"x"}  # the store, which PyG copies into every batch, holds none of them


def test_edge_rows_kept_as_none_are_attached_unlike_rows_never_kept():
    assert not edge_rows_attached(Data())
    kept = attach_edge_rows(Data(), None)
    assert edge_rows_attached(kept) and graph_edge_rows(kept) is None


def test_keeping_on_a_copy_leaves_the_originals_side_as_it_was():
    original = attach_csc(Data(x=torch.zeros(3, 2)), csc_of(3))
    duplicate = copy.copy(original)
    assert graph_csc(duplicate) is graph_csc(original)  # a copy shares what was kept
    attach_csc(duplicate, csc_of(5))
    assert graph_csc(original)[0].numel() == 4 and graph_csc(duplicate)[0].numel() == 6


def test_a_typed_graphs_structure_keeps_its_csc_and_segments_together():
    meta = HeteroMeta(("a", "b"), (("a", "to", "b"), ("b", "to", "a")), (2, 2), (1, 1), "a")
    graph = attach_meta(Data(x=torch.zeros(4, 1), edge_index=torch.tensor([[0, 2, 1], [2, 0, 3]]),
                             edge_type=torch.tensor([0, 1, 0]), node_type=torch.tensor([0, 0, 1, 1])), meta)
    colptr, row, perm = form_of(graph).structure(graph)
    assert side_of(graph).csc == (colptr, row, perm) and side_of(graph).segments is graph_segments(graph)
    assert graph_segments(graph) is not None and int(colptr[-1]) == 3
