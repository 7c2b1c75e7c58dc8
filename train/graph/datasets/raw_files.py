"""Name the missing or damaged file of a prepared dataset, and say how to prepare it again.

PyG and OGB end in a bare `EOFError`, `UnpicklingError` or `BadZipFile` when a raw file was cut
short (an interrupted copy to the shared file system), quietly process a truncated text file,
and re-download everything (or, offline, fail without a name) when one file is missing. These
checks read each file through its format, so the error names the file instead.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import pickle
import zipfile
from pathlib import Path

import numpy as np

from train.files import file_problem as path_problem

# Files whose bytes are fixed forever: the Planetoid release (github.com/kimiyoung/planetoid, the
# files PyG downloads). A truncated `ind.*.test.index` still parses, so only a checksum tells.
KNOWN_SHA256: dict[str, str] = {
    "ind.cora.allx": "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
    "ind.cora.ally": "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
    "ind.cora.graph": "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
    "ind.cora.test.index": "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    "ind.cora.tx": "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
    "ind.cora.ty": "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
    "ind.cora.x": "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
    "ind.cora.y": "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
}
# Up to this size a file is read to its end before processing; larger ones get the cheap checks
# (a zip's directory, an .npy header against the file size) and are read fully only after a failure.
THOROUGH_BYTES = 256 << 20
_CHUNK = 16 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def npy_problem(path: Path) -> str | None:
    """What keeps a (readable, non-empty) file from being an .npy array: its magic, its header, its length."""
    try:
        with path.open("rb") as fh:
            head = fh.read(6)
            if head != b"\x93NUMPY":
                return f"is not a .npy file (it starts with {head!r}, not NumPy's \\x93NUMPY)"
            fh.seek(0)
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0  # 2.0 and 3.0 share the header's layout
            shape, _fortran, dtype = read_header(fh)
            data_start, size = fh.tell(), path.stat().st_size
    except (OSError, ValueError) as exc:
        return f"has a damaged .npy header ({exc})"
    if dtype.hasobject:
        return "holds pickled Python objects, not numbers (it cannot be memory-mapped)"
    expected = math.prod(shape) * dtype.itemsize
    if size - data_start < expected:
        return (f"is cut short: its header promises {expected:,} bytes of data ({shape} of {dtype}), the file "
                f"holds {size - data_start:,}")
    return None


def pt_problem(path: Path) -> str | None:
    """What keeps a (readable, non-empty) file from being a torch.save file that can be memory-mapped."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
        if head == b"PK\x03\x04":
            with zipfile.ZipFile(path):  # torch.save's format: a zip whose directory is at the end
                return None
        if head[:1] == b"\x80":
            return ("was saved in torch's legacy format (_use_new_zipfile_serialization=False), which cannot be "
                    "memory-mapped")
    except (OSError, zipfile.BadZipFile) as exc:
        return f"is cut short or damaged: a torch.save zip archive whose directory cannot be read ({exc})"
    return f"is not a torch.save file (it starts with {head!r}, not a zip archive's PK\\x03\\x04)"


def _read_test_index(path: Path, thorough: bool) -> None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.strip().isdigit():
            raise ValueError(f"line {number} is not a node index: {line[:40]!r}")


def _read_pickle(path: Path, thorough: bool) -> None:
    with path.open("rb") as fh:
        pickle.load(fh, encoding="latin1")


def _read_npz(path: Path, thorough: bool) -> None:
    with zipfile.ZipFile(path) as archive:  # a cut-short zip has no central directory
        if thorough and (bad := archive.testzip()) is not None:
            raise ValueError(f"member {bad!r} fails its CRC check")


def _read_npy(path: Path, thorough: bool) -> None:
    problem = npy_problem(path)  # the header's shape must fit in the file
    if problem is not None:
        raise ValueError(problem)


def _read_json(path: Path, thorough: bool) -> None:
    json.loads(path.read_text())


def _read_gzip(path: Path, thorough: bool) -> None:
    if thorough:
        with gzip.open(path, "rb") as fh:
            while fh.read(_CHUNK):
                pass


def _read_pt(path: Path, thorough: bool) -> None:
    if thorough:
        with zipfile.ZipFile(path) as archive:  # torch.save's format is a zip archive
            if (bad := archive.testzip()) is not None:
                raise ValueError(f"member {bad!r} fails its CRC check")


# (how the name starts, how it ends, its reader): the first rule that matches the name decides.
_FORMATS = (
    ("ind.", ".test.index", _read_test_index),
    ("ind.", "", _read_pickle),  # the Planetoid pickles (scipy matrices, numpy arrays, dicts)
    ("", ".npz", _read_npz),
    ("", ".npy", _read_npy),
    ("", ".json", _read_json),
    ("", ".gz", _read_gzip),
    ("", ".pt", _read_pt),
)


def _read_format(path: Path, thorough: bool) -> None:
    """Raise when `path` cannot be read as what its name says it is."""
    for prefix, suffix, read in _FORMATS:
        if path.name.startswith(prefix) and path.name.endswith(suffix):
            read(path, thorough)
            return


def file_problem(path: Path, thorough: bool | None = None) -> str | None:
    """What is wrong with `path` (missing, not a file, empty, unreadable, checksum, damaged), or None when it reads.

    thorough=None reads small files fully and checks only the structure of large ones.
    """
    problem = path_problem(path)
    if problem == "does not exist":
        return "missing"  # the word callers tell a missing file from a damaged one by
    if problem is not None:  # "<path> is <problem>": a directory, a FIFO, a link loop..., or unusable (why)
        return problem[3:] if problem.startswith("is ") else f"unusable ({problem})"
    size = path.stat().st_size
    if thorough is None:
        thorough = size <= THOROUGH_BYTES
    try:
        expected = KNOWN_SHA256.get(path.name)
        if expected is not None and _sha256(path) != expected:
            return f"not the published file (its SHA-256 differs; {size} bytes: cut short or replaced?)"
        _read_format(path, thorough)
    except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
        return f"damaged ({type(exc).__name__}: {exc or 'cut short'})"
    return None


def problems(directory: Path, files: tuple[str, ...] | list[str], thorough: bool | None = None) -> list[str]:
    """`"<path> is <problem>"` for each of `files` (relative to `directory`) that is missing or damaged."""
    found = []
    for relative in files:
        path = directory / relative
        problem = file_problem(path, thorough)
        if problem is not None:
            found.append(f"{path} is {problem}")
    return found


def prepare_again(name: str) -> str:
    """How to prepare dataset `name` again: one sentence, the same in every message."""
    return (f"prepare it again on a login node (with internet): `make data DATASET={name}` or "
            f"`python -m train data --config CONFIG data.name={name}`, with the same data.root / DATA_DIR")
