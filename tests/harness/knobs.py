"""The job's settings as their one table, jobs/knobs.md, lists them (a row each: name, default, shape, sbatch
option, whether it travels to the job, documentation), and every variable a user may set: the tests hold make,
the scripts and the docs to these lists."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "jobs" / "knobs.md"
MAKEFILES = [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]
ROW = re.compile(r"^\|\s*([A-Z][A-Z0-9_]*)\s*\|([^|]*)\|([^|]*)\|([^|]*)\|([^|]*)\|(.*)\|\s*$")


@dataclass(frozen=True)
class Knob:
    name: str
    default: str
    shape: str
    sbatch: tuple[str, ...]  # the long option first, then its short forms
    job: bool
    doc: str


def knobs(text: str | None = None) -> dict[str, Knob]:
    """name -> its row, in the table's order."""
    rows = {}
    for line in (TABLE.read_text() if text is None else text).splitlines():
        m = ROW.match(line)
        if m:
            name, default, shape, sbatch, job, doc = (g.strip() for g in m.groups())
            rows[name] = Knob(name, default, shape, tuple(sbatch.split()), job == "yes", doc)
    return rows


def make_variables() -> set[str]:
    """Every variable a user may set: the table's rows and the `NAME ?=` lines of the Makefile and mk/*.mk."""
    declared = set()
    for path in MAKEFILES:
        declared |= set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*\?=", path.read_text(), flags=re.MULTILINE))
    return declared | set(knobs())
