"""Check a config, its overrides and the dataset it names as the job will read them, before anything is
queued (jobs/submit.sh) or prepared (container/data.sh): a typo in ARGS must not wait in the queue.

    python3 -m login.config_check [--dataset] CONFIG [OVERRIDE...]

Exit status 0: valid, or not checkable with this Python (then one line on stdout says what was not
checked and why); 2: not valid, the package's message on stderr. The config needs PyYAML; the dataset
name needs torch and PyG (train.graph.data), which a login node's python3 may lack.
"""

from __future__ import annotations

import sys

USAGE = "usage: python3 -m login.config_check [--dataset] CONFIG [OVERRIDE...]"


def check(config_name: str, overrides: list[str], dataset: bool) -> str:
    """'' when the config (and with `dataset` its data.name) is valid; what was not checked when this Python
    cannot tell. Raises train.errors.UserError when it is not valid."""
    try:
        from train.config import load_config
    except ModuleNotFoundError as exc:
        return f"{sys.executable} cannot import {exc.name}: CONFIG and ARGS were not checked here"
    config = load_config(config_name, overrides)
    if dataset:
        try:
            from train.graph.data import check_dataset_name
        except ModuleNotFoundError as exc:
            return f"{sys.executable} cannot import {exc.name}: the dataset name is checked in the image"
        check_dataset_name(config.data.name)
    return ""


def main(argv: list[str]) -> int:
    dataset = bool(argv) and argv[0] == "--dataset"
    argv = argv[1:] if dataset else argv
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    from train.errors import UserError  # the standard library only

    try:
        not_checked = check(argv[0], argv[1:], dataset)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not_checked:
        print(not_checked)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
