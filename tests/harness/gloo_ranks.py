"""Work that every rank of a real gloo process group does, its results back in the test's process: spawned
processes on this machine, one group, each rank's dict written as JSON and read back by rank, once per world size
per test session (a test module's cases then share one start of torch per rank)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from train.cluster.distenv import free_port

Work = Callable[[int, int], dict]  # (rank, world size) -> what the rank found, JSON-serialisable


def join_gloo(rank: int, world: int, port: int) -> None:
    """A spawned rank joins its gloo group on this machine, on one thread: the ranks outnumber the cores (CI has
    2), and torch's default (a thread per core in each rank) made them contend: tests/test_eval.py took 44 s of
    CPU, 27 s on one thread each (the suite's local jobs run with OMP_NUM_THREADS=1 for the same reason)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


def _rank(rank: int, work: Work, world: int, port: int, out_dir: str) -> None:
    join_gloo(rank, world, port)
    try:
        (Path(out_dir) / f"{rank}.json").write_text(json.dumps(work(rank, world)))
    finally:
        dist.destroy_process_group()


class GlooRanks:
    """`work` (a module-level function, so the spawned processes can import it) on `world` ranks, cached per world."""

    def __init__(self, work: Work, name: str):
        self.work, self.name = work, name
        self.results: dict[int, list[dict]] = {}

    def __call__(self, tmp_path_factory, world: int) -> list[dict]:
        if world not in self.results:
            out = tmp_path_factory.mktemp(f"{self.name}-{world}")
            mp.start_processes(_rank, args=(self.work, world, free_port(), str(out)), nprocs=world,
                               start_method="spawn")
            self.results[world] = [json.loads((out / f"{r}.json").read_text()) for r in range(world)]
        return self.results[world]
