"""`make run`, `make doctor`, `make model-check`: a `python -m train` command on this machine, its input checked
once before any rank starts, and a failure told by the project's own message, not by the launcher's traceback.

    python -m login.launch [--nproc N] [--code-dir DIR] [--check-only] COMMAND --config C [section.key=value ...]
                           [OPTION ...]

COMMAND is fit, doctor or predict (N ranks, started by torchrun's own launcher in this process), or model (the model
check, here). Before any rank starts, the config and its overrides (and for fit the dataset's name and the
model's contract) are checked in this one process, as `make submit` checks them before sbatch: a mistake is
one `error:` line and exit status 2. A rank that fails later prints its own message; torchrun's report of it
(`ChildFailedError`, its traceback, its log line) is left out, and this process exits with the status of the
rank that failed first (train/errors.py). A rank ended by a signal could say nothing: this process, which sees
the signal, names it with its likely cause and the memory plan's figures (train/loop/killed_rank.py), and exits
with the status a shell gives that signal. Each rank gets OMP_NUM_THREADS (this machine's cores / N, at least 1)
unless it is set already, so torchrun's banner about it is not printed, and TORCH_CPP_LOG_LEVEL=FATAL unless set
(CPP_LOG_LEVEL); CODE_DIR goes in front of PYTHONPATH. --check-only checks and starts nothing: `make submit
MODE=predict` checks the job's predict so before the queue.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from train.__main__ import build_parser
from train.__main__ import main as train_main
from train.cli.fit import config_of
from train.cli.predict import predict_config, run_path
from train.errors import EXIT_USER_ERROR, UserError
from train.graph.datasets.lookup import dataset_kind, unprepared

RANKED = ("fit", "doctor", "predict")  # the commands that run on every rank; `model` runs here
# The ranks' C++ log (gloo's, NCCL's): its lines repeat, in C++ words, a failure that a rank has told in its own
# (train/loop/failure_report.py: a rank's error once, one line from each of the others); a user's
# TORCH_CPP_LOG_LEVEL=WARNING shows them.
CPP_LOG_LEVEL = "FATAL"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m login.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=1, help="ranks on this machine (fit, doctor)")
    parser.add_argument("--code-dir", default="", help="the folder of your own model's code (CODE_DIR)")
    parser.add_argument("--check-only", action="store_true", help="check the input once, start no rank")
    parser.add_argument("command", choices=(*RANKED, "model"))
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="--config C, overrides, the command's options")
    return parser.parse_args(argv)


def code_dir_path(code_dir: str) -> Path | None:
    """CODE_DIR as an absolute folder (None when not given); `UserError` when it is not a folder."""
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
    args = build_parser().parse_args([command, *rest])
    if command == "predict":  # the run's own config, its final weights there, and a graph of its shape
        from train.loop.finished_run import read_record  # torch: the weights are read
        from train.loop.predict import check_shape

        run = run_path(args)
        config = predict_config(args, run)
        record = read_record(run)
        check_graph_files(config, data_dir)
        size = dataset_kind(config.data).plan_size(config.data)
        check_shape(record, size.features, size.meta)
        return config
    config = config_of(args)  # before torch loads: a config error takes a moment
    if command == "fit":  # what every rank's preflight checks first that needs no rank (train/cli/preflight.py)
        from train.cli.preflight import check_model_input, check_outputs  # with torch: the model's contract
        dataset_kind(config.data)  # a known name, and what its kind needs (data.path for files)
        check_graph_files(config, data_dir)
        check_model_input(config)
        check_outputs(config)
    return config


def check_graph_files(config, data_dir: str | None) -> None:
    """Your own graph's files (data.name=files, igbh): there, and their format and shapes read from the headers, as
    make submit's plan reads them, before any rank starts. A published dataset not prepared is no error here:
    rank 0 downloads it. Its values (NaN) are scanned where it is loaded."""
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


def main(argv: list[str], environ: dict[str, str] | os._Environ = os.environ) -> int:
    options = parse(argv)
    try:
        code_dir = code_dir_path(options.code_dir)
        if code_dir is not None:  # for the check here and for the ranks
            sys.path.insert(0, str(code_dir))
            environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(code_dir), environ.get("PYTHONPATH"))))
        if options.command not in RANKED:
            return train_main([options.command, *options.rest])
        config = check_input(options.command, options.rest, environ.get("DATA_DIR"))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    if options.check_only:
        return 0
    rest = for_ranks(options.rest)
    environ.setdefault("OMP_NUM_THREADS", str(threads_per_rank(options.nproc, len(os.sched_getaffinity(0)))))
    environ.setdefault("TORCH_CPP_LOG_LEVEL", CPP_LOG_LEVEL)
    # The same run as one command line (torchrun beside this Python: the venv's), with what was set here.
    shown = [f"OMP_NUM_THREADS={environ['OMP_NUM_THREADS']}", f"TORCH_CPP_LOG_LEVEL={environ['TORCH_CPP_LOG_LEVEL']}",
             *([f"PYTHONPATH={environ['PYTHONPATH']}"] if code_dir is not None else []),
             os.path.relpath(Path(sys.executable).with_name("torchrun")), "--standalone",
             f"--nproc-per-node={options.nproc}", "-m", "train", options.command, *rest]
    print(shlex.join(shown), flush=True)
    from login.ranks import launch  # torch loads once the input is known to be good

    return launch(options.nproc, options.command, rest, config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
