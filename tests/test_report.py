"""`python -m train report RUN_DIR`: curves.png and the summary, from what `fit` records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from train.config import dump_config, load_config
from train.loop.report import DPI, FIGSIZE, draw_curves, format_summary, read_metrics, summarize, write_report
from train.storage.writes import TMP_PREFIX

ROOT = Path(__file__).resolve().parents[1]


def row(epoch, loss, train, val=None, test=None, seconds=2.0, rate=4000.0, world=2):
    phases = {"sample": 0.8 * seconds, "gather": 0.1 * seconds, "copy": 0.0, "compute": 0.05 * seconds,
              "allreduce": 0.05 * seconds, "eval": 0.5 if val is not None else 0.0, "other": 0.0}
    return {"epoch": epoch, "loss": loss, "train_acc": train, "val_acc": val, "test_acc": test,
            "epoch_seconds": seconds, "seeds_per_second": rate, "world_size": world,
            "phase_seconds": phases, "wall_seconds": sum(phases.values())}


def write_run(run: Path, finished: bool = True, epochs: int = 6, device: str = "cuda") -> Path:
    """A run as fit leaves it: evaluation every 2nd epoch, one epoch repeated after a resume,
    and (for a running run) a half-written last line."""
    run.mkdir(parents=True)
    rows = [
        row(0, 1.30, 0.40, seconds=2.5, rate=3600),
        row(1, 0.90, 0.62, 0.70, 0.69, seconds=2.0, rate=4000),
        row(2, 0.70, 0.71, seconds=2.0, rate=4000),
        row(2, 0.68, 0.72, seconds=2.0, rate=4000),  # repeated after a resume: the last one counts
        row(3, 0.60, 0.76, 0.81, 0.79, seconds=1.5, rate=4400),
        row(4, 0.55, 0.78, seconds=2.0, rate=4000),
        row(5, 0.52, 0.80, 0.80, 0.80, seconds=2.0, rate=4000),
    ][: epochs + 1]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if not finished:
        text += '{"epoch": 6, "loss": 0.5'  # the writer is mid-line
    (run / "metrics.jsonl").write_text(text)
    dump_config(load_config("tiny", ["trainer.epochs=6"]), run / "config.yaml")
    if finished:
        (run / "summary.json").write_text(json.dumps({"epochs": 6, "world_size": 2, "device": device}))
    return run


def report(*args, env=None):
    return subprocess.run([sys.executable, "-m", "train", "report", *map(str, args)], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_report_draws_a_png_and_prints_the_summary(tmp_path):
    run = write_run(tmp_path / "run")
    proc = report(run)
    assert proc.returncode == 0, proc.stderr
    with Image.open(run / "curves.png") as image:
        assert image.format == "PNG"
        assert image.size == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI)) == (1200, 400)
    out = proc.stdout
    assert f"{run} (finished): synthetic, sage, world size 2" in out
    assert "epochs               6 of 6" in out
    assert "best val accuracy    0.8100 (epoch 3)" in out
    assert "final test accuracy  0.8000 (epoch 5)" in out
    assert "final loss           0.5200" in out
    assert "time per epoch       2.00 s (mean; 12.0 s in all)" in out
    assert "throughput           4000 seeds/s, 2000 per GPU (rank)\n" in out
    # mean per epoch: sample 1.6 s, gather 0.2, compute 0.1, allreduce 0.1, eval 0.25 (3 of 6 epochs) = 2.25 s
    assert ("step time            sample 71% | gather 9% | copy 0% | compute 4% | allreduce 4% | eval 11% | other 0% "
            "(of 2.25 s per epoch with evaluation, mean over ranks)") in out
    assert not list(run.glob(f"{TMP_PREFIX}*")) and not list(run.glob(".*"))  # written atomically


@pytest.mark.parametrize("device, finished", [("cpu", True), ("cuda", False)])
def test_throughput_is_per_rank_where_no_gpu_is_known(tmp_path, device, finished):
    """A CPU run has ranks, not GPUs; a running run (no summary.json yet) does not say which it has."""
    s = summarize(read_metrics(write_run(tmp_path / "run", finished, device=device) / "metrics.jsonl"),
                  json.loads((tmp_path / "run" / "summary.json").read_text()) if finished else None)
    assert format_summary(s, "run").splitlines()[7] == "throughput           4000 seeds/s, 2000 per rank"


def test_curves_keep_their_legends_off_the_data_and_throughput_from_zero(tmp_path):
    """Legends outside the panels (a 2-epoch run's curves fill all of the panel), as large as the ticks'
    labels; the throughput axis starts at 0, so that noise does not look like swings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row(0, 1.3, 0.33, 0.66, 0.70, rate=14700), row(1, 1.0, 0.64, 0.84, 0.86, rate=19900)]
    fig = draw_curves(plt, rows, "two epochs")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        _, ax_acc, ax_rate, ax_time = fig.axes
        for ax in (ax_acc, ax_time):
            legend, panel = ax.get_legend(), ax.get_window_extent(renderer)
            assert not legend.get_window_extent(renderer).overlaps(panel), ax.get_title()
            assert fig.bbox.contains(*legend.get_window_extent(renderer).p0)
            assert fig.bbox.contains(*legend.get_window_extent(renderer).p1)  # and inside the picture
            tick = ax.get_yticklabels()[0].get_fontsize()
            assert all(t.get_fontsize() >= 0.8 * tick for t in legend.get_texts())
        assert ax_rate.get_ylim()[0] == 0 and ax_rate.get_ylim()[1] >= 19900
    finally:
        plt.close(fig)


