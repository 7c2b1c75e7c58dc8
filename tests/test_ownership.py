"""The striped ownership of feature rows (train/graph/sharing/ownership.py): every id owned once, balanced, the
file and shard slices a loader reads agree with owner/local_row, and a different layout refused on resume."""

import pytest
import torch

from train.errors import UserError
from train.graph.sharing.ownership import Ownership, check_same_layout


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("num_nodes", [0, 1, 5, 11, 64])
def test_every_id_owned_once_and_balanced(parts, num_nodes):
    own = Ownership(parts, num_nodes)
    seen = torch.cat([own.owned_ids(part) for part in range(parts)])
    assert sorted(seen.tolist()) == list(range(num_nodes))
    sizes = [own.rows_of(part) for part in range(parts)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == num_nodes
    for part in range(parts):
        ids = own.owned_ids(part)
        assert (own.owner(ids) == part).all()
        assert own.local_row(ids).tolist() == list(range(ids.numel()))


@pytest.mark.parametrize("parts", [1, 2, 3, 4])
def test_file_and_shard_slices_of_any_range(parts):
    own = Ownership(parts, 13)
    for part in range(parts):
        for start in range(14):
            for stop in range(start, 14):
                ids = torch.arange(start, stop)[own.file_rows(part, start, stop)]
                assert ids.tolist() == [i for i in range(start, stop) if i % parts == part]
                rows = own.local_rows(part, start, stop)
                assert own.local_row(ids).tolist() == list(range(rows.start, rows.stop))


def test_typed_graph_balanced_per_type():
    counts = {"paper": 10, "author": 7, "institute": 1, "fos": 5}
    own = Ownership.of_types(3, counts)
    per_type = {name: [] for name in counts}
    for part in range(3):
        shard = own.owned_ids(part)
        offset = 0
        for name, (file_rows, shard_rows) in own.type_slices(part).items():
            ids = torch.arange(offset, offset + counts[name])[file_rows]
            assert shard[shard_rows].tolist() == ids.tolist()  # the type's rows land where the shard holds them
            per_type[name].append(ids.numel())
            offset += counts[name]
    for name, sizes in per_type.items():
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == counts[name], name


def test_state_dict_round_trip_and_another_layout_refused():
    own = Ownership.of_types(2, {"a": 3, "b": 4})
    assert Ownership.from_state_dict(own.state_dict()) == own
    check_same_layout(own.state_dict(), own.state_dict())
    with pytest.raises(UserError) as refused:
        check_same_layout(own.state_dict(), Ownership.of_types(3, {"a": 3, "b": 4}).state_dict())
    assert "over 2 node(s)" in str(refused.value) and "over 3 node(s)" in str(refused.value)
    with pytest.raises(UserError, match="a copy of the features per node"):
        check_same_layout(None, own.state_dict())


def test_bad_parts_refused():
    with pytest.raises(ValueError, match="parts=0"):
        Ownership(0, 5)
    with pytest.raises(ValueError, match="node 2 is not one of the 2 parts"):
        Ownership(2, 5).rows_of(2)
