"""NVIDIA's enroot and pyxis for the SLURM test cluster (tests/harness/slurm_cluster.py).

Neither is packaged anywhere these machines reach, so they are built from the source tarballs in
``../shared/pyxis`` (its README says what was seen working) when they are missing or of another
version. The project itself never depends on ``../shared``: only this test helper does.

A real cluster gives every node its own enroot and pyxis working directories; the emulated
nodes share one filesystem, so each node's slurmd gets, in its own mount namespace:

- a copy of enroot's configuration folder bind-mounted over ``ENROOT_SYSCONF``, whose drop-in
  points enroot's runtime, data, cache and temporary paths at that node's folders, and whose
  ``hooks.d`` holds enroot's PyTorch hook or not (``set_pytorch_hook``: sites differ);
- its own folder bind-mounted over the one ``runtime_path`` that plugstack.conf gives pyxis.

Stdlib only, like the cluster harness.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_PYXIS = Path(os.environ.get("PYXIS_SHARED_DIR", ROOT.parent / "shared" / "pyxis"))
PREFIX = Path("/usr/local")
ENROOT = PREFIX / "bin" / "enroot"
ENROOT_SYSCONF = PREFIX / "etc" / "enroot"
PYXIS_SO = PREFIX / "lib" / "slurm" / "spank_pyxis.so"
PYTORCH_HOOK = PREFIX / "share" / "enroot" / "hooks.d" / "50-slurm-pytorch.sh"
ENROOT_VERSION = "4.1.2"
# Which sources the installed build came from: rebuilt when ../shared/pyxis changes.
STAMP = PREFIX / "share" / "pyxis" / ".pyg-train-tests-sources"


class PyxisUnavailable(RuntimeError):
    """enroot/pyxis cannot be installed here (why, in the message)."""


def _sources_digest() -> str:
    sums = SHARED_PYXIS / "src" / "SHA256SUMS"
    if not sums.is_file():
        raise PyxisUnavailable(f"no enroot/pyxis sources: {sums} is missing "
                               "(../shared/pyxis holds them on the test machines and in CI)")
    return hashlib.sha256(sums.read_bytes()).hexdigest()


def installed_version() -> str | None:
    """enroot's version when enroot and pyxis are installed from these sources, else None."""
    if not (ENROOT.exists() and PYXIS_SO.exists() and STAMP.exists()):
        return None
    try:
        if STAMP.read_text().strip() != _sources_digest():
            return None
        out = subprocess.run([str(ENROOT), "version"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired, PyxisUnavailable):
        return None
    return out or None


def ensure_installed(log=print) -> None:
    """Build and install enroot and pyxis from ../shared/pyxis unless this build is there.

    Call after SLURM is installed: pyxis is compiled against libslurm-dev, which must match
    the installed slurmd ("Incompatible plugin version" otherwise)."""
    if installed_version() == ENROOT_VERSION:
        return
    if os.geteuid() != 0:
        raise PyxisUnavailable("installing enroot and pyxis needs root")
    digest = _sources_digest()
    setup = SHARED_PYXIS / "setup.sh"
    log(f"building enroot and pyxis from {SHARED_PYXIS} (about 70 s)")
    p = subprocess.run(["bash", str(setup)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=1200,
                       env=dict(os.environ, PREFIX=str(PREFIX)))
    if p.returncode != 0:
        raise PyxisUnavailable(f"{setup} failed (rc={p.returncode}): "
                               f"{(p.stdout + p.stderr).strip()[-1500:]}")
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(digest + "\n")
    version = installed_version()
    if version != ENROOT_VERSION:
        raise PyxisUnavailable(f"after {setup}, enroot reports {version!r}, "
                               f"expected {ENROOT_VERSION}")


def plugstack_line(runtime_path: Path) -> str:
    """The plugstack.conf line that loads pyxis (the configuration seen working here)."""
    return (f"required {PYXIS_SO} runtime_path={runtime_path} container_scope=job "
            "sbatch_support=1 use_squashfuse=1")


def node_enroot_conf(node_dir: Path) -> str:
    """enroot's drop-in for one node: every working path in that node's folder."""
    return "".join(f"{key} {node_dir / sub}\n" for key, sub in (
        ("ENROOT_RUNTIME_PATH", "enroot/runtime"),
        ("ENROOT_CACHE_PATH", "enroot/cache"),
        ("ENROOT_DATA_PATH", "enroot/data"),
        ("ENROOT_TEMP_PATH", "enroot/tmp"),
    ))


def prepare_node(node_dir: Path) -> Path:
    """A node's folders and its copy of enroot's configuration; returns that copy's path."""
    etc = node_dir / "enroot-etc"
    if etc.exists():
        shutil.rmtree(etc)
    shutil.copytree(ENROOT_SYSCONF, etc, symlinks=True)
    (etc / "hooks.d" / PYTORCH_HOOK.name).unlink(missing_ok=True)  # off unless asked for
    (etc / "enroot.conf.d").mkdir(exist_ok=True)
    (etc / "enroot.conf.d" / "50-test-node.conf").write_text(node_enroot_conf(node_dir))
    for sub in ("enroot/runtime", "enroot/cache", "enroot/data", "enroot/tmp", "pyxis"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    return etc


def node_mounts(node_dir: Path, runtime_path: Path) -> list[tuple[Path, Path]]:
    """(source, target) bind mounts for the node's slurmd mount namespace."""
    return [(node_dir / "enroot-etc", ENROOT_SYSCONF), (node_dir / "pyxis", runtime_path)]


def set_pytorch_hook(node_dirs: list[Path], enabled: bool) -> None:
    """Enable or disable enroot's 50-slurm-pytorch.sh hook on the given nodes (as an admin
    would, by copying it into hooks.d); takes effect at the next container start."""
    for node_dir in node_dirs:
        target = node_dir / "enroot-etc" / "hooks.d" / PYTORCH_HOOK.name
        if enabled:
            shutil.copy2(PYTORCH_HOOK, target)
            target.chmod(0o755)
        else:
            target.unlink(missing_ok=True)
