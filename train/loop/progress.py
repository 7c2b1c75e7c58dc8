"""The progress display of rank 0: what a user watches while a run trains.

In a terminal (output.progress=auto or bar) a bar per epoch shows the batch loss; in a log file a
line every trainer.log_every steps. After each epoch one line with the epoch's mean loss and
accuracies (and ROC-AUCs for multi-label nodes; a task's further figures: link prediction's AUC, AP). Epochs are
numbered from 0, as metrics.jsonl and the checkpoint lines number them.
"""

from __future__ import annotations

import sys

from train.loop.records import EpochRecord, Sink, StepRecord


def step_line(record: StepRecord) -> str:
    """`epoch 0 step 20/98 batch loss 1.3324`: the loss of this one batch (it jumps from batch to batch)."""
    return f"epoch {record.epoch} step {record.step}/{record.steps_in_epoch} batch loss {record.loss:.4f}"


def epoch_line(record: EpochRecord) -> str:
    """`epoch   0 mean loss 1.7337 train_acc ...`: the loss averaged over the epoch's seeds of all ranks."""
    acc = "" if record.val_acc is None else f" val_acc {record.val_acc:.4f} test_acc {record.test_acc:.4f}"
    if record.val_rocauc is not None:  # multi-label nodes: the run's metric
        acc += f" val_rocauc {record.val_rocauc:.4f} test_rocauc {record.test_rocauc:.4f}"
    for name, value in (record.more or {}).items():  # a task's further figures (link prediction: AUC, AP, ...)
        acc += f" {name} {value:.4f}"
    rate = "" if record.seeds_per_second is None else f", {record.seeds_per_second:.0f} seeds/s"
    return (f"epoch {record.epoch:3d} mean loss {record.loss:.4f} train_acc {record.train_acc:.4f}{acc} "
            f"({record.epoch_seconds:.1f} s{rate})")


class ProgressDisplay(Sink):
    """A tqdm bar per epoch when stdout is a terminal (output.progress), else plain lines; a line per epoch."""

    def __init__(self, config, env, out_dir):
        mode = config.output.progress
        self.use_bar = mode == "bar" or (mode == "auto" and sys.stdout.isatty())
        self.every = config.trainer.log_every
        self.bar = None

    def step(self, record: StepRecord) -> None:
        if not self.use_bar:
            if record.step % self.every == 0 or record.step == record.steps_in_epoch:
                print(step_line(record), flush=True)
            return
        if self.bar is None:
            from tqdm import tqdm  # optional here: PyG's dependency, not this package's; a terminal's bar alone

            self.bar = tqdm(total=record.steps_in_epoch, initial=record.step - 1, desc=f"epoch {record.epoch}",
                            leave=False)
        self.bar.update(1)
        self.bar.set_postfix(batch_loss=f"{record.loss:.4f}")

    def epoch(self, record: EpochRecord) -> None:
        self.close()
        print(epoch_line(record), flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
