"""torchrun's launcher in this process for `make run` and `make doctor` (login/launch.py, once the input is checked),
and the line for each rank a signal ended: with torch."""

from __future__ import annotations

import logging
import socket
import sys

import torch
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

from train.loop.killed_rank import killed_rank_message
from train.plan.memory_figures import plan_figures

# torchrun's loggers that report a rank's failure (its exit code, then the others being stopped) in lines of
# their own: the rank has said what went wrong, and this process's exit status is the rank's.
LAUNCHER_LOGGERS = ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api",
                    "torch.distributed.launcher.api")


def exit_status(exitcode: int) -> int:
    """A rank's exit code as a shell reports it: its own status, or 128 + the signal that ended it."""
    return 128 - exitcode if exitcode < 0 else exitcode


def killed_ranks(failures: dict, config, nproc: int) -> list[str]:
    """The line for each rank that a signal ended (torchrun's failures: rank -> ProcessFailure), in rank order."""


    killed = sorted(rank for rank, failure in failures.items() if failure.exitcode < 0)
    if not killed:
        return []
    figures = plan_figures(config, 1, nproc, gpus=torch.cuda.is_available())
    return [killed_rank_message(-failures[rank].exitcode, rank, socket.gethostname(), figures, failures[rank].pid)
            for rank in killed]


def launch(nproc: int, command: str, rest: list[str], config) -> int:
    """torchrun's launcher in this process; the status of the rank a signal ended, else of the rank that failed
    first, or 0."""

    for name in LAUNCHER_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "train", command, *rest]))
    except ChildFailedError as exc:
        lines = killed_ranks(exc.failures, config, nproc)  # killed: the rank could say nothing
        for line in lines:
            print(f"error: {line}", file=sys.stderr, flush=True)
        signalled = [failure for failure in exc.failures.values() if failure.exitcode < 0]
        return exit_status((signalled or [exc.get_first_failure()[1]])[0].exitcode)
    except SignalException as exc:  # Ctrl-C or a stop signal to the launcher: the ranks got it too
        return 128 + exc.sigval
    return 0
