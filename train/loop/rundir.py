"""Which run directory a job writes: its own, never another job's.

Job ids are not unique: two clusters that share the project directory both have a job 2, and a
restarted controller numbers from 1 again. A run directory therefore records the job it belongs
to (`job.json`: cluster name, job id, and the submission id `make submit` exports as
PYG_SUBMISSION_ID, the same for every requeue of that submission). Without `output.dir`:

- `runs/<jobid>` is used when it does not exist, or when it records this very job: the same
  submission id, or, when there is none, the same cluster and job id and this run is a requeue
  (SLURM_RESTART_COUNT > 0), which automatic resume then continues;
- otherwise the directory is another job's: this one gets `runs/<jobid>-<cluster>-<n>` (the
  first free n; a requeue finds that one again by its job.json) and says so.

`output.dir` is the user's explicit choice, resumed as given. Outside SLURM a run gets `runs/<timestamp>`.

`decide` is the one rule: the run (train/loop/run.py), the checks before it (train/cli/preflight.py) and the
doctor's probe ask it, each against the working directory (the job's --chdir); the report looks for runs in
the same `RUNS` (`newest_run`, `runs_under`: its hint).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from train.cluster.distenv import DistEnv
from train.files import RUNS, dir_problem, file_problem
from train.storage.writes import atomic_write_text

IDENTITY_FILE = "job.json"


def timestamp() -> str:
    """The name of a run outside SLURM (runs/<timestamp>); rank 0's is the one every rank takes."""
    return time.strftime("%Y%m%d-%H%M%S")


def decide(output_dir: str, env: DistEnv, runs: Path = RUNS) -> tuple[Path, str | None]:
    """(the run directory, a note when it is not the one the user would expect): output.dir as given; under SLURM
    runs/<jobid> or this job's own sibling (`choose`); else runs/<timestamp>. Reads `runs`, writes nothing."""
    if output_dir:
        return Path(output_dir), None
    if env.job_id:
        return choose(runs, job_identity(env.job_id, env.cluster_name, env.submission_id), env.restart_count > 0)
    return runs / timestamp(), None


def job_identity(job_id: str, cluster_name: str | None, submission_id: str | None) -> dict[str, str]:
    """What tells this job from another with the same id (`DistEnv.cluster_name`, `.submission_id`)."""
    return {"cluster": cluster_name or "unknown", "job_id": job_id, "submission": submission_id or ""}


def read_identity(directory: Path) -> dict | None:
    """The job a run directory records; None when its job.json is absent, empty, not a file or not JSON."""
    path = directory / IDENTITY_FILE
    if file_problem(path) is not None:  # a FIFO would block the read; a directory or a loop would raise
        return None
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):  # ValueError: not UTF-8, not JSON
        return None
    return value if isinstance(value, dict) else None


def belongs_to(directory: Path, identity: Mapping[str, str], requeued: bool) -> bool:
    """Is `directory` (which exists) this job's own? Not when it is no directory (a file, a link loop)."""
    if dir_problem(directory) is not None:
        return False
    recorded = read_identity(directory)
    if recorded is None:  # empty, made before job.json existed, or by a run that stopped before writing it
        return requeued or not any(directory.iterdir())
    if recorded.get("cluster") != identity["cluster"] or recorded.get("job_id") != identity["job_id"]:
        return False
    if identity["submission"] or recorded.get("submission"):
        return recorded.get("submission") == identity["submission"]
    return requeued  # same cluster and id, no submission id: only a requeue is the same job


def runs_under(runs: Path = RUNS) -> list[Path]:
    """The runs under `runs` (folders with a readable metrics.jsonl), the one whose metrics changed last last."""
    found = sorted((p.stat().st_mtime, p.parent) for p in runs.glob("*/metrics.jsonl") if file_problem(p) is None)
    return [run for _, run in found]


def newest_run(runs: Path = RUNS) -> Path | None:
    """The run under `runs` whose metrics.jsonl changed last (`make report` without RUN); None when there is none."""
    found = runs_under(runs)
    return found[-1] if found else None


def choose(runs: Path, identity: Mapping[str, str], requeued: bool) -> tuple[Path, str | None]:
    """(the job's run directory under `runs`, a note when it is not runs/<jobid>)."""
    base = runs / identity["job_id"]
    if not os.path.lexists(base) or belongs_to(base, identity, requeued):  # a dangling link is in the way too
        return base, None
    stem = f"{identity['job_id']}-{identity['cluster']}-"
    taken = sorted(p for p in runs.glob(f"{stem}*") if p.name[len(stem):].isdigit())
    for candidate in taken:
        if belongs_to(candidate, identity, requeued):
            return candidate, f"run directory {candidate} (job {identity['job_id']} of cluster {identity['cluster']})"
    number = 1 + max((int(p.name[len(stem):]) for p in taken), default=0)
    chosen = runs / f"{stem}{number}"
    problem = dir_problem(base)
    if problem is not None:
        return chosen, f"{base} {problem}: this job writes {chosen}"
    recorded = read_identity(base) or {}
    return chosen, (f"{base} belongs to another job (cluster {recorded.get('cluster', '?')}, job "
                    f"{recorded.get('job_id', '?')}{', an earlier submission' if recorded else ''}): this job writes "
                    f"{chosen} and starts from scratch (to continue that run, pass output.dir={base})")


def write_identity(directory: Path, identity: Mapping[str, str]) -> None:
    atomic_write_text(directory / IDENTITY_FILE, json.dumps(dict(identity), sort_keys=True) + "\n")
