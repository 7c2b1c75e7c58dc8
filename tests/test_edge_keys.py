"""An edge's key (train/graph/edge_keys.py), the one form both the split's value lookup and the link batches'
removal of their seed edges find an edge by: distinct per (src, dst), exact in int64 up to MAX_KEYED_NODES nodes
(int32 ends too), and a larger graph refused by name, by the helper and by both of its users."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from train.errors import UserError
from train.graph.edge_keys import MAX_KEYED_NODES, edge_keys
from train.graph.link_split import values_of_edges
from train.loop.tasks.link_batches import without_edges


def test_each_pair_has_its_own_key_and_a_reverse_edge_another():
    nodes = 5
    every = torch.cartesian_prod(torch.arange(nodes), torch.arange(nodes)).t()
    keys = edge_keys(every, nodes)
    assert keys.dtype == torch.long and keys.unique().numel() == nodes * nodes
    assert keys.tolist() == [s * nodes + d for s, d in every.t().tolist()]
    assert edge_keys(torch.tensor([[1], [2]]), nodes) != edge_keys(torch.tensor([[2], [1]]), nodes)


def test_keys_are_exact_up_to_the_bound_and_int32_ends_do_not_wrap():
    assert MAX_KEYED_NODES**2 - 1 <= 2**63 - 1 < (MAX_KEYED_NODES + 1)**2 - 1  # the bound is the largest that fits
    last = MAX_KEYED_NODES - 1
    assert int(edge_keys(torch.tensor([[last], [last]]), MAX_KEYED_NODES)) == MAX_KEYED_NODES**2 - 1
    ends = torch.tensor([[99_999], [99_998]], dtype=torch.int32)  # the key passes 2**31; int32 would wrap
    assert int(edge_keys(ends, 100_000)) == 99_999 * 100_000 + 99_998


def test_a_graph_too_large_for_int64_keys_is_refused_naming_its_size_and_the_bound():
    with pytest.raises(UserError) as refused:
        edge_keys(torch.tensor([[0], [1]]), MAX_KEYED_NODES + 1)
    assert str(refused.value) == ("a graph of 3,037,000,500 nodes is too large to find its edges by their ends: an "
                                  "edge's key (src * nodes + dst) fits int64 only for at most 3,037,000,499 nodes.")


def test_the_split_s_value_lookup_and_the_batches_edge_removal_key_edges_through_it():
    """Both users refuse what the helper refuses (they wrapped silently before) and still find the right edges."""
    huge = MAX_KEYED_NODES + 1
    graph = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), edge_attr=torch.arange(3.0)[:, None], num_nodes=3)
    assert values_of_edges(graph, torch.tensor([[2, 0], [0, 1]]))["edge_attr"].flatten().tolist() == [2.0, 0.0]
    with pytest.raises(UserError, match="too large to find its edges"):
        values_of_edges(Data(edge_index=graph.edge_index, edge_attr=graph.edge_attr, num_nodes=huge), graph.edge_index)
    batch = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), n_id=torch.tensor([10, 11, 12]), num_nodes=3)
    kept = without_edges(batch.clone(), torch.tensor([[11], [12]]), undirected=False)
    assert kept.edge_index.tolist() == [[0, 2], [1, 0]]
    with pytest.raises(UserError, match="too large to find its edges"):
        without_edges(Data(edge_index=batch.edge_index, n_id=torch.tensor([0, 1, huge - 1]), num_nodes=3),
                      torch.tensor([[0], [1]]), undirected=True)
