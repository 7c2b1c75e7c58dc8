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


def recording_sbatch(tmp_path: Path, answers: dict[str, str], environ: dict[str, str], drop=()) -> tuple[dict, Path]:
    """(env, record) for a make target that submits: the recording sbatch first on PATH (it answers job 4242; its
    calls go to `record`), and each of `answers` (sinfo, scontrol: name -> the text it prints) a fixed-output
    stand-in. `environ` without the names in `drop` and any SLURM_* variable."""
    bindir = tmp_path / "bin"
    install(bindir, "sbatch")
    for name, text in answers.items():
        install(bindir, name, "fixed-output")
        (bindir / f"{name}.out").write_text(text)
    record = tmp_path / "sbatch-calls.txt"
    env = {k: v for k, v in environ.items() if k not in drop and not k.startswith("SLURM_")}
    env.update(PATH=f"{bindir}:{env['PATH']}", STANDIN_RECORD=str(record), STANDIN_DIR=str(bindir))
    return env, record
