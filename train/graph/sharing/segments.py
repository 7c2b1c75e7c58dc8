"""Where a node's shared graph lives on disk: each user's private directory, the segments in it, their locks.

/dev/shm, /tmp and node-local scratch are shared by every user of a node, and the project's names
there are predictable. Another user could pre-create one (a directory of theirs; a symbolic link
to a file of the victim's, which an open(O_CREAT) or ftruncate follows where the kernel does not
protect links in sticky directories, fs.protected_symlinks=0) and crash or hijack the victim's job.
So, as ssh-agent and tmux do, a user's segments live in ``<base>/pyg-train-u<uid>/``: created 0700
and verified before use (a directory and not a link, owned by this user, closed to others). Where
another user holds that name, a fresh directory with an unpredictable name (mkdtemp) is used
instead, and the squatter is named. Inside, every file is opened relative to the directory's fd
without following links (O_NOFOLLOW; O_EXCL where created). `remove_stale` looks only at this
user's own entries: another user's are theirs, never followed, removed or locked.

A segment: ``<private>/<name>/`` (tensor files + manifest) and ``<private>/<name>.lock``, held by
its writer with an flock; the kernel drops the lock when the writer dies, and every start removes
the segments nobody holds. A base directory writable by everyone but not sticky is not used:
there another user could rename this user's directory away and put a link in its place.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import pwd
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from train.errors import UserError
from train.files import dir_problem, kind

PREFIX = "pyg-train-"
SHM = Path("/dev/shm")
# Room kept free on the file system beyond the graph itself.
HEADROOM_BYTES = 64 << 20
# An empty fallback directory older than this has no run about to fill it: `remove_stale` removes it.
FALLBACK_AGE_SECONDS = 300
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


# ---- names and places ----------------------------------------------------------------------------

def segment_name(job_id: str | None, master_port: int, node_rank: int, uid: int) -> str:
    """Unique per job, rendezvous port and node; the same again when the same job restarts."""
    job = re.sub(r"[^A-Za-z0-9_.]", "_", job_id) if job_id else "local"
    return f"{PREFIX}j{job}-p{master_port}-n{node_rank}-u{uid}"


def user_dir_name(uid: int) -> str:
    """The name of a user's private directory in a base directory (its fallbacks add `-<random>`)."""
    return f"{PREFIX}u{uid}"


def open_to_others(mode: int) -> str | None:
    """Why a base directory with this mode lets another user replace this user's entries, or None."""
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return "is writable by every user but not sticky (chmod +t): another user could rename this user's files away"
    return None


def candidate_dirs(share_dir: str, node_tmpdirs: Sequence[str] = ()) -> list[Path]:
    """`data.share_dir` alone when set; else /dev/shm, then node-local disk (`DistEnv.node_tmpdirs`: $SLURM_TMPDIR,
    $TMPDIR), then /tmp; each a directory that another user cannot take entries from."""
    if share_dir:
        problem = dir_problem(share_dir) or open_to_others(os.stat(share_dir).st_mode)
        if problem:
            raise UserError(f"data.share_dir={share_dir!r} {problem}; give an existing node-local directory (e.g. "
                            "/dev/shm, $SLURM_TMPDIR, /tmp), or '' to choose one.")
        return [Path(share_dir)]
    found: list[Path] = []
    for path in (str(SHM), *node_tmpdirs, "/tmp"):
        if path and Path(path) not in found and dir_problem(path) is None \
                and open_to_others(os.stat(path).st_mode) is None:
            found.append(Path(path))
    return found


def shares_graph(share: str, ranks_on_node: int) -> bool:
    """Whether a node's ranks map one copy of the graph: data.share=node with more than one rank on the node. A rank
    alone on its node has no one to share with: it keeps its own copy and writes no segment. The one rule for the
    run (train/graph/sharing/shared_graph.py), the memory plan (train/plan/terms.py) and the doctor."""
    return share == "node" and ranks_on_node > 1


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def gib(n: float) -> str:
    """A byte count in GiB, for messages."""
    return f"{n / 2**30:.2f} GiB"


