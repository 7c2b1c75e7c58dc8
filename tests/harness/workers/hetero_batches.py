"""`python -m tests.harness.workers.hetero_batches fit ...`: `python -m train` whose every training batch of a
heterogeneous graph is checked against the graph it came from (tests/test_hetero_data.py): each edge's
`edge_type` is the graph's for that edge (by e_id), each node's `node_type` the graph's for that node (by n_id),
every seed of the target type. Prints how many batches were checked when the run ends."""
import atexit

import torch

from train.graph.form import graph_csc, graph_edge_rows, graph_meta
from train.graph.sharing.shared_graph import csc_targets
from train.loop import fit

checked = [0]
original_batches = fit.Trainer.batches


def batches(self, seeds, epoch):
    data, meta = self.data, graph_meta(self.data)
    colptr, row, _perm = graph_csc(data)
    rows = graph_edge_rows(data)
    edge_type = rows.in_csc_order("edge_type")
    position = {int(e): p for p, e in enumerate(rows.perm.tolist())}  # the user's edge id -> CSC position
    for batch in original_batches(self, seeds, epoch):
        assert torch.equal(batch.node_type, data.node_type[batch.n_id])
        assert bool((batch.node_type[: batch.batch_size] == meta.target_index).all())
        checked[0] += 1
        if "e_id" not in batch:  # a feature-only model's batch: its seeds alone
            assert batch.edge_index.numel() == 0 and batch.edge_type.numel() == 0
            yield batch
            continue
        at = torch.tensor([position[int(e)] for e in batch.e_id], dtype=torch.long)
        assert torch.equal(batch.edge_type, edge_type[at].long())
        src, dst = batch.n_id[batch.edge_index]
        assert torch.equal(src, row[at].long()) and torch.equal(dst, csc_targets(colptr)[at])
        yield batch


fit.Trainer.batches = batches
atexit.register(lambda: print(f"hetero batches checked {checked[0]}", flush=True))

from train.__main__ import console_entry  # noqa: E402 (after the change above)

console_entry()
