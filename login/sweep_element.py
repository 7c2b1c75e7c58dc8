"""One element of a sweep, as jobs/train.sbatch starts it: its line of the list file and its own run directory
(train/sweep.py), recorded there before its training writes anything.

    python3 -m login.sweep_element LIST_FILE ARRAY_ID INDEX SUBMISSION

Prints two lines: the run directory, then the element's overrides. Exit status 2, with the reason on stderr, where
the list file has no such element. Standard library and train.sweep only: it runs on the host's python3 of a
node, before the image starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from train.sweep import claim, element_dir, read_list

USAGE = "usage: python3 -m login.sweep_element LIST_FILE ARRAY_ID INDEX SUBMISSION"


def main(argv: list[str]) -> int:
    if len(argv) != 4 or not argv[1].isdigit() or not argv[2].isdigit():
        print(USAGE, file=sys.stderr)
        return 2
    listed, array_id, index, submission = Path(argv[0]), argv[1], int(argv[2]), argv[3]
    try:
        elements = read_list(listed)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read the sweep's list file {listed}: {exc}", file=sys.stderr)
        return 2
    if index >= len(elements):
        print(f"the sweep's list file {listed} has no line for element {index} (it has {len(elements)})",
              file=sys.stderr)
        return 2
    run_dir = element_dir(array_id, index, submission)
    claim(run_dir, array_id, index, submission)
    print(run_dir)
    print(" ".join(elements[index]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
