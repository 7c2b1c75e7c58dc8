"""The repository's own habit: a commit's subject is at most 72 characters, so `git log --oneline` reads as a list
(the why goes in the body). Commits after BASE are checked; the older ones are history and stay as they are."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = "2f4205f"  # the commit that moved the rooms (issue 39); the rule holds from the next one on
MAX_SUBJECT = 72


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)


def new_subjects() -> list[tuple[str, str]]:
    """(commit, subject) of every commit after BASE on HEAD; skipped, with the reason, where there is no history
    to read (an export without .git, a shallow clone that lacks BASE)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: no history to read")
    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout: no history to read")
    if git("cat-file", "-e", f"{BASE}^{{commit}}").returncode != 0:
        pytest.skip(f"the history lacks {BASE} (a shallow clone?): the new commits cannot be told apart")
    done = git("log", "--format=%h %s", f"{BASE}..HEAD")
    assert done.returncode == 0, done.stderr
    return [tuple(line.split(" ", 1)) for line in done.stdout.splitlines()]


def long_subjects(subjects: list[tuple[str, str]]) -> list[str]:
    return [f"{commit} ({len(subject)} characters): {subject}" for commit, subject in subjects
            if len(subject) > MAX_SUBJECT]


def test_new_commit_subjects_are_at_most_72_characters():
    too_long = long_subjects(new_subjects())
    assert not too_long, ("commit subjects over 72 characters (say what changed in the subject, the why in the "
                          "body; `git commit --amend` or `git rebase -i` rewords them):\n" + "\n".join(too_long))


def test_the_check_names_a_long_subject_and_passes_a_short_one():
    subject = "x" * 73
    assert long_subjects([("abc1234", subject), ("def5678", "Fix the plan")]) == [
        f"abc1234 (73 characters): {subject}"]
