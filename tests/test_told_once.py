"""One message per error under `make run` (login/launch.py, train/loop/failure_report.py tell_once): the rank that
found a graph's error prints it; every other rank prints one line that points to it, never a guess at a cause (the
out-of-memory killer), and no gloo C++ log line. Counted on 2 and 4 local ranks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tests.harness.graph_folder import write_graph_folder
from tests.harness.side_by_side import map_side_by_side
from tests.test_launch import make

GUESSES = ("out-of-memory", "stopped answering", "is gone", "could not share the graph", "received SIGTERM",
           "ProcessGroupGloo", "[rank", "Traceback")


def nan_graph(folder: Path) -> Path:
    """A graph of the user's own whose features hold a NaN: refused where it is loaded, by a rank."""
    write_graph_folder(folder, nodes=40, edges=120, features=4, classes=3)
    x = np.load(folder / "x.npy")
    x[3, 1] = np.nan
    np.save(folder / "x.npy", x)
    return folder


def bad_cora(root: Path) -> Path:
    """Cora's raw files, replaced: rank 0 alone refuses them as it prepares the dataset (no download)."""
    raw = root / "Planetoid" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for name in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"):
        (raw / f"ind.cora.{name}").write_text("garbage\n")
    return root


def counted(out: str, said: str) -> tuple[list[str], list[str]]:
    """(the error lines that say `said`, the lines that point to another rank's error)."""
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert all(said in line for line in errors), errors
    return errors, re.findall(r"^rank \d+: rank \d+ stopped: see its error above$", out, re.M)


@pytest.mark.long  # three runs of 2, 4 and 2 ranks: some 40 CPU-seconds
def test_an_error_a_rank_found_is_printed_once_and_the_others_point_to_it(tmp_path):
    graph = nan_graph(tmp_path / "graph")
    root = bad_cora(tmp_path / "data")
    cases = [  # (ranks, the overrides, what the error says): handed over by the node's loader; found by each rank;
        # found by rank 0 alone while the other waits at the loading barrier
        (2, f"data.name=files data.path={graph} data.share=node", "x holds NaN"),
        (4, f"data.name=files data.path={graph} data.share=process", "x holds NaN"),
        (2, f"data.root={root}", "is not the published file"),
    ]
    runs = map_side_by_side(lambda case: make("run", "CONFIG=tiny" if "files" in case[1] else "CONFIG=cora",
                                              f"NPROC={case[0]}", f"ARGS={case[1]} output.dir={tmp_path}/run{case[0]}"
                                              f"{len(case[1])}", timeout=300), cases)
    for (ranks, _args, said), p in zip(cases, runs):
        out = p.stdout + p.stderr
        errors, pointers = counted(out, said)
        assert len(errors) == 1 and len(pointers) == ranks - 1, out  # one copy, and one line from each other rank
        assert out.index(errors[0]) < min(out.index(line) for line in pointers), out  # the error, then the pointers
        for guess in GUESSES:
            assert guess not in out, (guess, out)
        assert re.search(r"make: \*\*\* \[\S+: run\] Error 2$", p.stderr.strip()), p.stderr  # a user's error
