"""`python -m train report [RUN ...]`: curves.png and a short summary for a run, finished or still running; with
several runs, their summaries side by side and their curves overlaid in compare.png; with --sweep ID, a sweep's
points (make sweep), each one's mean ± std over its seeds, best first (train/loop/sweep_report.py).

Without RUN: the newest run under runs/ (train/loop/rundir.py), as `make report` without RUN. A run is named by
its directory or by its id under runs/ (`make report RUNS='7 8'`).

The reading and drawing live in train/loop/report.py, which `fit` also calls at the end of a run, and
train/loop/compare.py.
"""

from __future__ import annotations

from pathlib import Path

from train.errors import UserError
from train.loop.compare import COMPARE, compare
from train.loop.report import CURVES, report, resolve_run
from train.loop.rundir import RUNS, newest_run
from train.loop.sweep_report import sweep_report


def add_arguments(parser) -> None:
    parser.add_argument("run_dirs", metavar="RUN", nargs="*", default=[],
                        help="a run directory (runs/<id>) holding metrics.jsonl, or its id under runs/; several: "
                             "compared side by side (default: the newest run)")
    parser.add_argument("--output", default=None, metavar="PATH",
                        help=f"where to draw the curves (default RUN/{CURVES}; for several runs {COMPARE} beside the "
                             "first)")
    parser.add_argument("--no-plot", action="store_true", help="print the summary only")
    parser.add_argument("--sweep", default="", metavar="ID",
                        help="a sweep's job array id (its \"Submitted sweep ID\" line): each point's mean ± std over "
                             "its seeds, best first, and the elements that failed")
    parser.add_argument("--log-dir", default="logs", metavar="DIR",
                        help="where the sweep's logs and list file are (make sweep's LOG_DIR; default logs)")


def main(args) -> int:
    output = Path(args.output) if args.output else None
    if args.sweep:
        if args.run_dirs:
            raise UserError(f"a sweep's report (SWEEP={args.sweep}) reads its own runs: leave RUN and RUNS out "
                            f"({' '.join(args.run_dirs)}).")
        sweep_report(args.sweep, Path(args.log_dir), RUNS, output, plot=not args.no_plot)
        return 0
    if len(args.run_dirs) > 1:
        compare([resolve_run(name) for name in args.run_dirs], output, plot=not args.no_plot)
        return 0
    run_dir = resolve_run(args.run_dirs[0]) if args.run_dirs else newest_run()
    if run_dir is None:
        raise UserError(f"no run with metrics.jsonl under {RUNS}/ yet; name one: make report RUN={RUNS}/<id> "
                        f"(python -m train report {RUNS}/<id>)")
    report(run_dir, output, plot=not args.no_plot)
    return 0
