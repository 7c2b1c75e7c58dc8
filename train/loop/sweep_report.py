"""A sweep's results (`make report SWEEP=<array id>`, `python -m train report --sweep ID`): one table, each point of
the grid a row with its mean ± std over its seeds for the summary's figures, best first (by the validation figure of
the runs' metric, as a run picks its best epoch: train/loop/scores.py); a compare.png of the same; and each element
that has no summary, with why: the last error line of its log, and the status its training step exited with.

The sweep is read from what `make sweep` and its elements wrote (train/sweep.py): the list file LOG_DIR/sweep-<id>.list
(each element's overrides), each element's run directory (runs/<id>_<index>, where it records this sweep's submission)
and its log LOG_DIR/<name>-<id>_<index>.log.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from train.errors import UserError
from train.files import file_problem
from train.loop.report import DPI, _number, _pyplot, load_run, save_figure, summarize
from train.loop.rundir import RUNS
from train.loop.scores import metric_name
from train.sweep import element_dir, list_link, point_of, read_list, submission_of

FIGSIZE = (12.0, 4.5)
# a log line that says what went wrong: the package's errors ("0: error: ..."), a traceback's last line, SLURM's own
# (CANCELLED, DUE TO TIME LIMIT, oom-kill), srun's ("srun: error: node: task 0: Killed")
ERROR_LINE = re.compile(r"error|exception|killed|cancelled|time limit|oom|refused|failed", re.I)
# the most telling, first: SLURM's verdict on the job (slurmstepd: cancelled, its time limit, preempted, out of
# memory), then a rank's own words (its lines start "N: "; a stop signal's "stopped in epoch ..."), then any other
TELLING = (re.compile(r"slurmstepd.*(CANCELLED|TIME LIMIT|PREEMPT|OUT OF MEMORY|oom)", re.I),
           re.compile(r"^\d+: (?!slurmstepd).*(error|exception|stopped in epoch|killed)", re.I), ERROR_LINE)
STEP_EXIT = re.compile(r"^training step exited with status (\d+)")


@dataclass
class Point:
    """One point of the grid: its overrides, and the summaries of its elements that finished."""

    overrides: tuple[str, ...]
    elements: list[int] = field(default_factory=list)
    summaries: list[dict] = field(default_factory=list)
    curves: list[list[dict]] = field(default_factory=list)  # each finished element's metrics rows


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """(mean, sample standard deviation) of the values present; the deviation None below two of them."""
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def cell(values: list[float], digits: int = 4) -> str:
    mean, std = mean_std(values)
    if mean is None:
        return "-"
    return f"{mean:.{digits}f} ± {'-' if std is None else f'{std:.{digits}f}'}"


def figures(metric: str) -> list[tuple[str, str, int]]:
    """The table's columns: (heading, summary key, digits), the one that ranks the points first."""
    name = metric_name(metric)
    return [(f"val {name}", f"best_val_{metric}", 4), (f"test {name}", f"test_{metric}_at_best_val", 4),
            ("final loss", "final_loss", 4), ("s/epoch", "mean_epoch_seconds", 2)]


def values(point: Point, key: str) -> list[float]:
    return [v for v in (_number(s.get(key)) for s in point.summaries) if v is not None]


def ranked(points: list[Point], metric: str) -> list[Point]:
    """Best first, by the mean validation figure; points with no finished element last, in the grid's order."""
    key = figures(metric)[0][1]
    return sorted(points, key=lambda p: (not values(p, key), -(mean_std(values(p, key))[0] or 0.0)))


