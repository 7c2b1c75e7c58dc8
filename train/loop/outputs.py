"""Where the loop's records go: the sinks that subscribe to them, on rank 0.

`SINKS` is the list: a new output is one `Sink` class (train/loop/records.py)
added to it. Each is built as `cls(config, env, out_dir)`; the loop calls `Outputs`, which hands
every record to every sink in order. `start` and `epoch` are collective: whether rank 0's sinks wrote their
files reaches every rank (train/loop/rank0_writes.py), so a full disk ends all ranks alike.
"""

from __future__ import annotations

from pathlib import Path

from train.cluster.distenv import DistEnv
from train.config import Config
from train.loop.metrics_file import MetricsFile
from train.loop.progress import ProgressDisplay
from train.loop.rank0_writes import written_by_rank0
from train.loop.records import EpochRecord, Sink, StepRecord
from train.loop.tensorboard_events import TensorBoardEvents

SINKS: list[type[Sink]] = [MetricsFile, ProgressDisplay, TensorBoardEvents]


class Outputs:
    """The run's sinks, one call each per record; none on ranks other than 0 (their records are alike or
    rank 0's stands for them)."""

    def __init__(self, config: Config, env: DistEnv, out_dir: Path):
        self.is_main = env.is_main
        self.sinks: list[Sink] = [cls(config, env, out_dir) for cls in SINKS] if env.is_main else []

    def _to_all(self, method: str, *args) -> None:
        for sink in self.sinks:
            getattr(sink, method)(*args)

    def start(self, history: list[EpochRecord]) -> None:
        written_by_rank0(self.is_main, lambda: self._to_all("start", history))

    def step(self, record: StepRecord) -> None:
        self._to_all("step", record)

    def epoch(self, record: EpochRecord) -> None:
        written_by_rank0(self.is_main, lambda: self._to_all("epoch", record))

    def close(self) -> None:
        self._to_all("close")
