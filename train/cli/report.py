"""`python -m train report [RUN_DIR]`: curves.png and a short summary for a run, finished or still running.

Without RUN_DIR: the newest run under runs/ (train/loop/rundir.py), as `make report` without RUN.

The reading and drawing live in train/loop/report.py, which `fit` also calls at the end of a run.
"""

from __future__ import annotations

from pathlib import Path

from train.errors import UserError
from train.loop.report import CURVES, report
from train.loop.rundir import RUNS, newest_run


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", nargs="?", default=None,
                        help="a run directory (runs/<id>) holding metrics.jsonl (default: the newest run)")
    parser.add_argument("--output", default=None, metavar="PATH",
                        help=f"where to draw the curves (default RUN_DIR/{CURVES})")
    parser.add_argument("--no-plot", action="store_true", help="print the summary only")


def main(args) -> int:
    run_dir = Path(args.run_dir) if args.run_dir else newest_run()
    if run_dir is None:
        raise UserError(f"no run with metrics.jsonl under {RUNS}/ yet; name one: make report RUN={RUNS}/<id> "
                        f"(python -m train report {RUNS}/<id>)")
    report(run_dir, Path(args.output) if args.output else None, plot=not args.no_plot)
    return 0
