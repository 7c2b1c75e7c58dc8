"""`python3 -m train.cli.killed --srun-errors FILE [--figures TEXT] [--job JOBID]`: the job log's line for a task
of the training step that a signal ended, printed by jobs/train.sbatch when the step's status says a signal.

FILE holds srun's own stderr (its "srun: error: NODE: task N: <signal>" lines); TEXT the memory plan's figures
`make submit` gave the job (PYG_MEMORY_PLAN); JOBID is asked of sacct for the step's MaxRSS, where sacct
answers. It runs on the batch node's own Python, outside the image: the standard library only
(train/loop/killed_rank.py makes the words). Prints nothing when srun's first task line is not a signal's.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

from train.loop.killed_rank import first_killed_task, killed_rank_message, parse_figures, sacct_max_rss


def ask_sacct(job: str) -> str:
    """sacct's steps of `job` (JobID|MaxRSS|MaxRSSNode), or "" where sacct is missing or does not answer."""
    if not job or shutil.which("sacct") is None:
        return ""
    try:
        done = subprocess.run(["sacct", "-n", "-P", "-j", job, "-o", "JobID,MaxRSS,MaxRSSNode"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m train.cli.killed", description=__doc__.splitlines()[0])
    parser.add_argument("--srun-errors", required=True, help="a file with srun's stderr")
    parser.add_argument("--figures", default="", help="the memory plan's figures (make submit's PYG_MEMORY_PLAN)")
    parser.add_argument("--job", default="", help="the job id, asked of sacct")
    args = parser.parse_args(argv)
    try:
        lines = Path(args.srun_errors).read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    found = first_killed_task(lines)
    if found is None:
        return 0
    node, task, signum = found
    figures = dataclasses.replace(parse_figures(args.figures), max_rss=sacct_max_rss(ask_sacct(args.job)))
    print(killed_rank_message(signum, task, node, figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
