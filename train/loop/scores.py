"""A run's scores from its epoch rows: the best-validation epoch and the last evaluated one, and how they read.

One place for what `fit` writes into summary.json (train/loop/fit.py), what `make report` and the comparison of
runs print (train/loop/report.py, compare.py) and the run's last line (train/loop/run.py). The best epoch is the
one with the best validation figure of the run's metric: accuracy, for multi-label nodes the mean ROC-AUC
(train/loop/targets.py), whose rows carry val_rocauc and test_rocauc, and for link prediction the AUC
(train/loop/tasks/link.py), whose rows carry val_auc, val_ap (and val_mrr, val_hits@K where the split gives
each positive its negatives: then the MRR picks, as OGB's protocol) and the test's. Pure and torch-free: rows
in, dicts and text out.
"""

from __future__ import annotations

import math

# metric (a row's val_<metric>, test_<metric>) -> how the summary names it
METRIC_NAMES = {"acc": "accuracy", "rocauc": "ROC-AUC", "auc": "AUC", "ap": "AP", "mrr": "MRR"}
# the metric that picks the best epoch where a run's rows have it, in this order: MRR where each positive is ranked
# against its own negatives (OGB's protocol: ogbl-citation2), else a link run's AUC, multi-label nodes' ROC-AUC
BEST_BY = ("mrr", "auc", "rocauc")


def number(value) -> float | None:
    """A finite int or float of a row (a row read back may hold anything), else None."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if is_number and math.isfinite(value) else None


def metric_name(metric: str) -> str:
    """How a metric reads: `hits@50` as Hits@50."""
    return METRIC_NAMES.get(metric, metric.replace("hits", "Hits"))


def run_metric(rows: list[dict]) -> str:
    """The metric that picks the best epoch: the first of BEST_BY the rows have, else accuracy."""
    return next((m for m in BEST_BY if any(number(r.get(f"val_{m}")) is not None for r in rows)), "acc")


def row_metrics(rows: list[dict], metric: str) -> list[str]:
    """The metrics the rows carry: accuracy, the run's metric, then the others in the order the rows give them."""
    return list(dict.fromkeys(("acc", metric, *(k[4:] for r in rows for k in r if k.startswith("val_")))))


def score_summary(rows: list[dict]) -> dict:
    """`metric`, `best_val_epoch` (by the metric) and `final_test_epoch`, and for accuracy (and ROC-AUC where there
    is one): best_val_<m> and test_<m>_at_best_val (the usual protocol's figure) at the best-validation epoch,
    final_val_<m> and final_test_<m> at the last evaluated epoch."""
    metric = run_metric(rows)
    evaluated = [r for r in rows if number(r.get(f"val_{metric}")) is not None]
    best = max(evaluated, key=lambda r: r[f"val_{metric}"]) if evaluated else {}
    last = evaluated[-1] if evaluated else {}
    out = {"metric": metric, "best_val_epoch": best.get("epoch"), "final_test_epoch": last.get("epoch")}
    for name in row_metrics(rows, metric):
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
    metric = metric or summary.get("metric")
    if metric != "acc":
        name = metric_name(metric)
        rows += [(f"best val {name}", _at(summary.get(f"best_val_{metric}"), best)),
                 (f"test {name}, best val", _at(summary.get(f"test_{metric}_at_best_val"), best)),
                 (f"final test {name}", _at(summary.get(f"final_test_{metric}"), last))]
        for other in _others(summary, metric):
            rows += [(f"test {metric_name(other)}, best val", _at(summary.get(f"test_{other}_at_best_val"), best)),
                     (f"final test {metric_name(other)}", _at(summary.get(f"final_test_{other}"), last))]
        rows.append(("val acc, best val", _at(summary["best_val_acc"], best)))
    else:
        rows.append(("best val accuracy", _at(summary["best_val_acc"], best)))
    return rows + [("test acc, best val", _at(summary["test_acc_at_best_val"], best)),
                   ("final test accuracy", _at(summary["final_test_acc"], last))]


def _others(summary: dict, metric: str) -> list[str]:
    """The summary's metrics beside accuracy and the run's metric (link prediction's AP, MRR, Hits@K)."""
    return [k[len("best_val_"):] for k in summary if k.startswith("best_val_") and k[len("best_val_"):]
            not in ("acc", metric, "epoch")]


def final_line(summary: dict) -> str:
    """The run's last word on its scores: `final test accuracy 0.9915 (best val 0.9925 at epoch 9, test there
    0.9915)`, in the run's metric."""
    metric = summary["metric"]
    return (f"final test {metric_name(metric)} {summary[f'final_test_{metric}']:.4f} (best val "
            f"{summary[f'best_val_{metric}']:.4f} at epoch {summary['best_val_epoch']}, test there "
            f"{summary[f'test_{metric}_at_best_val']:.4f})")
