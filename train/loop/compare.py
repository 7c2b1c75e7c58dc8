"""Runs side by side (`make report RUNS='a b c'`, `python -m train report A B ...`): their summaries in one table
and their curves overlaid in one compare.png.

The table's rows are the summary's figures (train/loop/report.py `summarize`), then every setting of config.yaml
in which the runs differ, so that what changed between them is in the same table as what it did. Every run is
read before anything is drawn: a run that cannot be read is named, with the runs there are, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from train.errors import UserError
from train.loop.report import DPI, _number, _pyplot, load_run, save_figure, summarize
from train.loop.scores import score_rows

COMPARE = "compare.png"
FIGSIZE = (12.0, 4.5)  # inches: the four panels of curves.png, and a row for the legend of the runs
NOT_COMPARED = ("output.dir",)  # differs between any two runs by design


def run_labels(run_dirs: list[Path]) -> list[str]:
    """Each run's column heading: its folder's name, or its whole path where two names are the same."""
    names = [run.name for run in run_dirs]
    return [name if names.count(name) == 1 else str(run) for name, run in zip(names, run_dirs)]


def _flat(config: dict | None) -> dict[str, object]:
    return {f"{section}.{key}": value for section, values in (config or {}).items() if isinstance(values, dict)
            for key, value in values.items()}


def differing_settings(configs: list[dict | None]) -> dict[str, list[str]]:
    """`section.key` -> each run's value, for the settings in which the runs differ ('-': not recorded)."""
    flat = [_flat(config) for config in configs]
    keys = sorted({key for settings in flat for key in settings} - set(NOT_COMPARED))
    rows = {key: [str(settings.get(key, "-")) for settings in flat] for key in keys}
    return {key: values for key, values in rows.items() if len(set(values)) > 1}


def summary_rows(s: dict, metric: str | None = None) -> list[tuple[str, str]]:
    """One run's column: (row label, cell), in the order of the single run's summary; the scores' rows those of
    `metric` (train/loop/scores.py), the same for every run of the table."""
    planned = f" of {s['epochs_planned']}" if s["epochs_planned"] else ""
    return [
        ("status", "finished" if s["finished"] else "running or stopped"),
        ("dataset, model", f"{s['dataset'] or '?'}, {s['model'] or '?'}"),
        ("world size", str(s["world_size"] or "?")),
        ("epochs", f"{s['epochs_done']}{planned}"),
        *score_rows(s, metric),
        ("final loss", "-" if s["final_loss"] is None else f"{s['final_loss']:.4f}"),
        ("time per epoch", "-" if s["mean_epoch_seconds"] is None else f"{s['mean_epoch_seconds']:.2f} s"),
        ("throughput", "-" if s["seeds_per_second"] is None else f"{s['seeds_per_second']:.0f} seeds/s"),
    ]


def compare_table(names: list[str], summaries: list[dict], configs: list[dict | None]) -> str:
    """The runs as columns: their summaries, then the settings in which they differ."""
    metric = "rocauc" if any(s.get("metric") == "rocauc" for s in summaries) else "acc"  # ROC-AUC rows for all
    columns = [summary_rows(s, metric) for s in summaries]
    rows = [(label, [column[i][1] for column in columns]) for i, (label, _) in enumerate(columns[0])]
    rows += list(differing_settings(configs).items()) or [("settings", ["the same"] * len(names))]
    rows.insert(0, ("run", names))
    width = max(len(label) for label, _ in rows)
    widths = [max(len(cells[i]) for _, cells in rows) for i in range(len(names))]
    return "\n".join(f"{label:<{width}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip()
                     for label, cells in rows)


# (metrics.jsonl key, panel title, y label, from 0): one panel each, every run's curve in it; rates and times
# from 0, so that noise does not look like swings (as in curves.png)
PANELS = (("loss", "training loss (epoch mean)", "cross-entropy", False),
          ("val_acc", "val accuracy", "accuracy", False),
          ("seeds_per_second", "throughput (all ranks)", "seeds / s", True),
          ("wall_seconds", "time per epoch (mean rank)", "seconds", True))


def draw_compare(plt, names: list[str], runs: list[list[dict]], title: str):
    """The figure of compare.png (closed by the caller): one panel per PANELS entry, one colour per run."""
    fig, axes = plt.subplots(1, len(PANELS), figsize=FIGSIZE, dpi=DPI)
    try:
        for ax, (key, panel, ylabel, from_zero) in zip(axes, PANELS):
            for index, (name, rows) in enumerate(zip(names, runs)):
                points = [(r["epoch"], _number(r.get(key))) for r in rows]
                points = [(e, v) for e, v in points if v is not None]
                ax.plot([e for e, _ in points], [v for _, v in points], marker="o", markersize=3, color=f"C{index}",
                        label=name)
            ax.set(title=panel, xlabel="epoch", ylabel=ylabel)
            if from_zero:
                ax.set_ylim(0, max(ax.get_ylim()[1] * 1.05, 1e-3))
            ax.grid(alpha=0.3)
            ax.xaxis.get_major_locator().set_params(integer=True)
        fig.suptitle(title)
        fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=min(len(names), 4),
                   fontsize="small", frameon=False)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
    except BaseException:
        plt.close(fig)
        raise
    return fig


def compare(run_dirs: list[Path], output: Path | None = None, plot: bool = True) -> Path | None:
    """Print the runs' table and draw compare.png (default: beside the first run); returns its path."""
    loaded, problems = [], []
    for run in run_dirs:
        try:
            loaded.append(load_run(run))
        except UserError as exc:
            problems.append(str(exc))
    if problems:
        raise UserError(" ".join(problems))
    names = run_labels(run_dirs)
    summaries = [summarize(rows, summary, config) for rows, summary, config in loaded]
    print(compare_table(names, summaries, [config for _, _, config in loaded]), flush=True)
    if not plot:
        return None
    path = output or run_dirs[0].parent / COMPARE
    plt = _pyplot(path)
    title = f"{len(names)} runs: {', '.join(names)}"
    save_figure(plt, draw_compare(plt, names, [rows for rows, _, _ in loaded], title), path)
    print(f"{'curves':<19}  {path}", flush=True)
    return path
