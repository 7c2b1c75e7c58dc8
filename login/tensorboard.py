"""`make tensorboard`: TensorBoard over the runs' event files (runs/, output.tensorboard) on this node, and the
`ssh -L` line that reaches it from your own machine.

    python -m login.tensorboard --port PORT

The line is printed first, always. TensorBoard then listens on localhost only, so other users of a shared
login node do not see your runs; the `ssh -N -L` line, run on your machine, forwards http://localhost:PORT there
to it. A port already taken on this node (another TensorBoard) is refused before it starts, naming TB_PORT.
"""

from __future__ import annotations

import argparse
import getpass
import importlib.util
import os
import shlex
import socket
import sys
from pathlib import Path

from train.errors import EXIT_USER_ERROR
from train.files import RUNS  # where runs go: the one home of runs/

HOST = "localhost"  # where TensorBoard listens: only this node's own users reach it, through ssh


def ssh_line(port: int, user: str, node: str) -> str:
    """The command the user runs on their own machine to reach TensorBoard on `node`."""
    return f"ssh -N -L {port}:{HOST}:{port} {user}@{node}"


def node_name() -> str:
    """This node's name as another machine reaches it: its full name, else its host name (not `localhost`)."""
    full = socket.getfqdn()
    return full if full and not full.startswith("localhost") else socket.gethostname()


def serve_command(python: str, logdir: Path, port: int) -> list[str]:
    return [python, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", HOST, "--port", str(port)]


def port_problem(port: int) -> str | None:
    """Why TensorBoard cannot listen on `port` here (taken, or not allowed); None when it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            return (f"TB_PORT={port} cannot be used on this node ({exc.strerror or exc}: another TensorBoard, perhaps "
                    f"another user's, may hold it); choose another, e.g. make tensorboard TB_PORT={port + 1}")
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m login.tensorboard", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="where TensorBoard listens on this node (TB_PORT)")
    options = parser.parse_args(argv)
    command = serve_command(sys.executable, RUNS, options.port)
    print(f"on your own machine: {ssh_line(options.port, getpass.getuser(), node_name())}", flush=True)
    print(f"then open http://{HOST}:{options.port}/ (TensorBoard over {RUNS}/ on this node; Ctrl-C stops it)",
          flush=True)
    problem = port_problem(options.port)
    if problem is None and importlib.util.find_spec("tensorboard") is None:
        problem = f"{sys.executable} has no tensorboard package: make setup installs it (requirements.lock pins it)"
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        return EXIT_USER_ERROR
    if not RUNS.is_dir():
        print(f"note: no {RUNS}/ yet: TensorBoard shows the runs as they write their event files", flush=True)
    print(shlex.join(command), flush=True)
    os.execv(sys.executable, command)
    return 0  # not reached: TensorBoard runs in this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
