"""train/heap.py: a step's freed tensors go back to the system, unless the user set the heap up their own way."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.harness.localjob import ROOT
from train import heap
from train.heap import MMAP_THRESHOLD, THP_VARIABLE, HeapSettings, heap_settings


@pytest.mark.parametrize("environ,expected", [
    ({}, HeapSettings(MMAP_THRESHOLD, True)),
    ({"MALLOC_MMAP_THRESHOLD_": "65536"}, HeapSettings(None, True)),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4194304"}, HeapSettings(None, True)),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}, HeapSettings(MMAP_THRESHOLD, True)),
    ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold_x=1"}, HeapSettings(MMAP_THRESHOLD, True)),
    ({THP_VARIABLE: "0"}, HeapSettings(None, False)),  # both defaults: no huge pages, so no fixed threshold
    ({THP_VARIABLE: "1"}, HeapSettings(MMAP_THRESHOLD, False)),
    ({THP_VARIABLE: "1", "MALLOC_MMAP_THRESHOLD_": "1"}, HeapSettings(None, False)),
], ids=["default", "glibc-variable", "glibc-tunable", "other-tunable", "tunable-prefix", "thp-off", "thp-on",
        "all-users"])
def test_the_users_own_setting_stands(environ, expected):
    assert heap_settings(environ, "madvise") == expected


@pytest.mark.parametrize("mode,environ,expected", [
    ("always", {}, HeapSettings(MMAP_THRESHOLD, True)),
    ("always", {THP_VARIABLE: "0"}, HeapSettings(MMAP_THRESHOLD, False)),  # the kernel backs the blocks anyway
    ("never", {}, HeapSettings(None, False)),
    (None, {}, HeapSettings(None, False)),
])
def test_no_fixed_threshold_where_no_huge_pages_back_it(mode, environ, expected):
    """Mapping each block again without huge pages costs a fifth of a step: glibc's dynamic threshold stays."""
    assert heap_settings(environ, mode) == expected


@pytest.mark.parametrize("text,mode", [("always [madvise] never\n", "madvise"), ("[always] madvise never", "always"),
                                       ("always madvise [never]", "never"), ("", None)])
def test_thp_mode_reads_the_bracketed_word(tmp_path, text, mode):
    path = tmp_path / "enabled"
    path.write_text(text)
    assert heap.thp_mode(str(path)) == mode
    assert heap.thp_mode(str(tmp_path / "absent")) is None


def test_tune_heap_sets_torchs_variable_once_and_keeps_the_users(monkeypatch):
    monkeypatch.setattr(heap, "_applied", None)
    monkeypatch.setattr(heap, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(heap, "_set_mmap_threshold", lambda size: size == MMAP_THRESHOLD)
    environ = {"PATH": "/bin"}
    assert heap.tune_heap(environ) == HeapSettings(MMAP_THRESHOLD, True) and environ[THP_VARIABLE] == "1"
    assert heap.tune_heap(environ) == HeapSettings(MMAP_THRESHOLD, True)  # the first call's record stays
    assert heap.applied() == {"mmap_threshold": MMAP_THRESHOLD, "huge_pages": True}
    monkeypatch.setattr(heap, "_applied", None)
    users = {THP_VARIABLE: "0"}
    assert heap.tune_heap(users) == HeapSettings(None, False) and users == {THP_VARIABLE: "0"}


def test_without_mallopt_only_torchs_part_applies(monkeypatch):
    monkeypatch.setattr(heap, "_applied", None)
    monkeypatch.setattr(heap, "thp_mode", lambda: "madvise")
    monkeypatch.setattr(heap, "_set_mmap_threshold", lambda size: False)  # musl, macOS
    assert heap.tune_heap({}) == HeapSettings(None, True)


def held_after_step(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (THP_VARIABLE, "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")}
    done = subprocess.run([sys.executable, "-m", "tests.harness.workers.heap_retention", mode], cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_steps_freed_tensors_go_back_to_the_system():
    """The worker frees 120 MiB of 12 MiB tensors the way a step does; glibc's default keeps them all."""
    if heap.thp_mode() not in ("always", "madvise"):
        pytest.skip(f"this kernel's transparent huge pages are {heap.thp_mode()}: the threshold stays glibc's")
    default, tuned = held_after_step("default"), held_after_step("tuned")
    assert default["held"] >= 0.9 * default["allocated"], f"the pattern no longer shows glibc keeping memory: {default}"
    assert tuned["held"] <= 0.1 * tuned["allocated"], tuned
    assert tuned["settings"] == {"mmap_threshold": MMAP_THRESHOLD, "huge_pages": True}


def test_the_memory_page_states_the_settings_in_force():
    page = (ROOT / "docs" / "memory.md").read_text()
    assert f"mmap threshold fixed at {MMAP_THRESHOLD >> 20} MiB" in " ".join(page.split())
    assert f"`{THP_VARIABLE}=1`" in page and "(`heap`)" in page
