"""The C heap of a training process: each step's freed tensors go back to the system, on huge pages.

Why: glibc's mmap threshold is dynamic. Freeing a large block raises it (up to 32 MiB), so the next
step's tensors below it come from the heap, and what a step frees there stays with the process:
0.2-0.4 GiB per rank at 1M nodes, 4 ranks per node (bench/README.md, memory). A fixed threshold
(`mallopt(M_MMAP_THRESHOLD)`, which also turns the dynamic one off) maps each tensor above it on its
own and unmaps it when freed. Mapping again costs page faults each step; torch's huge-page allocation
(`THP_MEM_ALLOC_ENABLE`: every CPU tensor of 2 MiB or more on 2 MiB pages) makes those 512 times
fewer, and the step no slower than before.

Without huge pages those faults cost a fifth of a step here, so the threshold stays glibc's where
the kernel gives none: transparent huge pages `never`, or `madvise` with torch's variable set to 0.
A user's own setting wins: `MALLOC_MMAP_THRESHOLD_`, or `glibc.malloc.mmap_threshold` in
`GLIBC_TUNABLES`, keeps glibc's threshold as set; any `THP_MEM_ALLOC_ENABLE` keeps torch's
(`THP_MEM_ALLOC_ENABLE=0` keeps both defaults). `tune_heap` must run before torch is imported: torch
reads its variable once, at its first allocation. Without glibc (musl, macOS) only torch's part applies.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Mapping, MutableMapping

MMAP_THRESHOLD = 8 << 20  # bytes: a batch's feature rows and activations are above it, small tensors below
M_MMAP_THRESHOLD = -3  # mallopt's parameter number (glibc's malloc.h)
THP_VARIABLE = "THP_MEM_ALLOC_ENABLE"  # read by torch (c10/core/impl/alloc_cpu.cpp)
GLIBC_THRESHOLD_VARIABLE = "MALLOC_MMAP_THRESHOLD_"
GLIBC_THRESHOLD_TUNABLE = "glibc.malloc.mmap_threshold"
THP_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"  # "always [madvise] never": the mode in brackets


@dataclasses.dataclass(frozen=True)
class HeapSettings:
    """What `tune_heap` changes in this process: None / False where the user's setting stands."""

    mmap_threshold: int | None
    huge_pages: bool


_applied: HeapSettings | None = None  # what `tune_heap` changed in this process; None: it did not run


def heap_settings(environ: Mapping[str, str], thp_mode: str | None) -> HeapSettings:
    """The settings for a process with this environment on a kernel whose transparent huge pages are
    `thp_mode` (always, madvise, never; None: unknown); the user's own choices are left alone."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    user_threshold = GLIBC_THRESHOLD_VARIABLE in environ or any(
        item.split("=", 1)[0] == GLIBC_THRESHOLD_TUNABLE for item in tunables.split(":"))
    kernel_has_huge_pages = thp_mode in ("always", "madvise")
    set_torch_variable = kernel_has_huge_pages and THP_VARIABLE not in environ
    # "madvise" backs only what torch asks for (its variable, ours or the user's); "always" backs every block
    blocks_on_huge_pages = thp_mode == "always" or (kernel_has_huge_pages and environ.get(THP_VARIABLE, "1") == "1")
    return HeapSettings(mmap_threshold=MMAP_THRESHOLD if blocks_on_huge_pages and not user_threshold else None,
                        huge_pages=set_torch_variable)


def thp_mode(path: str = THP_MODE_FILE) -> str | None:
    """The kernel's transparent huge page mode (the bracketed word), or None where it cannot be read."""
    try:
        with open(path) as modes:
            words = modes.read().split()
    except OSError:
        return None
    return next((word[1:-1] for word in words if word.startswith("[") and word.endswith("]")), None)


def tune_heap(environ: MutableMapping[str, str]) -> HeapSettings:
    """Apply `heap_settings` to this process (before torch is imported); returns what was applied. The entry
    passes `os.environ`: setting torch's variable there sets it for the C library's getenv too."""
    global _applied
    if _applied is not None:  # once per process: a second call would take the first one's variable for the user's
        return _applied
    settings = heap_settings(environ, thp_mode())
    if settings.huge_pages:
        environ[THP_VARIABLE] = "1"
    if settings.mmap_threshold is not None and not _set_mmap_threshold(settings.mmap_threshold):
        settings = HeapSettings(None, settings.huge_pages)
    _applied = settings
    return settings


def applied() -> dict | None:
    """What `tune_heap` changed in this process, for summary.json; None where it did not run."""
    return None if _applied is None else dataclasses.asdict(_applied)


def _set_mmap_threshold(size: int) -> bool:
    """glibc's mallopt; False where the C library has none (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, size))