def test_runs_without_phase_times_still_report(tmp_path):
    """Runs recorded before the step-time breakdown existed: the table says so, the panel is empty."""
    run = write_run(tmp_path / "run")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k not in
                                                           ("phase_seconds", "wall_seconds")}) + "\n" for r in rows))
    proc = report(run)
    assert proc.returncode == 0, proc.stderr
    assert "step time            - (not recorded by this run)" in proc.stdout
    assert summarize(read_metrics(run / "metrics.jsonl"))["phase_seconds"] is None
    with Image.open(run / "curves.png") as image:
        assert image.size == (1200, 400)


def test_the_time_panel_stacks_every_phase(tmp_path):
    """The fourth panel of curves.png: one stacked bar per epoch, one colour per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from train.loop.report import plot_phases
    from train.loop.timing import PHASES

    rows = read_metrics(write_run(tmp_path / "run") / "metrics.jsonl")
    fig, ax = plt.subplots()
    try:
        plot_phases(ax, rows)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == list(reversed(PHASES))  # top to bottom, as the bars stack
        tops = {}
        for patch in ax.patches:  # bar patches: x centre = epoch, stacked heights add up to the wall time
            epoch = round(patch.get_x() + patch.get_width() / 2)
            tops[epoch] = max(tops.get(epoch, 0.0), patch.get_y() + patch.get_height())
        assert tops == {r["epoch"]: pytest.approx(r["wall_seconds"]) for r in rows}
    finally:
        plt.close(fig)


def test_report_while_running(tmp_path):
    run = write_run(tmp_path / "run", finished=False, epochs=4)
    proc = report(run, "--output", tmp_path / "live.png")
    assert proc.returncode == 0, proc.stderr
    assert "(running or stopped)" in proc.stdout and "epochs               4 of 6" in proc.stdout
    assert (tmp_path / "live.png").stat().st_size > 0 and not (run / "curves.png").exists()


def test_summary_is_computed_from_the_rows(tmp_path):
    rows = read_metrics(write_run(tmp_path / "run", finished=False) / "metrics.jsonl")
    assert [r["epoch"] for r in rows] == [0, 1, 2, 3, 4, 5] and rows[2]["loss"] == 0.68
    s = summarize(rows, None, {"trainer": {"epochs": 6}, "data": {"name": "Reddit"}, "model": {"name": "sage"}})
    assert (s["best_val_acc"], s["best_val_epoch"], s["final_test_acc"], s["epochs_done"]) == (0.81, 3, 0.80, 6)
    assert s["seeds_per_second_per_rank"] == pytest.approx(2000.0) and not s["finished"]


@pytest.mark.parametrize("setup, message", [
    (lambda p: None, "does not exist"),
    (lambda p: p.mkdir(), "has no metrics.jsonl"),
    (lambda p: (p.mkdir(), (p / "metrics.jsonl").write_text("")), "holds no finished epoch yet"),
])
def test_bad_run_dir_is_a_message(tmp_path, setup, message):
    setup(tmp_path / "run")
    proc = report(tmp_path / "run")
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_without_a_run_dir_the_newest_run_under_runs_is_reported(tmp_path):
    """`make report` without RUN: the run whose metrics.jsonl changed last, found where runs are made
    (train/loop/rundir.py's RUNS, against the working directory); none yet is a message naming RUN."""
    def newest(cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "train", "report", "--no-plot"], cwd=cwd, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)

    empty = newest(tmp_path)
    assert empty.returncode == 2 and "no run with metrics.jsonl under runs/" in empty.stderr
    assert "make report RUN=runs/<id>" in empty.stderr and "Traceback" not in empty.stderr
    write_run(tmp_path / "runs" / "9")
    write_run(tmp_path / "runs" / "10")
    os.utime(tmp_path / "runs" / "9" / "metrics.jsonl", (1, 1))
    (tmp_path / "runs" / "11").mkdir()  # no metrics.jsonl: not a run to report
    done = newest(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "runs/10" in done.stdout and "runs/9" not in done.stdout


def test_missing_matplotlib_is_a_message_after_the_summary(tmp_path):
    """A stand-in for a container without matplotlib: the import is blocked."""
    run = write_run(tmp_path / "run")
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from train.__main__ import main; sys.exit(main(['report', sys.argv[1]]))")
    proc = subprocess.run([sys.executable, "-c", code, str(run)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 2 and "needs matplotlib" in proc.stderr and "pip install matplotlib" in proc.stderr
    assert "best val accuracy" in proc.stdout and not (run / "curves.png").exists()


def test_end_of_run_report_never_raises(tmp_path, capsys):
    assert write_report(tmp_path / "nothing-here") is None
    assert "warning: no report for" in capsys.readouterr().err


def test_fit_draws_curves_at_the_end(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "train", "fit", "--config", "tiny", "trainer.epochs=2",
                           "trainer.max_steps_per_epoch=2",
                           f"output.dir={out}"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT)}.items()
                               if not k.startswith(("SLURM_", "WORLD_SIZE", "RANK", "MASTER_"))})
    assert proc.returncode == 0, proc.stderr[-2000:]
    with Image.open(out / "curves.png") as image:
        assert image.format == "PNG" and image.size == (1200, 400)
    assert "best val accuracy" in proc.stdout and "epochs               2 of 2" in proc.stdout
    assert "step time            sample " in proc.stdout  # measured by the run itself


