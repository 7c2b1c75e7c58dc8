"""`python -m tests.harness.workers.edge_batches fit ...`: `python -m train` whose every training batch is checked to
carry its edges' values (tests/test_edge_values.py): the graph's edge_attr rows are (source, target, column) and its
edge_weight source * 1000 + target, so each row is checked against the edge it belongs to. Prints how many batches
were checked when the run ends."""
import atexit

import torch

from train.loop import fit

checked = [0]
original_batches = fit.Trainer.batches


def batches(self, seeds, epoch):
    for batch in original_batches(self, seeds, epoch):
        src, dst = batch.n_id[batch.edge_index]
        assert torch.equal(batch.edge_attr[:, 0].long(), src) and torch.equal(batch.edge_attr[:, 1].long(), dst)
        assert torch.equal(batch.edge_attr[:, 2].long(), batch.e_id)
        assert torch.equal(batch.edge_weight, (src * 1000 + dst).float())
        checked[0] += 1
        yield batch


fit.Trainer.batches = batches
atexit.register(lambda: print(f"edge batches checked {checked[0]}", flush=True))

from train.__main__ import console_entry  # noqa: E402 (after the change above)

console_entry()
