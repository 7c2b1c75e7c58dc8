"""A stand-in for NVIDIA's PyG image (`nvcr.io/nvidia/pyg`), built from real parts, for the tests.

No registry is reachable from the test machines, so the container tests cannot pull
`nvcr.io#nvidia/pyg:TAG`. This builds a `.sqsh` that behaves like it where the project cares:

- Debian's Python (debootstrap from Debian's packages) with Debian's pip, setuptools and wheel,
  and `python` naming `python3`;
- the pinned CPU torch and PyG of requirements.lock (every pin except the project's own small
  dependencies listed in ``LEFT_OUT``, which NGC images do not ship either), installed into
  `/usr/local/lib/python3.11/dist-packages` as NGC images have them in their site-packages;
- `PYTORCH_VERSION` in the image's environment (`/etc/environment`, which enroot reads): pyxis
  and enroot's PyTorch hook act only on images that have it;
- a pip constraint file at `/etc/pip/constraint.txt` naming every installed distribution, and
  `PIP_CONSTRAINT` pointing at it, as NGC images have since 25.03;
- Debian's `EXTERNALLY-MANAGED` marker left in place (pip refuses a plain install there);
- the container layout `enroot import` writes for a docker image (`/etc/rc` with NGC's
  working directory `/workspace`, `/etc/rc.local`, `PATH` in `/etc/environment`).

Built once per machine and reused: the file is keyed by the hash of requirements.lock and of this
module, under ``CACHE_DIR``. The build takes a few minutes on 2 cores; ``build_standin`` returns
its timings so the tests can print them.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
CACHE_DIR = Path(os.environ.get("PYG_TRAIN_TEST_CACHE", "/var/cache/pyg-train-tests"))
# The project's own small dependencies that NGC's PyG images do not ship: the project's install
# (make image, or INSTALL_PROJECT=1 at job start) must bring them.
LEFT_OUT = frozenset({"python-hostlist", "python_hostlist"})
# torch needs a newer setuptools than Debian's (66): NGC images ship one that satisfies it
# (added unless requirements.lock pins one itself).
EXTRA_PINS = ("setuptools==80.9.0",)
SUITE = "bookworm"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
# No compression: the fastest to write and to read on 2 cores (enroot reads any squashfs).
SQUASH_OPTIONS = ("-noI", "-noD", "-noF", "-noX", "-no-xattrs")
APT_PACKAGES = ("debootstrap", "squashfs-tools")


class StandinUnavailable(RuntimeError):
    """The stand-in image cannot be built on this machine (why, in the message)."""


@dataclass
class Standin:
    """The built image: its path, and what its build cost (empty when reused from the cache)."""

    path: Path
    torch_version: str
    reused: bool
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def size_mib(self) -> float:
        return self.path.stat().st_size / 2**20


def _lock_pins(lock_text: str) -> list[str]:
    """`name==version` lines of requirements.lock, minus ``LEFT_OUT``."""
    pins = []
    for line in lock_text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name = line.split("==", 1)[0].strip()
        if name.lower().replace("_", "-") not in {n.replace("_", "-") for n in LEFT_OUT}:
            pins.append(line)
    return pins


def cache_key() -> str:
    h = hashlib.sha256(LOCK.read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def image_path() -> Path:
    return CACHE_DIR / f"ngc-pyg-standin-{cache_key()}.sqsh"


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    if p.returncode != 0:
        raise StandinUnavailable(f"{what} failed (rc={p.returncode}): "
                                 f"{(p.stderr or p.stdout).strip()[-1500:]}")
    return p


def ensure_tools() -> None:
    """debootstrap and mksquashfs, from Debian's packages when missing (root)."""
    if shutil.which("debootstrap") and shutil.which("mksquashfs"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise StandinUnavailable("debootstrap/mksquashfs are missing and cannot be installed "
                                 "(needs root and apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES]
    if subprocess.run(apt, env=env, capture_output=True).returncode != 0:
        _run(["apt-get", "update"], "apt-get update", env=env)
        _run(apt, "apt-get install " + " ".join(APT_PACKAGES), env=env)


@contextlib.contextmanager
def _flock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _unmounted_after(rootfs: Path):
    """Yield ``rootfs``; afterwards unmount whatever debootstrap left mounted inside it (/proc,
    /sys when interrupted), so that the folder can be removed."""
    try:
        yield rootfs
    finally:
        prefix = str(rootfs.resolve()) + "/"
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for target in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)


def build_standin(log=print) -> Standin:
    """The stand-in `.sqsh`, built when the cache has none for this lock file."""
    target = image_path()
    with _flock(CACHE_DIR / ".build.lock"):
        if target.is_file():
            return Standin(target, _torch_pin(), reused=True)
        ensure_tools()
        timings: dict[str, float] = {}
        with tempfile.TemporaryDirectory(prefix="ngc-standin-", dir=CACHE_DIR) as tmp, \
                _unmounted_after(Path(tmp) / "rootfs") as rootfs:
            t = time.monotonic()
            log(f"ngc stand-in: debootstrap {SUITE} (Debian's python3, pip) into {rootfs}")
            debs = CACHE_DIR / "debs"  # downloaded packages, kept for the next build
            debs.mkdir(parents=True, exist_ok=True)
            _run(["debootstrap", "--variant=minbase", f"--cache-dir={debs}",
                  "--include=python3,python3-pip,python-is-python3",
                  SUITE, str(rootfs)], "debootstrap", timeout=900)
            timings["debootstrap_s"] = time.monotonic() - t

            t = time.monotonic()
            reqs = Path(tmp) / "image-requirements.txt"
            pins = _lock_pins(LOCK.read_text())
            pinned = {pin.split("==", 1)[0].lower() for pin in pins}
            extra = [pin for pin in EXTRA_PINS if pin.split("==", 1)[0].lower() not in pinned]
            reqs.write_text("\n".join([*pins, *extra]) + "\n")
            log("ngc stand-in: pip install the lock's torch and PyG into the image")
            _run(["python3", "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                  "--target", str(rootfs / SITE_PACKAGES), "-r", str(reqs)],
                 "pip install --target", timeout=900)
            timings["pip_s"] = time.monotonic() - t

            t = time.monotonic()
            _configure(rootfs)
            out = target.with_name(target.name + f".tmp.{os.getpid()}")
            log(f"ngc stand-in: mksquashfs into {target}")
            try:
                _run(["mksquashfs", str(rootfs), str(out), "-noappend", "-quiet",
                      *SQUASH_OPTIONS], "mksquashfs", timeout=900)
                out.rename(target)
            finally:
                out.unlink(missing_ok=True)
            timings["mksquashfs_s"] = time.monotonic() - t
        return Standin(target, _torch_pin(), reused=False, timings=timings)


def _torch_pin() -> str:
    for pin in _lock_pins(LOCK.read_text()):
        if pin.lower().startswith("torch=="):
            return pin.split("==", 1)[1]
    raise StandinUnavailable("requirements.lock pins no torch")


def _configure(rootfs: Path) -> None:
    """NGC's environment and pip constraints, inside the rootfs."""
    # --no-deps above: a consistent image is checked here, as NGC's is.
    _run(["chroot", str(rootfs), "/usr/bin/python3", "-m", "pip", "check"], "pip check in the image")
    freeze = _run(["chroot", str(rootfs), "/usr/bin/python3", "-m", "pip", "list",
                   "--format=freeze", "--disable-pip-version-check"],
                  "pip list in the image").stdout
    pip_dir = rootfs / "etc" / "pip"
    pip_dir.mkdir(parents=True, exist_ok=True)
    (pip_dir / "constraint.txt").write_text(
        "# Every distribution of this image, pinned (as NGC images since 25.03).\n" + freeze)
    env = rootfs / "etc" / "environment"
    existing = env.read_text() if env.exists() else ""
    env.write_text(existing + "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
                   + f"PYTORCH_VERSION={_torch_pin()}\n"
                   + "PIP_CONSTRAINT=/etc/pip/constraint.txt\n"
                   + "NVIDIA_PYG_STANDIN=1\n")
    # What `enroot import` writes from a docker image's config (enroot's docker::configure),
    # with NGC's WORKDIR and no entrypoint.
    (rootfs / "workspace").mkdir(exist_ok=True)
    (rootfs / "etc" / "rc").write_text(
        "# enroot-provenance: tests/harness/ngc_standin.py (stand-in for nvcr.io#nvidia/pyg)\n\n"
        'mkdir -p "/workspace" 2> /dev/null\n'
        'cd "/workspace" && unset OLDPWD || exit 1\n\n'
        "if [ -s /etc/rc.local ]; then\n    . /etc/rc.local\nfi\n\n"
        'if [ $# -gt 0 ]; then\n    exec "$@"\nelse\n    exec /bin/sh\nfi\n')
    (rootfs / "etc" / "rc.local").write_text(
        "# This file is sourced by /etc/rc when the container starts.\n")
    (rootfs / "etc" / "fstab").write_text("")
    # Something only the image has, for tests that must prove a task ran inside it.
    (rootfs / "etc" / "ngc-pyg-standin").write_text("stand-in for nvcr.io/nvidia/pyg\n")
    # Keep it small: apt's lists and caches are not needed at run time.
    for d in ("var/cache/apt", "var/lib/apt/lists"):
        shutil.rmtree(rootfs / d, ignore_errors=True)
