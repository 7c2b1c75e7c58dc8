"""What the training loop emits: one record per step and one per epoch, and what a sink that receives them is.

The loop (train/loop/fit.py) knows nothing of files or terminals: it hands each record to the run's
sinks (train/loop/outputs.py: metrics.jsonl, the progress display, ...), and the step record to its
callbacks (the per-step vote). A sink is a class with the four methods of `Sink`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ROCAUC_FIELDS = ("val_rocauc", "test_rocauc")
# The phases an epoch's time is split into (EpochRecord.phase_seconds), as train/loop/timing.py measures them: here,
# without torch, for the report (`python -m train --help` imports it).
PHASES = ("sample", "gather", "copy", "compute", "allreduce", "eval", "other")
MEASURED = PHASES[:-1]  # `other` is what the wall clock saw beyond these


@dataclass(frozen=True)
class StepRecord:
    """One training step of this rank."""

    epoch: int  # from 0, as metrics.jsonl and the progress display number them
    step: int  # steps of `epoch` done on this rank, this one included (1 for the first)
    steps_in_epoch: int
    loss: float  # this batch's loss on this rank (the epoch's loss is the mean over all ranks' seeds)
    seeds: int  # the batch's seed nodes


@dataclass(frozen=True)
class EpochRecord:
    """One finished epoch, alike on every rank: a line of metrics.jsonl (the fields in this order, the ROC-AUCs only
    where there are some)."""

    epoch: int
    loss: float  # mean over the epoch's seeds of all ranks
    train_acc: float  # multi-label: over the labelled tasks, a logit above 0 read as positive (train/loop/targets.py)
    val_acc: float | None  # None: not evaluated this epoch (trainer.eval_every)
    test_acc: float | None
    epoch_seconds: float  # training only
    seeds_per_second: float | None  # all ranks together
    world_size: int
    phase_seconds: dict | None = None  # where the time went, mean over ranks (train/loop/timing.py)
    wall_seconds: float | None = None  # training and evaluation: the phases add up to it
    val_rocauc: float | None = None  # multi-label nodes, evaluated epochs: the mean ROC-AUC over tasks
    test_rocauc: float | None = None
    # a task's further figures by name, each split's (link prediction: val_auc, test_ap, val_mrr, test_hits@50, ...)
    more: dict | None = None

    def row(self) -> dict:
        """The record as a metrics.jsonl row (and an entry of the run's history in checkpoints); the ROC-AUCs only
        when there are some (a single-label run's rows are the ones metrics.jsonl always had), a task's further
        figures after the others."""
        row = dataclasses.asdict(self)
        more = row.pop("more") or {}
        return {**{k: v for k, v in row.items() if k not in ROCAUC_FIELDS or v is not None}, **more}

    @classmethod
    def from_row(cls, row: dict) -> EpochRecord:
        """A row of the history back as a record (runs recorded before the phase times lack them)."""
        return cls(**split_figures({k: v for k, v in row.items() if k in _FIELDS or k.startswith(("val_", "test_"))}))


def split_figures(figures: dict) -> dict:
    """An evaluation's figures as `EpochRecord`'s arguments: its own fields by name, the rest in `more`."""
    more = {k: v for k, v in figures.items() if k not in _FIELDS}
    return {**{k: v for k, v in figures.items() if k in _FIELDS}, **({"more": more} if more else {})}


_FIELDS = {f.name for f in dataclasses.fields(EpochRecord)} - {"more"}


class Sink:
    """What subscribes to the loop's records; a subclass overrides what it needs. Built on rank 0 as
    `cls(config, env, out_dir)` by train/loop/outputs.py. A sink that writes files writes them through
    train/storage/writes.py (or under its `guarded(path)`), so a failing file system ends every rank alike."""

    def start(self, history: list[EpochRecord]) -> None:
        """The run so far, before its first step: the epochs a resumed run restored, none on a fresh start."""

    def step(self, record: StepRecord) -> None:
        """After each training step of rank 0."""

    def epoch(self, record: EpochRecord) -> None:
        """After each epoch, its metrics reduced over all ranks (and evaluated when due)."""

    def close(self) -> None:
        """The loop ended (all epochs done, or stopped): release what is open."""
