"""`make run`, `make doctor`, `make model-check`: a `python -m train` command on this machine, its input checked
once before any rank starts, and a failure told by the project's own message, not by the launcher's traceback.

    python -m login.launch [--nproc N] [--code-dir DIR] COMMAND --config C [section.key=value ...] [OPTION ...]

COMMAND is fit or doctor (N ranks, started by torchrun's own launcher in this process), or model (the model
check, here). Before any rank starts, the config and its overrides (and for fit the dataset's name and the
model's contract) are checked in this one process, as `make submit` checks them before sbatch: a mistake is
one `error:` line and exit status 2. A rank that fails later prints its own message; torchrun's report of it
(`ChildFailedError`, its traceback, its log line) is left out, and this process exits with the status of the
rank that failed first (train/errors.py). A rank ended by a signal could say nothing: this process, which sees
the signal, names it with its likely cause and the memory plan's figures (train/loop/killed_rank.py), and exits
with the status a shell gives that signal. Each rank gets OMP_NUM_THREADS (this machine's cores / N, at least 1)
unless it is set already, so torchrun's banner about it is not printed, and TORCH_CPP_LOG_LEVEL=FATAL unless set
(CPP_LOG_LEVEL); CODE_DIR goes in front of PYTHONPATH.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import socket
import sys
from pathlib import Path

RANKED = ("fit", "doctor")  # the commands that run on every rank; `model` runs here
# torchrun's loggers that report a rank's failure (its exit code, then the others being stopped) in lines of
# their own: the rank has said what went wrong, and this process's exit status is the rank's.
# The ranks' C++ log (gloo's, NCCL's): its lines repeat, in C++ words, a failure that a rank has told in its own
# (train/loop/failure_report.py: a rank's error once, one line from each of the others); a user's
# TORCH_CPP_LOG_LEVEL=WARNING shows them.
CPP_LOG_LEVEL = "FATAL"
LAUNCHER_LOGGERS = ("torch.distributed.elastic.multiprocessing.api", "torch.distributed.elastic.agent.server.api",
                    "torch.distributed.launcher.api")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m login.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=1, help="ranks on this machine (fit, doctor)")
    parser.add_argument("--code-dir", default="", help="the folder of your own model's code (CODE_DIR)")
    parser.add_argument("command", choices=(*RANKED, "model"))
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="--config C, overrides, the command's options")
    return parser.parse_args(argv)


def code_dir_path(code_dir: str) -> Path | None:
    """CODE_DIR as an absolute folder (None when not given); `UserError` when it is not a folder."""
    from train.errors import UserError

    if not code_dir:
        return None
    path = Path(code_dir).expanduser()
    if not path.is_dir():
        raise UserError(f"CODE_DIR={code_dir!r} is not a directory: it is the folder of your own code "
                        "(model.name=package.module:ClassName), put in front of PYTHONPATH.")
    return path.resolve()


def threads_per_rank(nproc: int, cores: int) -> int:
    """OMP_NUM_THREADS for each of `nproc` ranks sharing `cores`: the cores split evenly, at least one."""
    return max(1, cores // max(1, nproc))


def check_input(command: str, rest: list[str], data_dir: str | None = None):
    """What every rank would refuse first, checked once: `UserError` (or argparse's exit) when it is wrong.
    Returns the config."""
    from train.__main__ import build_parser
    from train.cli.fit import config_of

    args = build_parser().parse_args([command, *rest])
    config = config_of(args)  # before torch loads: a config error takes a moment
    if command == "fit":  # what every rank's preflight checks first that needs no rank (train/cli/preflight.py)
        from train.cli.preflight import check_model_input, check_outputs
        from train.graph.datasets.loading import dataset_kind

        dataset_kind(config.data)  # a known name, and what its kind needs (data.path for files)
        check_graph_files(config, data_dir)
        check_model_input(config)
        check_outputs(config)
    return config


def check_graph_files(config, data_dir: str | None) -> None:
    """Your own graph's files (data.name=files, igbh): there, and their format and shapes read from the headers, as
    make submit's plan reads them, before any rank starts. A published dataset not prepared is no error here:
    rank 0 downloads it. Its values (NaN) are scanned where it is loaded."""
    from train.errors import UserError
    from train.graph.datasets.loading import dataset_kind, unprepared

    kind = dataset_kind(config.data)
    if kind.in_data_root:
        return
    missing = unprepared(config.data, data_dir)
    if missing:
        raise UserError(missing)
    kind.plan_size(config.data)


def for_ranks(rest: list[str]) -> list[str]:
    """`rest` less make's --config-knob (train/cli/fit.py): the config it names is checked here, so the ranks and the
    command line shown need only --config."""
    kept, skip = [], False
    for word in rest:
        if not skip and word == "--config-knob":
            skip = True
        elif skip or word.startswith("--config-knob="):
            skip = False
        else:
            kept.append(word)
    return kept


def exit_status(exitcode: int) -> int:
    """A rank's exit code as a shell reports it: its own status, or 128 + the signal that ended it."""
    return 128 - exitcode if exitcode < 0 else exitcode


def killed_ranks(failures: dict, config, nproc: int) -> list[str]:
    """The line for each rank that a signal ended (torchrun's failures: rank -> ProcessFailure), in rank order."""
    import torch

    from train.loop.killed_rank import killed_rank_message, plan_figures

    killed = sorted(rank for rank, failure in failures.items() if failure.exitcode < 0)
    if not killed:
        return []
    figures = plan_figures(config, 1, nproc, gpus=torch.cuda.is_available())
    return [killed_rank_message(-failures[rank].exitcode, rank, socket.gethostname(), figures, failures[rank].pid)
            for rank in killed]


def launch(nproc: int, command: str, rest: list[str], config) -> int:
    """torchrun's launcher in this process; the status of the rank a signal ended, else of the rank that failed
    first, or 0."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

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


def main(argv: list[str], environ: dict[str, str] | os._Environ = os.environ) -> int:
    from train.errors import EXIT_USER_ERROR, UserError

    options = parse(argv)
    try:
        code_dir = code_dir_path(options.code_dir)
        if code_dir is not None:  # for the check here and for the ranks
            sys.path.insert(0, str(code_dir))
            environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(code_dir), environ.get("PYTHONPATH"))))
        if options.command not in RANKED:
            from train.__main__ import main as train_main

            return train_main([options.command, *options.rest])
        config = check_input(options.command, options.rest, environ.get("DATA_DIR"))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    rest = for_ranks(options.rest)
    environ.setdefault("OMP_NUM_THREADS", str(threads_per_rank(options.nproc, len(os.sched_getaffinity(0)))))
    environ.setdefault("TORCH_CPP_LOG_LEVEL", CPP_LOG_LEVEL)
    # The same run as one command line (torchrun beside this Python: the venv's), with what was set here.
    shown = [f"OMP_NUM_THREADS={environ['OMP_NUM_THREADS']}", f"TORCH_CPP_LOG_LEVEL={environ['TORCH_CPP_LOG_LEVEL']}",
             *([f"PYTHONPATH={environ['PYTHONPATH']}"] if code_dir is not None else []),
             os.path.relpath(Path(sys.executable).with_name("torchrun")), "--standalone",
             f"--nproc-per-node={options.nproc}", "-m", "train", options.command, *rest]
    print(shlex.join(shown), flush=True)
    return launch(options.nproc, options.command, rest, config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
