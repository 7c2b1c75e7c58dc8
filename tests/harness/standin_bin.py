"""Put the shell stand-ins of tests/harness/standins/ on a test's PATH under the names scripts call."""
from __future__ import annotations

import shutil
from pathlib import Path

STANDINS = Path(__file__).resolve().parent / "standins"


def install(bindir: Path, name: str, script: str | None = None) -> Path:
    """Copy standins/SCRIPT.sh (default: NAME.sh) to bindir/NAME, executable; returns its path."""
    bindir.mkdir(parents=True, exist_ok=True)
    target = bindir / name
    shutil.copyfile(STANDINS / f"{script or name}.sh", target)
    target.chmod(0o755)
    return target
