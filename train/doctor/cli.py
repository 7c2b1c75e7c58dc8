"""`python -m train doctor`: the entry, and the one module of the doctor that reads the process environment.

Exit status: 0 all checks passed (warnings allowed), 1 a check failed, 2 a usage error (train/errors.py).
"""

from __future__ import annotations

import os
import sys
import time

from train.cli.fit import add_config_arguments, config_of
from train.cluster.distenv import resolve
from train.doctor.findings import CPU_SIZES, GPU_SIZES, failed, parse_sizes
from train.doctor.probes import pre_rendezvous
from train.errors import EXIT_FAILED, UserError

DEFAULT_TIMEOUT = 120.0  # seconds for the pre-checks plus the rendezvous; pyxis may start nodes seconds apart


def add_arguments(parser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"bound on the pre-checks and the rendezvous (default {DEFAULT_TIMEOUT:.0f})")
    parser.add_argument("--sizes", default=None, metavar="LIST",
                        help=f"all-reduce sizes (default {CPU_SIZES} with gloo, {GPU_SIZES} with NCCL)")
    parser.add_argument("--iters", type=int, default=5, help="timed all-reduces per size (default 5)")
    parser.add_argument("--no-bandwidth", action="store_true", help="skip the timed all-reduce and barrier")


def main(args) -> int:
    """Read the process environment here, once, and hand it down."""
    started = time.monotonic()
    environ = os.environ
    config = config_of(args)
    if args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g} must be > 0 seconds.")
    if args.iters < 1:
        raise UserError(f"--iters {args.iters} must be >= 1.")
    sizes = parse_sizes(args.sizes) if args.sizes else None
    env = resolve(environ)
    deadline = started + args.timeout
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"

    net, findings = pre_rendezvous(env, deadline, agent_store)
    if failed(findings):
        for finding in findings:
            print(finding.line(), file=sys.stderr, flush=True)
        return EXIT_FAILED

    # c10d logs every retry with a C++ stack trace; the doctor reports failures itself.
    environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    from train.doctor.rendezvous import rendezvous  # torch: only once the checks before it passed

    return rendezvous(env, config, net, environ, sizes, args, (started, deadline), agent_store)
