"""A sweep (`make sweep SWEEP='optim.lr=0.01,0.001 model.name=sage,gat' SEEDS=3`): a grid of config overrides times
seeds, one element of one SLURM job array each; pure and torch-free, for the login node, the job and the report.

- The grid: whitespace-separated `section.key=v1,v2,...` words; its points are the product of each key's values (the
  first key's values change slowest). A value may hold commas inside brackets (`sampler.num_neighbors=[10,5],[15,10]`
  is two values).
- The seeds: each point runs SEEDS times, with trainer.seed=0, 1, ..., SEEDS-1 (the seeds of a point are consecutive
  elements). Where the grid names trainer.seed itself, its values are the seeds and SEEDS stays 1.
- Each element's run directory is its own, runs/<array id>_<index> (`element_dir`), as its log is
  LOG_DIR/JOB_NAME-<array id>_<index>.log: output.dir is therefore not a key of the grid, nor of ARGS. Array ids are
  not unique (a restarted controller numbers from 1 again, as train/loop/rundir.py says of job ids): the element
  records its submission there (`claim`, sweep.json), a requeue of it finds its own directory again and resumes it,
  and an element whose runs/<array id>_<index> is another sweep's writes runs/<array id>_<index>-<submission>.
- The list file (`write_list`, `read_list`): line i holds element i's overrides, whitespace-separated, nothing else.
  `make sweep` writes it beside the logs before sbatch as LOG_DIR/sweep-<submission>.list, each element reads its
  own line (login/sweep_element.py, run by jobs/train.sbatch), and `make report SWEEP=<array id>` reads it back
  through the link LOG_DIR/sweep-<array id>.list (`list_link`), whose target names the submission
  (`submission_of`).
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from train.errors import UserError
from train.files import RUNS
from train.storage.writes import atomic_write_text

SEED_KEY = "trainer.seed"
OWN_KEYS = ("output.dir",)  # each element's own (element_dir)
ELEMENT_RECORD = "sweep.json"  # in an element's run directory: the sweep (submission) and element it belongs to


@dataclass(frozen=True)
class Axis:
    """One key of the grid and its values, as written (each is an override's right-hand side)."""

    key: str
    values: tuple[str, ...]


def split_values(text: str) -> list[str]:
    """`a,[1,2],b` -> ['a', '[1,2]', 'b']: commas inside brackets or braces belong to the value (a YAML list).
    By hand: the values are override texts, kept as written, not YAML parsed and written again."""
    values, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    values.append(text[start:])
    return values


def parse_grid(text: str) -> list[Axis]:
    """SWEEP's text as its axes, in the order given. Raises UserError naming the word at fault and what is valid."""
    axes: list[Axis] = []
    for word in text.split():
        key, eq, rest = word.partition("=")
        section, dot, name = key.partition(".")
        if not eq or not dot or not section or not name:
            raise UserError(f"SWEEP word {word!r} is not section.key=value1,value2,...: e.g. "
                            "SWEEP='optim.lr=0.01,0.001 model.name=sage,gat'.")
        if key in OWN_KEYS:
            raise UserError(f"SWEEP word {word!r}: {key} is each element's own (runs/<array id>_<index>), not a key "
                            "to sweep.")
        if any(axis.key == key for axis in axes):
            raise UserError(f"SWEEP names {key} twice; give it once with all its values: {key}=value1,value2.")
        values = split_values(rest)
        empty = [i + 1 for i, value in enumerate(values) if not value.strip()]
        if empty:
            raise UserError(f"SWEEP word {word!r} gives {key} an empty value (value {empty[0]} of {len(values)}): "
                            f"list its values with commas, e.g. {key}=a,b.")
        twice = sorted({value for value in values if values.count(value) > 1})
        if twice:
            raise UserError(f"SWEEP word {word!r} gives {key} the value {twice[0]!r} twice: each point once.")
        axes.append(Axis(key, tuple(values)))
    return axes


def expand(axes: list[Axis], seeds: int) -> list[tuple[str, ...]]:
    """Every element's overrides: the grid's points (the product of the axes' values), each SEEDS times with its
    trainer.seed. Raises UserError for an empty grid, or seeds given twice."""
    if seeds < 1:
        raise UserError(f"SEEDS={seeds} is not valid: the runs per point, at least 1.")
    if any(axis.key == SEED_KEY for axis in axes):
        if seeds != 1:
            raise UserError(f"SWEEP lists {SEED_KEY} and SEEDS={seeds} asks for seeds too: give one, SEEDS=N "
                            f"({SEED_KEY}=0..N-1) or the seeds in SWEEP.")
        seed_overrides: list[tuple[str, ...]] = [()]
    else:
        seed_overrides = [(f"{SEED_KEY}={seed}",) for seed in range(seeds)]
    if not axes and seeds == 1:
        raise UserError("the grid is empty: SWEEP names no key and SEEDS=1 is one run (make submit runs one); "
                        "give SWEEP='section.key=value1,value2 ...' and/or SEEDS=N.")
    points = itertools.product(*[[f"{axis.key}={value}" for value in axis.values] for axis in axes])
    return [point + seed for point in points for seed in seed_overrides]


def point_of(overrides: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """An element's point: its overrides but the seed (the report's rows group the seeds of a point)."""
    return tuple(word for word in overrides if word.partition("=")[0] != SEED_KEY)


def given_own_keys(overrides: list[str]) -> list[str]:
    """The overrides of ARGS that a sweep sets for each element itself (OWN_KEYS)."""
    return [word for word in overrides if word.partition("=")[0].strip() in OWN_KEYS]


def array_spec(elements: int, max_parallel: int | None) -> str:
    """sbatch --array's value: every element's index, at most `max_parallel` of them running at once."""
    return f"0-{elements - 1}" + (f"%{max_parallel}" if max_parallel else "")


def array_size_problem(elements: int, max_array_size: int | None) -> str | None:
    """Why the cluster refuses an array of `elements` (indices 0..elements-1 must be below MaxArraySize); None where
    it takes it, or where MaxArraySize is not known."""
    if max_array_size is None or elements <= max_array_size:
        return None
    return (f"the sweep has {elements} elements, more than this cluster's MaxArraySize={max_array_size} (scontrol "
            f"show config): an array's indices stop at {max_array_size - 1}; give fewer values or SEEDS, or split "
            "the grid into several sweeps.")


def element_dir(array_id: str, index: int, submission: str, runs: Path = RUNS) -> Path:
    """Element `index`'s run directory: runs/<array id>_<index> (its log's %A_%a) where it is free or records this
    very submission (a requeue resumes it), else runs/<array id>_<index>-<submission>. Reads, writes nothing: the
    element (`claim`) and the report ask alike."""
    base = runs / f"{array_id}_{index}"
    if not os.path.lexists(base) or recorded_submission(base) == submission:
        return base
    return runs / f"{array_id}_{index}-{submission}"


def recorded_submission(run_dir: Path) -> str | None:
    """The submission an element's run directory records; None where it records none (not an element's)."""
    try:
        record = json.loads((run_dir / ELEMENT_RECORD).read_text())
    except (OSError, ValueError):  # absent, unreadable, not JSON
        return None
    return record.get("submission") if isinstance(record, dict) else None


def claim(run_dir: Path, array_id: str, index: int, submission: str) -> None:
    """Record in `run_dir` (made here) the element it belongs to, before its run writes anything."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / ELEMENT_RECORD, json.dumps({"array": array_id, "index": index,
                                                            "submission": submission}, sort_keys=True) + "\n")


def list_file(log_dir: Path, submission: str) -> Path:
    """The list file `make sweep` writes before sbatch, named by the submission (the array has no id yet)."""
    return log_dir / f"sweep-{submission}.list"


def list_link(log_dir: Path, array_id: str) -> Path:
    """Where `make sweep` links the array's list file once sbatch has given the array its id."""
    return log_dir / f"sweep-{array_id}.list"


def submission_of(link: Path) -> str:
    """The submission whose list file `link` (list_link) names."""
    return link.resolve().name.removeprefix("sweep-").removesuffix(".list")


def write_list(path: Path, elements: list[tuple[str, ...]]) -> None:
    atomic_write_text(path, "".join(" ".join(overrides) + "\n" for overrides in elements))


def read_list(path: Path) -> list[tuple[str, ...]]:
    """Each element's overrides, from a list file `write_list` wrote."""
    return [tuple(line.split()) for line in path.read_text().splitlines()]
