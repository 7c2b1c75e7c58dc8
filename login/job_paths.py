"""The paths a job reads, as the container will see them (jobs/submit.sh, before anything is queued).

    python3 -m login.job_paths --project DIR --data-dir DIR [--mounts SRC:DST,...] CONFIG [OVERRIDE...]

--mounts: CONTAINER_MOUNTS, and CODE_DIR where it is mounted (jobs/lib/code_dir.sh).

In the image a task sees only what pyxis mounts: the project at /workspace (also its working directory), DATA_DIR
at /data, CODE_DIR at /code and CONTAINER_MOUNTS. The config's paths (data.path, data.root, a trainer.resume
checkpoint) are each taken as the job will read them, one of:

- relative to the project (the job's working directory): read as given;
- relative to DATA_DIR where the project has no such path (`DATA_DIR=/home/me/graphs data.path=g.pt`);
- under a mount as the container sees it (`/data/g.pt`: DATA_DIR's g.pt);
- an absolute path of this machine under a mount's source: given to the job as the container sees it.

Anything else is refused, naming the path and the two fixes. Prints two lines: `here:` and the overrides to check
on this machine (each path as this machine sees it), `job:` and the overrides for the job (as the container sees
it), each only for the keys whose value changes; or `note:` and what was not checked. Exit status 0, or 2 with
the message on stderr. Bare mode (IMAGE=none) never asks: the nodes read their own paths.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import PurePosixPath

PROJECT_MOUNT, DATA_MOUNT = "/workspace", "/data"
USAGE = "usage: python3 -m login.job_paths --project DIR --data-dir DIR [--mounts SRC:DST,...] CONFIG [OVERRIDE...]"


@dataclass(frozen=True)
class Mount:
    """A folder of this machine (`source`, absolute) and where the container sees it (`target`); `name`, the
    setting that gives it, for messages."""

    source: str
    target: str
    name: str


def mounts_of(project: str, data_dir: str, extra: str) -> list[Mount]:
    """The job's mounts, as jobs/lib/pyxis.sh gives them to pyxis (`extra`: SRC:DST[:FLAGS],...)."""
    found = [Mount(normal(project), PROJECT_MOUNT, "the project"), Mount(normal(data_dir), DATA_MOUNT, "DATA_DIR")]
    for entry in filter(None, extra.split(",")):
        source, _, rest = entry.partition(":")
        target = rest.split(":", 1)[0] or source  # pyxis: SRC alone mounts at the same path
        found.append(Mount(normal(source), normal(target), "a mount"))
    return found


def normal(path: str) -> str:
    """An absolute path with `.`, `..` and doubled slashes folded (the folders need not exist)."""
    return os.path.normpath(os.path.abspath(path))


def under(path: str, folder: str) -> str | None:
    """`path` relative to `folder` ('.' for the folder itself), or None when it is not inside it."""
    pure, base = PurePosixPath(path), PurePosixPath(folder)
    if pure == base:
        return "."
    return str(pure.relative_to(base)) if base in pure.parents else None


def rebase(relative: str, folder: str) -> str:
    return folder if relative == "." else f"{folder.rstrip('/')}/{relative}"


def inside(path: str, mounts: list[Mount], side: str) -> tuple[Mount, str] | None:
    """The mount whose `side` ('source' or 'target') holds `path`, the most specific one, with the path relative to
    it; None when none does."""
    best = None
    for mount in mounts:
        relative = under(path, getattr(mount, side))
        if relative is not None and (best is None or len(getattr(mount, side)) > len(getattr(best[0], side))):
            best = (mount, relative)
    return best


def place(value: str, mounts: list[Mount], exists=os.path.exists) -> tuple[str, str] | None:
    """(the path as this machine reads it, as the job's container reads it) for a config path `value`, or None
    when the container does not see it. mounts[0] is the project (the job's working directory), mounts[1]
    DATA_DIR."""
    project, data = mounts[0], mounts[1]
    if not os.path.isabs(value):
        local, in_data = normal(os.path.join(project.source, value)), normal(os.path.join(data.source, value))
        relative = under(in_data, data.source)
        if not exists(local) and exists(in_data) and relative is not None:  # DATA_DIR's, given relative to it
            return in_data, rebase(relative, data.target)
        if under(local, project.source) is not None:
            return value, value  # the project's, read from its working directory
        value = local  # outside the project through '..': as the absolute path it is
    target = inside(normal(value), mounts, "target")
    if target is not None:  # as the container sees it (/data/g.pt): read here from the mount's source
        return rebase(target[1], target[0].source), normal(value)
    source = inside(normal(value), mounts, "source")
    if source is None and os.path.realpath(value) != normal(value):
        source = inside(os.path.realpath(value), [Mount(os.path.realpath(m.source), m.target, m.name)
                                                  for m in mounts], "source")
    if source is None:
        return None
    return value, rebase(source[1], source[0].target)


def refusal(key: str, value: str, mounts: list[Mount]) -> str:
    """Why `key=value` cannot be read in the job, and the two fixes, with this path's own folder."""
    folder = os.path.dirname(normal(value)) or "/"
    name = os.path.basename(normal(value))
    seen = ", ".join(f"{m.name} {m.source} at {m.target}" for m in mounts)
    return (f"{key}={value!r} is outside every folder the job's container sees ({seen}): the job would not find "
            f"it. Either put it under DATA_DIR and give it relative to DATA_DIR (DATA_DIR={folder} {key}={name}; "
            f"{key}={DATA_MOUNT}/{name}, as the container sees it, is read the same), or mount its folder where it is: "
            f"CONTAINER_MOUNTS={folder}:{folder}.")


def read_paths(config) -> dict[str, str]:
    """The config's paths that the job reads, by key: the non-empty ones."""
    paths = {"data.path": config.data.path, "data.root": config.data.root}
    if config.trainer.resume not in ("auto", "never"):
        paths["trainer.resume"] = config.trainer.resume
    return {key: value for key, value in paths.items() if value}


def job_overrides(config, mounts: list[Mount]) -> tuple[list[str], list[str]]:
    """(the overrides to check here, the overrides for the job): a path each where its form changes.
    Raises UserError naming every path the container does not see."""
    from train.errors import UserError

    here, job, refused = [], [], []
    for key, value in read_paths(config).items():
        placed = place(value, mounts)
        if placed is None:
            refused.append(refusal(key, value, mounts))
            continue
        if placed[0] != value:
            here.append(f"{key}={placed[0]}")
        if placed[1] != value:
            job.append(f"{key}={placed[1]}")
    if refused:
        raise UserError("\n".join(refused))
    return here, job


def parse(argv: list[str]) -> dict | None:
    options = {"--project": None, "--data-dir": None, "--mounts": ""}
    while argv and argv[0] in options:
        if len(argv) < 2:
            return None
        options[argv[0]], argv = argv[1], argv[2:]
    if not argv or options["--project"] is None or options["--data-dir"] is None:
        return None
    return {**options, "config": argv[0], "overrides": argv[1:]}


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    from train.errors import UserError  # the standard library only

    try:
        from train.config import load_config
    except ModuleNotFoundError as exc:
        print(f"note: {sys.executable} cannot import {exc.name}: whether the job's container sees the config's "
              "paths was not checked here")
        return 0
    try:
        config = load_config(parsed["config"], parsed["overrides"])
    except UserError:
        return 0  # the config's own check (login/config_check.py) says what is wrong with it
    try:
        here, job = job_overrides(config, mounts_of(parsed["--project"], parsed["--data-dir"], parsed["--mounts"]))
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    print("here:", *here)
    print("job:", *job)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
