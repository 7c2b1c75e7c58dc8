"""`make help`: every target once, in the order a user needs them (HELP_ORDER in the Makefile), and every
variable a user may set (`VAR ?=` in the Makefile and mk/*.mk) with a line that says what it is."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.harness.knobs import make_variables

ROOT = Path(__file__).resolve().parents[1]
MAKEFILES = [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]


def help_text() -> str:
    p = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    return p.stdout


def documented_targets() -> list[str]:
    found = []
    for path in MAKEFILES:
        found += re.findall(r"^([a-zA-Z_-]+):.*## ", path.read_text(), re.M)
    return found


def settable_variables() -> list[str]:
    return sorted(make_variables())


def test_help_lists_every_target_once_in_the_users_order():
    order = re.search(r"^HELP_ORDER := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    listed = re.findall(r"^  make (\S+) ", help_text(), re.M)
    assert sorted(listed) == sorted(documented_targets()), "a target with a ## line is missing from help or twice"
    assert listed[: len(order)] == order, listed
    assert set(order) == set(documented_targets()), "HELP_ORDER names every target, so none falls to the end"
    assert listed[:4] == ["help", "setup", "run", "test"]  # README's two set-up commands come first


def test_every_settable_variable_is_listed_with_what_it_is():
    text = help_text().split("\nVariables", 1)[1]
    for name in settable_variables():
        line = re.search(rf"^  {name}=(.*)$", text, re.M)
        assert line, f"{name} is not in make help"
        # the value, then at least two spaces, then a description of a few words
        assert re.search(r"\s{2,}\S+ \S+", line.group(1)), f"help shows {name} without what it is: {line.group(0)!r}"