def sweep_table(array_id: str, points: list[Point], metric: str, elements: int) -> str:
    """The points as rows, best first: their overrides, how many of their elements finished, each figure's
    mean ± std over them."""
    columns = figures(metric)
    rows = [["", "point", "runs", *(heading for heading, _, _ in columns)]]
    for number, point in enumerate(ranked(points, metric), 1):  # P1, P2, ...: compare.png's names of the points
        rows.append([f"P{number}", " ".join(point.overrides) or "(the config)",
                     f"{len(point.summaries)}/{len(point.elements)}",
                     *(cell(values(point, key), digits) for _, key, digits in columns)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    seeds = elements // len(points) if points else 0
    head = (f"sweep {array_id}: {elements} elements, {len(points)} points x {seeds} seeds; mean ± std over each "
            f"point's seeds, best first (by val {metric_name(metric)})")
    return "\n".join([head, *("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)])


def element_log(log_dir: Path, array_id: str, index: int) -> Path | None:
    """Element `index`'s log, LOG_DIR/<job name>-<id>_<index>.log (SLURM's %x-%A_%a); None where there is none."""
    found = sorted(log_dir.glob(f"*-{array_id}_{index}.log"))
    return found[0] if found else None


def why_unfinished(log: Path | None, run_dir: Path) -> str:
    """Why an element has no summary, in a line: its training step's exit status and the most telling line of its
    log (TELLING: SLURM's verdict, else a rank's own error, else the last error line); or that it has no log yet
    (pending), or is still running."""
    if log is None or file_problem(log) is not None:
        return "no log yet: pending, or not started (squeue shows it)"
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    exits = [m.group(1) for line in lines if (m := STEP_EXIT.match(line))]
    said = [line for line in lines if not STEP_EXIT.match(line)]
    telling = next(([line for line in said if pattern.search(line)] for pattern in TELLING
                    if any(pattern.search(line) for line in said)), [])
    last = telling[-1] if telling else (lines[-1] if lines else "the log is empty")
    if not exits:
        return f"running, or ended before its training step did (its log's last word: {last})"
    if exits[-1] == "0":
        return f"its training step exited with status 0 but {run_dir} has no summary.json (last word: {last})"
    return f"failed: its training step exited with status {exits[-1]}: {last}"


def read_sweep(array_id: str, log_dir: Path, runs: Path) -> tuple[list[Point], list[str], str, int]:
    """(the points, a line per element without a summary, the runs' metric, the number of elements)."""
    listed = list_link(log_dir, array_id)
    if file_problem(listed) is not None:
        known = sorted(p.name[len("sweep-"):-len(".list")] for p in log_dir.glob("sweep-*.list")
                       if p.is_symlink() and p.name[len("sweep-"):-len(".list")].isdigit())
        hint = f" Sweeps there: {', '.join(known)}." if known else ""
        raise UserError(f"SWEEP={array_id}: no sweep list {listed} ({file_problem(listed)}): give the array's id (the "
                        f"ID of \"Submitted sweep ID\"), and LOG_DIR= the sweep's if it was not {log_dir}.{hint}")
    elements = read_list(listed)
    submission = submission_of(listed)
    points: dict[tuple[str, ...], Point] = {}
    unfinished, metrics = [], []
    for index, overrides in enumerate(elements):
        point = points.setdefault(point_of(overrides), Point(point_of(overrides)))
        point.elements.append(index)
        run_dir = element_dir(array_id, index, submission, runs)
        try:
            rows, summary, config = load_run(run_dir)
        except UserError:  # no run directory yet, or no epoch finished in it
            summary = None
        if summary is None:
            why = why_unfinished(element_log(log_dir, array_id, index), run_dir)
            unfinished.append(f"element {index} ({' '.join(overrides)}): {why}")
            continue
        point.summaries.append(summarize(rows, summary, config))
        point.curves.append(rows)
        metrics.append(point.summaries[-1]["metric"])
    metric = max(set(metrics), key=metrics.count) if metrics else "acc"
    return list(points.values()), unfinished, metric, len(elements)


def draw_sweep(plt, points: list[Point], metric: str, title: str):
    """compare.png of a sweep: the validation and test figures of each point (mean, and ± std as error bars), and
    each point's validation curve (the mean over its seeds, per epoch)."""
    fig, (bars, curves) = plt.subplots(1, 2, figsize=FIGSIZE, dpi=DPI)
    try:
        (val_heading, val_key, _), (test_heading, test_key, _) = figures(metric)[:2]
        shown = [p for p in points if p.summaries]
        labels = [f"P{i + 1}" for i in range(len(shown))]
        width = 0.4
        for offset, (heading, key) in ((-width / 2, (val_heading, val_key)), (width / 2, (test_heading, test_key))):
            stats = [mean_std(values(p, key)) for p in shown]
            bars.bar([i + offset for i in range(len(shown))], [m or 0.0 for m, _ in stats], width,
                     yerr=[s or 0.0 for _, s in stats], capsize=3, label=heading)
        bars.set_xticks(range(len(shown)), labels)
        bars.set(title="each point, mean ± std over seeds", ylabel=metric_name(metric))
        bars.legend(fontsize="small")
        row_key = f"val_{metric}"
        for index, (label, point) in enumerate(zip(labels, shown)):
            by_epoch: dict[int, list[float]] = {}
            for rows in point.curves:
                for row in rows:
                    if (v := _number(row.get(row_key))) is not None:
                        by_epoch.setdefault(row["epoch"], []).append(v)
            epochs = sorted(by_epoch)
            curves.plot(epochs, [statistics.fmean(by_epoch[e]) for e in epochs], marker="o", markersize=3,
                        color=f"C{index}", label=f"{label}: {' '.join(point.overrides)}")
        curves.set(title=f"val {metric_name(metric)} per epoch (mean over seeds)", xlabel="epoch",
                   ylabel=metric_name(metric))
        curves.xaxis.get_major_locator().set_params(integer=True)
        curves.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
        for ax in (bars, curves):
            ax.grid(alpha=0.3)
        fig.suptitle(title)
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def sweep_report(array_id: str, log_dir: Path, runs: Path = RUNS, output: Path | None = None,
                 plot: bool = True) -> Path | None:
    """Print the sweep's table and its unfinished elements, and draw compare.png (default runs/sweep-<id>-compare.png,
    where at least one element finished); returns its path."""
    if not array_id.isdigit():
        raise UserError(f"SWEEP={array_id!r} is not a job array's id: make report SWEEP=ID takes the ID of "
                        "\"Submitted sweep ID\"; SWEEP='section.key=...' is the grid of make sweep.")
    points, unfinished, metric, elements = read_sweep(array_id, log_dir, runs)
    print(sweep_table(array_id, points, metric, elements), flush=True)
    if unfinished:
        print(f"{len(unfinished)} of {elements} elements have no summary:", flush=True)
        print("\n".join(f"  {line}" for line in unfinished), flush=True)
    if not plot or not any(p.summaries for p in points):
        return None
    path = output or runs / f"sweep-{array_id}-compare.png"
    plt = _pyplot(path)
    ordered = ranked(points, metric)
    save_figure(plt, draw_sweep(plt, ordered, metric, f"sweep {array_id}: {len(points)} points, best first"), path)
    print(f"compare.png  {path}", flush=True)
    return path