def first_with_room(required: int, room: Mapping[Path, int]) -> Path | None:
    """The first directory of `room` (directory -> free bytes, in `candidate_dirs`' order) that holds `required`
    bytes and the headroom; None when none does. The run's choice (`choose_dir`) and the doctor's."""
    return next((path for path, free in room.items() if free >= required + HEADROOM_BYTES), None)


def planned_dir(share_dir: str, node_tmpdirs: Sequence[str], required: int,
                free: Callable[[Path], int] = free_bytes) -> Path:
    """Where `choose_dir` would put `required` bytes, never refusing (for the doctor): the first folder with room,
    else the first (which the refusal names); nothing to place (0): the first; a bad data.share_dir: itself."""
    try:
        candidates = candidate_dirs(share_dir, node_tmpdirs)
    except UserError:  # preflight names it
        return Path(share_dir)
    room = {}
    for path in candidates:
        with contextlib.suppress(OSError):
            room[path] = free(path)
    first = candidates[0] if candidates else SHM
    return (first_with_room(required, room) if required else None) or first


def choose_dir(required: int, candidates: list[Path], free: Callable[[Path], int] = free_bytes) -> tuple[Path, str]:
    """The first candidate with room for `required` bytes, and a note when it is not the first."""
    if not candidates:
        raise UserError("data.share=node found no directory to share the graph in (/dev/shm, $SLURM_TMPDIR, "
                        "$TMPDIR, /tmp); set data.share_dir to a node-local directory, or use data.share=process.")
    room = {path: free(path) for path in candidates}
    path = first_with_room(required, room)
    if path == candidates[0]:
        return path, ""
    if path is not None:
        return path, (f"data.share=node: {candidates[0]} has {gib(room[candidates[0]])} free but the graph needs "
                      f"{gib(required)}; sharing it from {path} (node-local disk) instead. To keep it in memory, "
                      f"give the job a larger {candidates[0]} (docker/podman --shm-size={-(-required // 2**30) + 1}g; "
                      "enroot/pyxis mount the host's /dev/shm).")
    listing = ", ".join(f"{p} has {gib(n)}" for p, n in room.items())
    raise UserError(
        f"data.share=node needs {gib(required + HEADROOM_BYTES)} of node-local space for one copy of the graph, "
        f"but {listing} free. Give the job a larger /dev/shm (docker/podman --shm-size={-(-required // 2**30) + 1}g; "
        "enroot/pyxis use the host's), point data.share_dir at a node-local directory with room, or use "
        "data.share=process (one copy per rank, in RAM)."
    )


# ---- this user's private directory ---------------------------------------------------------------

def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def private_problem(found: os.stat_result, uid: int) -> str | None:
    """Why an entry (lstat) is not `uid`'s private directory, or None."""
    if stat.S_ISLNK(found.st_mode):
        return f"is a symbolic link owned by {_owner(found.st_uid)}"
    if not stat.S_ISDIR(found.st_mode):
        return f"is {kind(found.st_mode)} owned by {_owner(found.st_uid)}, not a directory"
    if found.st_uid != uid:
        return f"belongs to {_owner(found.st_uid)}, not to this user ({_owner(uid)})"
    if found.st_mode & 0o077:
        return f"has mode {stat.filemode(found.st_mode)}: other users can enter it"
    return None


def open_private(path: Path, uid: int | None = None) -> int:
    """An fd of `path`, opened without following a link, when it is this user's private directory."""
    uid = os.getuid() if uid is None else uid
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:  # a link (ENOTDIR or ELOOP with O_NOFOLLOW), a file, gone
        try:
            what = private_problem(os.lstat(path), uid) or f"cannot be opened ({exc.strerror})"
        except OSError:
            what = f"cannot be opened ({exc.strerror})"
        raise UserError(f"{path} {what}: data.share=node keeps its files only in a private directory.") from None
    problem = private_problem(os.fstat(fd), uid)
    if problem is not None:
        os.close(fd)
        raise UserError(f"{path} {problem}: data.share=node keeps its files only in a private directory.")
    return fd


