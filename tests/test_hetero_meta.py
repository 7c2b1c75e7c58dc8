"""HeteroMeta: the types of a heterogeneous graph in its typed homogeneous form (train/graph/typed_meta.py)."""

from train.graph.typed_meta import HeteroMeta

META = HeteroMeta(("paper", "author"), (("author", "writes", "paper"), ("paper", "cites", "paper")), (5, 3), (4, 0),
                  "paper")


def test_offsets_number_the_types_in_order():
    assert META.offsets == (0, 5)
    assert META.target_index == 0


def test_metadata_is_pyg_s_and_the_dict_round_trips():
    assert META.metadata() == (["paper", "author"], [("author", "writes", "paper"), ("paper", "cites", "paper")])
    assert HeteroMeta.from_dict(META.to_dict()) == META
