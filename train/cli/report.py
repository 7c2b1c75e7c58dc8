"""`python -m train report RUN_DIR`: curves.png and a short summary for a run, finished or still running.

The reading and drawing live in train/loop/report.py, which `fit` also calls at the end of a run.
"""

from __future__ import annotations

from pathlib import Path

from train.loop.report import CURVES, report


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (runs/<id>) holding metrics.jsonl")
    parser.add_argument("--output", default=None, metavar="PATH",
                        help=f"where to draw the curves (default RUN_DIR/{CURVES})")
    parser.add_argument("--no-plot", action="store_true", help="print the summary only")


def main(args) -> int:
    report(Path(args.run_dir), Path(args.output) if args.output else None, plot=not args.no_plot)
    return 0
