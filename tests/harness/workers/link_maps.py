"""`python -m tests.harness.workers.link_maps [OVERRIDE ...]`: one rank of a link run on the tiny config builds its
`Trainer` from the graph as `python -m train fit` obtains it, and says where the tensors its batches and
evaluation read live: for the sampler's CSC and the split's fields, whether their memory is a mapping of the node's
shared segment (/proc/self/maps), and a digest of each. Rank 0 prints every rank's answer as one JSON line after
`LINK_MAPS ` (tests/test_link.py)."""
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from train.cluster.distenv import resolve
from train.cluster.procgroup import process_group
from train.config import load_config
from train.errors import exit_without_teardown
from train.graph.link_fields import LINK_FIELDS
from train.graph.sharing.segments import PREFIX
from train.graph.sharing.shared_graph import shared_graphs
from train.loop.fit import Trainer
from train.loop.run import obtain_graph

RESULT = "LINK_MAPS "


def segment_ranges() -> list[tuple[int, int]]:
    """The address ranges this process maps from a shared-graph segment's files."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if PREFIX in line:
            start, end = line.split()[0].split("-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def main(overrides: list[str]) -> None:
    config = load_config("tiny", ["task.name=link", "dist.backend=gloo", *overrides])
    env = resolve(os.environ)
    with process_group(env, config.dist) as (_backend, device), shared_graphs(), tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, env, device, obtain_graph(config, env), Path(out))
        ranges = segment_ranges()
        colptr, row, _perm = trainer.sampling.csc
        split = trainer.task.split
        read = {"colptr": colptr, "row": row, "train": split.train,
                **{name: trainer.data[name] for name in LINK_FIELDS if name in trainer.data}}
        seen = {name: {"mapped": any(start <= tensor.data_ptr() < end for start, end in ranges),
                       "digest": digest(tensor)} for name, tensor in read.items()}
        held_out = {name: [digest(part.pairs), digest(part.labels)] for name, part in (("val", split.val),
                                                                                     ("test", split.test))}
        rows: list = [None] * env.world_size
        dist.all_gather_object(rows, {"rank": env.rank, "tensors": seen, "held_out": held_out,
                                      "undirected": split.undirected})
        if env.rank == 0:
            print(RESULT + json.dumps(rows), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
    exit_without_teardown(0)  # as `python -m train` leaves: gloo can abort CPython's own teardown
