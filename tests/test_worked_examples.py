"""CONTRIBUTING.md's worked examples hold: each is applied, as written there, to a copy of the package, and what
the guide says follows from it is checked in that copy (tests/harness/workers/worked_examples.py). Also the
guide's map of the rooms is tests/test_layout.py's LAYERS."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layout import LAYERS

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "CONTRIBUTING.md").read_text()
WORKER = ROOT / "tests" / "harness" / "workers" / "worked_examples.py"
BLOCK = re.compile(r"```python\n# (\S+?)(?:, ([^\n]+))?\n(.*?)```", re.DOTALL)


def section(title: str) -> str:
    """The text of the guide's `### title` section."""
    start = GUIDE.index(f"### {title}\n")
    end = GUIDE.find("\n##", start + 4)
    return GUIDE[start:end]


def apply_examples(copy: Path, text: str) -> list[str]:
    """Each Python block of `text` whose first line is `# PATH` (a new file) or `# PATH, WHERE` (lines to insert
    after the line of PATH that starts with WHERE: `class TrainerConfig`, `TASKS`), applied under `copy`."""
    applied = []
    for path, where, body in BLOCK.findall(text):
        target = copy / path
        if not where:
            assert not target.exists(), f"{path}: the example's new file exists already"
            target.write_text(body)
        else:
            lines = target.read_text().splitlines(keepends=True)
            (at,) = [i for i, line in enumerate(lines) if line.startswith(where)]
            target.write_text("".join(lines[: at + 1]) + body + "".join(lines[at + 1:]))
        applied.append(path)
    return applied


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "train", tmp_path / "train", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def run_in(copy: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_adding_a_setting_is_its_one_line(package_copy):
    applied = apply_examples(package_copy, section("Adding a config setting"))
    assert applied == ["train/config/sections.py"]  # one declaration, nothing else
    done = run_in(package_copy, str(WORKER), "knob")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_adding_a_task_is_one_row_and_one_class_and_it_trains(package_copy, tmp_path):
    applied = apply_examples(package_copy, section("Adding a task"))
    assert applied == ["train/builtin_tasks.py", "train/loop/tasks/smoothed.py"]
    done = run_in(package_copy, str(WORKER), "task")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    run_dir = tmp_path / "run"
    fit = run_in(package_copy, "-m", "train", "fit", "--config", "tiny", "task.name=node-smoothed",
                 "trainer.epochs=1", "trainer.max_steps_per_epoch=3", f"output.dir={run_dir}", "output.progress=lines",
                 "output.tensorboard=false", timeout=300)
    assert fit.returncode == 0, fit.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["task"] == "node-smoothed"


def test_the_guides_map_of_the_rooms_is_the_layout_tests():
    table = GUIDE[GUIDE.index("## The rooms of train/: a map"):GUIDE.index("## Worked examples")]
    rows = [line for line in table.splitlines() if re.match(r"^\| \d+ \|", line)]
    assert [tuple(re.findall(r"`([\w.]+)`", row.split("|")[2])) for row in rows] == list(LAYERS)
    for number, row in enumerate(rows, 1):
        assert row.split("|")[4].strip() == ("layer 1" if number == 1 else f"layers 1-{number}")
