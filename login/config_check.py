"""Check a config, its overrides and the dataset it names as the job will read them, before anything is
queued (jobs/submit.sh) or prepared (container/data.sh): a typo in ARGS must not wait in the queue.

    python3 -m login.config_check [--dataset] [--data-dir DIR] [--value KEY] CONFIG [OVERRIDE...]

--dataset checks the dataset's name (and what its kind needs, e.g. data.path for files); --data-dir also checks that
the dataset is prepared in DIR (the job's DATA_DIR), so that a job is not queued to fail on the nodes, and names the
`make data` that prepares it; your own graph's values (NaN) are scanned as training scans them where they are at
most SCAN_LIMIT_BYTES, else a note says they were not. --value KEY prints the value the config and its overrides
give KEY (section.name; make submit DRY_RUN=1 shows trainer.max_restarts), nothing where this Python cannot load the
config. Exit status 0: valid, or not checkable with this Python (then one line on stdout says what was not checked
and why); 2: not valid, the package's message on stderr. The config needs PyYAML; the dataset's check numpy too
(train.graph.datasets.lookup: no shipped config's check imports torch, which only loading a graph needs;
tests/test_layout.py), which a login node's python3 may lack.
"""

from __future__ import annotations

import sys

from train.errors import UserError  # the standard library only

USAGE = "usage: python3 -m login.config_check [--dataset] [--data-dir DIR] [--value KEY] CONFIG [OVERRIDE...]"


def check(config_name: str, overrides: list[str], dataset: bool, data_dir: str | None = None) -> str:
    """'' when the config (with `dataset` its data.name; with `data_dir` also its files there) is valid; what
    was not checked when this Python cannot tell. Raises train.errors.UserError when it is not valid."""
    try:
        from train.config import load_config  # optional here: a login node's python3 may lack PyYAML
    except ModuleNotFoundError as exc:
        return f"{sys.executable} cannot import {exc.name}: CONFIG and ARGS were not checked here"
    config = load_config(config_name, overrides)
    if dataset or data_dir is not None:
        try:
            from train.graph.datasets.lookup import dataset_kind, unprepared  # optional here: numpy
        except ModuleNotFoundError as exc:
            unchecked = "" if data_dir is None else f"; whether it is prepared in {data_dir or 'data'} was not checked"
            return f"{sys.executable} cannot import {exc.name}: the dataset name is checked in the image{unchecked}"
        dataset_kind(config.data, config.task.name)
        if data_dir is not None:
            missing = unprepared(config.data, data_dir)
            if missing:
                raise UserError(missing)
            return scan_values(config.data)
    return ""


SCAN_LIMIT_BYTES = 4 * 2**30  # the values read here to scan for NaN; a larger graph is scanned as the job loads it


def scan_values(data, limit: int = SCAN_LIMIT_BYTES) -> str:
    """Your own graph's features and edge values, scanned for NaN and infinities as `fit` scans them (raises
    UserError naming the array and the rows); '' when scanned, or published; else a note that they were not."""
    if data.name != "files":
        return "" if data.name not in ("igbh", "igbh-full") else \
            f"data.name={data.name}: the features were not scanned for NaN here (the job scans them as it loads)"
    try:
        from train.graph.datasets.graph_files import check_edge_values, check_graph, read_graph_arrays
        from train.graph.datasets.hetero_files import is_hetero
    except ModuleNotFoundError as exc:
        return f"{sys.executable} cannot import {exc.name}: data.path's values were not scanned for NaN here"
    if is_hetero(data.path):
        return f"data.path={data.path}: a heterogeneous graph's features were not scanned for NaN here (the job does)"
    arrays, source = read_graph_arrays(data.path)
    size = sum(arrays[name].numel() * arrays[name].element_size()
               for name in ("x", "edge_attr", "edge_weight") if name in arrays)
    if size > limit:
        return (f"{source}: its {size / 2**30:.3g} GiB of features and edge values were not scanned for NaN here "
                f"(over {limit / 2**30:.3g} GiB); the job scans them as it loads")
    check_graph(arrays, source)
    check_edge_values(arrays, source)
    return ""


def value(config_name: str, overrides: list[str], key: str) -> str:
    """The value `key` (section.name) has in the config with its overrides; '' where this Python cannot load it.
    Raises train.errors.UserError when the config is not valid or has no such key."""
    try:
        from train.config import load_config  # optional here: a login node's python3 may lack PyYAML
    except ModuleNotFoundError:
        return ""
    config = load_config(config_name, overrides)
    section, _, name = key.partition(".")
    found = getattr(getattr(config, section, None), name, None) if name else None
    if found is None:
        raise UserError(f"--value {key!r}: the config has no such key; expected section.name, e.g. trainer.epochs")
    return str(found)


def parse(argv: list[str]) -> tuple[bool, str | None, str | None, list[str]] | None:
    """(--dataset, --data-dir's DIR, --value's KEY, CONFIG and the overrides), or None when argv is not a valid
    call."""
    dataset, data_dir, key = False, None, None
    while argv and argv[0] in ("--dataset", "--data-dir", "--value"):
        if argv[0] == "--dataset":
            dataset, argv = True, argv[1:]
        elif len(argv) < 2:
            return None
        elif argv[0] == "--data-dir":
            data_dir, argv = argv[1], argv[2:]
        else:
            key, argv = argv[1], argv[2:]
    return (dataset, data_dir, key, argv) if argv else None


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    dataset, data_dir, key, argv = parsed
    try:
        said = value(argv[0], argv[1:], key) if key else check(argv[0], argv[1:], dataset, data_dir)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    if said:
        print(said)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
