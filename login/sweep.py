"""`make sweep`'s grid, checked before anything is queued (jobs/submit.sh): every key a setting, every value one its
setting takes, every element's whole config valid (the config check of `make submit`, login/config_check.py), the
grid not empty and within the cluster's MaxArraySize; then the list file the elements read (train/config/sweep.py).

    python3 -m login.sweep --config CONFIG --sweep TEXT --seeds N [--max-array-size M] [--max-parallel P]
                           [--list-file PATH] [OVERRIDE...]

Prints, one a line: `array:SPEC` (sbatch --array's value), then `element:INDEX OVERRIDES` for each element, and
`note:TEXT` where something was not checked. Exit status 0: valid; 2: not valid, each problem a line on stderr, and
no list file is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from train.errors import UserError
from train.sweep import (
    SEED_KEY,
    array_size_problem,
    array_spec,
    expand,
    given_own_keys,
    parse_grid,
    point_of,
    write_list,
)


def element_problems(load_config, config_name: str, base: list[str], elements: list[tuple[str, ...]],
                     seeds_generated: bool) -> list[str]:
    """Each element's whole config checked as the job will load it (a value may be valid only beside another value
    of the grid: model.num_layers=3 with sampler.num_neighbors=[5,5,5]); each distinct refusal once, with the first
    element it refuses (a key that is not a setting, or a value its setting refuses, refuses every element that has
    it, in the same words). `seeds_generated`: the seeds are SEEDS's, whole numbers, so a point is checked once."""
    problems: list[str] = []
    told: set[str] = set()
    checked: set[tuple[str, ...]] = set()
    for index, overrides in enumerate(elements):
        key = point_of(overrides) if seeds_generated else overrides
        if key in checked:
            continue
        checked.add(key)
        try:
            load_config(config_name, [*base, *overrides])
        except UserError as exc:
            if str(exc) not in told:
                told.add(str(exc))
                problems.append(f"SWEEP element {index} ({' '.join(overrides)}): {exc}")
    return problems


def args_problems(base: list[str], axes) -> list[str]:
    """ARGS may not set what the sweep sets for each element: its run directory, a swept key, the seed."""
    problems = [f"ARGS sets {word}: each element of a sweep writes its own run directory, runs/<array id>_<index>; "
                "drop it from ARGS." for word in given_own_keys(base)]
    swept = {axis.key for axis in axes} | {SEED_KEY}
    for word in base:
        key = word.partition("=")[0].strip()
        if key in swept:
            what = "SEEDS sets it (trainer.seed=0..SEEDS-1)" if key == SEED_KEY and key not in \
                {axis.key for axis in axes} else "SWEEP sweeps it"
            problems.append(f"ARGS sets {word}, but {what}: drop it from ARGS.")
    return problems


def check(args) -> tuple[list[str], list[str], list[tuple[str, ...]]]:
    """(problems, notes, elements) of the sweep `args` asks for."""
    try:
        axes = parse_grid(args.sweep)
        elements = expand(axes, args.seeds)
    except UserError as exc:
        return [str(exc)], [], []
    problems = args_problems(args.overrides, axes)
    notes: list[str] = []
    try:
        from train.config import load_config  # optional here: a login node's python3 may lack PyYAML
    except ModuleNotFoundError as exc:
        notes.append(f"{sys.executable} cannot import {exc.name}: the grid's keys and values were not checked here")
    else:
        problems += element_problems(load_config, args.config, args.overrides, elements,
                                     seeds_generated=all(axis.key != SEED_KEY for axis in axes))
    size = array_size_problem(len(elements), args.max_array_size)
    return problems + ([size] if size else []), notes, elements


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m login.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--sweep", required=True, help="SWEEP's text: section.key=v1,v2 ...")
    p.add_argument("--seeds", type=int, required=True)
    p.add_argument("--max-array-size", type=int, default=None, help="the cluster's MaxArraySize")
    p.add_argument("--max-parallel", type=int, default=None, help="elements running at once (--array's %%N)")
    p.add_argument("--list-file", default="", help="write each element's overrides there, a line each")
    p.add_argument("overrides", nargs="*", help="ARGS, the overrides every element shares")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    problems, notes, elements = check(args)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    if args.list_file:
        write_list(Path(args.list_file), elements)
    print(f"array:{array_spec(len(elements), args.max_parallel)}")
    for index, overrides in enumerate(elements):
        print(f"element:{index} {' '.join(overrides)}")
    for note in notes:
        print(f"note:{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