def user_dir(base: Path, uid: int | None = None) -> tuple[Path, str]:
    """This user's private directory in `base` (made 0700 when missing) and a note when another one is used.

    Where `base/pyg-train-u<uid>` is not this user's private directory (another user made it, it is a
    link, or it is open to others), a fresh one with an unpredictable name is made beside it.
    """
    uid = os.getuid() if uid is None else uid
    name = user_dir_name(uid)
    try:
        base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=base_fd)
            problem = private_problem(os.stat(name, dir_fd=base_fd, follow_symlinks=False), uid)
        finally:
            os.close(base_fd)
        if problem is None:
            return base / name, ""
        fallback = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))  # 0700, a name nobody can guess
    except OSError as exc:
        raise UserError(f"data.share=node cannot make its directory in {base} ({exc.strerror}); set "
                        "data.share_dir to a node-local directory this user can write, or use data.share=process.") \
            from None
    return fallback, (f"data.share=node: {base / name} {problem}, so it is not used (another user's entries are "
                      f"theirs); this run keeps its files in {fallback}.")


# ---- stale segments: this user's only ------------------------------------------------------------

def _is_own(dir_fd: int, name: str, uid: int, test: Callable[[int], bool]) -> bool:
    """`name` in the directory is `uid`'s and of the kind `test` accepts (never through a link)."""
    try:
        found = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return found.st_uid == uid and test(found.st_mode)


def _try_lock(dir_fd: int, name: str) -> int | None:
    """An fd holding an exclusive flock on the lock file `name` (still at that name), or None if someone holds it."""
    try:
        fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:  # gone, or a link (ELOOP)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    os.close(fd)
    return None