def make(*args, env=None):
    clean = {k: v for k, v in os.environ.items() if k not in ("RUN", "LOG_DIR", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_make_report_and_logs(tmp_path):
    run = write_run(tmp_path / "run")
    p = make("report", f"RUN={run}")
    assert p.returncode == 0, p.stderr
    assert "best val accuracy    0.8100 (epoch 3)" in p.stdout and (run / "curves.png").is_file()

    logs = tmp_path / "logs"
    (logs / "old").mkdir(parents=True)
    (logs / "pyg-train-1.log").write_text("first job\n")
    os.utime(logs / "pyg-train-1.log", (1, 1))
    (logs / "old" / "pyg-train-2.log").write_text("newest job\n")
    p = make("logs", f"LOG_DIR={logs}")
    assert p.returncode == 0 and p.stdout == "newest job\n" and "pyg-train-2.log" in p.stderr
    p = make("logs", f"LOG_DIR={tmp_path / 'none'}")
    assert p.returncode != 0 and "no log under" in p.stderr


def test_right_after_submit_logs_and_tail_follow_the_new_job_not_an_older_log(tmp_path):
    """make submit records the job's log (jobs/submit.sh); while the job is pending the log does not exist: make logs
    says so, make tail waits for it and then follows it, instead of showing the previous job's log."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "pyg-train-1.log").write_text("the previous job\n")
    pending = logs / "pyg-train-2.log"
    (logs / ".last-submitted").write_text(f"{pending}\n")
    p = make("logs", f"LOG_DIR={logs}")
    assert p.returncode == 2 and f"make logs: {pending} does not exist yet: the job has not started" in p.stderr
    clean = {k: v for k, v in os.environ.items() if k not in ("RUN", "LOG_DIR", "MAKEFLAGS", "MAKELEVEL")}
    tail = subprocess.Popen(["make", "--no-print-directory", "tail", f"LOG_DIR={logs}"], cwd=ROOT, env=clean,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)
        pending.write_text("the new job started\n")
        time.sleep(3)  # tail -F looks again every second
    finally:
        tail.terminate()
    out, err = tail.communicate(timeout=30)
    assert f"make tail: waiting for {pending}: the job has not started yet" in err, err
    assert out == "the new job started\n", (out, err)
    pending.write_text("done\n")
    p = make("logs", f"LOG_DIR={logs}")
    assert p.returncode == 0 and p.stdout == "done\n"
