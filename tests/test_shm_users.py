"""Another user on the same node: the node's graph copy in /dev/shm (or data.share_dir, $TMPDIR, /tmp) is no one
else's to break or hijack. A real second user (made with useradd) pre-creates this user's directory, plants links
to this user's files under the names a job will use, and leaves entries of its own; the job runs, touches none of
them and follows no link (this machine has fs.protected_symlinks=0: the kernel does not stop it)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
import torch

from tests.harness.localjob import free_port, run_local_job
from tests.harness.users import ATTACKER, VICTIM, call_as, ensure_user, run_as, sticky_dir
from train.errors import UserError
from train.graph.sharing.segments import (
    Segment,
    candidate_dirs,
    remove_stale,
    segment_name,
    user_dir,
    user_dir_name,
)
from train.graph.sharing.shared_graph import map_tensors, write_tensors

PRECIOUS = b"the victim's own data\n"


@pytest.fixture(scope="module")
def mallory():
    return ensure_user(ATTACKER)


@pytest.fixture(scope="module")
def alice():
    return ensure_user(VICTIM)


@pytest.fixture
def base():
    """A directory like /dev/shm (1777), reachable by every user (pytest's tmp_path is not)."""
    path = sticky_dir("pyg-shm-users-")
    yield path
    shutil.rmtree(path)


def test_protected_symlinks_are_off_here_so_the_tests_below_mean_something():
    """With fs.protected_symlinks=1 the kernel refuses to follow another user's link in a sticky directory; these
    tests exist for the nodes where it is 0, as on this machine (if it is 1 here, they still pass)."""
    value = Path("/proc/sys/fs/protected_symlinks").read_text().strip()
    assert value in ("0", "1")


def _owner_and_mode(path: Path) -> tuple[int, int]:
    found = os.lstat(path)
    return found.st_uid, stat.S_IMODE(found.st_mode)


def _precious(where: Path) -> Path:
    path = where / "precious.txt"
    path.write_bytes(PRECIOUS)
    path.chmod(0o600)
    return path


# ---- this user's private directory ---------------------------------------------------------------------
def test_private_directory_is_made_0700_and_used_again(base):
    private, note = user_dir(base)
    assert (private, note) == (base / user_dir_name(os.getuid()), "")
    assert _owner_and_mode(private) == (os.getuid(), 0o700)
    assert user_dir(base) == (private, "")


@pytest.mark.parametrize("squat", ["directory", "link-to-victims-dir", "link-to-own-dir", "file", "fifo"])
def test_a_name_another_user_took_is_skipped_for_a_fresh_private_directory(base, mallory, squat, tmp_path):
    canonical = base / user_dir_name(os.getuid())
    victims_dir = tmp_path / "victims"  # a directory of the victim's, which a followed link would fill
    victims_dir.mkdir(mode=0o700)
    if squat == "directory":
        run_as(mallory, "mkdir", "-m", "777", str(canonical))
    elif squat == "link-to-victims-dir":
        run_as(mallory, "ln", "-s", str(victims_dir), str(canonical))
    elif squat == "link-to-own-dir":
        run_as(mallory, "mkdir", "-m", "777", str(base / "mallorys"))
        run_as(mallory, "ln", "-s", str(base / "mallorys"), str(canonical))
    elif squat == "file":
        run_as(mallory, "touch", str(canonical))
    else:
        run_as(mallory, "mkfifo", "-m", "666", str(canonical))
    before = _owner_and_mode(canonical)
    private, note = user_dir(base)
    assert private != canonical and private.name.startswith(canonical.name + "-")
    assert _owner_and_mode(private) == (os.getuid(), 0o700) and not private.is_symlink()
    assert f"{canonical} " in note and f"uid {mallory.pw_uid} ({ATTACKER})" in note and str(private) in note
    segment = Segment.create(private, segment_name("42", 1, 0, os.getuid()), {"pid": os.getpid()},
                             remove_base=True)
    (segment.path / "x.bin").write_bytes(b"1")
    segment.remove()
    assert not private.exists()  # a fallback directory goes with its segment
    assert _owner_and_mode(canonical) == before  # the other user's entry is theirs: untouched
    assert list(victims_dir.iterdir()) == []  # nothing went through the link


def test_own_directory_open_to_others_is_not_used(base):
    canonical = base / user_dir_name(os.getuid())
    canonical.mkdir()
    canonical.chmod(0o777)
    private, note = user_dir(base)
    assert private != canonical and "has mode drwxrwxrwx: other users can enter it" in note


def test_segment_refuses_a_directory_that_is_not_private(base, mallory):
    theirs = base / "theirs"
    run_as(mallory, "mkdir", "-m", "777", str(theirs))
    with pytest.raises(UserError, match=f"belongs to uid {mallory.pw_uid}"):
        Segment.create(theirs, segment_name("1", 1, 0, os.getuid()), {})
    run_as(mallory, "ln", "-s", str(base), str(base / "link"))
    with pytest.raises(UserError, match="is a symbolic link"):
        Segment.create(base / "link", segment_name("1", 1, 0, os.getuid()), {})


def test_a_lock_link_in_the_private_directory_is_replaced_never_followed(base, tmp_path):
    private, _ = user_dir(base)
    precious = _precious(tmp_path)
    name = segment_name("7", 1, 0, os.getuid())
    (private / f"{name}.lock").symlink_to(precious)
    segment = Segment.create(private, name, {"pid": os.getpid()})
    assert precious.read_bytes() == PRECIOUS
    assert stat.S_ISREG(os.lstat(segment.lock_path).st_mode)
    segment.remove()


def test_the_shared_files_refuse_links(tmp_path):
    write_tensors(tmp_path, {"x": torch.arange(6.0)}, {})
    (tmp_path / "x.bin").unlink()
    (tmp_path / "x.bin").symlink_to(_precious(tmp_path / ".."))
    with pytest.raises(UserError, match="x.bin is not a regular file of this user"):
        map_tensors(tmp_path)
    target = tmp_path / "target"
    target.mkdir()
    (tmp_path / "out").symlink_to(target)
    with pytest.raises(OSError):  # write_tensors opens its directory without following a link
        write_tensors(tmp_path / "out", {"x": torch.zeros(2)}, {})
    assert list(target.iterdir()) == []


# ---- stale segments: only this user's --------------------------------------------------------------------
def _plant(base: Path, mallory, victim_uid: int, precious: Path, job: str) -> list[Path]:
    """What the issue's attacker leaves for the victim's next job: the old layout's directory and .lock link,
    and entries that look like the victim's private directory and its segments."""
    legacy = base / segment_name(job, 1234, 0, victim_uid)
    fake_private = base / f"{user_dir_name(victim_uid)}-evil"
    run_as(mallory, "mkdir", "-m", "777", str(legacy))
    run_as(mallory, "touch", str(legacy / "x.bin"))
    run_as(mallory, "ln", "-s", str(precious), f"{legacy}.lock")
    run_as(mallory, "mkdir", "-m", "700", str(fake_private))
    run_as(mallory, "mkdir", str(fake_private / legacy.name))
    run_as(mallory, "touch", str(fake_private / f"{legacy.name}.lock"))
    return [legacy, legacy / "x.bin", Path(f"{legacy}.lock"), fake_private]


def test_remove_stale_removes_only_this_users_segments(base, mallory, tmp_path):
    precious = _precious(tmp_path)
    planted = _plant(base, mallory, os.getuid(), precious, "99")
    before = {p: _owner_and_mode(p) for p in planted}
    private, _ = user_dir(base)
    mine = private / segment_name("98", 1, 0, os.getuid())  # a stale one of this user's: no lock, no writer
    mine.mkdir()
    assert remove_stale([base]) == [mine]
    assert {p: _owner_and_mode(p) for p in planted} == before
    assert precious.read_bytes() == PRECIOUS and os.readlink(f"{planted[0]}.lock") == str(precious)


def test_a_user_without_root_meets_another_users_entries_without_failing(base, mallory, alice):
    """The issue's victim was not root: remove_stale ended in PermissionError on the attacker's directory."""
    home = base / "alice"
    home.mkdir(mode=0o700)
    os.chown(home, alice.pw_uid, alice.pw_gid)
    precious = _precious(home)
    os.chown(precious, alice.pw_uid, alice.pw_gid)
    planted = _plant(base, mallory, alice.pw_uid, precious, "77")
    run_as(mallory, "mkdir", "-m", "777", str(base / user_dir_name(alice.pw_uid)))  # the name taken first
    before = {p: _owner_and_mode(p) for p in planted}

    def as_alice():
        removed = remove_stale([base])
        private, note = user_dir(base)
        segment = Segment.create(private, segment_name("77", 1234, 0, alice.pw_uid), {"pid": os.getpid()},
                                 remove_base=bool(note))
        write_tensors(segment.path, {"x": torch.arange(4.0)}, {})
        mapped = map_tensors(segment.path)["x"].tolist()
        segment.remove()
        return removed, note, mapped, private.exists()

    removed, note, mapped, left = call_as(alice, as_alice)
    assert removed == [] and mapped == [0.0, 1.0, 2.0, 3.0] and not left
    assert f"belongs to uid {mallory.pw_uid}" in note
    assert {p: _owner_and_mode(p) for p in planted} == before
    assert precious.read_bytes() == PRECIOUS


def test_a_share_dir_anyone_can_rename_in_is_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # writable by all, not sticky
    with pytest.raises(UserError, match=r"data.share_dir='.*open' is writable by every user but not sticky"):
        candidate_dirs(str(open_dir))
    open_dir.chmod(0o1777)
    assert candidate_dirs(str(open_dir)) == [open_dir]


# ---- a real two-rank job with the attacker's entries waiting for it ---------------------------------------
def test_a_two_rank_job_runs_past_another_users_entries_and_touches_none(mallory, tmp_path, base):
    """The issue's case: the attacker pre-created the old layout's segment and a .lock link to the victim's file
    for the victim's next job id, and this user's private directory's name. The base is data.share_dir (a 1777
    directory like /dev/shm, which gets the same treatment): /dev/shm itself is shared with the other test runs of
    this machine, whose cleanup would see the attacker's entries too."""
    job, port = f"8{os.getpid()}", free_port()
    precious = _precious(tmp_path)
    legacy = base / segment_name(job, port, 0, os.getuid())
    planted = [legacy, legacy / "x.bin", Path(f"{legacy}.lock"), base / user_dir_name(os.getuid())]
    run_as(mallory, "mkdir", "-m", "777", str(legacy))
    run_as(mallory, "touch", str(legacy / "x.bin"))
    run_as(mallory, "ln", "-s", str(precious), str(planted[2]))
    run_as(mallory, "mkdir", "-m", "777", str(planted[3]))
    before = {p: _owner_and_mode(p) for p in planted}
    result = run_local_job(["fit", "--config", "tiny", "trainer.epochs=1", f"output.dir={tmp_path / 'run'}",
                            f"data.share_dir={base}"], 2, job_id=job, port=port)
    assert result.returncodes == [0, 0], "\n".join(result.outputs)
    assert not any("Traceback" in out for out in result.outputs)
    assert {p: _owner_and_mode(p) for p in planted} == before and os.readlink(planted[2]) == str(precious)
    assert precious.read_bytes() == PRECIOUS
    assert f"{planted[3]} belongs to uid {mallory.pw_uid} ({ATTACKER})" in result.outputs[0]
    # the fallback directory went with the segment: only the attacker's entries are left
    assert sorted(p.name for p in base.iterdir()) == sorted(p.name for p in planted if p.parent == base)
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1
