"""`python -m train env`: the resolved distributed contract as one JSON object, for debugging inside srun."""

from __future__ import annotations

import json
import os

from train.distenv import resolve


def add_arguments(parser) -> None:
    parser.add_argument("--indent", type=int, default=None, help="pretty-print with this indent")


def main(args) -> int:
    print(json.dumps(resolve(os.environ).to_dict(), indent=args.indent, sort_keys=False))
    return 0
