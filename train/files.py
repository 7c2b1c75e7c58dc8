"""A file the package reads, checked before it is read: when it is not what was expected, say what it is.

A user's path can be missing, empty, a directory, a FIFO, a dangling link or a link loop, behind a
file used as a directory, unreadable for this user, or not text. The libraries that read it then
fail with messages that name neither (torch.load's "failed finding central directory" for an empty
file, a FileExistsError from mkdir, a UnicodeDecodeError, or a read that blocks forever on a FIFO).
`file_problem` / `dir_problem` name the problem; `check_file`, `read_bytes` and `read_text` raise a
`UserError` with it. Every reader of the package goes through them. `load_yaml`: YAML text with a key given
twice refused (PyYAML keeps the last one silently).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from train.errors import UserError

RUNS = Path("runs")  # where runs go without output.dir, against the working directory (the project in a job)

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file"))


def kind(mode: int) -> str:
    """What a file of this st_mode is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _unreachable(path: Path, exc: OSError) -> str:
    """Why os.stat(path) failed, in words."""
    if exc.errno == errno.ELOOP:
        return "is a symbolic link loop (or goes through one)"
    if exc.errno == errno.ENOTDIR:
        blocker = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
        return (f"cannot exist: {str(blocker)!r} on its path is {kind(blocker.stat().st_mode)}, not a directory"
                if blocker else "cannot exist: a part of its path is not a directory")
    if exc.errno == errno.EACCES:
        return "cannot be reached: a directory on its path is not searchable by this user (permission denied)"
    if exc.errno == errno.ENOENT:
        if path.is_symlink():
            return f"is a dangling symbolic link (to {os.readlink(path)!r}, which does not exist)"
        return "does not exist"
    return f"cannot be reached ({exc.strerror})"


def _stat(path: Path) -> os.stat_result | str:
    try:
        return os.stat(path)
    except OSError as exc:
        return _unreachable(path, exc)
    except ValueError as exc:  # an embedded NUL byte
        return f"is not a valid path ({exc})"


def file_problem(path: Path | str, allow_empty: bool = False) -> str | None:
    """What keeps `path` from being read as a regular file, as a phrase that follows the path; None if nothing."""
    path = Path(path)
    found = _stat(path)
    if isinstance(found, str):
        return found
    if not stat.S_ISREG(found.st_mode):
        return f"is {kind(found.st_mode)}, not a regular file"
    if not os.access(path, os.R_OK):
        return f"cannot be read by this user (permission denied; mode {stat.filemode(found.st_mode)}, " \
               f"owner uid {found.st_uid})"
    if found.st_size == 0 and not allow_empty:
        return "is empty (0 bytes)"
    return None


def dir_problem(path: Path | str, create: bool = False) -> str | None:
    """What keeps `path` from being a directory this user can list (or, with `create`, make: then a missing
    directory is fine when its first existing ancestor is a writable directory); None if nothing."""
    path = Path(path)
    found = _stat(path)
    if isinstance(found, str):
        if not (create and found == "does not exist"):
            return found
        ancestor = next(p for p in path.parents if p.exists() or p.is_symlink())
        problem = dir_problem(ancestor)
        if problem is not None:
            return f"cannot be created: {str(ancestor)!r} {problem}"
        if not os.access(ancestor, os.W_OK | os.X_OK):
            return f"cannot be created: {str(ancestor)!r} is not writable by this user"
        return None
    if not stat.S_ISDIR(found.st_mode):
        return f"is {kind(found.st_mode)}, not a directory"
    if not os.access(path, os.R_OK | os.X_OK):
        return f"cannot be listed by this user (permission denied; mode {stat.filemode(found.st_mode)})"
    return None


def _refuse(what: str, problem: str, hint: str) -> UserError:
    return UserError(f"{what} {problem}{'; ' + hint if hint else ''}.")


def check_file(path: Path | str, what: str, hint: str = "", allow_empty: bool = False) -> None:
    """`UserError` "<what> <problem>; <hint>." unless `path` is a readable regular file (not empty)."""
    problem = file_problem(path, allow_empty)
    if problem is not None:
        raise _refuse(what, problem, hint)


def check_dir(path: Path | str, what: str, hint: str = "", create: bool = False) -> None:
    """`UserError` unless `path` is a directory this user can list (or, with `create`, make)."""
    problem = dir_problem(path, create)
    if problem is not None:
        raise _refuse(what, problem, hint)


def read_bytes(path: Path | str, what: str, hint: str = "", allow_empty: bool = False) -> bytes:
    """The bytes of a checked file; a failure while reading (EIO, a race) is a `UserError` too."""
    check_file(path, what, hint, allow_empty)
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _refuse(what, f"cannot be read ({exc.strerror})", hint) from None


def read_text(path: Path | str, what: str, hint: str = "", allow_empty: bool = False) -> str:
    """The UTF-8 text of a checked file; bytes that are not UTF-8 are named with their offset."""
    data = read_bytes(path, what, hint, allow_empty)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}: a binary file?)"
        raise _refuse(what, problem, hint) from None


class DuplicateKey(yaml.YAMLError):
    """A mapping that gives one key twice: PyYAML keeps the last one silently."""

    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark):
        super().__init__(f"the key {key!r} is given twice, on line {first.line + 1} and line {second.line + 1}; "
                         "the second would silently replace the first: keep one")


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (a merge key `<<` may be overridden)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the safe loader refuses it with its own message
                continue
            if first is not key_node.start_mark:
                raise DuplicateKey(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, with keys given twice refused (`DuplicateKey`)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: plain data only


def yaml_problem(exc, text: str) -> str:
    """Where a YAML text went wrong and what (PyYAML's mark and problem), in one sentence, with the line itself."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is None:
        return f"{problem}."
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    started = f" ({context} that starts at line {context_mark.line + 1})" if context and context_mark else ""
    return (f"line {mark.line + 1}, column {mark.column + 1}: {problem}{started}; the line is {line!r}. Each key "
            "sits under its section, indented by the same spaces, and every bracket and quote is closed.")
