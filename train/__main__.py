"""`python -m train SUBCOMMAND`: the command-line entry point.

Each subcommand lives in its own module with `add_arguments(parser)` and `main(args) -> int`;
this file only dispatches, and turns a `UserError` into one clear message and exit status 2 (a
`StorageError`, a file system that failed a write, into one message and EXIT_STORAGE).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import traceback
from pathlib import Path

from train.errors import EXIT_USER_ERROR, UserError, exit_status, exit_without_teardown
from train.heap import tune_heap
from train.storage.faults import StorageError

# name -> (module, one-line help). Modules are imported lazily: `env` must not pay for torch_geometric.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "env": ("train.cli.env", "print the resolved distributed environment as JSON"),
    "fit": ("train.cli.fit", "train a model (run under srun or torchrun for several processes)"),
    "data": ("train.cli.data", "download and prepare a dataset (run on a login node)"),
    "doctor": ("train.doctor", "check the allocation, devices, network and data before a run"),
    "report": ("train.cli.report", "draw curves.png and print a summary for a run directory; several: side by side"),
    "model": ("train.cli.model", "check model.name and model.kwargs as fit will build the model; nothing is written"),
    "predict": ("train.cli.predict", "write every node's prediction and embedding of a finished run (.npy rows)"),
    "plan": ("train.cli.plan", "print the memory a run will need per node, rank and GPU; refuse one that cannot fit"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m train", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(module=module_name)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # a subcommand whose module is not part of this build
        module.add_arguments(sub_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return importlib.import_module(args.module).main(args)
    except (UserError, StorageError) as exc:  # a StorageError: `fit` says more itself (train/loop/run.py)
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return exit_status(exc)
    except KeyboardInterrupt as exc:
        print("interrupted", file=sys.stderr)
        return exit_status(exc)


def console_entry() -> None:
    tune_heap(os.environ)  # before any subcommand imports torch (train/heap.py)
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except ModuleNotFoundError as exc:
        if (exc.name or "train").partition(".")[0] == "train":  # the package itself: a bug, shown as one
            traceback.print_exc()
            code = 1
        else:
            print(f"error: {missing_dependency(exc.name, sys.executable, sys.argv[1:])}", file=sys.stderr, flush=True)
            code = EXIT_USER_ERROR
    except BaseException:  # a bug, not a user's mistake: show the traceback
        traceback.print_exc()
        code = 1
    exit_without_teardown(code)


def missing_dependency(module: str, python: str, argv: list[str]) -> str:
    """Why `python` cannot run this command (it lacks `module`, a dependency: the system's Python, a venv of
    another project), and the interpreter that can: the project's pinned .venv, which `make setup` builds."""
    project = Path(__file__).resolve().parents[1]
    venv = project / ".venv" / "bin" / "python"
    lacks = f"{python} cannot import {module!r}, which this project needs"
    if os.path.abspath(python) == str(venv):  # the venv itself: incomplete, or its site-packages left out (-S)
        return f"{lacks}: make setup installs the pinned dependencies into .venv."
    shown = os.path.relpath(venv) if Path.cwd() == project else str(venv)
    command = shlex.join([shown, "-m", "train", *argv])
    built = "" if venv.exists() else " (make setup builds it first)"
    return (f"{lacks}: run it with the project's Python, {command}{built}; or through make (make run, make plan), "
            "which uses it. make setup installs the pinned dependencies into .venv.")


if __name__ == "__main__":
    console_entry()