def _clean(dir_fd: int, where: Path, names: list[str], uid: int) -> list[Path]:
    """Remove the segments among `names` that are `uid`'s and that no live writer holds."""
    removed: list[Path] = []
    for lock in sorted(n for n in names if n.endswith(".lock")):
        if not _is_own(dir_fd, lock, uid, stat.S_ISREG):
            continue
        fd = _try_lock(dir_fd, lock)
        if fd is None:
            continue  # a live writer holds it
        try:
            segment = lock.removesuffix(".lock")
            if _is_own(dir_fd, segment, uid, stat.S_ISDIR):
                shutil.rmtree(segment, dir_fd=dir_fd, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(lock, dir_fd=dir_fd)
            removed.append(where / segment)
        finally:
            os.close(fd)
    for segment in sorted(n for n in names if not n.endswith(".lock")):
        # A writer creates the lock before the directory and removes it after: no lock, no owner.
        if _is_own(dir_fd, segment, uid, stat.S_ISDIR) and not _is_own(dir_fd, f"{segment}.lock", uid, bool):
            shutil.rmtree(segment, dir_fd=dir_fd, ignore_errors=True)
            removed.append(where / segment)
    return removed


def _clean_private(base_fd: int, base: Path, name: str, uid: int) -> list[Path]:
    """The stale segments in one of this user's private directories; an old empty fallback directory too."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=base_fd)
    except OSError:  # a link, not a directory, gone: not this user's private directory
        return []
    try:
        found = os.fstat(fd)
        if private_problem(found, uid) is not None:
            return []  # another user's: theirs
        removed = _clean(fd, base / name, [n for n in os.listdir(fd) if n.startswith(PREFIX)], uid)
        if name != user_dir_name(uid) and not os.listdir(fd) and time.time() - found.st_mtime > FALLBACK_AGE_SECONDS:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=base_fd)
        return removed
    finally:
        os.close(fd)


def remove_stale(bases: list[Path], uid: int | None = None) -> list[Path]:
    """Remove this user's segments that no live process holds (left by kill -9, OOM, node failure).

    Looks in this user's private directories of each base, and at the entries an earlier version
    made in the base itself (``pyg-train-j...-u<uid>``); an entry another user owns is skipped.
    """
    uid = os.getuid() if uid is None else uid
    mine, legacy = user_dir_name(uid), re.compile(rf"^{re.escape(PREFIX)}j.*-u{uid}(\.lock)?$")
    removed: list[Path] = []
    for base in bases:
        try:
            base_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            names = os.listdir(base_fd)
            for name in sorted(n for n in names if n == mine or n.startswith(f"{mine}-")):
                removed += _clean_private(base_fd, base, name, uid)
            removed += _clean(base_fd, base, [n for n in names if legacy.match(n)], uid)
        finally:
            os.close(base_fd)
    return removed


# ---- one segment: a directory of raw tensor files, owned through its lock -------------------------

class Segment:
    """``<private>/<name>/`` (tensor files + manifest) and ``<private>/<name>.lock``, held by its writer."""

    def __init__(self, base: Path, name: str, remove_base: bool = False):
        self.base, self.name = base, name
        self.path = base / name
        self.lock_path = base / f"{name}.lock"
        self.remove_base = remove_base  # a fallback private directory: removed with its one segment
        self._fd: int | None = None
        self._dir_fd: int | None = None

    def _open_lock(self, dir_fd: int) -> int:
        """The lock file, created 0600 or opened as it is, never through a link."""
        lock = f"{self.name}.lock"
        for _ in range(2):
            try:
                return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise UserError(f"{self.lock_path} cannot be opened ({exc.strerror}); remove it.") from None
                os.unlink(lock, dir_fd=dir_fd)  # a link in this user's own private directory: the link goes
        raise UserError(f"{self.lock_path} keeps being replaced by a symbolic link; stop what makes it.")

    @classmethod
    def create(cls, base: Path, name: str, owner: dict, attempts: int = 50, remove_base: bool = False) -> "Segment":
        """Lock the name in the private directory `base`, clear what a dead run of the same job left, make it."""
        segment = cls(base, name, remove_base)
        dir_fd = open_private(base)
        try:
            for _ in range(attempts):
                fd = segment._open_lock(dir_fd)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # a live run, or another start removing stale segments right now
                    os.close(fd)
                    time.sleep(0.1)
                    continue
                if not _is_own(dir_fd, f"{name}.lock", os.getuid(), stat.S_ISREG) or \
                        os.stat(f"{name}.lock", dir_fd=dir_fd, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
                    os.close(fd)  # removed by a cleaner between open and flock: take the new file
                    continue
                segment._fd, segment._dir_fd = fd, dir_fd
                try:
                    os.ftruncate(fd, 0)
                    os.write(fd, json.dumps(owner).encode())
                    shutil.rmtree(name, dir_fd=dir_fd, ignore_errors=True)  # the same job's, from a run that died
                    os.mkdir(name, 0o700, dir_fd=dir_fd)
                except BaseException:
                    segment.remove()
                    raise
                _OWNED.append(segment)
                return segment
            holder = segment._holder(dir_fd)
        finally:
            if segment._dir_fd is None:
                os.close(dir_fd)
        raise UserError(
            f"{segment.lock_path} is held by a live process ({holder}): another run with the same job id, "
            "MASTER_PORT and node rank is using this node. Stop it, or give this run another MASTER_PORT."
        )

    def _holder(self, dir_fd: int) -> str:
        """What the live writer wrote into its lock file, for the message."""
        try:
            fd = os.open(f"{self.name}.lock", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return "?"
        with os.fdopen(fd, "rb") as fh:
            return fh.read(4096).decode(errors="replace")

    def remove(self) -> None:
        """Delete the files (ranks that mapped them keep their mappings) and release the lock. Idempotent."""
        if self._fd is None:
            return
        shutil.rmtree(self.name, dir_fd=self._dir_fd, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{self.name}.lock", dir_fd=self._dir_fd)
        os.close(self._fd)
        os.close(self._dir_fd)
        self._fd = self._dir_fd = None
        if self.remove_base:
            with contextlib.suppress(OSError):
                self.base.rmdir()  # empty unless another run of this user took it meanwhile
        with contextlib.suppress(ValueError):
            _OWNED.remove(self)


_OWNED: list[Segment] = []


def release_all() -> None:
    """Remove every segment this process still owns (atexit, and on leaving `shared_graphs()`)."""
    for segment in list(_OWNED):
        segment.remove()


atexit.register(release_all)


@contextlib.contextmanager
def shared_graphs() -> Iterator[None]:
    """Scope of a run: the segments this process wrote are gone when it ends, however it ends."""
    try:
        yield
    finally:
        release_all()
