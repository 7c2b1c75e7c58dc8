"""jobs/knobs.md is read whole or refused: a malformed row or a name given twice stops every reader
(jobs/lib/knobs.sh), naming the line, instead of the setting silently missing from make and the job."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLE = (ROOT / "jobs" / "knobs.md").read_text()
NODES_ROW = next(line for line in TABLE.splitlines() if line.startswith("| NODES "))


def knobs_in_copy(tmp_path: Path, table: str, *args: str) -> subprocess.CompletedProcess:
    """`bash jobs/lib/knobs.sh ARGS` in a copy of the project's jobs/ whose table is `table`."""
    (tmp_path / "jobs" / "lib").mkdir(parents=True)
    shutil.copy(ROOT / "jobs" / "lib" / "knobs.sh", tmp_path / "jobs" / "lib" / "knobs.sh")
    (tmp_path / "jobs" / "knobs.md").write_text(table)
    return subprocess.run(["bash", str(tmp_path / "jobs" / "lib" / "knobs.sh"), *args], capture_output=True,
                          text=True, timeout=60)


def line_number(table: str, line: str) -> int:
    return table.splitlines().index(line) + 1


def test_the_shipped_table_reads_every_row():
    done = subprocess.run(["bash", str(ROOT / "jobs" / "lib" / "knobs.sh"), "make-defaults"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    rows = [line for line in TABLE.splitlines() if line.startswith("| ") and not line.startswith("| name ")]
    assert len(done.stdout.splitlines()) == len(rows) and done.stdout.startswith("NODES=1\n")


@pytest.mark.parametrize("bad", [
    NODES_ROW.replace("| NODES ", "| nodes ", 1),  # a name not in capitals
    NODES_ROW.rsplit("|", 2)[0] + "|",  # a cell missing
    "| NODES | 1 |",  # a row cut short
])
def test_a_malformed_row_is_refused_with_its_line(tmp_path, bad):
    table = TABLE.replace(NODES_ROW, bad)
    done = knobs_in_copy(tmp_path, table, "make-defaults")
    assert done.returncode == 1 and done.stdout == ""
    number = line_number(table, bad)
    assert f"knobs.md line {number} is not a row \"| NAME | default | shape | sbatch | job | doc |\"" in done.stderr
    assert bad in done.stderr


def test_a_setting_given_twice_is_refused_with_both_lines(tmp_path):
    table = TABLE.replace(NODES_ROW, NODES_ROW + "\n" + NODES_ROW)
    done = knobs_in_copy(tmp_path, table, "NODES")
    first = line_number(table, NODES_ROW)
    assert done.returncode == 1
    assert f"knobs.md line {first + 1}: NODES already has a row (line {first})" in done.stderr


def test_a_script_that_sources_a_malformed_table_stops(tmp_path):
    """Sourced (as lib/checks.sh and jobs/submit.sh do), the refusal stops the script under `set -e`."""
    knobs_in_copy(tmp_path, TABLE.replace(NODES_ROW, "| NODES | 1 |"), "NODES")
    script = f'set -euo pipefail; source "{tmp_path}/jobs/lib/knobs.sh"; echo "read ${{#KNOBS[@]}}"'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "read" not in done.stdout and "is not a row" in done.stderr
