"""metrics.jsonl, the run's one record per epoch: this sink is its only writer.

Each line is written whole in one write() and is on disk when the call returns, or not at all: a
write that stops short or fails (a full disk) is cut back (train/storage/writes.py), so readers
(train/loop/report.py, `make report` mid-run) never meet a partial line. At the start of a run the
file is rewritten to hold exactly the epochs of the run state: none on a fresh start, the checkpoint's
on a resume (no epoch twice).
"""

from __future__ import annotations

import json
from pathlib import Path

from train.loop.records import EpochRecord, Sink
from train.storage.writes import append_line, atomic_write_text

METRICS = "metrics.jsonl"


def line(record: EpochRecord) -> str:
    return json.dumps(record.row()) + "\n"


class MetricsFile(Sink):
    """RUN_DIR/metrics.jsonl: one JSON line per finished epoch (EpochRecord.row)."""

    def __init__(self, config, env, out_dir: Path):
        self.path = Path(out_dir) / METRICS

    def start(self, history: list[EpochRecord]) -> None:
        atomic_write_text(self.path, "".join(line(record) for record in history))

    def epoch(self, record: EpochRecord) -> None:
        append_line(self.path, line(record))
