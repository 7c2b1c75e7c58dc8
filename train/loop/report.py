"""curves.png and a short summary for a run, finished or still running (`python -m train report`, end of `fit`).

Reads what `fit` writes into the run directory: metrics.jsonl (one row per epoch, rank 0),
summary.json (only once the run has finished) and config.yaml. The summary is computed from
the metrics rows, so it works mid-run; matplotlib is imported only to draw, so the summary
still prints where it is missing.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import yaml

from train.errors import UserError
from train.files import dir_problem, file_problem, read_text
from train.loop.records import PHASES
from train.loop.rundir import RUNS, runs_under
from train.loop.scores import number as _number
from train.loop.scores import score_rows, score_summary
from train.storage.faults import StorageError
from train.storage.writes import atomic_write

CURVES = "curves.png"
FIGSIZE = (12.0, 4.0)  # inches; with DPI the PNG is 1200 x 400 pixels
DPI = 100
SHOWN_RUNS = 12  # the runs a message about a run that does not exist names (the newest)


# ---- reading (tolerant: the run may be writing right now) --------------------------------------
def read_metrics(path: Path) -> list[dict]:
    """One row per epoch, in epoch order. A half-written last line is skipped; when a resumed run
    repeated an epoch, its last row wins."""
    by_epoch: dict[int, dict] = {}
    for line in read_text(path, repr(str(path)), allow_empty=True).splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("epoch"), int):
            by_epoch[row["epoch"]] = row
    return [by_epoch[e] for e in sorted(by_epoch)]


def _read_optional(path: Path, parse) -> dict | None:
    """A mapping from an optional file of the run (summary.json, config.yaml); None when it is absent, and a
    warning naming it when it is there but unusable (the summary then comes from metrics.jsonl alone)."""
    if not path.exists() and not path.is_symlink():
        return None
    problem = file_problem(path)
    try:
        value = None if problem else parse(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as exc:  # ValueError: not UTF-8, not JSON
        problem = f"cannot be read ({type(exc).__name__}: {exc})"
        value = None
    if problem is None and not isinstance(value, dict):
        problem = f"holds a {type(value).__name__}, not a mapping"
    if problem is not None:
        print(f"warning: {path} {problem}; ignoring it", file=sys.stderr, flush=True)
        return None
    return value


def _read_json(path: Path) -> dict | None:
    return _read_optional(path, json.loads)


def _read_yaml(path: Path) -> dict | None:
    return _read_optional(path, yaml.safe_load)


# ---- the summary: a pure function of what was read ---------------------------------------------
def summarize(rows: list[dict], summary: dict | None = None, config: dict | None = None) -> dict:
    """The best-validation epoch and the last evaluated one (train/loop/scores.py), time per epoch, throughput per
    rank."""
    config = config or {}
    seconds = [s for s in (_number(r.get("epoch_seconds")) for r in rows) if s is not None]
    rates = [r for r in rows if _number(r.get("seeds_per_second")) is not None]
    per_rank = [r["seeds_per_second"] / max(int(r.get("world_size") or 1), 1) for r in rates]
    world = rows[-1].get("world_size") if rows else (summary or {}).get("world_size")
    planned = (config.get("trainer") or {}).get("epochs")
    timed = [r["phase_seconds"] for r in rows if isinstance(r.get("phase_seconds"), dict)]
    phases = {k: statistics.fmean(_number(t.get(k)) or 0.0 for t in timed) for k in PHASES} if timed else None
    return {
        "finished": summary is not None,
        "epochs_done": len(rows),
        "epochs_planned": planned,
        "dataset": (config.get("data") or {}).get("name") or (summary or {}).get("dataset"),
        "model": (config.get("model") or {}).get("name") or (summary or {}).get("model"),
        "world_size": world,
        "device": (summary or {}).get("device"),  # known once the run has finished
        **score_summary(rows),
        "final_loss": rows[-1].get("loss") if rows else None,
        "mean_epoch_seconds": statistics.fmean(seconds) if seconds else None,
        "total_seconds": sum(seconds) if seconds else None,
        "seeds_per_second": statistics.fmean(r["seeds_per_second"] for r in rates) if rates else None,
        "seeds_per_second_per_rank": statistics.fmean(per_rank) if per_rank else None,
        "phase_seconds": phases,  # mean per epoch (and over ranks) of each phase, train/loop/timing.py
    }


def format_summary(s: dict, run_dir: str) -> str:
    status = "finished" if s["finished"] else "running or stopped"
    planned = f" of {s['epochs_planned']}" if s["epochs_planned"] else ""
    rows = [
        ("run", f"{run_dir} ({status}): {s['dataset'] or '?'}, {s['model'] or '?'}, "
                f"world size {s['world_size'] or '?'}"),
        ("epochs", f"{s['epochs_done']}{planned}"),
        *score_rows(s),
        ("final loss", "-" if s["final_loss"] is None else f"{s['final_loss']:.4f}"),
        ("time per epoch", "-" if s["mean_epoch_seconds"] is None
         else f"{s['mean_epoch_seconds']:.2f} s (mean; {s['total_seconds']:.1f} s in all)"),
        ("throughput", "-" if s["seeds_per_second"] is None
         else f"{s['seeds_per_second']:.0f} seeds/s, {s['seeds_per_second_per_rank']:.0f} "
              f"{'per GPU (rank)' if s['device'] == 'cuda' else 'per rank'}"),
    ]
    rows.append(("step time", format_phases(s["phase_seconds"])))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def format_phases(phases: dict | None) -> str:
    """`sample 40% | gather 5% | ... (2.10 s per epoch with evaluation)`: where the time goes."""
    total = sum(phases.values()) if phases else 0.0
    if not total:
        return "- (not recorded by this run)"
    shares = " | ".join(f"{k} {phases[k] / total:.0%}" for k in PHASES)
    return f"{shares} (of {total:.2f} s per epoch with evaluation, mean over ranks)"


# ---- drawing ------------------------------------------------------------------------------------
# (metrics.jsonl key, legend, line style) of the scores' panel: the ROC-AUCs dashed, where the rows have them
SCORE_CURVES = (("train_acc", "train", "-"), ("val_acc", "val", "-"), ("test_acc", "test", "-"),
                ("val_rocauc", "val ROC-AUC", "--"), ("test_rocauc", "test ROC-AUC", "--"))
# Legends outside their panel (a short run's curves fill all of it), in a font as large as the ticks'.
BELOW = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.2), "ncol": 3, "fontsize": "small", "frameon": False}
RIGHT = {"loc": "center left", "bbox_to_anchor": (1.02, 0.5), "fontsize": "small", "frameon": False}


def _pyplot(path: Path):
    try:
        import matplotlib  # optional: the extra `.[report]`, and only to draw

        matplotlib.use("Agg")  # no display on a cluster
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError(f"drawing {path} needs matplotlib, which is not installed: "
                        "pip install matplotlib (or pip install '.[report]').") from None
    return plt


def plot_curves(rows: list[dict], path: Path, title: str) -> Path:
    """Loss, train/val/test accuracy (and ROC-AUC), seeds per second and where the time went, per epoch, as one PNG of
    FIGSIZE*DPI pixels.
    Written to a temporary file and renamed, so a viewer never sees half a picture."""
    plt = _pyplot(path)
    return save_figure(plt, draw_curves(plt, rows, title), path)


def save_figure(plt, fig, path: Path) -> Path:
    """`fig` as a PNG at `path`, written to a temporary file and renamed (a viewer never sees half a picture)."""
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=DPI))
    finally:
        plt.close(fig)
    return path


def draw_curves(plt, rows: list[dict], title: str):
    """The figure of `plot_curves` (closed by the caller)."""
    def series(key):
        points = [(r["epoch"], _number(r.get(key))) for r in rows]
        return [e for e, v in points if v is not None], [v for _, v in points if v is not None]

    fig, (ax_loss, ax_acc, ax_rate, ax_time) = plt.subplots(1, 4, figsize=FIGSIZE, dpi=DPI)
    try:
        ax_loss.plot(*series("loss"), marker="o", color="tab:red")
        ax_loss.set(title="training loss (epoch mean)", xlabel="epoch", ylabel="cross-entropy")
        for key, label, style in SCORE_CURVES:
            epochs, values = series(key)
            if values:
                ax_acc.plot(epochs, values, marker="o", label=label, linestyle=style)
        scores = "accuracy, ROC-AUC" if series("val_rocauc")[1] else "accuracy"
        ax_acc.set(title=scores, xlabel="epoch", ylabel=scores)
        ax_acc.legend(**BELOW)
        ax_rate.plot(*series("seeds_per_second"), marker="o", color="tab:purple")
        ax_rate.set(title="throughput (all ranks)", xlabel="epoch", ylabel="seeds / s")
        ax_rate.set_ylim(0, max(ax_rate.get_ylim()[1] * 1.05, 1.0))  # from 0: noise does not look like swings
        plot_phases(ax_time, rows)
        for ax in (ax_loss, ax_acc, ax_rate, ax_time):
            ax.grid(alpha=0.3)
            ax.xaxis.get_major_locator().set_params(integer=True)
        fig.suptitle(title)
        fig.tight_layout()
    except BaseException:
        plt.close(fig)
        raise
    return fig


def plot_phases(ax, rows: list[dict]) -> None:
    """Stacked bars per epoch: seconds in each phase (train/loop/timing.py), mean over ranks."""
    timed = [(r["epoch"], r["phase_seconds"]) for r in rows if isinstance(r.get("phase_seconds"), dict)]
    ax.set(title="time per epoch (mean rank)", xlabel="epoch", ylabel="seconds")
    if not timed:
        ax.text(0.5, 0.5, "not recorded\nby this run", ha="center", va="center", transform=ax.transAxes)
        return
    epochs = [e for e, _ in timed]
    bottom = [0.0] * len(timed)
    for name in PHASES:
        heights = [_number(t.get(name)) or 0.0 for _, t in timed]
        ax.bar(epochs, heights, bottom=bottom, label=name, width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylim(0, max(bottom) * 1.05 or 1.0)
    ax.legend(reverse=True, **RIGHT)  # top to bottom, as the bars stack


# ---- entry points -------------------------------------------------------------------------------
def runs_hint(run_dir: Path) -> str:
    """` Runs under runs: a, b, c.`: the runs beside `run_dir` (else under runs/), newest last; '' when none."""
    parent = run_dir.parent if run_dir.parent.is_dir() and run_dir.parent != Path(".") else RUNS
    known = runs_under(parent)
    shown = ", ".join(p.name for p in known[-SHOWN_RUNS:])
    more = f" ({len(known)} in all, the newest shown)" if len(known) > SHOWN_RUNS else ""
    return f" Runs under {parent}: {shown}{more}." if known else ""


def resolve_run(name: str, runs: Path = RUNS) -> Path:
    """A run as `make report` names it: a directory (runs/<id>, any path), or an id under runs/ (`RUNS='7 8'`)."""
    path = Path(name)
    if "/" not in name and not path.exists() and (runs / name).is_dir():
        return runs / name
    return path


def load_run(run_dir: Path) -> tuple[list[dict], dict | None, dict | None]:
    problem = dir_problem(run_dir)
    if problem is not None:
        raise UserError(f"run directory {str(run_dir)!r} {problem}.{runs_hint(run_dir)}")
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists() and not metrics.is_symlink():
        raise UserError(f"{str(run_dir)!r} has no metrics.jsonl: is it a run directory (runs/<id>), and has its "
                        "first epoch finished?")
    rows = read_metrics(metrics)
    if not rows:
        raise UserError(f"{str(metrics)!r} holds no finished epoch yet; try again after the first epoch.")
    return rows, _read_json(run_dir / "summary.json"), _read_yaml(run_dir / "config.yaml")


def report(run_dir: Path, output: Path | None = None, plot: bool = True) -> Path | None:
    """Print the summary and draw the curves; returns the PNG's path (None without plot)."""
    rows, summary, config = load_run(run_dir)
    s = summarize(rows, summary, config)
    print(format_summary(s, str(run_dir)), flush=True)
    if not plot:
        return None
    title = f"{run_dir.name}: {s['dataset'] or '?'} / {s['model'] or '?'}, world size {s['world_size'] or '?'}"
    path = plot_curves(rows, output or run_dir / CURVES, title)
    print(f"{'curves':<19}  {path}", flush=True)
    return path


def write_report(run_dir: Path) -> Path | None:
    """The end-of-run report from `fit`: a failure to draw warns and never fails the run, but a failing file system
    (`StorageError`) ends it as any other file of the run would."""
    try:
        return report(Path(run_dir))
    except StorageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the run's results are written already; this is a bonus
        print(f"warning: no report for {run_dir}: {exc}", file=sys.stderr, flush=True)
        return None

