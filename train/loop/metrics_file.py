"""metrics.jsonl, the run's one record per epoch: this sink is its only writer.

Each line is written whole in one write() and is on disk when the call returns, or not at all: a
write that stops short (a full disk) is cut back, so readers (train/loop/report.py, `make report`
mid-run) never meet a partial line. At the start of a run the file is rewritten to hold exactly the
epochs of the run state: none on a fresh start, the checkpoint's on a resume (no epoch twice).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from pathlib import Path

from train.loop.checkpoint import atomic_write_text
from train.loop.records import EpochRecord, Sink

METRICS = "metrics.jsonl"


def line(record: EpochRecord) -> str:
    return json.dumps(record.row()) + "\n"


def append_line(path: Path, text: str) -> None:
    """Append `text` in one write; on any error the file is cut back to its size before (no partial line)."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, f"wrote {written} of {len(data)} bytes of a line", str(path))
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


class MetricsFile(Sink):
    """RUN_DIR/metrics.jsonl: one JSON line per finished epoch (EpochRecord.row)."""

    def __init__(self, config, env, out_dir: Path):
        self.path = Path(out_dir) / METRICS

    def start(self, history: list[EpochRecord]) -> None:
        atomic_write_text(self.path, "".join(line(record) for record in history))

    def epoch(self, record: EpochRecord) -> None:
        append_line(self.path, line(record))
