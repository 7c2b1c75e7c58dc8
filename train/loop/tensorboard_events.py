"""TensorBoard's event files of a run (output.tensorboard): RUN_DIR/tensorboard/, written by rank 0's sink.

Per epoch, at global step = the epoch (from 0, as metrics.jsonl numbers them): the loss, the accuracies (and the
ROC-AUCs of multi-label nodes), seeds per second, the epoch's times and each phase's (train/loop/timing.py), the
learning rate, and on CUDA rank 0's GPU memory. A resumed run opens a new event file in the same folder with
`purge_step` = the first epoch it trains (SummaryWriter's own mechanism): TensorBoard hides what an earlier
attempt wrote from that epoch on, so no epoch shows twice. `make tensorboard` serves runs/ (login/tensorboard.py).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import torch

from train.loop.records import EpochRecord, Sink
from train.storage.writes import guarded

TENSORBOARD = "tensorboard"  # the folder in the run directory
GIB = 2**30
EVENT_FILE = re.compile(r"events\.out\.tfevents\.(\d+)\.")  # SummaryWriter's names: the creation second first


def unavailable() -> str | None:
    """Why torch.utils.tensorboard cannot write here (the tensorboard package is missing or too old); None: it can."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401 - optional (`.[tensorboard]`): the import is the check
    except ImportError as exc:
        return f"the tensorboard package cannot be imported ({exc}); pip install tensorboard"
    return None


def switched_on(setting: str, missing: str | None) -> tuple[bool, str | None]:
    """(write event files?, the line that says why not) for output.tensorboard and what `unavailable` said.
    `true` where the package is missing is refused before the run (train/cli/preflight.py)."""
    if setting == "false":
        return False, None
    if missing is None:
        return True, None
    return False, f"TensorBoard: no event files, as {missing} (output.tensorboard=false: off without this line)"


def scalars(record: EpochRecord, lr: float) -> dict[str, float]:
    """Tag -> value of one epoch; what the epoch did not measure (val/test between evaluations) is left out."""
    values = {"loss/train": record.loss, "accuracy/train": record.train_acc, "accuracy/val": record.val_acc,
              "accuracy/test": record.test_acc, "rocauc/val": record.val_rocauc, "rocauc/test": record.test_rocauc,
              "throughput/seeds_per_second": record.seeds_per_second,
              "time/epoch_seconds": record.epoch_seconds, "time/wall_seconds": record.wall_seconds, "optim/lr": lr}
    values.update({f"time/phase/{name}": seconds for name, seconds in (record.phase_seconds or {}).items()})
    return {tag: float(value) for tag, value in values.items() if value is not None}


def gpu_memory() -> dict[str, float]:
    """This process's GPU memory in GiB (now, the peak so far, what the allocator holds) when it uses CUDA."""
    if not torch.cuda.is_initialized():
        return {}
    return {"memory/gpu_allocated_gib": torch.cuda.memory_allocated() / GIB,
            "memory/gpu_peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
            "memory/gpu_reserved_gib": torch.cuda.memory_reserved() / GIB}


def after_existing_files(folder: Path) -> None:
    """Wait (at most a second) until a new event file's name sorts after every one in `folder`: readers replay
    the files in name order, and the purge of a resumed run must come after what it purges."""
    seconds = [int(m.group(1)) for p in folder.glob("events.out.tfevents.*") if (m := EVENT_FILE.match(p.name))]
    wait = max(seconds, default=0) + 1 - time.time()
    if 0 < wait <= 1:
        time.sleep(wait)


class TensorBoardEvents(Sink):
    """RUN_DIR/tensorboard/: one scalar per tag and epoch (`scalars`, `gpu_memory`); nothing when switched off."""

    def __init__(self, config, env, out_dir: Path):
        self.folder = Path(out_dir) / TENSORBOARD
        self.lr = config.optim.lr  # Adam's, constant: no scheduler changes it (train/loop/fit.py)
        setting = config.output.tensorboard
        self.on, why_not = switched_on(setting, unavailable() if setting != "false" else None)
        if why_not:
            print(why_not, flush=True)
        self.writer = None

    def start(self, history: list[EpochRecord]) -> None:
        if not self.on:
            return
        from torch.utils.tensorboard import SummaryWriter  # optional: the extra `.[tensorboard]`

        self.close()
        first = history[-1].epoch + 1 if history else 0  # the epoch this run trains first
        with guarded(self.folder / "events"):  # a full disk ends the run as any file of it would (train/storage)
            self.folder.mkdir(parents=True, exist_ok=True)
            after_existing_files(self.folder)
            self.writer = SummaryWriter(str(self.folder), purge_step=first)
        print(f"tensorboard events {self.folder} (from epoch {first}; make tensorboard serves them)", flush=True)

    def epoch(self, record: EpochRecord) -> None:
        if self.writer is None:
            return
        with guarded(self.folder / "events"):
            for tag, value in {**scalars(record, self.lr), **gpu_memory()}.items():
                self.writer.add_scalar(tag, value, global_step=record.epoch)
            self.writer.flush()  # on disk at each epoch: a live `make tensorboard` shows it, a preemption keeps it

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
