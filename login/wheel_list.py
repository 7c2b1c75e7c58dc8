"""The dependencies whose wheels container/wheelhouse.sh prepares on the login node.

Those of pyproject.toml that are not guarded (the guarded ones, torch, PyG, numpy, ..., always come from the
image: container/guarded-packages.regex), each at the version requirements.lock pins where it pins one.

    python3 -m login.wheel_list PROJECT_DIR GUARD_REGEX_FILE     one requirement per line on stdout
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip vendors the same parser (tomli), and wheelhouse.sh needs pip
    from pip._vendor import tomli as tomllib


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(lock_text: str) -> dict[str, str]:
    """`name==version` lines of a lock file (comments and other lines ignored) -> {normalized name: version}."""
    pins = {}
    for line in lock_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[normalized(name.strip())] = version.strip()
    return pins


def dependencies(pyproject_text: str) -> list[str]:
    """pyproject's [project] dependencies, as written ("python-hostlist>=1.23")."""
    return list(tomllib.loads(pyproject_text)["project"]["dependencies"])


def wanted(pyproject_text: str, lock_text: str, guard: str) -> list[str]:
    """The requirements to build wheels of: pinned where the lock pins them, else as pyproject states them."""
    pins = lock_pins(lock_text)
    guarded = re.compile(guard, re.I)
    out = []
    for dependency in dependencies(pyproject_text):
        name = re.match(r"[A-Za-z0-9._-]+", dependency).group(0)
        version = pins.get(normalized(name))
        if not guarded.search(f"{name}=={version or '0'}"):
            out.append(f"{name}=={version}" if version else dependency)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m login.wheel_list PROJECT_DIR GUARD_REGEX_FILE", file=sys.stderr)
        return 2
    root = Path(argv[0])
    lines = wanted((root / "pyproject.toml").read_text(), (root / "requirements.lock").read_text(),
                   Path(argv[1]).read_text().strip())
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
