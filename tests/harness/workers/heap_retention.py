"""What a process keeps of the tensors a step freed (tests/test_heap.py): `tuned` or `default` heap.

The pattern is a training step's: one large block freed first (the batch's gathered features), which
raises glibc's dynamic mmap threshold; then blocks of 12 MiB (activations, messages) freed while small
tensors allocated between them stay alive (what the step keeps: its outputs, the optimizer's
statistics), so the heap cannot shrink past them. Prints one JSON line: the
bytes allocated and how many of them the process still holds (anonymous memory) once all are freed.
"""

import json
import os
import sys

from train.heap import applied, tune_heap

MIB = 1 << 20


def anonymous_bytes() -> int:
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Anonymous:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no Anonymous line in /proc/self/smaps_rollup")


def main() -> None:
    if sys.argv[1] == "tuned":
        tune_heap(os.environ)
    import torch

    torch.ones(30 * MIB // 4)  # freed at once
    before = anonymous_bytes()
    blocks, kept = [], []
    for _ in range(10):
        blocks.append(torch.ones(12 * MIB // 4))
        kept.append(torch.ones(1024))  # a small tensor that outlives the step
    del blocks
    held = anonymous_bytes() - before
    print(json.dumps({"allocated": 120 * MIB, "held": held, "kept": len(kept),
                      "settings": applied()}))


if __name__ == "__main__":
    main()
