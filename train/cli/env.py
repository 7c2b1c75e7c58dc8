"""`python -m train env`: the resolved distributed contract as one JSON object, for debugging inside srun.

`--port` prints only the master port a job's steps use when MASTER_PORT is unset (the one home of
that rule, `train.cluster.distenv.port_for_job`), for a batch script that wants to log or export it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from train.cluster.distenv import JOB_ID_VARS, port_for_job, resolve
from train.errors import UserError


def add_arguments(parser) -> None:
    parser.add_argument("--indent", type=int, default=None, help="pretty-print with this indent")
    parser.add_argument("--port", action="store_true",
                        help="print only the job's master port (from SLURM_JOB_ID) and exit")


def command_line() -> str:
    """This process's command line as `python -m train ...`, for the srun hint of an error."""
    return "python -m train " + shlex.join(sys.argv[1:])


def main(args) -> int:
    if args.port:
        for name in JOB_ID_VARS:
            if os.environ.get(name, "").strip():
                print(port_for_job(os.environ[name].strip(), name))
                return 0
        raise UserError("--port needs SLURM_JOB_ID (run it inside a job), or set MASTER_PORT yourself.")
    print(json.dumps(resolve(os.environ, command=command_line()).to_dict(), indent=args.indent, sort_keys=False))
    return 0
