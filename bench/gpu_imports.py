"""`python -m bench.gpu_imports`: refuse a Python that lacks a package the train package imports when it loads.

`make gpu-check` (bench/gpu_check.sh) runs this first with the chosen Python, so a GPU node's interpreter that
lacks e.g. python-hostlist is named at once instead of failing two GPU tests later. The list is derived, not
kept by hand: the third-party modules imported at module level anywhere in train/ (those inside a function or a
`try` are optional: ogb, matplotlib), each matched to its distribution in pyproject's [project] dependencies
(the one home of what the package needs) for the install hint. Standard library only: it runs before anything
is known about the Python.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

from login.wheel_list import dependencies, normalized  # pyproject's reader (stdlib only too)
from train.errors import EXIT_USER_ERROR  # stdlib only, like this module

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "train"


def _top_level_imports(tree: ast.Module) -> set[str]:
    """The first name of every `import`/`from ... import` at module level, outside `try` (absolute only)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def imported_modules(package_dir: Path) -> dict[str, str]:
    """Third-party module -> the first file (relative to the checkout) that imports it at module level."""
    found: dict[str, str] = {}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in sorted(_top_level_imports(tree) - stdlib - {PACKAGE}):
            found.setdefault(name, str(path.relative_to(package_dir.parent)))
    return found


def distribution_of(module: str, requirements: list[str]) -> str | None:
    """The dependency that provides `module`: the same name (torch_geometric: torch-geometric), else the one
    whose name ends with it (yaml: pyyaml, hostlist: python-hostlist); None when pyproject lacks it."""
    names = {normalized(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0]): req for req in requirements}
    wanted = normalized(module)
    if wanted in names:
        return names[wanted]
    return next((req for name, req in names.items() if name.endswith(wanted)), None)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module without a spec
        return False


def missing(modules: dict[str, str], requirements: list[str], importable=_importable) -> list[str]:
    """One line per module this Python cannot import: the module, who imports it, and what to install."""
    lines = []
    for module, where in sorted(modules.items()):
        if not importable(module):
            dist = distribution_of(module, requirements)
            lines.append(f"{module} (imported by {where}; pip install '{dist or module}')")
    return lines


def main() -> int:
    requirements = dependencies((ROOT / "pyproject.toml").read_text())
    lacking = missing(imported_modules(ROOT / PACKAGE), requirements)
    if lacking:
        print(f"error: {sys.executable} lacks what the train package imports: {'; '.join(lacking)}. Install "
              "them, or set GPU_PYTHON to a Python that has them.", file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
