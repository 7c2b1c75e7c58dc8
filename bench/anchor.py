"""The pyg-lib anchor: PyG's own C++ sampler, built by bench/anchor.sh into .venv-anchor (or BENCH_ANCHOR_VENV).

The project's venv has no pyg-lib (no PyPI wheel for this machine). A benchmark that compares
against it runs its measurement, project and pyg-lib side by side in one process, in the anchor's
Python: same pinned torch and PyG as the project's venv, plus pyg-lib. Only benchmarks use this.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `make anchor` builds .venv-anchor; BENCH_ANCHOR_VENV names another build of bench/anchor.sh (the tests' one)
ANCHOR_VENV = Path(os.environ.get("BENCH_ANCHOR_VENV") or ROOT / ".venv-anchor")
SCRIPT = ROOT / "bench" / "anchor.sh"
IN_ANCHOR = "BENCH_IN_ANCHOR"  # set in the re-executed process, so it never re-executes again


def have_pyg_lib() -> bool:
    import torch_geometric.typing

    return bool(torch_geometric.typing.WITH_PYG_LIB)


def cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def anchor_python(venv: Path = ANCHOR_VENV) -> tuple[Path | None, str]:
    """(python, "") when the anchor venv is built for the current sources, else (None, why not)."""
    if os.environ.get("BENCH_ANCHOR") == "none":
        return None, "BENCH_ANCHOR=none: the pyg-lib anchor is switched off"
    proc = subprocess.run(["bash", str(SCRIPT), "--check", str(venv)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        return None, reason.split("] ", 1)[-1].removeprefix("pyg-lib anchor not ready: ")
    return venv / "bin" / "python", ""


def run_in_anchor(module: str, argv: list[str]) -> tuple[int | None, str]:
    """Re-run `python -m module argv` in the anchor's Python (output streams through).

    Returns (exit status, "") when it ran there, or (None, why not) when it has to run here:
    pyg-lib is already importable here, the anchor is missing, or this is the re-run itself.
    """
    if os.environ.get(IN_ANCHOR) or have_pyg_lib():
        return None, ""
    if cuda_here():
        return None, ("this Python sees a GPU and the anchor's torch is requirements.lock's CPU build: measured here, "
                      "on the GPU")
    python, reason = anchor_python()
    if python is None:
        return None, reason
    env = {**os.environ, IN_ANCHOR: "1", "PYTHONPATH": str(ROOT)}
    print(f"(running in the pyg-lib anchor's Python: {python})", flush=True)
    return subprocess.run([str(python), "-m", module, *argv], cwd=ROOT, env=env).returncode, ""


__all__ = ["ANCHOR_VENV", "anchor_python", "have_pyg_lib", "run_in_anchor"]


def anchored_main(module: str, doc: str, add_arguments, run, argv=None, worker=None) -> int:
    """A benchmark's main: re-run in the anchor's Python where it is built (`run_in_anchor`),
    else here, with the reason the anchor is absent in `args.anchor_reason`. A worker process
    (`--worker`) never re-runs itself."""
    from bench.common import bench_main

    argv = list(sys.argv[1:] if argv is None else argv)
    reason = ""
    if "--worker" not in argv:
        code, reason = run_in_anchor(module, argv)
        if code is not None:
            return code

    def run_here(args):
        args.anchor_reason = reason
        return run(args)

    return bench_main(doc, add_arguments, run_here, argv, worker=worker)
