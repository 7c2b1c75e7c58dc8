"""A run's scores from its epoch rows: the best-validation epoch and the last evaluated one, and how they read.

One place for what `fit` writes into summary.json (train/loop/fit.py), what `make report` and the comparison of
runs print (train/loop/report.py, compare.py) and the run's last line (train/loop/run.py). The best epoch is the
one with the best validation figure of the run's metric: accuracy, or for multi-label nodes the mean ROC-AUC
(train/loop/targets.py), whose rows carry val_rocauc and test_rocauc. Pure and torch-free: rows in, dicts and
text out.
"""

from __future__ import annotations

import math

# metric (a row's val_<metric>, test_<metric>) -> how the summary names it
METRIC_NAMES = {"acc": "accuracy", "rocauc": "ROC-AUC"}


def number(value) -> float | None:
    """A finite int or float of a row (a row read back may hold anything), else None."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if is_number and math.isfinite(value) else None


def run_metric(rows: list[dict]) -> str:
    """The metric that picks the best epoch: ROC-AUC where the rows have one (multi-label nodes), else accuracy."""
    return "rocauc" if any(number(r.get("val_rocauc")) is not None for r in rows) else "acc"


def score_summary(rows: list[dict]) -> dict:
    """`metric`, `best_val_epoch` (by the metric) and `final_test_epoch`, and for accuracy (and ROC-AUC where there
    is one): best_val_<m> and test_<m>_at_best_val (the usual protocol's figure) at the best-validation epoch,
    final_val_<m> and final_test_<m> at the last evaluated epoch."""
    metric = run_metric(rows)
    evaluated = [r for r in rows if number(r.get(f"val_{metric}")) is not None]
    best = max(evaluated, key=lambda r: r[f"val_{metric}"]) if evaluated else {}
    last = evaluated[-1] if evaluated else {}
    out = {"metric": metric, "best_val_epoch": best.get("epoch"), "final_test_epoch": last.get("epoch")}
    for name in dict.fromkeys(("acc", metric)):
        out.update({f"best_val_{name}": best.get(f"val_{name}"), f"test_{name}_at_best_val": best.get(f"test_{name}"),
                    f"final_val_{name}": last.get(f"val_{name}"), f"final_test_{name}": last.get(f"test_{name}")})
    return out


def _at(value, epoch) -> str:
    return "-" if value is None else f"{value:.4f} (epoch {epoch})"


def score_rows(summary: dict, metric: str | None = None) -> list[tuple[str, str]]:
    """The summary table's rows of scores: (label, cell), the metric first (default: the run's; a table of runs
    side by side gives the same rows to each). Under ROC-AUC the accuracy's rows are those of the epochs it picked;
    a run without ROC-AUC shows '-' there."""
    best, last = summary["best_val_epoch"], summary["final_test_epoch"]
    rows = []
    if (metric or summary.get("metric")) == "rocauc":
        rows += [("best val ROC-AUC", _at(summary.get("best_val_rocauc"), best)),
                 ("test ROC-AUC, best val", _at(summary.get("test_rocauc_at_best_val"), best)),
                 ("final test ROC-AUC", _at(summary.get("final_test_rocauc"), last)),
                 ("val acc, best val", _at(summary["best_val_acc"], best))]
    else:
        rows.append(("best val accuracy", _at(summary["best_val_acc"], best)))
    return rows + [("test acc, best val", _at(summary["test_acc_at_best_val"], best)),
                   ("final test accuracy", _at(summary["final_test_acc"], last))]


def final_line(summary: dict) -> str:
    """The run's last word on its scores: `final test accuracy 0.9915 (best val 0.9925 at epoch 9, test there
    0.9915)`, in the run's metric."""
    metric = summary["metric"]
    return (f"final test {METRIC_NAMES[metric]} {summary[f'final_test_{metric}']:.4f} (best val "
            f"{summary[f'best_val_{metric}']:.4f} at epoch {summary['best_val_epoch']}, test there "
            f"{summary[f'test_{metric}_at_best_val']:.4f})")
