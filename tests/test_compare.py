"""Runs side by side: `make report RUNS='a b'` (train/loop/compare.py), one table and one compare.png."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.test_report import row, write_run
from train.config import dump_config, load_config
from train.loop.compare import COMPARE, FIGSIZE, compare_table, differing_settings, draw_compare, run_labels
from train.loop.report import DPI, summarize

ROOT = Path(__file__).resolve().parents[1]


def make_report(*assignments: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RUN", "RUNS", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", "report", *assignments], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def two_runs(tmp_path) -> tuple[Path, Path]:
    """Two finished runs under runs/ that differ in optim.lr (and in what they reached)."""
    first = write_run(tmp_path / "runs" / "101")
    second = write_run(tmp_path / "runs" / "102", epochs=4)
    dump_config(load_config("tiny", ["trainer.epochs=6", "optim.lr=0.05"]), second / "config.yaml")
    return first, second


def test_make_report_with_several_runs_prints_one_table_and_draws_compare_png(two_runs):
    first, second = two_runs
    p = make_report(f"RUNS={first} {second}")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["run", "101", "102"]
    assert "epochs               6 of 6            4 of 6" in p.stdout
    assert "best val accuracy    0.8100 (epoch 3)  0.8100 (epoch 3)" in p.stdout
    assert "final test accuracy  0.8000 (epoch 5)  0.7900 (epoch 3)" in p.stdout
    assert "final loss           0.5200            0.6000" in p.stdout
    assert [line.split() for line in lines if line.startswith("optim.lr")] == [["optim.lr", "0.01", "0.05"]]
    assert not any(line.startswith(("output.dir", "trainer.epochs")) for line in lines)  # only what differs
    png = first.parent / COMPARE
    assert lines[-1] == f"curves               {png}"
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI)) == (1200, 450)
    assert not list(first.parent.glob(".*.tmp"))


def test_runs_are_named_by_id_under_runs(two_runs, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "train", "report", "101", "102", "--no-plot"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].split() == ["run", "101", "102"]
    assert not (tmp_path / "runs" / COMPARE).exists()


def test_a_bad_run_name_is_named_with_the_runs_there_are_and_nothing_is_drawn(two_runs):
    first, _ = two_runs
    missing = first.parent / "nosuch"
    p = make_report(f"RUNS={first} {missing}")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.splitlines()[0] == \
        f"error: run directory '{missing}' does not exist. Runs under {first.parent}: 101, 102."
    assert p.stdout == "" and not (first.parent / COMPARE).exists()


def test_the_table_and_the_settings_that_differ():
    rows = [row(0, 1.0, 0.5, 0.6, 0.61), row(1, 0.8, 0.7, 0.72, 0.7)]
    fast, slow = summarize(rows), summarize([{**r, "seeds_per_second": 1000.0} for r in rows])
    configs = [{"optim": {"lr": 0.01}, "model": {"name": "sage"}, "output": {"dir": "a"}},
               {"optim": {"lr": 0.01}, "model": {"name": "gat"}, "output": {"dir": "b"}}, None]
    assert differing_settings(configs) == {"model.name": ["sage", "gat", "-"], "optim.lr": ["0.01", "0.01", "-"]}
    assert differing_settings(configs[:1] * 2) == {}
    table = compare_table(["a", "b"], [fast, slow], configs[:1] * 2).splitlines()
    assert table[0] == "run                  a                   b"  # each column as wide as its widest cell
    assert table[1] == "status               running or stopped  running or stopped"  # no summary.json
    assert "throughput           4000 seeds/s        1000 seeds/s" in table
    assert table[-1] == "settings             the same            the same"
    assert run_labels([Path("runs/7"), Path("x/7"), Path("runs/8")]) == ["runs/7", "x/7", "8"]


def test_each_run_has_one_colour_in_every_panel():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [[row(0, 1.0, 0.5, 0.6, 0.6), row(1, 0.8, 0.7, 0.7, 0.7)], [row(0, 0.9, 0.6, 0.65, 0.6)]]
    fig = draw_compare(plt, ["a", "b"], runs, "two runs")
    try:
        for ax in fig.axes:
            assert [(line.get_label(), line.get_color()) for line in ax.get_lines()] == [("a", "C0"), ("b", "C1")]
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b"]
        assert fig.axes[2].get_ylim()[0] == 0  # throughput from 0
    finally:
        plt.close(fig)


def test_a_run_scored_by_rocauc_beside_one_scored_by_accuracy_gets_the_same_rows():
    """Multi-label nodes (train/loop/targets.py) beside one class per node: each run's cells in the same rows, '-'
    where a run has no ROC-AUC."""
    rows = [row(0, 1.0, 0.5, 0.6, 0.61), row(1, 0.8, 0.7, 0.72, 0.7)]
    tasks = [{**rows[0], "val_rocauc": 0.75, "test_rocauc": 0.74}, {**rows[1], "val_rocauc": 0.7, "test_rocauc": 0.71}]
    table = compare_table(["classes", "tasks"], [summarize(rows), summarize(tasks)], [None, None]).splitlines()
    cells = {line[:22].strip(): line[22:].split("  ") for line in table}
    assert [c.strip() for c in cells["best val ROC-AUC"] if c] == ["-", "0.7500 (epoch 0)"]
    assert [c.strip() for c in cells["val acc, best val"] if c] == ["0.7200 (epoch 1)", "0.6000 (epoch 0)"]
    assert [c.strip() for c in cells["final test ROC-AUC"] if c] == ["-", "0.7100 (epoch 1)"]
